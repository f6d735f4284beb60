package schedule_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/tool"
)

// onStack reports whether the function named name (not one of its
// closures) is on the calling goroutine's stack.
func onStack(name string) bool {
	pcs := make([]uintptr, 128)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(1, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, "."+name) {
			return true
		}
		if !more {
			return false
		}
	}
}

// watchedBackend is the real manager, noting for each call whether it ran
// on the test's goroutine and which definition it carried.
type watchedBackend struct {
	*manager.Manager
	test string

	mu     sync.Mutex
	inline map[string]bool       // by call ID
	defs   map[string]*tool.Tool // by call ID
}

func (w *watchedBackend) Call(ctx context.Context, call tool.Call) *tool.Record {
	w.mu.Lock()
	w.inline[call.ID] = onStack(w.test)
	w.defs[call.ID] = call.Def()
	w.mu.Unlock()
	return w.Manager.Call(ctx, call)
}

// A call made with Call, and the last call of a batch run with Run, run on
// the caller's goroutine: admission, the gate and the backend start no
// goroutine for them. Earlier calls of a batch still run side by side on
// their own. Each call reaches the backend with the definition it was
// admitted against.
func TestCallsRunOnTheCallersGoroutine(t *testing.T) {
	m, _ := fixture(t)
	be := &watchedBackend{Manager: m, test: t.Name(), inline: map[string]bool{}, defs: map[string]*tool.Tool{}}
	var gateInline atomic.Bool
	gate := gateFunc(func(ctx context.Context, def tool.Tool, call tool.Call, _ func(string)) error {
		gateInline.Store(onStack(t.Name()))
		return nil
	})
	s := schedule.New(be, schedule.WithGate(gate))

	rec := s.Call(context.Background(), tool.Call{ID: "one", Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "hi"}})
	if rec.Err() != nil || rec.Result.Text() != "Echo: hi" {
		t.Fatalf("got %+v %v", rec, rec.Err())
	}
	if !be.inline["one"] || !gateInline.Load() {
		t.Errorf("a batch of one left the caller's goroutine: backend %v, gate %v", be.inline["one"], gateInline.Load())
	}
	def := be.defs["one"]
	if def == nil || def.Name != "echo" || def.Server != "fx" || def.InputSchema == nil {
		t.Errorf("the backend got no admitted definition: %+v", def)
	}

	out := s.Run(context.Background(), []tool.Call{
		{ID: "first", Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "a"}},
		{ID: "last", Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "b"}},
	})
	for _, o := range out {
		if o.State != schedule.Success {
			t.Fatalf("%s: %s %v", o.Call.ID, o.State, o.Record.Err())
		}
	}
	if be.inline["first"] || !be.inline["last"] {
		t.Errorf("in a batch of two, first ran inline %v (want false), last %v (want true)", be.inline["first"], be.inline["last"])
	}

	// Start returns at once: the batch runs on a goroutine of its own.
	b := s.Start(context.Background(), []tool.Call{{ID: "started", Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "c"}}})
	if o := b.Wait(); o[0].State != schedule.Success || be.inline["started"] {
		t.Errorf("started batch: %s, inline %v", o[0].State, be.inline["started"])
	}
}

// gateFunc adapts a function to schedule.Gate.
type gateFunc func(ctx context.Context, def tool.Tool, call tool.Call, asking func(string)) error

func (f gateFunc) Admit(ctx context.Context, def tool.Tool, call tool.Call, asking func(string)) error {
	return f(ctx, def, call, asking)
}

// countingLookup is the real manager, counting definition lookups; once
// changed is set, it answers with that definition instead, as a manager
// does after the server re-listed its tools.
type countingLookup struct {
	*manager.Manager
	lookups atomic.Int32
	changed atomic.Pointer[tool.Tool]
}

func (c *countingLookup) Tool(ctx context.Context, server, name string) (tool.Tool, error) {
	c.lookups.Add(1)
	if t := c.changed.Load(); t != nil {
		return *t, nil
	}
	return c.Manager.Tool(ctx, server, name)
}

// The governed path looks a call's tool up once: the definition the gate
// admitted is the one the pipeline repairs and validates against and the
// one the manager calls, even when the tool changed in between.
func TestOneDefinitionPerCall(t *testing.T) {
	m, _ := fixture(t)
	lookup := &countingLookup{Manager: m}
	p, err := pipeline.New(lookup, pipeline.WithDataDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	// While the call waits for the gate, the server's echo changes: it
	// now wants "text", and would refuse {"message": ...}.
	gate := gateFunc(func(context.Context, tool.Tool, tool.Call, func(string)) error {
		lookup.changed.Store(&tool.Tool{Server: "fx", Name: "echo", InputSchema: map[string]any{"type": "object",
			"properties": map[string]any{"text": map[string]any{"type": "string"}}, "required": []any{"text"}}})
		return nil
	})
	s := schedule.New(p, schedule.WithGate(gate))
	rec := s.Call(context.Background(), tool.Call{Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "hi"}})
	if rec.Err() != nil || rec.Result.Text() != "Echo: hi" {
		t.Fatalf("the call was not made against its admitted definition: %v %+v", rec.Err(), rec.Result)
	}
	if n := lookup.lookups.Load(); n != 1 {
		t.Errorf("%d lookups for one call, want 1", n)
	}
}
