package schedule_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmux/toolmux/builtin"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/tool"
)

// The whole path with the real policy gate and the built-in shell: live
// output of a running command reaches the sink as output events; a
// non-interactive default mode refuses the shell with a message that says
// how to allow it; cancelling a running shell call ends it in cancelled.
func TestShellThroughPolicyAndScheduler(t *testing.T) {
	src, err := builtin.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	yolo, err := policy.New(policy.ModeYolo, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var output strings.Builder
	started := make(chan struct{})
	var once sync.Once
	sink := schedule.SinkFunc(func(e schedule.Event) {
		if e.Type != schedule.EventOutput {
			return
		}
		mu.Lock()
		if e.Stream == "stdout" {
			output.WriteString(e.Chunk)
		}
		seen := strings.Contains(output.String(), "started")
		mu.Unlock()
		if seen {
			once.Do(func() { close(started) })
		}
	})
	s := schedule.New(m, schedule.WithGate(policy.NewGate(yolo)), schedule.WithSink(sink))

	out := s.Run(context.Background(), []tool.Call{{Server: "builtin", Tool: "shell",
		Arguments: map[string]any{"command": "echo one; echo two"}}})
	if out[0].State != schedule.Success {
		t.Fatalf("shell: %s %v", out[0].State, out[0].Record.Err())
	}
	mu.Lock()
	got := output.String()
	mu.Unlock()
	if !strings.Contains(got, "one") || !strings.Contains(got, "two") {
		t.Fatalf("output events carried %q", got)
	}

	// Default mode, nobody to ask.
	def, err := policy.New(policy.ModeDefault, nil)
	if err != nil {
		t.Fatal(err)
	}
	out = schedule.New(m, schedule.WithGate(policy.NewGate(def))).Run(context.Background(), []tool.Call{{
		Server: "builtin", Tool: "shell", Arguments: map[string]any{"command": "echo never"}}})
	if out[0].State != schedule.Error || tool.KindOf(out[0].Record.Err()) != tool.KindApprovalUnavailable ||
		!strings.Contains(out[0].Record.Error.Message, "--yes") {
		t.Fatalf("non-interactive default mode: %s %v", out[0].State, out[0].Record.Err())
	}

	// Cancel a running command, once it has shown it runs.
	mu.Lock()
	output.Reset()
	mu.Unlock()
	b := s.Start(context.Background(), []tool.Call{{ID: "long", Server: "builtin", Tool: "shell",
		Arguments: map[string]any{"command": "echo started; sleep 30"}}})
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the command never started")
	}
	b.CancelCall("long")
	out = b.Wait()
	if out[0].State != schedule.Cancelled {
		t.Fatalf("cancelled shell: %s %v", out[0].State, out[0].Record.Err())
	}
}
