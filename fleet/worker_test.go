package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/internal/testservers"
)

// gate holds a scripted model's answering turns until released.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func (g *gate) release() { g.once.Do(func() { close(g.ch) }) }

// heldModel is appendModel whose answering turn waits for the gate's
// release (a slow model: a run in progress as long as the test wants).
func heldModel(t *testing.T) (*llmtest.Server, *gate) {
	g := &gate{ch: make(chan struct{})}
	m := llmtest.OpenAI(t, func(n int, req llmtest.Request) llmtest.Reply {
		r := scriptAppend(req)
		if len(r.Calls) == 0 {
			select {
			case <-g.ch:
			case <-time.After(10 * time.Minute):
			}
		}
		return r
	})
	// Before the server closes, which waits for the held requests.
	t.Cleanup(g.release)
	return m, g
}

// queueState is the queue's messages and the workers' consumer's
// deliveries waiting for an ack.
func queueState(t *testing.T, f *fleet.Fleet) (msgs uint64, ackPending int) {
	t.Helper()
	st, err := f.JetStream().Stream(bg, "TOOLMUX_QUEUE")
	if err != nil {
		t.Fatal(err)
	}
	si, err := st.Info(bg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := st.Consumer(bg, "workers")
	if err != nil {
		t.Fatal(err)
	}
	ci, err := c.Info(bg)
	if err != nil {
		t.Fatal(err)
	}
	return si.State.Msgs, ci.NumAckPending
}

func queueEmpty(t *testing.T, f *fleet.Fleet) bool {
	msgs, pending := queueState(t, f)
	return msgs == 0 && pending == 0
}

// A run that never finishes is given up after MaxDeliveries deliveries:
// failed, with the reason, and its queue message terminated, not handed
// out again.
func TestMaxDeliveries(t *testing.T) {
	s := startNATS(t, t.TempDir(), 0)
	o := fleet.Options{Memory: true, Lease: 2 * time.Second, MaxDeliveries: 2}
	f := open(t, s, o)
	model, _ := heldModel(t)
	fx := newEffects()
	if _, _, err := f.Submit(bg, fleet.Request{ID: "stuck", Task: "append stuck"}); err != nil {
		t.Fatal(err)
	}
	// Each worker is stopped while the run waits on the model, past its
	// grace: the run is handed back.
	for i := 1; i <= o.MaxDeliveries; i++ {
		n := newNode(t, s, o, fmt.Sprintf("w%d", i), model, fx, fleet.WorkerOptions{Grace: 50 * time.Millisecond}).start()
		waitFor(t, f, "stuck", func(r *fleet.Run) bool { return r.Status == fleet.StatusRunning && r.Deliveries == i })
		if !testservers.Eventually(time.Minute, func() bool { return len(model.Requests()) >= i+1 }) {
			t.Fatalf("delivery %d never asked the model", i)
		}
		n.stop()
		if r, err := f.Get(bg, "stuck"); err != nil || r.Status != fleet.StatusQueued {
			t.Fatalf("after delivery %d: %+v %v", i, r, err)
		}
	}
	last := newNode(t, s, o, "last", model, fx, fleet.WorkerOptions{}).start()
	run := wait(t, f, "stuck")
	if run.Status != fleet.StatusFailed || run.Deliveries != o.MaxDeliveries+1 || run.ErrorKind != fleet.ErrorKindGivenUp ||
		!strings.Contains(run.Error, fmt.Sprintf("given up after %d deliveries", o.MaxDeliveries)) {
		t.Errorf("run %+v", run)
	}
	if !testservers.Eventually(10*time.Second, func() bool { return queueEmpty(t, f) }) {
		msgs, pending := queueState(t, f)
		t.Errorf("the given-up run's message is still queued: %d messages, %d waiting for an ack", msgs, pending)
	}
	if len(last.w.Running()) != 0 {
		t.Errorf("the last worker runs %v", last.w.Running())
	}
	if c := fx.count("stuck"); c != 1 {
		t.Errorf("the call ran %d times", c)
	}
}

// Draining: a run that finishes within the grace is finished and
// acknowledged before Run returns.
func TestDrainFinishes(t *testing.T) {
	s := startNATS(t, t.TempDir(), 0)
	o := fleet.Options{Memory: true, Lease: 2 * time.Second}
	f := open(t, s, o)
	model := appendModel(t, 500*time.Millisecond)
	fx := newEffects()
	n := newNode(t, s, o, "w1", model, fx, fleet.WorkerOptions{Grace: time.Minute}).start()
	if _, _, err := f.Submit(bg, fleet.Request{ID: "r", Task: "append r"}); err != nil {
		t.Fatal(err)
	}
	if !testservers.Eventually(time.Minute, func() bool { return len(model.Requests()) >= 2 }) {
		t.Fatal("the run never reached its second turn")
	}
	n.stop()
	run, err := f.Get(bg, "r")
	if err != nil || run.Status != fleet.StatusDone || run.Worker != "w1" || run.Deliveries != 1 {
		t.Fatalf("after the drain: %+v %v", run, err)
	}
	if !queueEmpty(t, f) {
		t.Error("the run finished in the drain was not acknowledged")
	}
}

// Draining: a run that outlasts the grace is handed back (queued), taken
// by another worker and resumed from its last committed turn: its call is
// not made again, and the model is asked only the turn that was cut.
func TestDrainHandsBack(t *testing.T) {
	s := startNATS(t, t.TempDir(), 0)
	o := fleet.Options{Memory: true, Lease: 2 * time.Second}
	f := open(t, s, o)
	model, held := heldModel(t)
	fx := newEffects()
	n1 := newNode(t, s, o, "w1", model, fx, fleet.WorkerOptions{Grace: 100 * time.Millisecond}).start()
	if _, _, err := f.Submit(bg, fleet.Request{ID: "r", Task: "append r"}); err != nil {
		t.Fatal(err)
	}
	if !testservers.Eventually(time.Minute, func() bool { return len(model.Requests()) >= 2 }) {
		t.Fatal("the run never reached its second turn")
	}
	n1.stop()
	run, err := f.Get(bg, "r")
	if err != nil || run.Status != fleet.StatusQueued || run.Worker != "w1" {
		t.Fatalf("after the drain: %+v %v", run, err)
	}
	held.release()
	newNode(t, s, o, "w2", model, fx, fleet.WorkerOptions{}).start()
	run = wait(t, f, "r")
	if run.Status != fleet.StatusDone || run.Worker != "w2" || run.Deliveries != 2 || run.Answer != "appended r | tool said: appended r" {
		t.Errorf("run %+v", run)
	}
	if c := fx.count("r"); c != 1 {
		t.Errorf("the call ran %d times", c)
	}
	if reqs := model.Requests(); len(reqs) != 3 {
		t.Errorf("%d model requests, want 3 (turn 1, turn 2 cut, turn 2 again)", len(reqs))
	}
	// The state is written before the ack.
	if !testservers.Eventually(10*time.Second, func() bool { return queueEmpty(t, f) }) {
		t.Error("the resumed run was not acknowledged")
	}
	// The first attempt's cancellation is not the run's end: the events
	// tell of one end, the second worker's, and no error.
	for _, e := range checkEvents(t, f, "r") {
		if e.Name == "show_error" || e.Name == "end_of_workflow" && e.Worker != "w2" {
			t.Errorf("event %d: %s by %s", e.Seq, e.Name, e.Worker)
		}
	}
}

// A second queue message of a run already taken (submitted again after the
// queue's de-duplication window: another stream sequence) is dropped, not
// run; so is one of a run already over.
func TestDuplicateMessageDropped(t *testing.T) {
	s := startNATS(t, t.TempDir(), 0)
	o := fleet.Options{Memory: true, Lease: 2 * time.Second}
	f := open(t, s, o)
	model, held := heldModel(t)
	fx := newEffects()
	newNode(t, s, o, "w1", model, fx, fleet.WorkerOptions{Concurrency: 2}).start()
	if _, _, err := f.Submit(bg, fleet.Request{ID: "r", Task: "append r"}); err != nil {
		t.Fatal(err)
	}
	taken := waitFor(t, f, "r", func(r *fleet.Run) bool { return r.Status == fleet.StatusRunning })
	if !testservers.Eventually(time.Minute, func() bool { return len(model.Requests()) >= 2 }) {
		t.Fatal("the run never reached its second turn")
	}
	dup := func() {
		b, _ := json.Marshal(fleet.Request{ID: "r", Task: "append r"})
		msg := nats.NewMsg("toolmux.queue.run")
		msg.Data = b
		msg.Header.Set(jetstream.MsgIDHeader, "r-again-"+fmt.Sprint(time.Now().UnixNano()))
		if _, err := f.JetStream().PublishMsg(bg, msg); err != nil {
			t.Fatal(err)
		}
	}
	dup()
	// The worker's free slot takes the duplicate and drops it (acks it)
	// while the run goes on.
	if !testservers.Eventually(time.Minute, func() bool { return queueState1(t, f) == 0 }) {
		t.Fatal("the duplicate was never taken")
	}
	if r, _ := f.Get(bg, "r"); r.Status != fleet.StatusRunning || r.QueueSeq != taken.QueueSeq || r.Deliveries != 1 {
		t.Errorf("the duplicate changed the run: %+v", r)
	}
	// The run is let finish; then a duplicate of a run over is dropped
	// too.
	held.release()
	wait(t, f, "r")
	dup()
	if !testservers.Eventually(time.Minute, func() bool { return queueEmpty(t, f) }) {
		t.Fatal("the duplicate of a run over was never dropped")
	}
	if c := fx.count("r"); c != 1 {
		t.Errorf("the call ran %d times", c)
	}
	if r, _ := f.Get(bg, "r"); r.Status != fleet.StatusDone || r.QueueSeq != taken.QueueSeq || r.Deliveries != 1 {
		t.Errorf("run %+v", r)
	}
}

// queueState1 is the number of queue messages not yet delivered.
func queueState1(t *testing.T, f *fleet.Fleet) uint64 {
	st, err := f.JetStream().Stream(bg, "TOOLMUX_QUEUE")
	if err != nil {
		t.Fatal(err)
	}
	c, err := st.Consumer(bg, "workers")
	if err != nil {
		t.Fatal(err)
	}
	ci, err := c.Info(bg)
	if err != nil {
		t.Fatal(err)
	}
	return ci.NumPending
}

// checkEvents checks that a run's events are numbered 1..N with no gap
// or repeat, and end with the workflow's end.
func checkEvents(t *testing.T, f *fleet.Fleet, id string) []fleet.Event {
	t.Helper()
	evs := checkEventsSoFar(t, f, id)
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Errorf("event %d (%s by %s) numbered %d", i+1, e.Name, e.Worker, e.Seq)
		}
	}
	if evs[len(evs)-1].Name != "end_of_workflow" {
		t.Errorf("the last event is %s", evs[len(evs)-1].Name)
	}
	return evs
}

// checkEventNumbers checks that a run's events are numbered 1..N, each
// number once, and end with the workflow's end: across a server restart
// the events in flight when it went away are stored when it is back,
// possibly after later ones (see EventStore.AppendEvents).
func checkEventNumbers(t *testing.T, f *fleet.Fleet, id string) []fleet.Event {
	t.Helper()
	evs := checkEventsSoFar(t, f, id)
	seen := map[int64]int{}
	var last fleet.Event
	for _, e := range evs {
		seen[e.Seq]++
		if e.Seq > last.Seq {
			last = e
		}
	}
	for n := int64(1); n <= last.Seq; n++ {
		if seen[n] != 1 {
			t.Errorf("run %s: event %d stored %d times", id, n, seen[n])
		}
	}
	if len(evs) != int(last.Seq) {
		t.Errorf("run %s: %d events numbered up to %d", id, len(evs), last.Seq)
	}
	if last.Name != "end_of_workflow" {
		t.Errorf("run %s: the last event is %s", id, last.Name)
	}
	return evs
}

// A worker whose run's journal another worker claimed (it was presumed
// dead) finds out at its next renewal (an *OwnershipError): its run stops
// without writing the run's end, and publishes no more of its events.
func TestLeaseLost(t *testing.T) {
	s := startNATS(t, t.TempDir(), 0)
	o := fleet.Options{Memory: true, Lease: 2 * time.Second}
	f := open(t, s, o)
	model, held := heldModel(t)
	fx := newEffects()
	n := newNode(t, s, o, "w1", model, fx, fleet.WorkerOptions{}).start()
	if _, _, err := f.Submit(bg, fleet.Request{ID: "r", Task: "append r"}); err != nil {
		t.Fatal(err)
	}
	if !testservers.Eventually(time.Minute, func() bool { return len(model.Requests()) >= 2 }) {
		t.Fatal("the run never reached its second turn")
	}
	other := open(t, s, o)
	j, err := other.OpenJournal(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if _, err := j.Claim(bg, "r", "intruder"); err != nil {
		t.Fatal(err)
	}
	if !testservers.Eventually(time.Minute, func() bool { return len(n.w.Running()) == 0 }) {
		t.Fatal("the run went on after its lease was lost")
	}
	run, err := f.Get(bg, "r")
	if err != nil || run.Status != fleet.StatusRunning || !run.Ended.IsZero() || run.Worker != "w1" || run.Answer != "" {
		t.Errorf("the worker that lost the run wrote its end: %+v %v", run, err)
	}
	// Its cancellation is not the run's end, and not its to tell.
	for _, e := range checkEventsSoFar(t, f, "r") {
		if e.Name == "show_error" || e.Name == "end_of_workflow" {
			t.Errorf("the worker that lost the run published event %d: %s", e.Seq, e.Name)
		}
	}
	// The queue hands the run out again once its lease lapses (to the
	// same worker, the only one): it claims it back and finishes it.
	held.release()
	run = wait(t, f, "r")
	if run.Status != fleet.StatusDone || run.Deliveries != 2 || run.Answer != "appended r | tool said: appended r" {
		t.Errorf("run %+v", run)
	}
	if c := fx.count("r"); c != 1 {
		t.Errorf("the call ran %d times", c)
	}
	checkEvents(t, f, "r")
}

// checkEventsSoFar returns a run's events stored so far.
func checkEventsSoFar(t *testing.T, f *fleet.Fleet, id string) []fleet.Event {
	t.Helper()
	last, err := f.LastEventSeq(bg, id)
	if err != nil || last == 0 {
		t.Fatalf("last event: %d %v", last, err)
	}
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	var evs []fleet.Event
	err = f.Events(ctx, id, 0, func(e fleet.Event) bool {
		evs = append(evs, e)
		// The last stored, which after a restart need not be the
		// last numbered.
		return e.Seq != last
	})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// The NATS server restarts (same store, same port) while runs are in
// progress: the workers reconnect, every run submitted finishes, each
// call's effect happens once and every run's events have no gap.
func TestServerRestart(t *testing.T) {
	dir := t.TempDir()
	s := startNATS(t, dir, 0)
	port := natsPort(s)
	o := fleet.Options{Lease: 5 * time.Second}
	f := open(t, s, o)
	model := appendModel(t, 2*time.Second)
	fx := newEffects()
	w1 := newNode(t, s, o, "w1", model, fx, fleet.WorkerOptions{Concurrency: 3}).start()
	w2 := newNode(t, s, o, "w2", model, fx, fleet.WorkerOptions{Concurrency: 3}).start()
	const n = 6
	for i := range n {
		if _, _, err := f.Submit(bg, fleet.Request{ID: fmt.Sprintf("r%d", i), Task: fmt.Sprintf("append line-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Every run's call made, every run waiting on its answering turn.
	if !testservers.Eventually(time.Minute, func() bool {
		for i := range n {
			if fx.count(fmt.Sprintf("line-%d", i)) == 0 {
				return false
			}
		}
		return true
	}) {
		t.Fatal("the runs' calls were never made")
	}
	s.Shutdown()
	startNATS(t, dir, port)
	restarted := time.Now()
	for i := range n {
		id := fmt.Sprintf("r%d", i)
		run := wait(t, f, id)
		t.Logf("%s: %s on %s after %d deliveries, %s after the restart", id, run.Status, run.Worker, run.Deliveries, time.Since(restarted).Round(time.Millisecond))
		if run.Status != fleet.StatusDone || run.Answer != fmt.Sprintf("appended line-%d | tool said: appended line-%d", i, i) {
			t.Errorf("run %+v", run)
		}
		if c := fx.count(fmt.Sprintf("line-%d", i)); c != 1 {
			t.Errorf("%s: the call ran %d times", id, c)
		}
		checkEventNumbers(t, f, id)
	}
	if !testservers.Eventually(10*time.Second, func() bool { return queueEmpty(t, f) }) {
		t.Error("runs left in the queue")
	}
	w1.close()
	w2.close()
}

// A worker drained past its grace in the middle of a call of a
// non-idempotent tool (its effect already had): the run is handed back,
// and the worker that resumes it does not run the call again, neither by
// itself nor by the model's hand (a call reported "cancelled" is one a
// model retries): the model is told the outcome is unknown.
func TestDrainMidCall(t *testing.T) {
	s := startNATS(t, t.TempDir(), 0)
	o := fleet.Options{Memory: true, Lease: 2 * time.Second}
	f := open(t, s, o)
	// A careful model: a call reported cancelled is made again.
	model := llmtest.OpenAI(t, func(_ int, req llmtest.Request) llmtest.Reply {
		r := scriptAppend(req)
		var last string
		for _, m := range req.Messages {
			if m["role"] == "tool" {
				last, _ = m["content"].(string)
			}
		}
		if len(r.Calls) == 0 && strings.Contains(last, "cancelled") {
			return llmtest.Reply{Calls: []llmtest.Call{{Name: "fx__append", Args: `{"line": "x"}`}}}
		}
		return r
	})
	fx := newEffects()
	fx.hold = true
	n1 := newNode(t, s, o, "w1", model, fx, fleet.WorkerOptions{Grace: 100 * time.Millisecond}).start()
	if _, _, err := f.Submit(bg, fleet.Request{ID: "r", Task: "append x"}); err != nil {
		t.Fatal(err)
	}
	<-fx.started
	n1.stop()
	fx.mu.Lock()
	fx.hold = false
	fx.mu.Unlock()
	newNode(t, s, o, "w2", model, fx, fleet.WorkerOptions{}).start()
	run := wait(t, f, "r")
	if run.Status != fleet.StatusDone || run.Worker != "w2" || !strings.Contains(run.Answer, "outcome_unknown") && !strings.Contains(run.Answer, "outcome is unknown") {
		t.Errorf("run %+v", run)
	}
	if c := fx.count("x"); c != 1 {
		t.Errorf("the non-idempotent call ran %d times", c)
	}
	checkEvents(t, f, "r")
}

// The same with a read-only tool: the call cut short is run again by the
// worker that resumes the run (under the same id; the ledger sees the
// tool's definition say it is safe), and its result is the model's.
func TestDrainMidCallReadOnly(t *testing.T) {
	s := startNATS(t, t.TempDir(), 0)
	o := fleet.Options{Memory: true, Lease: 2 * time.Second}
	f := open(t, s, o)
	model := appendModel(t, 0)
	fx := newEffects()
	fx.hold = true
	n1 := newNode(t, s, o, "w1", model, fx, fleet.WorkerOptions{Grace: 100 * time.Millisecond}).start()
	if _, _, err := f.Submit(bg, fleet.Request{ID: "r", Task: "peek x"}); err != nil {
		t.Fatal(err)
	}
	<-fx.started
	n1.stop()
	fx.mu.Lock()
	fx.hold = false
	fx.mu.Unlock()
	newNode(t, s, o, "w2", model, fx, fleet.WorkerOptions{}).start()
	run := wait(t, f, "r")
	if run.Status != fleet.StatusDone || run.Worker != "w2" || run.Answer != "peeked x | tool said: saw x" {
		t.Errorf("run %+v", run)
	}
	if c := fx.count("peek:x"); c != 2 {
		t.Errorf("the read-only call ran %d times, want twice (cut short, then again)", c)
	}
	if n := len(model.Requests()); n != 2 {
		t.Errorf("%d model requests, want 2 (the call, the answer)", n)
	}
	checkEvents(t, f, "r")
}

// gates holds a scripted model's requests by their number: request n
// waits until release(n) (or the test's end).
type gates struct {
	mu  sync.Mutex
	chs map[int]chan struct{}
}

func (g *gates) ch(n int) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.chs[n] == nil {
		g.chs[n] = make(chan struct{})
	}
	return g.chs[n]
}

func (g *gates) release(n int) {
	ch := g.ch(n)
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// A worker cut off from the server past its lease (unfenced, so that it
// does not learn of it) loses its run to another worker. When it comes
// back and finishes the run, it must leave the queue message alone: an
// acknowledgement removes the message by its stream sequence whoever
// holds it now, and the run would be lost with its new worker.
func TestStaleWorkerLeavesMessage(t *testing.T) {
	s := startNATS(t, t.TempDir(), 0)
	o := fleet.Options{Memory: true, Lease: 2 * time.Second}
	f := open(t, s, o)
	g := &gates{chs: map[int]chan struct{}{}}
	held := map[int]bool{1: true, 2: true} // the answering turns of w1 and w2
	model := llmtest.OpenAI(t, func(n int, req llmtest.Request) llmtest.Reply {
		if held[n] {
			select {
			case <-g.ch(n):
			case <-time.After(10 * time.Minute):
			}
		}
		return scriptAppend(req)
	})
	t.Cleanup(func() { g.release(1); g.release(2) })
	fx := newEffects()
	p := newProxy(t, s.Addr().String())
	n1 := newNode(t, s, o, "w1", model, fx, fleet.WorkerOptions{}, nodeOptions{url: p.url(), unfenced: true}).start()
	if _, _, err := f.Submit(bg, fleet.Request{ID: "r", Task: "append r"}); err != nil {
		t.Fatal(err)
	}
	if !testservers.Eventually(time.Minute, func() bool { return len(model.Requests()) >= 2 }) {
		t.Fatal("the run never reached its second turn")
	}
	p.freeze(true)
	n2 := newNode(t, s, o, "w2", model, fx, fleet.WorkerOptions{Grace: 100 * time.Millisecond}).start()
	waitFor(t, f, "r", func(r *fleet.Run) bool { return r.Worker == "w2" && r.Deliveries == 2 })
	if !testservers.Eventually(time.Minute, func() bool { return len(model.Requests()) >= 3 }) {
		t.Fatal("the second worker never resumed the run")
	}
	// w1 is back and finishes its attempt; it finds the run another's.
	p.freeze(false)
	g.release(1)
	if !testservers.Eventually(time.Minute, func() bool { return len(n1.w.Running()) == 0 }) {
		t.Fatal("the first worker's attempt never ended")
	}
	if r, _ := f.Get(bg, "r"); r.Worker != "w2" || r.Status != fleet.StatusRunning {
		t.Fatalf("the stale worker wrote the run's end: %+v", r)
	}
	// w2 goes away too (handing the run back); another worker finishes
	// it.
	n2.stop()
	newNode(t, s, o, "w3", model, fx, fleet.WorkerOptions{}).start()
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	run, err := f.Wait(ctx, "r")
	if err != nil {
		msgs, pending := queueState(t, f)
		t.Fatalf("the run was lost: %+v %v (queue: %d messages, %d waiting for an ack)", run, err, msgs, pending)
	}
	// w1 (back in the fleet) or w3 finishes it.
	if run.Status != fleet.StatusDone || run.Deliveries != 3 || run.Worker == "w2" {
		t.Errorf("run %+v", run)
	}
	if c := fx.count("r"); c != 1 {
		t.Errorf("the call ran %d times", c)
	}
}
