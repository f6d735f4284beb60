package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/internal/testservers"
)

// startNATS starts an embedded JetStream server for one test, its data in
// a directory of the test's, on port (0: any).
func startNATS(t testing.TB, dir string, port int) *server.Server {
	t.Helper()
	if port == 0 {
		port = server.RANDOM_PORT
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir,
		NoLog: true, NoSigs: true, MaxPayload: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("the NATS server did not start")
	}
	t.Cleanup(s.Shutdown)
	return s
}

func natsURL(s *server.Server) string {
	return fmt.Sprintf("nats://127.0.0.1:%d", s.Addr().(*net.TCPAddr).Port)
}

// appendModel is a scripted model for fleet runs: a task "append LINE to
// FILE sleeping MS" makes one call of the fixture's append tool, then
// answers "appended LINE", and tells what the tool said.
func appendModel(t testing.TB, turnDelay time.Duration) *llmtest.Server {
	re := regexp.MustCompile(`append (\S+) to (\S+) sleeping (\d+)`)
	return llmtest.OpenAI(t, func(_ int, req llmtest.Request) llmtest.Reply {
		var task, last string
		assistants := 0
		for _, m := range req.Messages {
			c, _ := m["content"].(string)
			switch m["role"] {
			case "user":
				if task == "" {
					task = c
				}
			case "assistant":
				assistants++
			case "tool":
				last = c
			}
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
	})
}

func oneLineOf(s string) string { return strings.Join(strings.Fields(s), " ") }

func fleetWorkspace(t testing.TB, m *llmtest.Server) string {
	return workspace(t, fmt.Sprintf(`model:
  base_url: %s
  model: scripted
servers:
  fx:
    command: %s
    trust: true
`, m.BaseURL(), testservers.Fixture(t)))
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
	w := &workerProc{stderr: &testservers.SyncBuffer{}, exited: make(chan struct{})}
	w.cmd = exec.Command(bin, append([]string{"worker", "--nats", url, "--lease", "2s"}, args...)...)
	w.cmd.Dir = dir
	w.cmd.Env = append(modelFreeEnv(), "XDG_DATA_HOME="+t.TempDir())
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
	if !testservers.Eventually(30*time.Second, func() bool { return strings.Contains(w.stderr.String(), "joined the fleet") }) {
		t.Fatalf("the worker did not start:\n%s", w.stderr.String())
	}
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
	time.Sleep(time.Second)
	if again := lines(t, out); len(again) != len(effects) {
		t.Errorf("re-submitting ran something: %d lines, then %d", len(effects), len(again))
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
	if _, _, err := f.Submit(ctx, fleet.Request{ID: "slow", Task: "append once to " + out + " sleeping 60000"}); err != nil {
		t.Fatal(err)
	}
	if !testservers.Eventually(time.Minute, func() bool { return countOf(lines(t, out), "once") == 1 }) {
		t.Fatalf("the call never started:\n%s", w1.stderr.String())
	}
	w1.kill(t)
	killed := time.Now()
	w2 := startWorker(t, dir, natsURL(ns), "--name", "second")
	run, err := f.Wait(ctx, "slow")
	if err != nil {
		t.Fatalf("%v\n%s", err, w2.stderr.String())
	}
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
	run, err := f.Wait(ctx, "thinking")
	if err != nil {
		t.Fatal(err)
	}
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
