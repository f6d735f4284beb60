package schedule_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/tool"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture returns a manager over one stdio fixture server named "fx",
// whose marker file records cancellations.
func fixture(t *testing.T) (*manager.Manager, string) {
	t.Helper()
	marker := filepath.Join(t.TempDir(), "marker")
	src, err := mcpsource.New(mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio,
		Command: testservers.Fixture(t), Args: []string{"-marker", marker},
		ConnectTimeout: 30 * time.Second, StopGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	if _, err := m.Tools(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m, marker
}

// recorder collects events; safe for concurrent use.
type recorder struct {
	mu     sync.Mutex
	events []schedule.Event
}

func (r *recorder) Event(e schedule.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// states returns the states each call went through, by call ID.
func (r *recorder) states() map[string][]schedule.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]schedule.State{}
	for _, e := range r.events {
		if e.Type == schedule.EventState {
			out[e.Call] = append(out[e.Call], e.State)
		}
	}
	return out
}

func spanCall(name string, ms int) tool.Call {
	return tool.Call{Server: "fx", Tool: name, Arguments: map[string]any{"ms": ms}}
}

// span is when a span or span_write call ran, by the server's clock.
type span struct{ start, end int64 }

func spanOf(t *testing.T, o schedule.Outcome) span {
	t.Helper()
	if o.State != schedule.Success {
		t.Fatalf("call %s (%s) ended %s: %v", o.Call.ID, o.Call.Tool, o.State, o.Record.Err())
	}
	f := strings.Fields(o.Record.Result.Text())
	if len(f) != 2 {
		t.Fatalf("span result %q", o.Record.Result.Text())
	}
	a, _ := strconv.ParseInt(f[0], 10, 64)
	b, _ := strconv.ParseInt(f[1], 10, 64)
	return span{a, b}
}

// Read-only calls overlap; a mutating call waits for everything before it
// and holds back everything after it; outcomes keep the model's order.
func TestBatchRunsReadsInParallelAndWritesInOrder(t *testing.T) {
	m, _ := fixture(t)
	rec := &recorder{}
	s := schedule.New(m, schedule.WithSink(rec))
	calls := []tool.Call{
		spanCall("span", 400), spanCall("span", 400), spanCall("span", 400),
		spanCall("span_write", 100), spanCall("span_write", 100),
		spanCall("span", 300), spanCall("span", 300),
	}
	out := s.Run(context.Background(), calls)
	if len(out) != len(calls) {
		t.Fatalf("%d outcomes for %d calls", len(out), len(calls))
	}
	sp := make([]span, len(out))
	for i, o := range out {
		if o.Call.Tool != calls[i].Tool || o.Record.Tool != calls[i].Tool {
			t.Fatalf("outcome %d is for %s, want %s", i, o.Call.Tool, calls[i].Tool)
		}
		sp[i] = spanOf(t, o)
	}
	overlap := func(group ...int) bool {
		var maxStart, minEnd int64 = 0, 1 << 62
		for _, i := range group {
			maxStart, minEnd = max(maxStart, sp[i].start), min(minEnd, sp[i].end)
		}
		return maxStart < minEnd
	}
	if !overlap(0, 1, 2) {
		t.Errorf("the first three read-only calls did not overlap: %v", sp[:3])
	}
	for _, i := range []int{0, 1, 2} {
		if sp[3].start < sp[i].end {
			t.Errorf("write 3 started before read %d ended: %v %v", i, sp[3], sp[i])
		}
	}
	if sp[4].start < sp[3].end {
		t.Errorf("write 4 overlapped write 3: %v %v", sp[4], sp[3])
	}
	if sp[5].start < sp[4].end || sp[6].start < sp[4].end {
		t.Errorf("reads after a write started before it ended: %v %v %v", sp[4], sp[5], sp[6])
	}
	if !overlap(5, 6) {
		t.Errorf("the last two read-only calls did not overlap: %v", sp[5:])
	}

	want := []schedule.State{schedule.Validating, schedule.Scheduled, schedule.Executing, schedule.Success}
	states := rec.states()
	for i, o := range out {
		if got := states[o.Call.ID]; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("call %d events: %v, want %v", i, got, want)
		}
		var got []schedule.State
		for j, tr := range o.Transitions {
			got = append(got, tr.State)
			if j > 0 && tr.Time.Before(o.Transitions[j-1].Time) {
				t.Errorf("call %d: transition times go backwards: %v", i, o.Transitions)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("call %d transitions: %v, want %v", i, got, want)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, e := range rec.events {
		if e.Batch == "" || e.Call == "" || e.Server != "fx" || e.Time.IsZero() {
			t.Fatalf("event without its identity: %+v", e)
		}
		if e.State.Terminal() && e.Record == nil {
			t.Fatalf("terminal event without its record: %+v", e)
		}
	}
}

// MaxParallel bounds how many read-only calls run at once.
func TestMaxParallelBoundsConcurrency(t *testing.T) {
	m, _ := fixture(t)
	s := schedule.New(m, schedule.WithMaxParallel(2))
	var calls []tool.Call
	for range 5 {
		calls = append(calls, spanCall("span", 150))
	}
	out := s.Run(context.Background(), calls)
	sp := make([]span, len(out))
	for i, o := range out {
		sp[i] = spanOf(t, o)
	}
	// At no call's start are more than two calls running.
	for i := range sp {
		running := 0
		for j := range sp {
			if sp[j].start <= sp[i].start && sp[i].start < sp[j].end {
				running++
			}
		}
		if running > 2 {
			t.Fatalf("%d calls ran at once with MaxParallel 2: %v", running, sp)
		}
	}
}

// An unknown tool ends in error at validation, without running, and is
// still recorded by the pipeline with its rollback verdict.
func TestUnknownToolIsRefusedAndRecorded(t *testing.T) {
	m, _ := fixture(t)
	var mu sync.Mutex
	var recorded []*tool.Record
	p, err := pipeline.New(m, pipeline.WithRecorder(pipeline.RecorderFunc(
		func(_ context.Context, r *tool.Record) { mu.Lock(); recorded = append(recorded, r); mu.Unlock() })))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	out := schedule.New(p, schedule.WithSink(rec)).Run(context.Background(), []tool.Call{
		{Server: "fx", Tool: "ecko", Arguments: map[string]any{"message": "x"}},
		{Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "key sk-abcdefghijklmnopqrstuvwxyz0123"}},
	})
	if out[0].State != schedule.Error || tool.KindOf(out[0].Record.Err()) != tool.KindToolNotRegistered {
		t.Fatalf("unknown tool: %s %v", out[0].State, out[0].Record.Err())
	}
	if fmt.Sprint(rec.states()[out[0].Call.ID]) != fmt.Sprint([]schedule.State{schedule.Validating, schedule.Error}) {
		t.Errorf("unknown tool went through %v", rec.states()[out[0].Call.ID])
	}
	if v := out[0].Record.Verdict; v == nil || !v.Rollback {
		t.Errorf("no rollback verdict for an unknown tool: %+v", v)
	}
	if out[1].State != schedule.Success {
		t.Fatalf("echo: %s %v", out[1].State, out[1].Record.Err())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(recorded) != 2 {
		t.Fatalf("%d records, want 2 (the refusal included)", len(recorded))
	}
	for _, r := range recorded {
		if r.ID == "" {
			t.Errorf("record without an id: %+v", r)
		}
		if v, _ := r.Arguments["message"].(string); strings.Contains(v, "sk-abc") {
			t.Errorf("secret not masked in the record: %v", v)
		}
	}
}

// gate is a programmatic Gate: deny, ask (then the answer) or allow, by
// tool name.
type gate struct {
	deny   map[string]bool
	ask    map[string]bool
	answer func(ctx context.Context) error
	mu     sync.Mutex
	asked  []string
}

func (g *gate) Admit(ctx context.Context, t tool.Tool, call tool.Call, asking func(string)) error {
	switch {
	case g.deny[t.Name]:
		return &tool.Error{Kind: tool.KindPolicyViolation, Message: t.Name + " is denied"}
	case g.ask[t.Name]:
		g.mu.Lock()
		g.asked = append(g.asked, call.ID)
		g.mu.Unlock()
		asking("may " + t.Name + " run?")
		return g.answer(ctx)
	}
	return nil
}

// A denied call never runs; an asked one waits for its answer, reported as
// awaiting_approval; approval prompts come in the model's order.
func TestGateDeniesAndAsks(t *testing.T) {
	m, _ := fixture(t)
	rec := &recorder{}
	g := &gate{deny: map[string]bool{"span_write": true}, ask: map[string]bool{"echo": true},
		answer: func(context.Context) error { return nil }}
	s := schedule.New(m, schedule.WithSink(rec), schedule.WithGate(g))
	out := s.Run(context.Background(), []tool.Call{
		spanCall("span_write", 10),
		{Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "one"}},
		{Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "two"}},
	})
	if out[0].State != schedule.Error || tool.KindOf(out[0].Record.Err()) != tool.KindPolicyViolation {
		t.Fatalf("denied call: %s %v", out[0].State, out[0].Record.Err())
	}
	states := rec.states()
	if got := states[out[0].Call.ID]; fmt.Sprint(got) != fmt.Sprint([]schedule.State{schedule.Validating, schedule.Scheduled, schedule.Error}) {
		t.Errorf("denied call went through %v", got)
	}
	for _, o := range out[1:] {
		if o.State != schedule.Success {
			t.Fatalf("approved call: %s %v", o.State, o.Record.Err())
		}
		want := []schedule.State{schedule.Validating, schedule.Scheduled, schedule.AwaitingApproval, schedule.Executing, schedule.Success}
		if got := states[o.Call.ID]; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("asked call went through %v", got)
		}
	}
	if fmt.Sprint(g.asked) != fmt.Sprint([]string{out[1].Call.ID, out[2].Call.ID}) {
		t.Errorf("approvals asked in the order %v", g.asked)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, e := range rec.events {
		if e.State == schedule.AwaitingApproval && e.Message != "may echo run?" {
			t.Errorf("awaiting_approval without the gate's message: %+v", e)
		}
	}
}

// Cancelling a call that waits for approval ends it in cancelled.
func TestCancelWhileAwaitingApproval(t *testing.T) {
	m, _ := fixture(t)
	rec := &recorder{}
	asked := make(chan struct{})
	g := &gate{ask: map[string]bool{"span_write": true}, answer: func(ctx context.Context) error {
		close(asked)
		<-ctx.Done()
		return ctx.Err()
	}}
	b := schedule.New(m, schedule.WithSink(rec), schedule.WithGate(g)).Start(context.Background(),
		[]tool.Call{{ID: "w", Server: "fx", Tool: "span_write", Arguments: map[string]any{"ms": 10}}})
	<-asked
	if !b.CancelCall("w") || b.CancelCall("nope") {
		t.Fatal("CancelCall did not find the call, or found one that is not there")
	}
	out := b.Wait()
	if out[0].State != schedule.Cancelled || tool.KindOf(out[0].Record.Err()) != tool.KindCancelled {
		t.Fatalf("got %s %v", out[0].State, out[0].Record.Err())
	}
	for _, tr := range out[0].Transitions {
		if tr.State == schedule.Executing {
			t.Fatal("a call cancelled while awaiting approval executed")
		}
	}
}

// Cancelling one queued call ends it without running it; the others go on.
// Cancelling the batch then ends the running call, and the server sees the
// cancellation.
func TestCancelQueuedCallAndBatch(t *testing.T) {
	m, marker := fixture(t)
	rec := &recorder{}
	running := make(chan struct{})
	var once sync.Once
	sink := schedule.SinkFunc(func(e schedule.Event) {
		rec.Event(e)
		if e.Call == "hang" && e.State == schedule.Executing {
			once.Do(func() { close(running) })
		}
	})
	b := schedule.New(m, schedule.WithSink(sink)).Start(context.Background(), []tool.Call{
		{ID: "hang", Server: "fx", Tool: "hang"}, // mutating: what follows waits for it
		{ID: "queued", Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "x"}},
		{ID: "also-queued", Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "y"}},
	})
	<-running
	b.CancelCall("queued")
	if !testservers.Eventually(10*time.Second, func() bool {
		s := rec.states()["queued"]
		return len(s) > 0 && s[len(s)-1] == schedule.Cancelled
	}) {
		t.Fatalf("the queued call did not end: %v", rec.states()["queued"])
	}
	b.Cancel()
	out := b.Wait()
	for i, o := range out {
		if o.State != schedule.Cancelled || tool.KindOf(o.Record.Err()) != tool.KindCancelled {
			t.Errorf("call %d: %s %v", i, o.State, o.Record.Err())
		}
	}
	for _, id := range []string{"queued", "also-queued"} {
		for _, s := range rec.states()[id] {
			if s == schedule.Executing {
				t.Errorf("%s executed although cancelled while queued", id)
			}
		}
	}
	if !testservers.Eventually(10*time.Second, func() bool {
		b, _ := os.ReadFile(marker)
		return strings.Contains(string(b), "cancelled hang")
	}) {
		t.Error("the server never saw the running call cancelled")
	}
}

// panicky is a backend whose calls panic.
type panicky struct{ schedule.Backend }

func (panicky) Call(context.Context, tool.Call) *tool.Record { panic("tool exploded") }

// A panic in a call becomes an execution_failed outcome, and a panicking
// sink loses its event, not the batch.
func TestPanicsBecomeExecutionFailed(t *testing.T) {
	m, _ := fixture(t)
	sink := schedule.SinkFunc(func(e schedule.Event) {
		if e.State == schedule.Executing {
			panic("sink exploded")
		}
	})
	out := schedule.New(panicky{m}, schedule.WithSink(sink)).Run(context.Background(), []tool.Call{
		{Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "x"}},
	})
	if out[0].State != schedule.Error || tool.KindOf(out[0].Record.Err()) != tool.KindExecutionFailed ||
		!strings.Contains(out[0].Record.Error.Message, "tool exploded") {
		t.Fatalf("got %s %v", out[0].State, out[0].Record.Err())
	}
}

// Progress of a running call reaches the sink as events, and the caller's
// own progress callback still gets it.
func TestProgressReachesTheSink(t *testing.T) {
	m, _ := fixture(t)
	rec := &recorder{}
	var outer atomic.Int32
	ctx := tool.WithProgress(context.Background(), func(tool.Progress) { outer.Add(1) })
	out := schedule.New(m, schedule.WithSink(rec)).Run(ctx, []tool.Call{
		{Server: "fx", Tool: "progress", Arguments: map[string]any{"steps": 3, "delay_ms": 20}},
	})
	if out[0].State != schedule.Success {
		t.Fatalf("progress: %s %v", out[0].State, out[0].Record.Err())
	}
	if !testservers.Eventually(5*time.Second, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		n := 0
		for _, e := range rec.events {
			if e.Type == schedule.EventProgress && e.Progress != nil && e.Call == out[0].Call.ID {
				n++
			}
		}
		return n >= 3 && outer.Load() >= 3
	}) {
		t.Fatalf("fewer than 3 progress events, or the caller's own callback got %d", outer.Load())
	}
}

// A batch of nothing ends at once.
func TestEmptyBatch(t *testing.T) {
	m, _ := fixture(t)
	if out := schedule.New(m).Run(context.Background(), nil); len(out) != 0 {
		t.Fatalf("got %v", out)
	}
}

// Call is a batch of one: same states, same record.
func TestCallIsABatchOfOne(t *testing.T) {
	m, _ := fixture(t)
	rec := &recorder{}
	r := schedule.New(m, schedule.WithSink(rec)).Call(context.Background(),
		tool.Call{ID: "one", Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "hi"}})
	if r.Err() != nil || r.Result.Text() != "Echo: hi" || r.ID != "one" {
		t.Fatalf("got %+v %v", r, r.Err())
	}
	want := []schedule.State{schedule.Validating, schedule.Scheduled, schedule.Executing, schedule.Success}
	if got := rec.states()["one"]; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("states %v", got)
	}
}
