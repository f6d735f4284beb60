package stream_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolmux/toolmux/stream"
)

// Ids start at 1 and increase by one whatever the number of publishers,
// and a subscriber receives them in that order.
func TestPublishIDsAndOrder(t *testing.T) {
	const publishers, each = 8, 500
	h := newHub(t, stream.WithBuffer(publishers*each))
	s := subscribe(t, h, stream.Filter{}, stream.Live)

	var wg sync.WaitGroup
	ids := make([][]int64, publishers)
	for p := range publishers {
		wg.Go(func() {
			for i := range each {
				e := h.Publish(stream.EventMessage, "t", stream.Message("m", string(rune('a'+i%26))))
				ids[p] = append(ids[p], e.ID)
			}
		})
	}
	wg.Wait()
	seen := map[int64]bool{}
	for _, l := range ids {
		for i, id := range l {
			if i > 0 && id <= l[i-1] {
				t.Fatalf("one publisher's ids went back: %d after %d", id, l[i-1])
			}
			seen[id] = true
		}
	}
	if len(seen) != publishers*each {
		t.Fatalf("%d distinct ids for %d events", len(seen), publishers*each)
	}
	var prev time.Time
	for want := int64(1); want <= publishers*each; want++ {
		e := next(t, s)
		if e.ID != want || e.Name != stream.EventMessage || e.Task != "t" {
			t.Fatalf("event %+v, want id %d", e, want)
		}
		if e.Time.Before(prev) || e.Time.Location() != time.UTC {
			t.Fatalf("time %v after %v", e.Time, prev)
		}
		prev = e.Time
		var m stream.MessageData
		if err := json.Unmarshal(e.Data, &m); err != nil || m.MessageID != "m" {
			t.Fatalf("data %s: %v", e.Data, err)
		}
	}
	if st := h.Stats(); st.LastID != publishers*each || st.Published != publishers*each || st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// Ten subscribers, one of which never reads while events are published:
// the nine others receive every event, the publisher is never held up,
// and the stuck one, when it reads at last, finds every event either
// delivered or inside a gap marker whose counts add up.
func TestFanOutWithStuckSubscriber(t *testing.T) {
	const total, buffer, readers = 20000, 64, 9
	h := newHub(t, stream.WithBuffer(buffer))
	stuck := subscribe(t, h, stream.Filter{}, stream.Live)

	var progress [readers]atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	for r := range readers {
		s := subscribe(t, h, stream.Filter{}, stream.Live)
		wg.Go(func() {
			for want := int64(1); want <= total; want++ {
				e := <-s.Events()
				if e.ID != want {
					errs <- errors.New("reader got " + e.Name + " out of order")
					return
				}
				progress[r].Store(e.ID)
			}
		})
	}

	// The publisher paces itself on the nine readers so that they never
	// overflow; it never waits for the stuck one, and must finish well
	// before the deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i <= total; i++ {
			h.Publish(stream.EventToolOutput, "t", n{i})
			if i%(buffer/2) == 0 {
				for r := range readers {
					for progress[r].Load() < int64(i-buffer/2) {
						if ctx.Err() != nil {
							return
						}
						time.Sleep(50 * time.Microsecond)
					}
				}
			}
		}
	}()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("publishing did not complete: a stuck subscriber held the publisher up")
	}
	if ctx.Err() != nil {
		t.Fatal("publishing gave up")
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// Now the stuck one reads: events and gaps cover 1..total once, in
	// order.
	var covered, missed, delivered int64
	for covered < total {
		e := next(t, stuck)
		if e.Name == stream.EventGap {
			g := gap(t, e)
			if g.Reason != stream.GapSlow || g.FromID != covered+1 || g.Missed != g.ToID-g.FromID+1 {
				t.Fatalf("gap %+v after id %d", g, covered)
			}
			covered, missed = g.ToID, missed+g.Missed
			continue
		}
		if e.ID != covered+1 {
			t.Fatalf("stuck subscriber got id %d after %d", e.ID, covered)
		}
		covered++
		delivered++
	}
	if missed == 0 || missed != stuck.Dropped() || missed+delivered != total {
		t.Fatalf("missed %d, Dropped %d, delivered %d of %d", missed, stuck.Dropped(), delivered, total)
	}
	if delivered < buffer {
		t.Fatalf("only %d events delivered, the buffer holds %d", delivered, buffer)
	}
	if st := h.Stats(); st.Dropped != uint64(missed) || st.Subscribers != readers+1 {
		t.Fatalf("stats %+v", st)
	}
}

// Filters keep a task's events and chosen names; gap markers pass any
// filter.
func TestFilters(t *testing.T) {
	h := newHub(t, stream.WithBuffer(2))
	task := subscribe(t, h, stream.Filter{Task: "a"}, stream.Live)
	names := subscribe(t, h, stream.Filter{Names: []string{stream.EventToolCall, stream.EventShowError}}, stream.Live)
	both := subscribe(t, h, stream.Filter{Task: "b", Names: []string{stream.EventToolCall}}, stream.Live)

	h.Publish(stream.EventToolCall, "a", stream.ToolCallInput("c1", "x__y", nil))     // 1
	h.Publish(stream.EventToolState, "a", stream.ToolStateData{CallID: "c1"})         // 2
	h.Publish(stream.EventToolCall, "b", stream.ToolCallResult("c2", "x__y", "done")) // 3
	const errs = 100
	for range errs {
		h.Publish(stream.EventShowError, "", stream.ShowError("boom")) // 4 .. 103
	}

	if a, b := next(t, task), next(t, task); a.ID != 1 || b.ID != 2 {
		t.Fatalf("task filter: %d %d", a.ID, b.ID)
	}
	// names matches 1, 3 and 4..103 but holds 2 (plus what its channel
	// takes meanwhile): the rest is lost, each run of losses reported by a
	// gap marker in its place.
	if a, b := next(t, names), next(t, names); a.ID != 1 || b.ID != 3 {
		t.Fatalf("names filter: %d %d", a.ID, b.ID)
	}
	var covered, missed int64 = 3, 0
	for covered < 3+errs {
		e := next(t, names)
		if e.Name == stream.EventGap {
			g := gap(t, e)
			if g.FromID != covered+1 || g.Missed != g.ToID-g.FromID+1 || g.Reason != stream.GapSlow {
				t.Fatalf("gap %+v after %d", g, covered)
			}
			covered, missed = g.ToID, missed+g.Missed
			continue
		}
		if e.ID != covered+1 {
			t.Fatalf("got %d after %d", e.ID, covered)
		}
		covered++
	}
	if missed == 0 || missed != names.Dropped() {
		t.Fatalf("missed %d, Dropped %d", missed, names.Dropped())
	}
	if e := next(t, both); e.ID != 3 {
		t.Fatalf("task and names: %d", e.ID)
	}
	select {
	case e := <-both.Events():
		t.Fatalf("unexpected %+v", e)
	default:
	}
}

// The payload given to Publish becomes compact JSON: typed payloads, raw
// JSON (re-compacted), nil as {}; a value that does not encode is
// replaced, never refused.
func TestPublishPayloads(t *testing.T) {
	h := newHub(t)
	cases := []struct {
		data any
		want string
	}{
		{stream.ShowError("x"), `{"error":"x"}`},
		{json.RawMessage("{\n  \"a\": 1\n}"), `{"a":1}`},
		{[]byte(`[1, 2]`), `[1,2]`},
		{nil, `{}`},
		{map[string]int{"b": 2}, `{"b":2}`},
	}
	for _, c := range cases {
		if got := string(h.Publish("x", "", c.data).Data); got != c.want {
			t.Errorf("%v: %s, want %s", c.data, got, c.want)
		}
	}
	bad := h.Publish("x", "", map[string]any{"f": func() {}}).Data
	if !strings.Contains(string(bad), "encode_error") || !json.Valid(bad) {
		t.Errorf("unencodable: %s", bad)
	}
	if raw := h.Publish("x", "", json.RawMessage("{nope")).Data; !strings.Contains(string(raw), "encode_error") {
		t.Errorf("invalid raw JSON: %s", raw)
	}
	if e := h.Publish("", "", nil); e.Name != "unnamed" {
		t.Errorf("empty name published as %q", e.Name)
	}
	if e := h.Publish("two\r\nlines", "", nil); e.Name != "two  lines" {
		t.Errorf("name with line breaks published as %q", e.Name)
	}
}

// Closing the hub delivers what subscribers have queued, then closes
// their channels; later publications and subscriptions are refused.
func TestCloseEndsSubscriptions(t *testing.T) {
	h, err := stream.NewHub(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s, err := h.Subscribe(context.Background(), stream.Filter{}, stream.Live)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h.Publish("a", "", nil)
	h.Publish("b", "", nil)
	closed := make(chan error, 1)
	go func() { closed <- h.Close(context.Background()) }()
	var got []string
	for e := range s.Events() {
		got = append(got, e.Name)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "a,b" {
		t.Fatalf("delivered %v", got)
	}
	if e := h.Publish("c", "", nil); e.ID != 0 {
		t.Fatalf("published after close: %+v", e)
	}
	if _, err := h.Subscribe(context.Background(), stream.Filter{}, 0); !errors.Is(err, stream.ErrClosed) {
		t.Fatalf("subscribe after close: %v", err)
	}
	if err := h.Close(context.Background()); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// A subscriber that never reads cannot hold Close beyond its context: the
// subscription is ended and Close reports the deadline.
func TestCloseDeadlineEndsStuckSubscription(t *testing.T) {
	h, err := stream.NewHub(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s, err := h.Subscribe(context.Background(), stream.Filter{}, stream.Live)
	if err != nil {
		t.Fatal(err)
	}
	for range 100 { // more than the channel holds: delivery blocks
		h.Publish("a", "", nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := h.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("close: %v", err)
	}
	for range s.Events() { // closed, possibly after nothing
	}
	s.Close()
}

// Cancelling the context given to Subscribe, or Close, ends the
// subscription and unregisters it; Close may be called twice.
func TestSubscriptionEnds(t *testing.T) {
	h := newHub(t)
	ctx, cancel := context.WithCancel(context.Background())
	a, err := h.Subscribe(ctx, stream.Filter{}, stream.Live)
	if err != nil {
		t.Fatal(err)
	}
	b := subscribe(t, h, stream.Filter{}, stream.Live)
	cancel()
	for range a.Events() {
	}
	b.Close()
	b.Close()
	if _, ok := <-b.Events(); ok {
		t.Fatal("channel open after Close")
	}
	waitFor(t, "subscriptions to unregister", func() bool { return h.Stats().Subscribers == 0 })
	h.Publish("x", "", nil) // nobody to offer it to
}
