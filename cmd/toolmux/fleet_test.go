package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/stream"
)

// startNATS starts an embedded JetStream server for one test, as
// serve --nats-listen does, its data in dir, on port (0: any).
func startNATS(t testing.TB, dir string, port int) *fleet.Server {
	t.Helper()
	s, err := fleet.StartServer(fleet.ServerOptions{Listen: fmt.Sprintf("127.0.0.1:%d", port), StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

func natsURL(s *fleet.Server) string { return s.ClientURL() }

// appendModel is a scripted model for fleet runs: a task "append LINE to
// FILE sleeping MS" makes one call of the fixture's append tool, then
// answers "appended LINE", and tells what the tool said.
func appendModel(t testing.TB, turnDelay time.Duration) *llmtest.Server {
	return llmtest.OpenAI(t, appendScript(turnDelay))
}

// appendScript is appendModel's script, for a test that wraps it.
func appendScript(turnDelay time.Duration) llmtest.Script {
	re := regexp.MustCompile(`append (\S+) to (\S+) sleeping (\d+)`)
	return func(_ int, req llmtest.Request) llmtest.Reply {
		task, assistants, results := req.Dialogue()
		last := ""
		tools := make([]string, len(results))
		for i, r := range results {
			tools[i], last = oneLineOf(r), r
		}
		if task == "pid twice" {
			if assistants < 2 {
				return llmtest.Reply{Calls: []llmtest.Call{{Name: "fx__pid", Args: `{}`}}}
			}
			return llmtest.Reply{Content: "pids " + strings.Join(tools, " ")}
		}
		if sm := spanRe.FindStringSubmatch(task); sm != nil {
			if assistants == 0 {
				return llmtest.Reply{Calls: []llmtest.Call{{Name: "fx__span", Args: fmt.Sprintf(`{"ms": %s}`, sm[1])}}}
			}
			return llmtest.Reply{Content: "spanned " + oneLineOf(last)}
		}
		mm := re.FindStringSubmatch(task)
		if mm == nil {
			return llmtest.Reply{Content: "no task I know"}
		}
		if assistants == 0 {
			return llmtest.Reply{Calls: []llmtest.Call{{Name: "fx__append",
				Args: fmt.Sprintf(`{"path": %q, "line": %q, "ms": %s}`, mm[2], mm[1], mm[3])}}}
		}
		return llmtest.Reply{Content: "appended " + mm[1] + " | tool said: " + oneLineOf(last), Delay: turnDelay}
	}
}

// spanRe is the task "span MS": one call of the fixture's span tool,
// whose answer "START END" the model repeats after "spanned".
var spanRe = regexp.MustCompile(`^span (\d+)$`)

// waitRun returns run id's final state; a wait that fails ends the test,
// with w's stderr when w is given.
func waitRun(t testing.TB, ctx context.Context, f *fleet.Fleet, id string, w *workerProc) *fleet.Run {
	t.Helper()
	run, err := f.Wait(ctx, id)
	if err != nil {
		if w != nil {
			t.Fatalf("run %s: %v\n%s", id, err, w.stderr.String())
		}
		t.Fatalf("run %s: %v", id, err)
	}
	return run
}

// startAppend submits run id, whose one call appends line to out and
// then sleeps ms, and returns once the line is there: the call has had
// its effect and is still running (for ms).
func startAppend(t testing.TB, ctx context.Context, f *fleet.Fleet, w *workerProc, id, line, out string, ms int) {
	t.Helper()
	task := fmt.Sprintf("append %s to %s sleeping %d", line, out, ms)
	if _, _, err := f.Submit(ctx, fleet.Request{ID: id, Task: task}); err != nil {
		t.Fatal(err)
	}
	if !testservers.Eventually(time.Minute, func() bool { return countOf(lines(t, out), line) == 1 }) {
		t.Fatalf("the call of run %s never started:\n%s", id, w.stderr.String())
	}
}

func oneLineOf(s string) string { return strings.Join(strings.Fields(s), " ") }

func fleetWorkspace(t testing.TB, m *llmtest.Server) string {
	return workspace(t, fleetConfig(t, m))
}

// fleetConfig is fleetWorkspace's configuration: the scripted model and
// the fixture's server fx, trusted.
func fleetConfig(t testing.TB, m *llmtest.Server) string {
	return fmt.Sprintf(`model:
  base_url: %s
  model: scripted
servers:
  fx:
    command: %s
    trust: true
`, m.BaseURL(), testservers.Fixture(t))
}

type workerProc struct {
	cmd    *exec.Cmd
	stderr *testservers.SyncBuffer
	exited chan struct{}
	err    error
}

// startWorker starts a toolmux worker process in dir.
func startWorker(t testing.TB, dir, url string, args ...string) *workerProc {
	t.Helper()
	return startWorkerBin(t, binary, dir, url, args...)
}

// startWorkerBin starts a worker of the binary bin (the benchmarks' is
// built without the race detector); a --lease in args overrides 2s.
func startWorkerBin(t testing.TB, bin, dir, url string, args ...string) *workerProc {
	t.Helper()
	w := spawnWorker(t, bin, dir, url, t.TempDir(), args...)
	if !testservers.Eventually(30*time.Second, func() bool { return strings.Contains(w.stderr.String(), "joined the fleet") }) {
		t.Fatalf("the worker did not start:\n%s", w.stderr.String())
	}
	return w
}

// spawnWorker starts a worker process with its data under dataHome
// ($XDG_DATA_HOME) and returns at once; it is stopped with SIGTERM when
// the test ends.
func spawnWorker(t testing.TB, bin, dir, url, dataHome string, args ...string) *workerProc {
	t.Helper()
	return spawnWorkerEnv(t, bin, dir, url, dataHome, nil, args...)
}

// spawnWorkerEnv is spawnWorker with further environment variables.
func spawnWorkerEnv(t testing.TB, bin, dir, url, dataHome string, env []string, args ...string) *workerProc {
	t.Helper()
	w := &workerProc{stderr: &testservers.SyncBuffer{}, exited: make(chan struct{})}
	w.cmd = exec.Command(bin, append([]string{"worker", "--nats", url, "--lease", "2s"}, args...)...)
	w.cmd.Dir = dir
	w.cmd.Env = append(append(modelFreeEnv(), "XDG_DATA_HOME="+dataHome), env...)
	w.cmd.Stderr = w.stderr
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { w.err = w.cmd.Wait(); close(w.exited) }()
	t.Cleanup(func() {
		select {
		case <-w.exited:
			return
		default:
		}
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-w.exited:
		case <-time.After(30 * time.Second):
			_ = w.cmd.Process.Kill()
			<-w.exited
			t.Errorf("the worker did not stop within 30s of SIGTERM\n%s", w.stderr.String())
		}
	})
	return w
}

func (w *workerProc) kill(t testing.TB) {
	t.Helper()
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	<-w.exited
}

func connectFleet(t testing.TB, url string) *fleet.Fleet {
	t.Helper()
	f, err := fleet.Connect(context.Background(), url, "test", fleet.Options{Lease: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func lines(t testing.TB, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

func countOf(ls []string, s string) int {
	n := 0
	for _, l := range ls {
		if l == s {
			n++
		}
	}
	return n
}

// A file of runs spreads over two workers; every run's side effect
// happens once; submitting the file again runs nothing.
func TestFleetSubmitFile(t *testing.T) {
	t.Parallel()
	ns := startNATS(t, t.TempDir(), 0)
	m := appendModel(t, 0)
	dir := fleetWorkspace(t, m)
	out := filepath.Join(t.TempDir(), "effects.txt")
	w1 := startWorker(t, dir, natsURL(ns), "--concurrency", "2", "--name", "w1")
	w2 := startWorker(t, dir, natsURL(ns), "--concurrency", "2", "--name", "w2")
	var b strings.Builder
	const n = 8
	for i := range n {
		fmt.Fprintf(&b, `{"id": "run-%d", "task": "append line-%d to %s sleeping 300"}`+"\n", i, i, out)
	}
	file := filepath.Join(dir, "runs.jsonl")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	r := execToolmux(t, dir, "", modelFreeEnv(), "submit", "--nats", natsURL(ns), "--lease", "2s", "--wait", file)
	if r.code != 0 {
		t.Fatalf("submit: exit %d\n%s\n%s\nw1: %s\nw2: %s", r.code, r.stdout, r.stderr, w1.stderr.String(), w2.stderr.String())
	}
	workers := map[string]int{}
	got := 0
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	for sc.Scan() {
		var res struct {
			ID, Status, Answer, Worker string
			Submitted                  bool
		}
		if err := json.Unmarshal(sc.Bytes(), &res); err != nil {
			t.Fatalf("a result line is not JSON: %q", sc.Text())
		}
		got++
		if res.Status != "done" || !strings.HasPrefix(res.Answer, "appended line-") || !res.Submitted {
			t.Errorf("result %+v", res)
		}
		workers[res.Worker]++
	}
	if got != n {
		t.Fatalf("%d result lines, want %d:\n%s", got, n, r.stdout)
	}
	if len(workers) != 2 {
		t.Errorf("the runs did not spread over both workers: %v", workers)
	}
	if !strings.Contains(r.stderr, fmt.Sprintf("%d/%d done", n, n)) {
		t.Errorf("no progress on stderr:\n%s", r.stderr)
	}
	effects := lines(t, out)
	for i := range n {
		if c := countOf(effects, fmt.Sprintf("line-%d", i)); c != 1 {
			t.Errorf("line-%d appended %d times", i, c)
		}
	}

	// The same file again: nothing runs, each run is reported as it ended.
	// Nothing runs because nothing is queued: the queue's last sequence
	// stays where the first submission left it.
	f := connectFleet(t, natsURL(ns))
	queued := func() uint64 {
		t.Helper()
		ctx := context.Background()
		name, err := f.JetStream().StreamNameBySubject(ctx, f.Options().Prefix+".queue.run")
		if err != nil {
			t.Fatal(err)
		}
		s, err := f.JetStream().Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	before := queued()
	r = execToolmux(t, dir, "", modelFreeEnv(), "submit", "--nats", natsURL(ns), "--lease", "2s", file)
	if r.code != 0 {
		t.Fatalf("submit again: exit %d\n%s", r.code, r.stderr)
	}
	if c := strings.Count(r.stdout, `"submitted":false`); c != n {
		t.Errorf("re-submitted: %d lines say not submitted, want %d:\n%s", c, n, r.stdout)
	}
	if c := strings.Count(r.stdout, `"status":"done"`); c != n {
		t.Errorf("re-submitted: %d lines are done:\n%s", c, r.stdout)
	}
	if after := queued(); after != before || before < n {
		t.Errorf("re-submitting queued something: the queue's last sequence went from %d to %d (%d runs)", before, after, n)
	}

	// runs lists them with their worker.
	r = execToolmux(t, dir, "", modelFreeEnv(), "runs", "--nats", natsURL(ns), "--workers")
	if r.code != 0 || strings.Count(r.stdout, " done ") != n || !strings.Contains(r.stdout, "worker w1") {
		t.Errorf("runs: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// A worker killed with SIGKILL in the middle of a call of a
// non-idempotent tool: another worker takes the run over within seconds,
// does not call the tool again, tells the model its outcome is unknown,
// and finishes the run; the run's events have no gap.
func TestFleetWorkerKilledMidCall(t *testing.T) {
	t.Parallel()
	ns := startNATS(t, t.TempDir(), 0)
	m := appendModel(t, 0)
	dir := fleetWorkspace(t, m)
	out := filepath.Join(t.TempDir(), "effects.txt")
	f := connectFleet(t, natsURL(ns))
	w1 := startWorker(t, dir, natsURL(ns), "--name", "first")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	startAppend(t, ctx, f, w1, "slow", "once", out, 60000)
	w1.kill(t)
	killed := time.Now()
	w2 := startWorker(t, dir, natsURL(ns), "--name", "second")
	run := waitRun(t, ctx, f, "slow", w2)
	t.Logf("taken over and finished %s after the kill", time.Since(killed).Round(time.Millisecond))
	if run.Status != fleet.StatusDone || run.Worker != "second" || run.Deliveries != 2 {
		t.Errorf("run: %+v", run)
	}
	if c := countOf(lines(t, out), "once"); c != 1 {
		t.Errorf("the non-idempotent call ran %d times", c)
	}
	if !strings.Contains(run.Answer, "outcome_unknown") && !strings.Contains(run.Answer, "outcome is unknown") {
		t.Errorf("the model was not told the outcome is unknown: %q", run.Answer)
	}
	checkEventSeq(t, f, "slow")
}

// A worker killed while the model thinks (the call done and committed):
// the run resumes from its last committed turn, asks the model the next
// turn and reuses nothing it need not.
func TestFleetWorkerKilledBetweenTurns(t *testing.T) {
	t.Parallel()
	ns := startNATS(t, t.TempDir(), 0)
	m := appendModel(t, 3*time.Second)
	dir := fleetWorkspace(t, m)
	out := filepath.Join(t.TempDir(), "effects.txt")
	f := connectFleet(t, natsURL(ns))
	w1 := startWorker(t, dir, natsURL(ns), "--name", "first")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, _, err := f.Submit(ctx, fleet.Request{ID: "thinking", Task: "append twice to " + out + " sleeping 0"}); err != nil {
		t.Fatal(err)
	}
	// The second model request is the one that is slow.
	if !testservers.Eventually(time.Minute, func() bool { return len(m.Requests()) >= 2 }) {
		t.Fatalf("the second turn never started:\n%s", w1.stderr.String())
	}
	w1.kill(t)
	startWorker(t, dir, natsURL(ns), "--name", "second")
	run := waitRun(t, ctx, f, "thinking", nil)
	if run.Status != fleet.StatusDone || run.Worker != "second" || !strings.Contains(run.Answer, "appended twice | tool said: appended twice") {
		t.Errorf("run: %+v", run)
	}
	if c := countOf(lines(t, out), "twice"); c != 1 {
		t.Errorf("the call ran %d times", c)
	}
	reqs := m.Requests()
	// The resumed run asked the model its second turn again, with the
	// first turn's result in the history, and did not ask the first again.
	last := reqs[len(reqs)-1]
	if !strings.Contains(last.Text(), "appended twice") {
		t.Errorf("the resumed turn lacks the first turn's result:\n%s", last.Text())
	}
	if len(reqs) != 3 {
		t.Errorf("%d model requests, want 3 (turn 1, turn 2 killed, turn 2 again)", len(reqs))
	}
	checkEventSeq(t, f, "thinking")
}

// checkEventSeq checks that a run's events are numbered 1..N with no gap
// and end with the workflow's end.
func checkEventSeq(t testing.TB, f *fleet.Fleet, id string) {
	t.Helper()
	last, err := f.LastEventSeq(context.Background(), id)
	if err != nil || last == 0 {
		t.Fatalf("last event: %d %v", last, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var want int64 = 1
	var name string
	err = f.Events(ctx, id, 0, func(e fleet.Event) bool {
		if e.Seq != want {
			t.Errorf("event %d after %d", e.Seq, want-1)
		}
		want = e.Seq + 1
		name = e.Name
		return e.Seq < last
	})
	if err != nil {
		t.Fatal(err)
	}
	if name != "end_of_workflow" {
		t.Errorf("the last event is %s", name)
	}
}

// serve --nats-listen is the whole fleet's infrastructure: a worker on
// another "machine" joins its embedded NATS server with nothing else, a
// run submitted with run --nats is shown by the gateway's API (the fleet's
// workers and runs, the run's record, its events) and by toolmux logs.
func TestFleetServeNATSListen(t *testing.T) {
	t.Parallel()
	m := appendModel(t, 0)
	dir := fleetWorkspace(t, m)
	data := t.TempDir()
	natsAddr := fmt.Sprintf("127.0.0.1:%d", testservers.FreePort(t))
	p := startFleetGateway(t, dir, data, natsAddr)
	url := natsListenURL(t, data, natsAddr)
	startWorker(t, dir, url, "--name", "remote")
	out := filepath.Join(t.TempDir(), "effects.txt")
	r := execToolmux(t, dir, "", modelFreeEnv(), "run", "--nats", url, "--lease", "2s", "append shown to "+out+" sleeping 0")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "appended shown | tool said: appended shown" {
		t.Fatalf("run --nats: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "✓ fx/append") {
		t.Errorf("run --nats showed no progress:\n%s", r.stderr)
	}
	id := regexp.MustCompile(`run (\S+) submitted`).FindStringSubmatch(r.stderr)
	if id == nil {
		t.Fatalf("run --nats did not name its run:\n%s", r.stderr)
	}

	var summary struct {
		Workers []struct{ Name string } `json:"workers"`
		Runs    map[string]int          `json:"runs"`
	}
	getJSON(t, p.url("/api/fleet"), &summary)
	if len(summary.Workers) != 1 || summary.Workers[0].Name != "remote" || summary.Runs["done"] != 1 {
		t.Errorf("/api/fleet: %+v", summary)
	}
	// The run's record, written by the worker into the fleet's journal,
	// read through the gateway's index of it.
	var task struct {
		Status string `json:"status"`
		Calls  []struct {
			Tool string `json:"tool"`
		} `json:"calls"`
	}
	if !testservers.Eventually(30*time.Second, func() bool {
		getJSON(t, p.url("/api/tasks/"+id[1]), &task)
		return task.Status == "success"
	}) {
		t.Fatalf("the gateway does not show the run ended: %+v", task)
	}
	if len(task.Calls) != 1 || task.Calls[0].Tool != "append" {
		t.Errorf("the run's calls: %+v", task.Calls)
	}
	// Its events, projected into the page's stream.
	evs := readEvents(t, p.addr, "0", func(e stream.Event) bool { return e.Task == id[1] && e.Name == "end_of_workflow" })
	n := 0
	for _, e := range evs {
		if e.Task == id[1] {
			n++
		}
	}
	if n < 5 {
		t.Errorf("only %d events of the run on the page's stream", n)
	}
	lr := execToolmux(t, dir, "", append(modelFreeEnv(), "XDG_DATA_HOME="+t.TempDir()), "logs", "--nats", url, "show", id[1])
	if lr.code != 0 || !strings.Contains(lr.stdout, "fx/append") || !strings.Contains(lr.stdout, "appended shown") {
		t.Errorf("logs --nats show: exit %d\n%s\n%s", lr.code, lr.stdout, lr.stderr)
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// The runs file of docs/fleet.md is read as written: its three runs end
// done, the one naming the main agent too.
func TestFleetDocExample(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "fleet.md"))
	if err != nil {
		t.Fatal(err)
	}
	mm := regexp.MustCompile("(?ms)^```jsonl runs.jsonl\n(.*?)^```$").FindSubmatch(doc)
	if mm == nil {
		t.Fatal("docs/fleet.md has no runs.jsonl example")
	}
	ns := startNATS(t, t.TempDir(), 0)
	m := appendModel(t, 0)
	dir := fleetWorkspace(t, m)
	if err := os.WriteFile(filepath.Join(dir, "runs.jsonl"), mm[1], 0o644); err != nil {
		t.Fatal(err)
	}
	startWorker(t, dir, natsURL(ns), "--concurrency", "3")
	r := execToolmux(t, dir, "", modelFreeEnv(), "submit", "--nats", natsURL(ns), "--lease", "2s", "--wait", "runs.jsonl")
	if r.code != 0 || strings.Count(r.stdout, `"status":"done"`) != 3 {
		t.Fatalf("submit: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// A call the policy asks about on a worker is put to the fleet's gateway:
// with its page open, the question is on the API, answered there, and the
// call runs on the worker; with no page open, it is refused at once.
func TestFleetApprovalOnGateway(t *testing.T) {
	t.Parallel()
	m := appendModel(t, 0)
	// The fixture's append changes state, and fx is not trusted: the
	// default mode asks.
	dir := workspace(t, fmt.Sprintf(`model:
  base_url: %s
  model: scripted
servers:
  fx:
    command: %s
`, m.BaseURL(), testservers.Fixture(t)))
	data := t.TempDir()
	natsAddr := fmt.Sprintf("127.0.0.1:%d", testservers.FreePort(t))
	p := startFleetGateway(t, dir, data, natsAddr, "--lease", "2s")
	url := natsListenURL(t, data, natsAddr)
	asker := startWorker(t, dir, url, "--name", "asker")
	f := connectFleet(t, url)
	out := filepath.Join(t.TempDir(), "effects.txt")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Nobody on the page: refused at once, and the run goes on.
	if _, _, err := f.Submit(ctx, fleet.Request{ID: "unasked", Task: "append refused to " + out + " sleeping 0"}); err != nil {
		t.Fatal(err)
	}
	run := waitRun(t, ctx, f, "unasked", nil)
	if run.Status != fleet.StatusDone || !strings.Contains(run.Answer, "approval_unavailable") {
		t.Errorf("without a page: %+v", run)
	}
	if c := countOf(lines(t, out), "refused"); c != 0 {
		t.Errorf("the refused call ran %d times", c)
	}

	// The page open: the question waits there and is answered.
	testservers.AttachApprover(t, "http://"+p.addr)
	if !testservers.Eventually(30*time.Second, func() bool {
		var info struct{ Approvers int }
		getJSON(t, p.url("/api/info"), &info)
		return info.Approvers == 1
	}) {
		t.Fatal("the approver was not attached")
	}
	if _, _, err := f.Submit(ctx, fleet.Request{ID: "asked", Task: "append approved to " + out + " sleeping 0"}); err != nil {
		t.Fatal(err)
	}
	var pending []struct{ ID, Task, Server, Tool string }
	if !testservers.Eventually(time.Minute, func() bool {
		getJSON(t, p.url("/api/approvals"), &pending)
		return len(pending) == 1
	}) {
		t.Fatalf("the worker's question never reached the gateway")
	}
	if pending[0].Task != "asked" || pending[0].Server != "fx" || pending[0].Tool != "append" {
		t.Errorf("pending: %+v", pending[0])
	}
	p.decide(t, pending[0].ID, "once")
	run, err := f.Wait(ctx, "asked")
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != fleet.StatusDone || run.Answer != "appended approved | tool said: appended approved" {
		t.Errorf("approved: %+v", run)
	}
	if c := countOf(lines(t, out), "approved"); c != 1 {
		t.Errorf("the approved call ran %d times", c)
	}

	// The worker dies while its question waits: the question leaves the
	// page; the run resumed elsewhere asks again for the same call, and
	// the answer runs it once.
	if _, _, err := f.Submit(ctx, fleet.Request{ID: "orphan", Task: "append late to " + out + " sleeping 0"}); err != nil {
		t.Fatal(err)
	}
	if !testservers.Eventually(time.Minute, func() bool {
		getJSON(t, p.url("/api/approvals"), &pending)
		return len(pending) == 1 && pending[0].Task == "orphan"
	}) {
		t.Fatalf("the question never reached the gateway: %+v", pending)
	}
	first := pending[0].ID
	asker.kill(t)
	if !testservers.Eventually(time.Minute, func() bool {
		getJSON(t, p.url("/api/approvals"), &pending)
		return len(pending) == 0
	}) {
		t.Fatalf("the dead worker's question stayed on the page: %+v", pending)
	}
	startWorker(t, dir, url, "--name", "heir")
	if !testservers.Eventually(time.Minute, func() bool {
		getJSON(t, p.url("/api/approvals"), &pending)
		return len(pending) == 1
	}) {
		t.Fatalf("the resumed run did not ask again")
	}
	if pending[0].ID != first {
		t.Errorf("the resumed run asked for call %s, not the same call %s", pending[0].ID, first)
	}
	p.decide(t, pending[0].ID, "once")
	if run, err = f.Wait(ctx, "orphan"); err != nil {
		t.Fatal(err)
	}
	if run.Status != fleet.StatusDone || run.Worker != "heir" || countOf(lines(t, out), "late") != 1 {
		t.Errorf("resumed after approval: %+v, %d lines", run, countOf(lines(t, out), "late"))
	}
}

// A server shared by one worker (--share fx=1) is called by the runs of
// every worker, the holder's own included, through the fleet, never more
// than one call at once fleet-wide.
func TestFleetSharedServer(t *testing.T) {
	t.Parallel()
	ns := startNATS(t, t.TempDir(), 0)
	m := appendModel(t, 0)
	holderDir := fleetWorkspace(t, m)
	// The other worker has no fx of its own.
	userDir := workspace(t, fmt.Sprintf("model:\n  base_url: %s\n  model: scripted\n", m.BaseURL()))
	h := startWorker(t, holderDir, natsURL(ns), "--name", "holder", "--concurrency", "2", "--share", "fx=1")
	if !strings.Contains(h.stderr.String(), "shares fx with the fleet (1 at once)") {
		t.Errorf("the holder did not say it shares fx:\n%s", h.stderr.String())
	}
	startWorker(t, userDir, natsURL(ns), "--name", "user", "--concurrency", "2")
	f := connectFleet(t, natsURL(ns))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 6
	for i := range n {
		if _, _, err := f.Submit(ctx, fleet.Request{ID: fmt.Sprintf("span-%d", i), Task: "span 300"}); err != nil {
			t.Fatal(err)
		}
	}
	type span struct{ start, end int64 }
	var spans []span
	byWorker := map[string]int{}
	for i := range n {
		run := waitRun(t, ctx, f, fmt.Sprintf("span-%d", i), nil)
		var s span
		if _, err := fmt.Sscanf(run.Answer, "spanned %d %d", &s.start, &s.end); err != nil || run.Status != fleet.StatusDone {
			t.Fatalf("run %d: %+v", i, run)
		}
		spans = append(spans, s)
		byWorker[run.Worker]++
	}
	if byWorker["user"] == 0 {
		t.Errorf("no run on the worker without fx: %v", byWorker)
	}
	for i := range spans {
		for j := range i {
			if spans[i].start < spans[j].end && spans[j].start < spans[i].end {
				t.Errorf("calls %d and %d of the shared server overlapped (cap 1)", i, j)
			}
		}
	}
}

// A shared server held by two workers keeps each run's calls on one
// holder: its state (here, the process answering) is the run's.
func TestFleetSharedServerSticksToRun(t *testing.T) {
	t.Parallel()
	ns := startNATS(t, t.TempDir(), 0)
	m := appendModel(t, 0)
	dir := fleetWorkspace(t, m)
	startWorker(t, dir, natsURL(ns), "--name", "h1", "--concurrency", "4", "--share", "fx=8")
	startWorker(t, dir, natsURL(ns), "--name", "h2", "--concurrency", "4", "--share", "fx=8")
	f := connectFleet(t, natsURL(ns))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 16
	for i := range n {
		if _, _, err := f.Submit(ctx, fleet.Request{ID: fmt.Sprintf("pid-%d", i), Task: "pid twice"}); err != nil {
			t.Fatal(err)
		}
	}
	pids := map[string]bool{}
	for i := range n {
		run := waitRun(t, ctx, f, fmt.Sprintf("pid-%d", i), nil)
		var a, b string
		if _, err := fmt.Sscanf(run.Answer, "pids %s %s", &a, &b); err != nil || run.Status != fleet.StatusDone {
			t.Fatalf("run %d: %+v", i, run)
		}
		if a != b {
			t.Errorf("run %d's calls went to two processes: %s and %s", i, a, b)
		}
		pids[a] = true
	}
	t.Logf("%d holders' processes served the runs", len(pids))
}

// SIGTERM drains a worker: a run that outlasts --grace is handed back,
// resumed at once by another worker (no lease to wait for), and its
// interrupted non-idempotent call is not run again.
func TestFleetWorkerDrainHandsBack(t *testing.T) {
	t.Parallel()
	ns := startNATS(t, t.TempDir(), 0)
	m := appendModel(t, 0)
	dir := fleetWorkspace(t, m)
	out := filepath.Join(t.TempDir(), "effects.txt")
	f := connectFleet(t, natsURL(ns))
	w1 := startWorker(t, dir, natsURL(ns), "--name", "leaving", "--grace", "1s")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	startAppend(t, ctx, f, w1, "long", "drained", out, 60000)
	if err := w1.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-w1.exited
	if w1.err != nil || !strings.Contains(w1.stderr.String(), "left the fleet") {
		t.Errorf("the drained worker: %v\n%s", w1.err, w1.stderr.String())
	}
	if run, err := f.Get(ctx, "long"); err != nil || run.Status != fleet.StatusQueued {
		t.Errorf("handed back: %+v %v", run, err)
	}
	w2 := startWorker(t, dir, natsURL(ns), "--name", "staying")
	run := waitRun(t, ctx, f, "long", nil)
	if run.Status != fleet.StatusDone || run.Worker != "staying" || !strings.Contains(run.Answer, "outcome") {
		t.Errorf("resumed: %+v", run)
	}
	// Each worker says, without --verbose, the runs it took, resumed,
	// finished or handed back, with a prefix of the task at most.
	prefix := fmt.Sprintf("%q", oneLineCut("append drained to "+out+" sleeping 60000", 32))
	sayRun := func(w *workerProc, want ...string) {
		t.Helper()
		for _, l := range want {
			if !testservers.Eventually(time.Minute, func() bool { return strings.Contains(w.stderr.String(), l) }) {
				t.Errorf("worker's stderr lacks %q:\n%s", l, w.stderr.String())
			}
		}
		if strings.Contains(w.stderr.String(), "sleeping 60000") {
			t.Errorf("the task's text is on the worker's stderr:\n%s", w.stderr.String())
		}
	}
	sayRun(w1, "toolmux: worker leaving took run long ("+prefix+")\n", "toolmux: worker leaving handed run long back after ")
	sayRun(w2, "toolmux: worker staying resumed run long, delivery 2 ("+prefix+")\n", "toolmux: worker staying finished run long: done (answered) after ")
	if c := countOf(lines(t, out), "drained"); c != 1 {
		t.Errorf("the interrupted call ran %d times", c)
	}
	checkEventSeq(t, f, "long")
}

// The NATS server restarted (same port, same data) while a run's call is
// in flight: the worker reconnects, the run finishes, the call ran once,
// and nothing acknowledged is lost (the run's events have no gap).
func TestFleetNATSRestart(t *testing.T) {
	t.Parallel()
	store := t.TempDir()
	ns := startNATS(t, store, 0)
	port := ns.Addr().(*net.TCPAddr).Port
	url := natsURL(ns)
	m := appendModel(t, 0)
	dir := fleetWorkspace(t, m)
	out := filepath.Join(t.TempDir(), "effects.txt")
	w := startWorker(t, dir, url, "--name", "steady")
	f := connectFleet(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	startAppend(t, ctx, f, w, "through", "restart", out, 3000)
	ns.Shutdown()
	// Shutdown closed every client's connection; the test's own client
	// showing it lost its connection is the outage seen from outside.
	if !testservers.Eventually(10*time.Second, func() bool { return !f.Conn().IsConnected() }) {
		t.Fatal("the client did not see the server go")
	}
	startNATS(t, store, port)
	run := waitRun(t, ctx, f, "through", w)
	if run.Status != fleet.StatusDone || run.Answer != "appended restart | tool said: appended restart" || run.Deliveries != 1 {
		t.Errorf("run: %+v\n%s", run, w.stderr.String())
	}
	if c := countOf(lines(t, out), "restart"); c != 1 {
		t.Errorf("the call ran %d times", c)
	}
	checkEventSeq(t, f, "through")
	// Stopped while the restarted server is up (its cleanup runs first).
	w.cmd.Process.Signal(syscall.SIGTERM)
	<-w.exited
}

// The fleet's journal is bounded by the members' task_log.retention, as a
// local task log is: its stream's age and byte limits are the
// configuration's (and the defaults without one).
func TestFleetJournalRetention(t *testing.T) {
	t.Parallel()
	ns := startNATS(t, t.TempDir(), 0)
	m := appendModel(t, 0)
	dir := workspace(t, fmt.Sprintf(`model:
  base_url: %s
  model: scripted
task_log:
  retention: {max_age: 2d, max_bytes: 10MiB}
`, m.BaseURL()))
	startWorker(t, dir, natsURL(ns))
	f := connectFleet(t, natsURL(ns))
	info, err := f.JetStream().Stream(context.Background(), "TOOLMUX_JOURNAL")
	if err != nil {
		t.Fatal(err)
	}
	if c := info.CachedInfo().Config; c.MaxAge != 48*time.Hour || c.MaxBytes != 10<<20 {
		t.Errorf("the journal's limits: max_age %s, max_bytes %d", c.MaxAge, c.MaxBytes)
	}
}

// run --nats reports the run as the fleet recorded it: its duration from
// the worker's taking it to its end (not this client's wait, nor 0), and
// its turns as a local run counts them (the call's and the answer's).
func TestFleetRunReportsTheRun(t *testing.T) {
	t.Parallel()
	ns := startNATS(t, t.TempDir(), 0)
	m := appendModel(t, 0)
	dir := fleetWorkspace(t, m)
	w := startWorker(t, dir, natsURL(ns))
	out := filepath.Join(t.TempDir(), "effects.txt")
	r := execToolmux(t, dir, "", modelFreeEnv(), "run", "--nats", natsURL(ns), "--lease", "2s", "--json", "append timed to "+out+" sleeping 0")
	if r.code != 0 {
		t.Fatalf("run --nats: exit %d\n%s\n%s\nworker: %s", r.code, r.stdout, r.stderr, w.stderr.String())
	}
	ls := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var res struct {
		Event string
		Data  struct {
			Task       string
			Turns      int
			DurationMS float64 `json:"duration_ms"`
		}
	}
	if err := json.Unmarshal([]byte(ls[len(ls)-1]), &res); err != nil || res.Event != "result" {
		t.Fatalf("last line: %v\n%s", err, ls[len(ls)-1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := connectFleet(t, natsURL(ns)).Get(ctx, res.Data.Task)
	if err != nil {
		t.Fatal(err)
	}
	if want := float64(run.Ended.Sub(run.Started).Microseconds()) / 1000; res.Data.DurationMS != want || want <= 0 {
		t.Errorf("duration_ms %v, the run's (started %v, ended %v) is %v", res.Data.DurationMS, run.Started, run.Ended, want)
	}
	if res.Data.Turns != 2 || run.Turns != 2 {
		t.Errorf("turns: %d reported, %d recorded; want 2 (the call's, the answer's)", res.Data.Turns, run.Turns)
	}
}

// oneLineCut is s cut to max runes, the last one an ellipsis, as the
// worker shows a task.
func oneLineCut(s string, max int) string {
	if r := []rune(s); len(r) > max {
		return string(r[:max-1]) + "…"
	}
	return s
}
