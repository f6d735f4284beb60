package stream_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/toolmux/toolmux/stream"
)

// resumeUnderLoad publishes total events from one goroutine while
// subscribers join mid-stream with an afterID a little behind the last
// id; each must receive exactly afterID+1 .. total, in order, once.
// Subscriber k is let in when chunk k is out and joins while chunk k+1
// is being published; chunk k+2 waits for it, so every one joins with
// events still to come.
func resumeUnderLoad(t *testing.T, h *stream.Hub, total int, behind int64) {
	t.Helper()
	const subscribers = 12
	chunk := total / (subscribers + 2)
	var wg sync.WaitGroup
	letIn, joined := make(chan struct{}), make(chan struct{})
	wg.Go(func() {
		for i := 1; i <= total; i++ {
			h.Publish(stream.EventToolOutput, "t", n{i})
			if c := i / chunk; i%chunk == 0 {
				if c >= 2 && c-1 <= subscribers {
					<-joined
				}
				if c <= subscribers {
					letIn <- struct{}{}
				}
			}
		}
	})
	errs := make(chan error, subscribers)
	for range subscribers {
		<-letIn
		last := h.Stats().LastID
		after := max(last-rand.Int64N(behind+1), 0)
		s, err := h.Subscribe(context.Background(), stream.Filter{}, after)
		joined <- struct{}{}
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer s.Close()
			for want := after + 1; want <= int64(total); want++ {
				select {
				case e := <-s.Events():
					if e.ID != want {
						errs <- errors.New("resumed after " + itoa(after) + ": got " + e.Name + " " + itoa(e.ID) + ", want " + itoa(want))
						return
					}
				case <-time.After(20 * time.Second):
					errs <- errors.New("resumed after " + itoa(after) + ": stalled before " + itoa(want))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Resuming from the hub's memory ring under concurrent publishing: the
// missed events, then the live ones, no duplicate, no hole.
func TestResumeFromMemory(t *testing.T) {
	const total = 6000
	h := newHub(t, stream.WithBuffer(total), stream.WithMemory(total, 0))
	resumeUnderLoad(t, h, total, 500)
}

// The same with a tiny memory ring and a MemoryStore behind the hub: the
// replay comes from the store (after waiting for the persistence queue),
// then the ring, then live events.
func TestResumeFromStore(t *testing.T) {
	const total = 6000
	store := stream.NewMemoryStore(total, 0)
	h := newHub(t, stream.WithBuffer(total), stream.WithMemory(8, 0), stream.WithStore(store))
	resumeUnderLoad(t, h, total, 2000)
	if st := h.Stats(); st.PersistDropped != 0 || st.PersistFailed != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// Without a store, a replay from before the memory ring reports the
// expired range as a gap, then delivers what the ring holds.
func TestResumeExpired(t *testing.T) {
	h := newHub(t, stream.WithMemory(10, 0))
	for i := range 100 {
		h.Publish("x", "", n{i})
	}
	s := subscribe(t, h, stream.Filter{}, 5)
	if g := gap(t, next(t, s)); g.Reason != stream.GapExpired || g.FromID != 6 || g.ToID != 90 || g.Missed != 85 {
		t.Fatalf("gap %+v", g)
	}
	for want := int64(91); want <= 100; want++ {
		if e := next(t, s); e.ID != want {
			t.Fatalf("got %d, want %d", e.ID, want)
		}
	}
	h.Publish("x", "", nil)
	if e := next(t, s); e.ID != 101 {
		t.Fatalf("live: %d", e.ID)
	}
}

// Replay honours the filter, and an afterID at or beyond the last id
// replays nothing.
func TestResumeFiltered(t *testing.T) {
	h := newHub(t)
	for i := range 20 {
		task := "a"
		if i%2 == 1 {
			task = "b"
		}
		h.Publish(stream.EventMessage, task, stream.Message("m", "x"))
	}
	s := subscribe(t, h, stream.Filter{Task: "b"}, 10)
	for _, want := range []int64{12, 14, 16, 18, 20} {
		if e := next(t, s); e.ID != want || e.Task != "b" {
			t.Fatalf("got %+v, want %d", e, want)
		}
	}
	ahead := subscribe(t, h, stream.Filter{}, 500)
	h.Publish("live", "", nil)
	if e := next(t, ahead); e.ID != 21 {
		t.Fatalf("after an id from the future: %d", e.ID)
	}
}

// A new hub on the same store continues its ids and replays the previous
// hub's events.
func TestHubRestartOnStore(t *testing.T) {
	store := stream.NewMemoryStore(0, 0)
	ctx := context.Background()
	h1, err := stream.NewHub(ctx, stream.WithStore(store))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		h1.Publish("old", "t", n{i})
	}
	if err := h1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := h1.Stats(); st.Persisted != 30 {
		t.Fatalf("persisted %+v", st)
	}
	h2 := newHub(t, stream.WithStore(store), stream.WithStartID(10))
	if e := h2.Publish("new", "t", nil); e.ID != 31 {
		t.Fatalf("first id after restart: %d", e.ID)
	}
	s := subscribe(t, h2, stream.Filter{Task: "t"}, 25)
	for want := int64(26); want <= 31; want++ {
		if e := next(t, s); e.ID != want {
			t.Fatalf("got %d, want %d", e.ID, want)
		}
	}
	if h3 := newHub(t, stream.WithStartID(1000)); h3.Publish("x", "", nil).ID != 1001 {
		t.Fatal("WithStartID without a store")
	}
}

// stalledStore accepts nothing until its context ends, as a store on a
// dead disk or network would: the hub must stay unaffected.
type stalledStore struct {
	stream.MemoryStore
	calls chan struct{}
}

func (s *stalledStore) AppendEvents(ctx context.Context, evs ...stream.Event) error {
	select {
	case s.calls <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}

// A stalled store neither blocks Publish nor the subscribers: the
// persistence queue fills, further events are dropped from persistence
// and counted, and Close gives up at its deadline.
func TestStalledStore(t *testing.T) {
	st := &stalledStore{calls: make(chan struct{}, 1)}
	h, err := stream.NewHub(context.Background(), stream.WithStore(st), stream.WithPersistQueue(8))
	if err != nil {
		t.Fatal(err)
	}
	s, err := h.Subscribe(context.Background(), stream.Filter{}, stream.Live)
	if err != nil {
		t.Fatal(err)
	}
	h.Publish("first", "", nil)
	<-st.calls // the persister is stuck in AppendEvents
	for i := range 100 {
		h.Publish("x", "", n{i})
	}
	if e := next(t, s); e.ID != 1 {
		t.Fatalf("subscriber: %d", e.ID)
	}
	stats := h.Stats()
	if stats.PersistDropped != 100-8 || stats.PersistQueued != 8 {
		t.Fatalf("stats %+v", stats)
	}
	s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := h.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("close: %v", err)
	}
	stats = h.Stats()
	if stats.PersistFailed != 1 || stats.PersistDropped != 100 || stats.Persisted != 0 {
		t.Fatalf("after close: %+v", stats)
	}
}

// A store that fails is reported by NewHub and Subscribe.
type failingStore struct{ *stream.MemoryStore }

var errDisk = errors.New("disk on fire")

func (failingStore) LastEventID(context.Context) (int64, error) { return 0, errDisk }

type failingReads struct{ *stream.MemoryStore }

func (failingReads) EventsAfter(context.Context, int64, string, int) ([]stream.Event, error) {
	return nil, errDisk
}

func TestStoreErrors(t *testing.T) {
	var se *stream.StoreError
	if _, err := stream.NewHub(context.Background(), stream.WithStore(failingStore{stream.NewMemoryStore(0, 0)})); !errors.As(err, &se) ||
		se.Op != "last_event_id" || !errors.Is(err, errDisk) {
		t.Fatalf("NewHub: %v", err)
	}
	h := newHub(t, stream.WithStore(failingReads{stream.NewMemoryStore(0, 0)}), stream.WithMemory(2, 0))
	for range 10 {
		h.Publish("x", "", nil)
	}
	if _, err := h.Subscribe(context.Background(), stream.Filter{}, 1); !errors.As(err, &se) || se.Op != "events_after" {
		t.Fatalf("Subscribe: %v", err)
	}
	if s := subscribe(t, h, stream.Filter{}, 8); next(t, s).ID != 9 {
		t.Fatal("a replay within the ring needs no store")
	}
	if h.Stats().Subscribers != 1 {
		t.Fatalf("failed subscription left registered: %+v", h.Stats())
	}
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }
