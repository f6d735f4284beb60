package toolmux_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/agent"
	"github.com/toolmux/toolmux/builtin"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/funcsource"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tool"
)

// answering answers every question with one answer, and counts them.
type answering struct {
	answer policy.Answer
	mu     sync.Mutex
	asked  []string
}

func (a *answering) Approve(_ context.Context, req policy.Request) (policy.Answer, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, req.Call.Server+"/"+req.Call.Tool)
	return a.answer, nil
}

// TestOpenPersistsAlways: with policy.persist, an "always" answer given to
// a runtime built by Open is written into the configuration file as a
// rule, which a runtime built from the rewritten file then applies
// without asking.
func TestOpenPersistsAlways(t *testing.T) {
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "toolmux.yaml")
	body := "# kept\nworkspace: " + strconv.Quote(ws) + "\npolicy:\n  persist: true\n"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	write := func(approver policy.Approver, name string) *tool.Record {
		t.Helper()
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		rt, err := toolmux.Open(ctx, cfg, toolmux.Options{Approver: approver, NoTaskLog: true})
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close(ctx)
		return rt.Scheduler.Call(ctx, tool.Call{Server: builtin.ServerName, Tool: builtin.WriteFile,
			Arguments: map[string]any{"path": name, "content": "hi"}})
	}

	always := &answering{answer: policy.AlwaysTool}
	if rec := write(always, "a.txt"); rec.Err() != nil {
		t.Fatal(rec.Err())
	}
	if len(always.asked) != 1 {
		t.Fatalf("asked %v, want one question", always.asked)
	}
	saved, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(saved), body) || !strings.Contains(string(saved), "always allow builtin/write_file") {
		t.Fatalf("the configuration file holds no saved rule:\n%s", saved)
	}

	// Nobody to ask now: only the saved rule lets the call run.
	if rec := write(nil, "b.txt"); rec.Err() != nil {
		t.Fatalf("the saved rule was not applied: %v", rec.Err())
	}
	if _, err := os.Stat(filepath.Join(ws, "b.txt")); err != nil {
		t.Error(err)
	}
}

// recordingDispatcher takes the tasks given to Runtime.Run.
type recordingDispatcher struct{ tasks []toolmux.Task }

func (d *recordingDispatcher) Dispatch(_ context.Context, t toolmux.Task) (*agent.Result, error) {
	d.tasks = append(d.tasks, t)
	return &agent.Result{Answer: "done elsewhere"}, nil
}

// TestRunDispatches: Runtime.Run hands its task to the dispatcher of
// Options, and without one runs it on the runtime's own agent, whose
// calls go through the runtime's scheduler (Sinks see them).
func TestRunDispatches(t *testing.T) {
	ctx := context.Background()
	d := &recordingDispatcher{}
	rt, err := toolmux.Open(ctx, config.Default(), toolmux.Options{NoTaskLog: true, Dispatcher: d})
	if err != nil {
		t.Fatal(err)
	}
	task := toolmux.Task{ID: tool.NewID(), Input: "count the apples", Metadata: map[string]any{"k": "v"}}
	res, err := rt.Run(ctx, task)
	rt.Close(ctx)
	if err != nil || res.Answer != "done elsewhere" || len(d.tasks) != 1 || d.tasks[0].ID != task.ID || d.tasks[0].Input != task.Input {
		t.Fatalf("dispatched %+v: %+v, %v", d.tasks, res, err)
	}

	model, stop := scriptedModel()
	defer stop()
	shop := funcsource.New("shop", funcsource.Func("stock", "Stock of an item.",
		func(context.Context, struct {
			Item string `json:"item"`
		}) (string, error) {
			return "12", nil
		}, funcsource.ReadOnly()))
	var mu sync.Mutex
	var executed []string
	rt, err = toolmux.Open(ctx, config.Default(), toolmux.Options{Model: model, NoTaskLog: true,
		Sources: []manager.Source{shop},
		Sinks: []schedule.Sink{schedule.SinkFunc(func(e schedule.Event) {
			if e.Type == schedule.EventState && e.State == schedule.Executing {
				mu.Lock()
				executed = append(executed, e.Server+"/"+e.Tool)
				mu.Unlock()
			}
		})}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	res, err = rt.Run(ctx, toolmux.Task{Input: "How many apples are in stock?"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "There are 12 apples in stock." {
		t.Errorf("answer %q", res.Answer)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(executed) != 1 || executed[0] != "shop/stock" {
		t.Errorf("calls through the scheduler: %v", executed)
	}
}

// TestOpenTaskLogError: a task log that cannot be opened is told apart
// from the rest of the configuration (the CLI exits 1 for it, 2 for a
// mistake in the configuration).
func TestOpenTaskLogError(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Default()
	// A file where the data directory should be.
	cfg.DataDir = filepath.Join(dir, "data")
	if err := os.WriteFile(cfg.DataDir, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	rt, err := toolmux.Open(context.Background(), cfg, toolmux.Options{})
	if err == nil {
		rt.Close(context.Background())
		t.Fatal("opened a task log in a file")
	}
	if _, ok := errors.AsType[*toolmux.TaskLogError](err); !ok {
		t.Errorf("%T %v: not a *TaskLogError", err, err)
	}
}

// TestOpenExternalEvents: a runtime given a hub of the caller's publishes
// its calls' events there and leaves the hub open when it closes; with
// NoEvents it has no hub and its calls still run, seen by Sinks only.
func TestOpenExternalEvents(t *testing.T) {
	ctx := context.Background()
	hub, err := stream.NewHub(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close(ctx)
	sub, err := hub.Subscribe(ctx, stream.Filter{}, stream.Live)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	echo := funcsource.New("s", funcsource.Func("echo", "Echoes.", func(_ context.Context, in struct {
		Text string `json:"text"`
	}) (string, error) {
		return in.Text, nil
	}, funcsource.ReadOnly()))
	rt, err := toolmux.Open(ctx, config.Default(), toolmux.Options{NoTaskLog: true, Events: hub, Sources: []manager.Source{echo}})
	if err != nil {
		t.Fatal(err)
	}
	if rt.Events != hub {
		t.Fatal("the runtime made a hub of its own")
	}
	if rec := rt.Scheduler.Call(ctx, tool.Call{Server: "s", Tool: "echo", Arguments: map[string]any{"text": "hi"}}); rec.Err() != nil {
		t.Fatal(rec.Err())
	}
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The call's events reached the hub, which is still open.
	sawState := false
	for !sawState {
		e, ok := <-sub.Events()
		if !ok {
			t.Fatal("the subscription ended: the runtime closed the caller's hub")
		}
		sawState = e.Name == stream.EventToolState
	}
	if _, err := hub.Subscribe(ctx, stream.Filter{}, stream.Live); err != nil {
		t.Errorf("the hub was closed with the runtime: %v", err)
	}

	var states []schedule.State
	rt, err = toolmux.Open(ctx, config.Default(), toolmux.Options{NoTaskLog: true, NoEvents: true, NoAgents: true,
		Sources: []manager.Source{echo},
		Sinks: []schedule.Sink{schedule.SinkFunc(func(e schedule.Event) {
			if e.Type == schedule.EventState {
				states = append(states, e.State)
			}
		})}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	if rt.Events != nil {
		t.Error("a hub with NoEvents")
	}
	if rec := rt.Scheduler.Call(ctx, tool.Call{Server: "s", Tool: "echo", Arguments: map[string]any{"text": "hi"}}); rec.Err() != nil || rec.Result.Text() != "hi" {
		t.Fatalf("%+v", rec)
	}
	if len(states) == 0 || states[len(states)-1] != schedule.Success {
		t.Errorf("states %v", states)
	}
	if _, err := rt.Agent(); err == nil {
		t.Error("an agent without events")
	}
}
