package fleet_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/tool"
)

// counted is a handler below the ledger: it counts its calls and answers
// with the call's id, or waits for release (a call in flight when its
// worker stops) when block is set.
type counted struct {
	n       atomic.Int32
	entered chan struct{}
	release chan struct{}
}

func newCounted() *counted {
	return &counted{entered: make(chan struct{}, 10), release: make(chan struct{})}
}

func (c *counted) handler(block bool) pipeline.Handler {
	return pipeline.HandlerFunc(func(ctx context.Context, call tool.Call) *tool.Record {
		c.n.Add(1)
		c.entered <- struct{}{}
		if block {
			select {
			case <-c.release:
			case <-ctx.Done():
				return tool.Refused(&call, &tool.Error{Kind: tool.KindCancelled, Server: call.Server, Tool: call.Tool, Message: "cancelled", Err: ctx.Err()})
			}
		}
		rec := tool.NewRecord(&call, "")
		rec.Result = &tool.Result{Content: []tool.Content{{Type: "text", Text: "ran " + call.ID}}}
		rec.Ended = time.Now()
		return rec
	})
}

func def(call tool.Call, readOnly, idempotent bool) tool.Call {
	d := &tool.Tool{Server: call.Server, Name: call.Tool}
	if readOnly {
		d.Annotations.ReadOnly = tool.Bool(true)
	}
	if idempotent {
		d.Annotations.Idempotent = tool.Bool(true)
	}
	call.Definition = d
	return call
}

func call(id string) tool.Call {
	return tool.Call{ID: id, Task: "run-1", Server: "fx", Tool: "append", Arguments: map[string]any{"line": id}}
}

func kindOf(rec *tool.Record) tool.Kind {
	if rec == nil || rec.Error == nil {
		return ""
	}
	return rec.Error.Kind
}

func TestLedger(t *testing.T) {
	s := startNATS(t, t.TempDir(), 0)
	f := open(t, s, fleet.Options{Memory: true})
	first := f.Ledger(fleet.LedgerOptions{Worker: "w1"})
	second := f.Ledger(fleet.LedgerOptions{Worker: "w2"})

	// A first call runs; the same call again is answered from the ledger.
	c := newCounted()
	rec := first.Middleware(c.handler(false)).Call(bg, call("c1"))
	if rec.Err() != nil || c.n.Load() != 1 {
		t.Fatalf("first call: %+v, %d calls", rec.Error, c.n.Load())
	}
	again := second.Middleware(c.handler(false)).Call(bg, call("c1"))
	if again.Err() != nil || c.n.Load() != 1 || again.Result == nil || again.Result.Content[0].Text != "ran c1" ||
		len(again.Notes) == 0 || again.Notes[len(again.Notes)-1].Layer != "ledger" {
		t.Errorf("the completed call again: %+v, %d calls", again, c.n.Load())
	}

	// A call without a task (a gateway client's) is not the ledger's.
	loose := call("c0")
	loose.Task = ""
	first.Middleware(c.handler(false)).Call(bg, loose)
	first.Middleware(c.handler(false)).Call(bg, loose)
	if c.n.Load() != 3 {
		t.Errorf("calls without a task: %d runs, want both", c.n.Load()-1)
	}

	// Calls in flight on w1 when it stops: started, never completed.
	inflight := newCounted()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(inflight.release)
	for _, id := range []string{"c2", "c3", "c4"} {
		wg.Go(func() { first.Middleware(inflight.handler(true)).Call(bg, call(id)) })
	}
	for range 3 {
		<-inflight.entered
	}
	retry := newCounted()
	next := second.Middleware(retry.handler(false))
	// Not declared safe: refused, outcome unknown.
	if rec := next.Call(bg, def(call("c2"), false, false)); kindOf(rec) != tool.KindOutcomeUnknown {
		t.Errorf("a started non-idempotent call again: %+v", rec.Error)
	}
	if rec := next.Call(bg, call("c2")); kindOf(rec) != tool.KindOutcomeUnknown {
		t.Errorf("a started call without a definition again: %+v", rec.Error)
	}
	if retry.n.Load() != 0 {
		t.Fatalf("the non-idempotent call ran again")
	}
	// Declared idempotent or read-only: runs again, once.
	if rec := next.Call(bg, def(call("c3"), false, true)); rec.Err() != nil {
		t.Errorf("a started idempotent call again: %+v", rec.Error)
	}
	if rec := next.Call(bg, def(call("c4"), true, false)); rec.Err() != nil {
		t.Errorf("a started read-only call again: %+v", rec.Error)
	}
	if retry.n.Load() != 2 {
		t.Errorf("%d calls ran again, want the idempotent and the read-only one", retry.n.Load())
	}
}

// A call cut short by its run's cancellation (a worker draining past its
// grace) is not a completed call: its effect may have happened. Its
// record, "cancelled", is not kept as its outcome: a resumed run is told
// the outcome is unknown, or, for a tool safe to repeat, runs it again.
func TestLedgerCancelledCallNotCompleted(t *testing.T) {
	s := startNATS(t, t.TempDir(), 0)
	f := open(t, s, fleet.Options{Memory: true})
	first := f.Ledger(fleet.LedgerOptions{Worker: "w1"})
	second := f.Ledger(fleet.LedgerOptions{Worker: "w2"})
	c := newCounted()
	for _, id := range []string{"c1", "c2"} {
		ctx, cancel := context.WithCancel(bg)
		got := make(chan *tool.Record, 1)
		go func() { got <- first.Middleware(c.handler(true)).Call(ctx, call(id)) }()
		<-c.entered
		cancel()
		if rec := <-got; kindOf(rec) != tool.KindCancelled {
			t.Fatalf("the cancelled call: %+v", rec.Error)
		}
	}
	retry := newCounted()
	next := second.Middleware(retry.handler(false))
	rec := next.Call(bg, def(call("c1"), false, false))
	if kindOf(rec) != tool.KindOutcomeUnknown {
		t.Errorf("a cancelled non-idempotent call again: %+v (%v)", rec.Error, errors.Unwrap(rec.Err()))
	}
	if rec := next.Call(bg, def(call("c2"), false, true)); rec.Err() != nil || retry.n.Load() != 1 {
		t.Errorf("a cancelled idempotent call again: %+v, ran %d times", rec.Error, retry.n.Load())
	}
}
