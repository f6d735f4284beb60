package fleet_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/internal/testservers"
)

// Submitting an id twice queues one message and runs it once; an empty
// task is refused; Watch and Wait see the final state.
func TestSubmit(t *testing.T) {
	s := startNATS(t, t.TempDir(), 0)
	o := fleet.Options{Memory: true, Lease: 2 * time.Second}
	f := open(t, s, o)
	fx := newEffects()
	model := appendModel(t, 0)

	_, _, err := f.Submit(bg, fleet.Request{ID: "empty"})
	var re *fleet.RequestError
	if !errors.As(err, &re) || re.ID != "empty" {
		t.Errorf("an empty task: %v", err)
	}
	var nf *fleet.NotFoundError
	if _, err := f.Get(bg, "empty"); !errors.As(err, &nf) {
		t.Errorf("the refused run was recorded: %v", err)
	}

	run, created, err := f.Submit(bg, fleet.Request{ID: "r1", Task: "append one"})
	if err != nil || !created || run.Status != fleet.StatusQueued {
		t.Fatalf("submit: %+v %v %v", run, created, err)
	}
	again, created, err := f.Submit(bg, fleet.Request{ID: "r1", Task: "append another"})
	if err != nil || created || again.Task != "append one" {
		t.Fatalf("submit again: %+v %v %v", again, created, err)
	}
	st, err := f.JetStream().Stream(bg, "TOOLMUX_QUEUE")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(bg)
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("queue: %+v %v, want one message", info.State, err)
	}

	// Watch sees every state from queued to done; Wait returns the last.
	seen := make(chan []fleet.Status, 1)
	wctx, wcancel := context.WithTimeout(bg, time.Minute)
	defer wcancel()
	go func() {
		var got []fleet.Status
		f.Watch(wctx, func(r *fleet.Run) bool {
			got = append(got, r.Status)
			return !r.Status.Final()
		}, "r1")
		seen <- got
	}()
	newNode(t, s, o, "w1", model, fx, fleet.WorkerOptions{}).start()
	done := wait(t, f, "r1")
	if done.Status != fleet.StatusDone || done.Worker != "w1" || done.Deliveries != 1 || done.Answer != "appended one | tool said: appended one" ||
		done.Turns < 1 || done.Calls != 1 || done.Started.IsZero() || done.Ended.Before(done.Started) {
		t.Errorf("final state %+v", done)
	}
	got := <-seen
	if len(got) == 0 || got[0] != fleet.StatusQueued && got[0] != fleet.StatusRunning || got[len(got)-1] != fleet.StatusDone {
		t.Errorf("watched %v", got)
	}
	// Submitting a finished run again queues nothing and reports it done.
	again, created, err = f.Submit(bg, fleet.Request{ID: "r1", Task: "append one"})
	if err != nil || created || again.Status != fleet.StatusDone {
		t.Errorf("submit after the end: %+v %v %v", again, created, err)
	}
	if c := fx.count("one"); c != 1 {
		t.Errorf("the run's call ran %d times", c)
	}
	// Nothing is left in the queue (the run's state is written before its
	// message is acknowledged).
	if !testservers.Eventually(10*time.Second, func() bool { return queueEmpty(t, f) }) {
		t.Error("the run's message is still in the queue")
	}
	runs, err := f.Runs(bg)
	if err != nil || len(runs) != 1 || runs[0].ID != "r1" {
		t.Errorf("runs: %v %v", runs, err)
	}
}
