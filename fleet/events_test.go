package fleet_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/stream"
)

func events(task string, names ...string) []stream.Event {
	out := make([]stream.Event, len(names))
	for i, n := range names {
		out[i] = stream.Event{Name: n, Task: task, Time: time.Now().UTC(), Data: json.RawMessage(`{}`)}
	}
	return out
}

// Events appended while the NATS server is away are stored when it is
// back, under the numbers they were given: a run's events keep no gap
// across a server restart. (Their order in the stream may differ from
// their numbers' there: what was in flight when the server went away is
// sent again after what got through.)
func TestEventsAcrossServerRestart(t *testing.T) {
	dir := t.TempDir()
	s := startNATS(t, dir, 0)
	port := natsPort(s)
	f := open(t, s, fleet.Options{})
	store := fleet.NewEventStore(f, "w1")
	store.Begin("r")
	if err := store.AppendEvents(bg, events("r", "start_of_workflow", "start_of_agent", "start_of_llm")...); err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	appended := make(chan error, 1)
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	sent := f.Conn().Stats().OutMsgs
	go func() { appended <- store.AppendEvents(ctx, events("r", "end_of_llm", "message", "message")...) }()
	// The append meets the server away once it has sent something
	// (sequencing, not a timing assertion: the result is the same if it
	// meets it back).
	if !testservers.Eventually(10*time.Second, func() bool { return f.Conn().Stats().OutMsgs > sent }) {
		t.Error("the append sent nothing while the server was away")
	}
	startNATS(t, dir, port)
	if err := <-appended; err != nil {
		t.Errorf("events appended across the restart: %v", err)
	}
	if err := store.AppendEvents(bg, events("r", "end_of_agent", "end_of_workflow")...); err != nil {
		t.Fatal(err)
	}
	evs := checkEventNumbers(t, f, "r")
	if len(evs) != 8 {
		t.Errorf("%d events stored, want 8", len(evs))
	}
}

// Events appended without a pause while the server restarts: whatever
// was being published when it went away is stored once it is back, and
// the run's events have no gap.
func TestEventsStreamedAcrossServerRestart(t *testing.T) {
	dir := t.TempDir()
	s := startNATS(t, dir, 0)
	port := natsPort(s)
	f := open(t, s, fleet.Options{})
	store := fleet.NewEventStore(f, "w1")
	store.Begin("r")
	stop := make(chan struct{})
	done := make(chan int)
	var batches atomic.Int64 // appended, failed or not
	go func() {
		failed := 0
		for {
			select {
			case <-stop:
				done <- failed
				return
			default:
			}
			ctx, cancel := context.WithTimeout(bg, 30*time.Second)
			// As the hub does: a failed batch is not retried.
			if store.AppendEvents(ctx, events("r", "message", "message", "message", "message")...) != nil {
				failed++
			}
			cancel()
			batches.Add(1)
		}
	}()
	// Batches go before the server goes, and after it is back.
	after := func(n int64, what string) {
		t.Helper()
		if !testservers.Eventually(30*time.Second, func() bool { return batches.Load() >= n+3 }) {
			t.Fatalf("no batches appended %s", what)
		}
	}
	after(0, "before the restart")
	s.Shutdown()
	startNATS(t, dir, port)
	after(batches.Load(), "after the restart")
	close(stop)
	if failed := <-done; failed > 0 {
		t.Errorf("%d batches of events failed", failed)
	}
	if err := store.AppendEvents(bg, events("r", "end_of_workflow")...); err != nil {
		t.Fatal(err)
	}
	checkEventNumbers(t, f, "r")
}
