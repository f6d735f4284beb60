package schedule_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/tool"
)

// Shutdown lets a call that finishes within the grace finish, cancels the
// one that does not (the server sees the cancellation), reports it with
// the shutdown as its cause, and refuses batches started afterwards.
func TestShutdownFinishesThenCancels(t *testing.T) {
	m, marker := fixture(t)
	executing := make(chan string, 4)
	s := schedule.New(m, schedule.WithSink(schedule.SinkFunc(func(e schedule.Event) {
		if e.Type == schedule.EventState && e.State == schedule.Executing {
			executing <- e.Call
		}
	})))
	var wg sync.WaitGroup
	outcomes := map[string]schedule.Outcome{}
	var mu sync.Mutex
	for _, c := range []tool.Call{
		{ID: "short", Server: "fx", Tool: "span", Arguments: map[string]any{"ms": 300}},
		{ID: "hang", Server: "fx", Tool: "hang"},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := s.Run(context.Background(), []tool.Call{c})[0]
			mu.Lock()
			outcomes[c.ID] = o
			mu.Unlock()
		}()
	}
	for range 2 {
		<-executing
	}
	// The grace outlasts the short call and never the hanging one.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	got := s.Shutdown(ctx)
	wg.Wait()

	if len(got) != 1 || got[0].Call.ID != "hang" {
		t.Fatalf("Shutdown reported %+v, want the hanging call only", got)
	}
	if o := outcomes["short"]; o.State != schedule.Success {
		t.Errorf("the short call did not finish: %s %v", o.State, o.Record.Err())
	}
	o := outcomes["hang"]
	if o.State != schedule.Cancelled || tool.KindOf(o.Record.Err()) != tool.KindCancelled ||
		!strings.Contains(o.Record.Error.Message, schedule.ErrShuttingDown.Error()) {
		t.Errorf("hanging call: %s %v", o.State, o.Record.Err())
	}
	if !testservers.Eventually(10*time.Second, func() bool {
		b, _ := os.ReadFile(marker)
		return strings.Contains(string(b), "cancelled hang")
	}) {
		t.Error("the server never saw the hanging call cancelled")
	}

	// After the shutdown every new call ends cancelled without running.
	late := s.Call(context.Background(), tool.Call{Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "x"}})
	if tool.KindOf(late.Err()) != tool.KindCancelled || !strings.Contains(late.Error.Message, schedule.ErrShuttingDown.Error()) {
		t.Errorf("call after shutdown: %v", late.Err())
	}
	// A second Shutdown has nothing left to wait for.
	if again := s.Shutdown(context.Background()); len(again) != 0 {
		t.Errorf("second Shutdown: %+v", again)
	}
}

// Shutdown with nothing running returns at once, even with a context that
// never ends.
func TestShutdownIdle(t *testing.T) {
	s := schedule.New(instantBackend{})
	done := make(chan []schedule.Outcome)
	go func() { done <- s.Shutdown(context.Background()) }()
	select {
	case got := <-done:
		if len(got) != 0 {
			t.Fatalf("got %+v", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown of an idle scheduler did not return")
	}
}

// instantBackend answers every call at once.
type instantBackend struct{}

func (instantBackend) Call(_ context.Context, c tool.Call) *tool.Record {
	return &tool.Record{ID: c.ID, Server: c.Server, Tool: c.Tool}
}

func (instantBackend) Tool(context.Context, string, string) (tool.Tool, error) {
	return tool.Tool{}, errors.New("unused")
}
