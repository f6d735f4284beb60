package main_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	toolmuxrt "github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/agent"
	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/internal/testservers"
)

// Bad files of runs are refused before anything is submitted: exit 2,
// naming the file and the line.
func TestFleetSubmitBadFile(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "")
	for _, c := range []struct {
		name, content, want string
	}{
		{"bad line", "{\"id\": \"a\", \"task\": \"x\"}\n\n{\"id\": \"b\", task: \"y\"}\n", "runs.jsonl:3: not a run"},
		{"two runs on a line", `{"id": "a", "task": "x"} {"id": "b", "task": "y"}` + "\n", "runs.jsonl:1: not a run"},
		{"no task", "{\"id\": \"a\", \"task\": \"x\"}\n{\"id\": \"b\"}\n", `runs.jsonl:2: run "b" has no task`},
		{"duplicate id", "{\"id\": \"a\", \"task\": \"x\"}\n{\"id\": \"b\", \"task\": \"y\"}\n{\"id\": \"a\", \"task\": \"z\"}\n",
			`runs.jsonl:3: id "a" is already on line 1`},
		{"empty", "# nothing yet\n", "runs.jsonl holds no run"},
	} {
		file := filepath.Join(dir, "runs.jsonl")
		if err := os.WriteFile(file, []byte(c.content), 0o644); err != nil {
			t.Fatal(err)
		}
		// The URL is never dialled: the file is read first.
		r := execToolmux(t, dir, "", modelFreeEnv(), "submit", "--nats", "nats://127.0.0.1:1", "runs.jsonl")
		if r.code != 2 || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
			t.Errorf("%s: exit %d, want 2 and %q\nstdout: %s\nstderr: %s", c.name, r.code, c.want, r.stdout, r.stderr)
		}
	}
	// The same from stdin, named so.
	r := execToolmux(t, dir, "{\"id\": \"a\"}\n", modelFreeEnv(), "submit", "--nats", "nats://127.0.0.1:1", "-")
	if r.code != 2 || !strings.Contains(r.stderr, `stdin:1: run "a" has no task`) {
		t.Errorf("stdin: exit %d\n%s", r.code, r.stderr)
	}
}

// Without --nats (or $TOOLMUX_NATS) the fleet commands say how to name
// one (exit 2); a server that cannot be reached is a failure (exit 1) that
// names it.
func TestFleetCommandsWithoutServer(t *testing.T) {
	t.Parallel()
	m := llmtest.OpenAI(t, llmtest.Replies())
	dir := workspace(t, fmt.Sprintf("model:\n  base_url: %s\n  model: scripted\n", m.BaseURL()))
	if err := os.WriteFile(filepath.Join(dir, "runs.jsonl"), []byte(`{"id": "a", "task": "x"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const hint = "--nats nats://HOST:4222"
	for _, args := range [][]string{{"submit", "runs.jsonl"}, {"runs"}, {"worker"}} {
		r := execToolmux(t, dir, "", modelFreeEnv(), args...)
		if r.code != 2 || !strings.Contains(r.stderr, hint) {
			t.Errorf("%s without --nats: exit %d, want 2 and the hint\n%s", args[0], r.code, r.stderr)
		}
	}

	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + l.Addr().String()
	l.Close()
	// A worker waits for its server: --connect-timeout bounds the wait
	// (TestFleetWorkerWaitsForNATS).
	for _, args := range [][]string{{"submit", "--nats", url, "runs.jsonl"}, {"runs", "--nats", url}, {"worker", "--nats", url, "--connect-timeout", "1s"},
		{"run", "--nats", url, "a task"}} {
		r := execToolmux(t, dir, "", modelFreeEnv(), args...)
		if r.code != 1 || !strings.Contains(r.stderr, "cannot reach the NATS server at "+url) {
			t.Errorf("%s with nothing at %s: exit %d, want 1 and a message naming it\n%s", args[0], url, r.code, r.stderr)
		}
	}
}

// blockingRunner is a worker's runtime whose runs never end by
// themselves (a run that kills or outlasts every worker it is given to).
type blockingRunner struct{}

func (blockingRunner) Run(ctx context.Context, _ toolmuxrt.Task) (*agent.Result, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// toolmux run --nats follows a run to its end even when the run never
// told of one: given up after its deliveries, it published no event at
// all. The command reports the failure (exit 1) instead of waiting for
// ever for the workflow's end.
func TestFleetRunGivenUp(t *testing.T) {
	t.Parallel()
	ns := startNATS(t, t.TempDir(), 0)
	dir := workspace(t, "")
	type result struct {
		stdout, stderr string
		code           int
	}
	done := make(chan result, 1)
	go func() {
		r := execToolmux(t, dir, "", modelFreeEnv(), "run", "--nats", natsURL(ns), "--lease", "2s", "a task no worker finishes")
		done <- result{r.stdout, r.stderr, r.code}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := fleet.Connect(ctx, natsURL(ns), "test", fleet.Options{Lease: 2 * time.Second, MaxDeliveries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var id string
	if !testservers.Eventually(time.Minute, func() bool {
		runs, err := f.Runs(ctx)
		if err == nil && len(runs) == 1 {
			id = runs[0].ID
		}
		return id != ""
	}) {
		t.Fatal("the run was never submitted")
	}
	// The first worker is stopped past its grace: the run is handed back;
	// the second gets its second delivery, one more than allowed.
	for i, name := range []string{"first", "second"} {
		w, err := f.NewWorker(ctx, fleet.WorkerOptions{Name: name, Runner: blockingRunner{}, Grace: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithCancel(ctx)
		stopped := make(chan struct{})
		go func() { defer close(stopped); w.Run(wctx) }()
		if !testservers.Eventually(time.Minute, func() bool {
			r, err := f.Get(ctx, id)
			return err == nil && r.Deliveries == i+1 && (r.Status == fleet.StatusRunning || r.Status == fleet.StatusFailed)
		}) {
			t.Fatalf("delivery %d never came", i+1)
		}
		wcancel()
		<-stopped
	}
	select {
	case r := <-done:
		if r.code != 1 || !strings.Contains(r.stderr, "given up after 1 deliveries") {
			t.Errorf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
	case <-ctx.Done():
		t.Fatal("toolmux run --nats did not end with its run")
	}
}
