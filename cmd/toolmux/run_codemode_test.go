package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/internal/testservers"
)

// programModel is a scripted model that writes one program: for each of
// lines, a call of the fixture's append tool (line "slow" sleeps a
// minute), each failure caught and its kind kept; then it answers with
// what the program returned.
func programModel(t testing.TB, out string, lines []string) *llmtest.Server {
	ls, _ := json.Marshal(lines)
	code := fmt.Sprintf(`const done = [], failed = [];
for (const line of %s) {
  try {
    await tools.fx__append({path: %q, line, ms: line === "slow" ? 60000 : 0});
    done.push(line);
  } catch (e) {
    failed.push(line + ":" + e.kind);
  }
}
return {done, failed};`, ls, out)
	args, _ := json.Marshal(map[string]string{"code": code})
	return llmtest.OpenAI(t, func(_ int, req llmtest.Request) llmtest.Reply {
		_, assistants, results := req.Dialogue()
		if assistants == 0 {
			return llmtest.Reply{Calls: []llmtest.Call{{Name: "run_code", Args: string(args)}}}
		}
		return llmtest.Reply{Content: "program said: " + oneLineOf(results[len(results)-1])}
	})
}

// taskCalls is what a task's JSON (logs show --json, GET /api/tasks/ID)
// says of its calls.
type taskCalls struct {
	Calls []struct {
		ID     string `json:"id"`
		Tool   string `json:"tool"`
		Parent string `json:"parent"`
	} `json:"calls"`
}

// program is the id of the task's run_code record, and how many append
// calls name it as their parent.
func (d taskCalls) program() (id string, inner int) {
	for _, c := range d.Calls {
		if c.Tool == "run_code" {
			id = c.ID
		}
	}
	for _, c := range d.Calls {
		if id != "" && c.Parent == id && c.Tool == "append" {
			inner++
		}
	}
	return id, inner
}

// toolmux run --code-mode: the model is offered run_code alone, its
// program's calls run through the governed path and are shown as calls
// of the run, and the task log holds the program and its calls, each
// naming the program as its parent.
func TestRunCodeMode(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "effects.txt")
	m := programModel(t, out, []string{"a", "b", "c"})
	dir := workspace(t, fleetConfig(t, m))
	r := runToolmux(t, dir, nil, "run", "--code-mode", "append three lines")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if want := `program said: {"done":["a","b","c"],"failed":[]}`; strings.TrimSpace(r.stdout) != want {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	if got := lines(t, out); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("effects: %v", got)
	}
	if n := strings.Count(r.stderr, "✓ fx/append"); n != 3 {
		t.Errorf("%d progress lines for the program's calls, want 3:\n%s", n, r.stderr)
	}
	if reqs := m.Requests(); !slices.Equal(reqs[0].Tools, []string{"run_code", "terminate"}) {
		t.Errorf("offered %v, want run_code and terminate", reqs[0].Tools)
	}
	// A mode it does not know is a usage error.
	r = runToolmux(t, dir, nil, "run", "--code-mode=besides", "x")
	if r.code != 2 || !strings.Contains(r.stderr, "--code-mode=besides: want only, beside or off") {
		t.Errorf("--code-mode=besides: exit %d\n%s", r.code, r.stderr)
	}
	tasks := loggedTasks(t, dir)
	if len(tasks) != 1 {
		t.Fatalf("tasks: %+v", tasks)
	}
	show := runToolmux(t, dir, nil, "logs", "show", "--json", tasks[0].ID)
	var detail taskCalls
	if err := json.Unmarshal([]byte(show.stdout), &detail); err != nil {
		t.Fatalf("logs show --json: %v\n%s", err, show.stdout)
	}
	program, inner := detail.program()
	if inner != 3 {
		t.Errorf("%d calls name the program %q as their parent, want 3: %+v", inner, program, detail.Calls)
	}
}

// A fleet worker killed with SIGKILL in the middle of a program, while
// its sixth call runs: another worker resumes the run, runs the program
// again, and none of the five calls the first one completed is made
// again (each line is in the file once); the call cut short is not made
// again either (the call ledger: its outcome is unknown, which the
// program catches), the one after it is, and the run finishes.
func TestFleetWorkerKilledMidProgram(t *testing.T) {
	t.Parallel()
	ns := startNATS(t, t.TempDir(), 0)
	out := filepath.Join(t.TempDir(), "effects.txt")
	m := programModel(t, out, []string{"l1", "l2", "l3", "l4", "l5", "slow", "l7"})
	dir := workspace(t, fleetConfig(t, m)+"agent: {code_mode: only}\n")
	f := connectFleet(t, natsURL(ns))
	w1 := startWorker(t, dir, natsURL(ns), "--name", "first")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, _, err := f.Submit(ctx, fleet.Request{ID: "prog", Task: "append lines"}); err != nil {
		t.Fatal(err)
	}
	// The sixth call has begun: the program made it after the fifth's
	// outcome, which it gets only once the call's record is in the
	// journal (the pipeline records a call before it returns).
	if !testservers.Eventually(time.Minute, func() bool { return countOf(lines(t, out), "slow") == 1 }) {
		t.Fatalf("the program's sixth call never started:\n%s", w1.stderr.String())
	}
	w1.kill(t)
	w2 := startWorker(t, dir, natsURL(ns), "--name", "second")
	run := waitRun(t, ctx, f, "prog", w2)
	if run.Status != fleet.StatusDone || run.Worker != "second" {
		t.Errorf("run: %+v", run)
	}
	if got := lines(t, out); !slices.Equal(got, []string{"l1", "l2", "l3", "l4", "l5", "slow", "l7"}) {
		t.Errorf("effects %v, want each line once", got)
	}
	if want := `{"done":["l1","l2","l3","l4","l5","l7"],"failed":["slow:outcome_unknown"]}`; !strings.Contains(run.Answer, want) {
		t.Errorf("answer %q, want %s", run.Answer, want)
	}
	// The five calls were answered from the journal's records (by the
	// program's position and their arguments), before the ledger was
	// asked: the program's record says so.
	show := execToolmux(t, dir, "", append(modelFreeEnv(), "XDG_DATA_HOME="+t.TempDir()), "logs", "--nats", natsURL(ns), "show", "--json", "prog")
	var detail struct {
		Calls []struct {
			Tool  string `json:"tool"`
			Notes []struct {
				Data map[string]any `json:"data"`
			} `json:"notes"`
		} `json:"calls"`
	}
	if err := json.Unmarshal([]byte(show.stdout), &detail); err != nil {
		t.Fatalf("logs show: %v\n%s\n%s", err, show.stdout, show.stderr)
	}
	replayed := -1
	for _, c := range detail.Calls {
		if c.Tool == "run_code" && len(c.Notes) > 0 {
			n, _ := c.Notes[len(c.Notes)-1].Data["replayed"].(float64)
			replayed = int(n)
		}
	}
	if replayed != 5 {
		t.Errorf("the program's record says %d calls were replayed, want 5: %s", replayed, show.stdout)
	}
	// The resumed turn is run again from its checkpoint, not asked anew.
	if n := len(m.Requests()); n != 2 {
		t.Errorf("%d model requests, want 2 (the program, the answer)", n)
	}
}

// The page of a run whose model wrote a program: the task's JSON (GET
// /api/tasks/ID) has the program's record and its calls naming it as
// their parent, and the Tasks view shows the calls under the program.
func TestBrowserProgramCalls(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "effects.txt")
	m := programModel(t, out, []string{"a", "b", "c"})
	dir := workspace(t, fleetConfig(t, m))
	p := startRun(t, dir, nil, "run", "--code-mode", "--serve", "127.0.0.1:0", "append three lines")
	p.waitStderr(t, "the run has ended; its page stays at")
	match := regexp.MustCompile(`its page stays at (http://\S+/) until`).FindStringSubmatch(p.stderr.String())
	task := regexp.MustCompile(`\(task (\S+)\)`).FindStringSubmatch(p.stderr.String())
	if match == nil || task == nil {
		t.Fatalf("no address or task:\n%s", p.stderr)
	}
	var detail taskCalls
	getJSON(t, match[1]+"api/tasks/"+task[1], &detail)
	program, inner := detail.program()
	if program == "" || inner != 3 || len(detail.Calls) != 4 {
		t.Fatalf("GET /api/tasks/%s: program %q, %d calls under it, of %+v", task[1], program, inner, detail.Calls)
	}

	b := newUIBrowser(t)
	b.do(chromedp.Navigate(match[1] + "#tasks/" + task[1]))
	sel := fmt.Sprintf(`#task-detail details.call[data-call-id=%q]`, program)
	b.until("the program's record", fmt.Sprintf(`document.querySelector(%q) !== null`, sel))
	// One call at the top, the program, with its three calls underneath.
	got := uiEval[string](b, fmt.Sprintf(`(() => {
		const detail = document.querySelector('#task-detail');
		const top = [...detail.querySelectorAll(':scope > details.call')].map(d => d.dataset.callId);
		const prog = document.querySelector(%q);
		prog.open = true;
		const under = [...prog.querySelectorAll(':scope > .program-calls > details.call')].map(d => d.querySelector('.mono').textContent);
		return JSON.stringify({top: top.length, under, tag: prog.querySelector('summary .tag').textContent});
	})()`, sel))
	if want := `{"top":1,"under":["fx__append","fx__append","fx__append"],"tag":"program · 3 calls"}`; got != want {
		t.Errorf("the task's calls on the page: %s, want %s", got, want)
	}
	b.visible(sel + ` > .program-calls`)
	b.shot("program-calls")
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.stderr)
	}
}

// While a program runs (it is recorded when it ends), the Tasks view
// shows its calls so far under a running entry standing for it.
func TestBrowserProgramRunning(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "effects.txt")
	code := fmt.Sprintf(`await tools.fx__append({path: %q, line: "a", ms: 0});
await tools.fx__append({path: %q, line: "b", ms: 0});
await tools.fx__hang({});`, out, out)
	args, _ := json.Marshal(map[string]string{"code": code})
	m := llmtest.OpenAI(t, llmtest.Replies(llmtest.Reply{Calls: []llmtest.Call{{Name: "run_code", Args: string(args)}}}))
	dir := workspace(t, fleetConfig(t, m))
	p := startRun(t, dir, nil, "run", "--code-mode", "--serve", "127.0.0.1:0", "append and hang")
	p.waitStderr(t, "→ fx/hang")
	match := regexp.MustCompile(`watch the run at (http://\S+/)`).FindStringSubmatch(p.stderr.String())
	if match == nil {
		t.Fatalf("no address:\n%s", p.stderr)
	}
	var tasks []struct {
		ID string `json:"id"`
	}
	getJSON(t, match[1]+"api/tasks", &tasks)
	if len(tasks) != 1 {
		t.Fatalf("tasks: %+v", tasks)
	}
	b := newUIBrowser(t)
	b.do(chromedp.Navigate(match[1] + "#tasks/" + tasks[0].ID))
	b.until("the program's calls so far", `document.querySelectorAll('#task-detail > details.call .program-calls > details.call').length === 2`)
	got := uiEval[string](b, `(() => {
		const top = [...document.querySelectorAll('#task-detail > details.call')];
		const s = top[0].querySelector('summary');
		return JSON.stringify({top: top.length, badge: s.querySelector('.badge').textContent, name: s.querySelector('.mono').textContent});
	})()`)
	if want := `{"top":1,"badge":"running","name":"run_code"}`; got != want {
		t.Errorf("the running program on the page: %s, want %s", got, want)
	}
	b.shot("program-running")
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 130 {
		t.Fatalf("exit %d\n%s", code, p.stderr)
	}
}
