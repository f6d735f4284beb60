package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/stream"
)

// runToolmux runs the binary in dir with env added to a clean model
// environment (no OPENAI_* or ANTHROPIC_* of whoever runs the tests).
func runToolmux(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	return execToolmux(t, dir, "", append(append(modelFreeEnv(), "XDG_DATA_HOME="+dataHome(t, dir)), env...), args...)
}

// dataHome is the XDG_DATA_HOME of the runs in dir, so that a later
// `toolmux logs` in the same test reads the same task log.
func dataHome(t *testing.T, dir string) string {
	return dir + "/.xdg"
}

func modelFreeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OPENAI_") || strings.HasPrefix(kv, "ANTHROPIC_") || strings.HasPrefix(kv, "TOOLMUX_") {
			continue
		}
		env = append(env, kv)
	}
	if _, set := os.LookupEnv("GORACE"); !set {
		// The race detector's runtime otherwise waits a second before
		// every exit of the binary (it still reports races).
		env = append(env, "GORACE=atexit_sleep_ms=0")
	}
	return env
}

func TestRunAnswers(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "")
	m := llmtest.OpenAI(t, llmtest.Replies(
		llmtest.Reply{Calls: []llmtest.Call{{Name: "builtin__read_file", Args: `{"path": "notes.txt"}`}}},
		llmtest.Reply{Content: "The notes list alpha, beta and gamma."},
	))
	r := runToolmux(t, dir, nil, "run", "--model", "scripted", "--base-url", m.BaseURL(), "What is in notes.txt?")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if strings.TrimSpace(r.stdout) != "The notes list alpha, beta and gamma." {
		t.Errorf("stdout: %q", r.stdout)
	}
	if !strings.Contains(r.stderr, "✓ builtin/read_file") {
		t.Errorf("no progress line for the call:\n%s", r.stderr)
	}
	if reqs := m.Requests(); len(reqs) != 2 || !strings.Contains(reqs[1].Text(), "gamma") {
		t.Errorf("the model did not get the file: %d requests", len(reqs))
	}
	t.Log(r.stderr)
}

func TestRunWithoutModel(t *testing.T) {
	t.Parallel()
	r := runToolmux(t, workspace(t, ""), nil, "run", "do something")
	if r.code != 2 || !strings.Contains(r.stderr, "no model is configured") || !strings.Contains(r.stderr, "--model") {
		t.Errorf("exit %d\n%s", r.code, r.stderr)
	}
}

// runProc is a `toolmux run` process that a test watches while it runs.
type runProc struct {
	cmd            *exec.Cmd
	stdout, stderr *testservers.SyncBuffer
	exited         chan struct{}
	err            error // how it exited, once exited is closed
}

// startRun starts `toolmux run` in dir like runToolmux (stdin is not a
// terminal) without waiting for it; it is killed if the test ends first.
func startRun(t *testing.T, dir string, env []string, args ...string) *runProc {
	t.Helper()
	p := &runProc{stdout: &testservers.SyncBuffer{}, stderr: &testservers.SyncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(binary, args...)
	p.cmd.Dir = dir
	p.cmd.Env = append(append(modelFreeEnv(), "XDG_DATA_HOME="+dataHome(t, dir)), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// wait waits at most timeout for the process to exit and returns its exit
// code.
func (p *runProc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		t.Fatalf("toolmux run did not exit within %s\nstdout: %s\nstderr: %s", timeout, p.stdout, p.stderr)
	}
	return exitCode(t, p.err)
}

// waitStderr waits until the process's stderr holds s.
func (p *runProc) waitStderr(t *testing.T, s string) {
	t.Helper()
	if !testservers.Eventually(time.Minute, func() bool { return strings.Contains(p.stderr.String(), s) }) {
		t.Fatalf("stderr never showed %q:\n%s", s, p.stderr)
	}
}

// headers returns the HTTP headers of the requests m received.
func headers(m *llmtest.Server) []http.Header {
	var out []http.Header
	for _, r := range m.Requests() {
		out = append(out, r.Header)
	}
	return out
}

// taskSummary is an entry of `toolmux logs --json`.
type taskSummary struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Input  string `json:"input"`
}

// loggedTasks lists the tasks of the task log of the runs in dir.
func loggedTasks(t *testing.T, dir string) []taskSummary {
	t.Helper()
	r := runToolmux(t, dir, nil, "logs", "--json")
	var tasks []taskSummary
	if err := json.Unmarshal([]byte(r.stdout), &tasks); err != nil || r.code != 0 {
		t.Fatalf("toolmux logs --json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	return tasks
}

// The model comes from the environment when the flags leave it out, from
// the model: section (its ${VAR}s expanded) with no flags at all, and from
// ANTHROPIC_API_KEY with --provider anthropic.
func TestRunModelFromEnvironmentAndConfig(t *testing.T) {
	t.Parallel()
	answer := llmtest.Reply{Content: "done"}
	t.Run("env", func(t *testing.T) {
		m := llmtest.OpenAI(t, llmtest.Replies(answer))
		base := m.BaseURL()
		r := runToolmux(t, workspace(t, ""), []string{"OPENAI_BASE_URL=" + base, "OPENAI_API_KEY=sk-from-env"},
			"run", "--model", "scripted", "say done")
		if r.code != 0 || strings.TrimSpace(r.stdout) != "done" {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		h := headers(m)
		if len(h) != 1 || h[0].Get("Authorization") != "Bearer sk-from-env" {
			t.Errorf("requests' headers: %v", h)
		}
		if reqs := m.Requests(); len(reqs) != 1 || reqs[0].Raw["model"] != "scripted" {
			t.Errorf("requests: %+v", reqs)
		}
	})
	t.Run("config", func(t *testing.T) {
		m := llmtest.OpenAI(t, llmtest.Replies(answer))
		base := m.BaseURL()
		cfg := fmt.Sprintf("model:\n  base_url: %s\n  api_key: ${MY_KEY}\n  model: from-config\n", base)
		// The environment's OpenAI settings do not override the section.
		r := runToolmux(t, workspace(t, cfg), []string{"MY_KEY=sk-from-config", "OPENAI_API_KEY=sk-wrong",
			"OPENAI_BASE_URL=http://127.0.0.1:1/v1"}, "run", "say done")
		if r.code != 0 || strings.TrimSpace(r.stdout) != "done" {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		h := headers(m)
		if len(h) != 1 || h[0].Get("Authorization") != "Bearer sk-from-config" {
			t.Errorf("requests' headers: %v", h)
		}
		if reqs := m.Requests(); len(reqs) != 1 || reqs[0].Raw["model"] != "from-config" {
			t.Errorf("requests: %+v", reqs)
		}
	})
	t.Run("anthropic", func(t *testing.T) {
		m := llmtest.Anthropic(t, llmtest.Replies(answer))
		base := m.BaseURL()
		r := runToolmux(t, workspace(t, ""), []string{"ANTHROPIC_API_KEY=ak-from-env", "OPENAI_API_KEY=sk-wrong"},
			"run", "--provider", "anthropic", "--model", "claude-scripted", "--base-url", base, "say done")
		if r.code != 0 || strings.TrimSpace(r.stdout) != "done" {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		h := headers(m)
		if len(h) != 1 || h[0].Get("X-Api-Key") != "ak-from-env" || h[0].Get("Authorization") != "" {
			t.Errorf("requests' headers: %v", h)
		}
		if reqs := m.Requests(); len(reqs) != 1 || reqs[0].Raw["model"] != "claude-scripted" {
			t.Errorf("requests: %+v", reqs)
		}
	})
}

// With --json, stdout holds only the run's events as JSON lines, in order,
// then the result.
func TestRunJSON(t *testing.T) {
	t.Parallel()
	m := llmtest.OpenAI(t, llmtest.Replies(
		llmtest.Reply{Content: "Reading it.", Calls: []llmtest.Call{{Name: "builtin__read_file", Args: `{"path": "notes.txt"}`}}},
		llmtest.Reply{Content: "alpha, beta, gamma"},
	))
	r := runToolmux(t, workspace(t, ""), nil, "run", "--json", "--model", "scripted", "--base-url", m.BaseURL(), "What is in notes.txt?")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) < 2 {
		t.Fatalf("stdout: %s", r.stdout)
	}
	var res struct {
		Event string
		Data  struct {
			Task, Answer, Status string
			Turns, Calls         int
		}
		Error any
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("last line: %v\n%s", err, lines[len(lines)-1])
	}
	if res.Event != "result" || res.Data.Answer != "alpha, beta, gamma" || res.Data.Status != "answered" ||
		res.Data.Turns != 2 || res.Data.Calls != 1 || res.Data.Task == "" || res.Error != nil {
		t.Errorf("result line: %+v", res)
	}
	// The run's duration is duration_ms, milliseconds, as a record's.
	var raw struct{ Data map[string]any }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &raw); err != nil {
		t.Fatal(err)
	}
	if ms, ok := raw.Data["duration_ms"].(float64); !ok || ms <= 0 {
		t.Errorf("result's duration_ms: %v, want milliseconds", raw.Data["duration_ms"])
	}
	if d, ok := raw.Data["duration"]; ok {
		t.Errorf("result has duration %v besides duration_ms", d)
	}
	var names []string
	var last int64
	for i, l := range lines[:len(lines)-1] {
		var e struct {
			ID    int64
			Event string
			Task  string
			Data  json.RawMessage
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("line %d is not JSON: %v\n%s", i+1, err, l)
		}
		if e.ID <= last {
			t.Errorf("line %d: id %d after %d", i+1, e.ID, last)
		}
		last = e.ID
		if e.Task != res.Data.Task {
			t.Errorf("line %d: task %q, the result's %q", i+1, e.Task, res.Data.Task)
		}
		if len(e.Data) == 0 {
			t.Errorf("line %d has no data: %s", i+1, l)
		}
		names = append(names, e.Event)
	}
	want := []string{"start_of_workflow", "start_of_agent", "start_of_llm", "end_of_llm", "tool_call", "tool_state",
		"start_of_llm", "end_of_llm", "end_of_agent", "end_of_workflow"}
	if !isSubsequence(want, names) {
		t.Errorf("events %v\ndo not contain in order %v", names, want)
	}
	if names[0] != "start_of_workflow" || names[len(names)-1] != "end_of_workflow" || !slices.Contains(names, "message") {
		t.Errorf("events %v", names)
	}
}

// isSubsequence reports whether want appears in have in order.
func isSubsequence(want, have []string) bool {
	i := 0
	for _, h := range have {
		if i < len(want) && h == want[i] {
			i++
		}
	}
	return i == len(want)
}

// A model that refuses the key fails the run: exit 1, the kind on stderr,
// the task failed in the task log.
func TestRunModelFailure(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "")
	m := llmtest.OpenAI(t, llmtest.Replies(llmtest.Reply{Status: http.StatusUnauthorized,
		Body: `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`}))
	r := runToolmux(t, dir, []string{"OPENAI_API_KEY=sk-bad"}, "run", "--model", "scripted", "--base-url", m.BaseURL(), "anything")
	if r.code != 1 || !strings.Contains(r.stderr, "model_failed") || !strings.Contains(r.stderr, "auth") ||
		!strings.Contains(r.stderr, "Incorrect API key") {
		t.Errorf("exit %d\nstderr: %s", r.code, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("stdout: %q", r.stdout)
	}
	if n := strings.Count(r.stderr, "Incorrect API key"); n != 1 {
		t.Errorf("the error is said %d times, want once:\n%s", n, r.stderr)
	}
	if len(m.Requests()) != 1 {
		t.Errorf("%d requests: an auth failure is not retried", len(m.Requests()))
	}
	tasks := loggedTasks(t, dir)
	if len(tasks) != 1 || tasks[0].Status != "failed" || tasks[0].Input != "anything" {
		t.Errorf("task log: %+v", tasks)
	}
}

// A model that cannot be reached (nothing listens at --base-url) fails
// the run with its error said once, at the end, not in the progress too.
func TestRunDeadModel(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "model: {model: scripted, retry: {max_attempts: 2, initial_backoff: 10ms, max_backoff: 20ms}}\n")
	url := fmt.Sprintf("http://127.0.0.1:%d/v1", testservers.FreePort(t)) // nothing listens there
	r := runToolmux(t, dir, nil, "run", "--model", "scripted", "--base-url", url, "anything")
	if r.code != 1 || !strings.HasSuffix(r.stderr, "connection refused (after 2 attempts)\n") {
		t.Fatalf("exit %d, want 1 and the error last\n%s", r.code, r.stderr)
	}
	if n := strings.Count(r.stderr, "connection refused"); n != 1 {
		t.Errorf("the error is said %d times, want once:\n%s", n, r.stderr)
	}
	if !strings.Contains(r.stderr, "● failed after 0 turns") {
		t.Errorf("no summary line:\n%s", r.stderr)
	}
}

// At --max-turns the model is asked for a summary without tools, which is
// the answer.
func TestRunMaxTurns(t *testing.T) {
	t.Parallel()
	m := llmtest.OpenAI(t, func(n int, req llmtest.Request) llmtest.Reply {
		if req.ToolChoice == "none" {
			return llmtest.Reply{Content: "Summary: the notes start with alpha."}
		}
		return llmtest.Reply{Calls: []llmtest.Call{{Name: "builtin__read_file", Args: fmt.Sprintf(`{"path": "notes.txt", "offset": %d}`, n)}}}
	})
	r := runToolmux(t, workspace(t, ""), nil, "run", "--max-turns", "1", "--model", "scripted", "--base-url", m.BaseURL(), "Read forever")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "Summary: the notes start with alpha." {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "max_turns") {
		t.Errorf("stderr does not say the run stopped at max_turns:\n%s", r.stderr)
	}
	reqs := m.Requests()
	if len(reqs) != 2 || len(reqs[0].Tools) == 0 || !strings.Contains(reqs[1].Text(), "limit of 1 turns") {
		t.Errorf("%d requests: %+v", len(reqs), reqs)
	}
}

// shellThenAnswer is a model that runs command in the shell, then answers
// with what it was shown.
func shellThenAnswer(command string) llmtest.Script {
	return func(n int, req llmtest.Request) llmtest.Reply {
		if n == 0 {
			return llmtest.Reply{Calls: []llmtest.Call{{Name: "builtin__shell", Args: fmt.Sprintf(`{"command": %q}`, command)}}}
		}
		if n == 1 {
			return llmtest.Reply{Content: "finished"}
		}
		return llmtest.Reply{Status: 500, Body: `{"error":{"message":"llmtest: script exhausted"}}`}
	}
}

// Without a terminal, a call the policy asks about is refused (and the
// model told so) unless --yes approves it.
func TestRunApprovalsWithoutTerminal(t *testing.T) {
	t.Parallel()
	t.Run("refused", func(t *testing.T) {
		dir := workspace(t, "")
		m := llmtest.OpenAI(t, shellThenAnswer("touch made.txt"))
		r := runToolmux(t, dir, nil, "run", "--model", "scripted", "--base-url", m.BaseURL(), "Make a file")
		if r.code != 0 || strings.TrimSpace(r.stdout) != "finished" {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, "made.txt")); err == nil {
			t.Error("the refused command ran")
		}
		if !strings.Contains(r.stderr, "✗ builtin/shell: approval_unavailable") {
			t.Errorf("stderr does not show the refusal:\n%s", r.stderr)
		}
		if reqs := m.Requests(); len(reqs) != 2 || !strings.Contains(reqs[1].Text(), "approval_unavailable") {
			t.Errorf("the model was not told of the refusal: %+v", reqs)
		}
	})
	t.Run("yes", func(t *testing.T) {
		dir := workspace(t, "")
		m := llmtest.OpenAI(t, shellThenAnswer("touch made.txt"))
		r := runToolmux(t, dir, nil, "--yes", "run", "--model", "scripted", "--base-url", m.BaseURL(), "Make a file")
		if r.code != 0 || strings.TrimSpace(r.stdout) != "finished" {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, "made.txt")); err != nil {
			t.Errorf("the approved command did not run: %v\n%s", err, r.stderr)
		}
		if !strings.Contains(r.stderr, "✓ builtin/shell") {
			t.Errorf("stderr:\n%s", r.stderr)
		}
	})
}

// With --serve, the run is on the web page and its approvals wait in the
// API's queue.
func TestRunServeApprovals(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "")
	m := llmtest.OpenAI(t, shellThenAnswer("touch made.txt"))
	p := startRun(t, dir, nil, "run", "--serve", "127.0.0.1:0", "--model", "scripted", "--base-url", m.BaseURL(), "Make a file")
	p.waitStderr(t, "watch the run at http://")
	match := regexp.MustCompile(`watch the run at (http://[^/\s]+)/`).FindStringSubmatch(p.stderr.String())
	if match == nil {
		t.Fatalf("no address on stderr:\n%s", p.stderr)
	}
	base := match[1]
	getJSON := func(path string, v any) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	type pending struct {
		ID, Task, Server, Tool string
		Arguments              map[string]any
	}
	var waiting []pending
	if !testservers.Eventually(time.Minute, func() bool {
		waiting = nil
		getJSON("/api/approvals", &waiting)
		return len(waiting) > 0
	}) {
		t.Fatalf("no call waits for approval\n%s", p.stderr)
	}
	if len(waiting) != 1 || waiting[0].Server != "builtin" || waiting[0].Tool != "shell" ||
		waiting[0].Arguments["command"] != "touch made.txt" || waiting[0].Task == "" {
		t.Fatalf("waiting: %+v", waiting)
	}
	// The page answers a browser while the run waits.
	req, _ := http.NewRequest(http.MethodGet, base+"/", nil)
	req.Header.Set("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), "text/html") {
		t.Errorf("GET / for a browser: %s %s\n%.200s", resp.Status, resp.Header.Get("Content-Type"), page)
	}
	if _, err := os.Stat(filepath.Join(dir, "made.txt")); err == nil {
		t.Fatal("the command ran before it was approved")
	}
	resp, err = http.Post(base+"/api/approvals/"+waiting[0].ID, "application/json", strings.NewReader(`{"decision": "once"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("answer: %s", resp.Status)
	}
	// The run ends; its page stays up, showing it ended, until Ctrl-C.
	p.waitStderr(t, "the run has ended; its page stays at "+base+"/ until you press Ctrl-C")
	var info struct {
		Run struct {
			Task       string
			AfterEvent int64 `json:"after_event"`
			Ended      bool
		}
	}
	getJSON("/api/info", &info)
	if info.Run.Task != waiting[0].Task || !info.Run.Ended {
		t.Errorf("/api/info after the run: %+v", info)
	}
	// The whole run replays after the id the page is given.
	var first struct{ Event string }
	if err := firstEventAfter(base, info.Run.AfterEvent, &first); err != nil || first.Event != "start_of_workflow" {
		t.Errorf("the run's first event: %+v %v", first, err)
	}
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 0 || strings.TrimSpace(p.stdout.String()) != "finished" {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, p.stdout, p.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "made.txt")); err != nil {
		t.Errorf("the approved command did not run: %v\n%s", err, p.stderr)
	}
	if tasks := loggedTasks(t, dir); len(tasks) != 1 || tasks[0].ID != waiting[0].Task || tasks[0].Status != "success" {
		t.Errorf("task log: %+v, the approval's task %s", tasks, waiting[0].Task)
	}
}

// SIGINT stops a run promptly, in the middle of a tool call: exit 130, the
// task and the call recorded as cancelled.
func TestRunInterrupted(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "")
	// An odd duration names the command's process among the machine's.
	const sleep = "61.2345"
	m := llmtest.OpenAI(t, shellThenAnswer("sleep "+sleep))
	p := startRun(t, dir, nil, "--yes", "run", "--model", "scripted", "--base-url", m.BaseURL(), "Wait a minute")
	p.waitStderr(t, "→ builtin/shell")
	_, procfs := os.Stat("/proc/self/cmdline")
	var sleepers []int
	if procfs == nil && !testservers.Eventually(time.Minute, func() bool {
		sleepers = processesRunning("sleep\x00" + sleep + "\x00")
		return len(sleepers) > 0
	}) {
		t.Fatalf("the command did not start\n%s", p.stderr)
	}
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	// Well under the minute the command would take.
	if code := p.wait(t, 30*time.Second); code != 130 {
		t.Fatalf("exit %d, want 130\nstdout: %s\nstderr: %s", code, p.stdout, p.stderr)
	}
	if s := p.stderr.String(); !strings.Contains(s, "interrupted") || !strings.Contains(s, "● cancelled after") || p.stdout.String() != "" {
		t.Errorf("stdout: %q\nstderr: %s", p.stdout, s)
	}
	for _, pid := range sleepers {
		if !testservers.Eventually(10*time.Second, func() bool { return testservers.ProcessGone(pid) }) {
			t.Errorf("the command (pid %d) outlived the interrupted run", pid)
		}
	}
	if n := len(m.Requests()); n != 1 {
		t.Errorf("%d model requests after the interrupted call, want 1", n)
	}
	tasks := loggedTasks(t, dir)
	if len(tasks) != 1 || tasks[0].Status != "cancelled" {
		t.Fatalf("task log: %+v", tasks)
	}
	r := runToolmux(t, dir, nil, "logs", "show", tasks[0].ID)
	if r.code != 0 || !regexp.MustCompile(`builtin/shell\s+cancelled`).MatchString(r.stdout) {
		t.Errorf("logs show: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if running := runToolmux(t, dir, nil, "logs", "--status", "running", "--json"); strings.TrimSpace(running.stdout) != "[]" {
		t.Errorf("tasks still running: %s", running.stdout)
	}
}

// Rate limits are retried with the configured backoff.
func TestRunRetriesRateLimit(t *testing.T) {
	t.Parallel()
	m := llmtest.OpenAI(t, llmtest.Replies(
		llmtest.Reply{Status: http.StatusTooManyRequests, RetryAfter: "0"},
		llmtest.Reply{Content: "after the wait"},
	))
	cfg := fmt.Sprintf("model:\n  base_url: %s\n  model: scripted\n  retry: {initial_backoff: 10ms, max_backoff: 50ms}\n", m.BaseURL())
	r := runToolmux(t, workspace(t, cfg), nil, "run", "Answer")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "after the wait" {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if n := len(m.Requests()); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
}

// The main agent delegates to a configured sub-agent, whose answer comes
// back as the tool's result.
func TestRunSubAgent(t *testing.T) {
	t.Parallel()
	cfg := `agents:
  helper:
    description: Answers questions about the notes.
    system_prompt: "You are the helper."
`
	m := llmtest.OpenAI(t, func(n int, req llmtest.Request) llmtest.Reply {
		if strings.Contains(req.System, "You are the helper.") {
			if !strings.Contains(req.Text(), "Which word comes first?") {
				return llmtest.Reply{Content: "the helper did not get the subtask"}
			}
			return llmtest.Reply{Content: "The helper says: alpha."}
		}
		if strings.Contains(req.Text(), "The helper says: alpha.") {
			return llmtest.Reply{Content: "Main: alpha comes first."}
		}
		if !slices.Contains(req.Tools, "agent-helper__run") {
			return llmtest.Reply{Content: "no helper tool offered"}
		}
		return llmtest.Reply{Calls: []llmtest.Call{{Name: "agent-helper__run", Args: `{"subtask": "Which word comes first?"}`}}}
	})
	r := runToolmux(t, workspace(t, cfg), nil, "run", "--model", "scripted", "--base-url", m.BaseURL(), "Ask the helper")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "Main: alpha comes first." {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"● main started", "● helper started", "● helper finished", "✓ agent-helper/run"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if n := len(m.Requests()); n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
}

// processesRunning returns the processes whose command line (its
// arguments, each ended by a NUL) is cmdline.
func processesRunning(cmdline string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && string(b) == cmdline && !testservers.ProcessGone(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// firstEventAfter reads the first event of base's stream after id into v.
func firstEventAfter(base string, id int64, v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/events", nil)
	req.Header.Set("Last-Event-ID", strconv.FormatInt(id, 10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := stream.NewDecoder(resp.Body)
	for {
		ev, err := dec.NextEvent()
		if err != nil {
			return err
		}
		if ev.ID == 0 {
			continue // heartbeats and gaps
		}
		b, _ := json.Marshal(ev)
		return json.Unmarshal(b, v)
	}
}
