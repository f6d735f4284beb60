package stream_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolmux/toolmux/stream"
)

func ev(id int64, task string, size int) stream.Event {
	return stream.Event{ID: id, Name: "x", Task: task, Data: []byte(`"` + strings.Repeat("a", size) + `"`)}
}

// The ring keeps the newest events within both bounds, in order, and
// remembers the last id it ever held.
func TestMemoryStore(t *testing.T) {
	ctx := context.Background()
	m := stream.NewMemoryStore(5, 0)
	for i := int64(1); i <= 12; i++ {
		task := "a"
		if i%3 == 0 {
			task = "b"
		}
		if err := m.AppendEvents(ctx, ev(i, task, 1)); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(evs []stream.Event) (out []int64) {
		for _, e := range evs {
			out = append(out, e.ID)
		}
		return out
	}
	all, _ := m.EventsAfter(ctx, 0, "", 0)
	if got := ids(all); len(got) != 5 || got[0] != 8 || got[4] != 12 || m.Len() != 5 {
		t.Fatalf("held %v", got)
	}
	if got, _ := m.EventsAfter(ctx, 9, "a", 0); len(got) != 2 || got[0].ID != 10 || got[1].ID != 11 {
		t.Fatalf("task a after 9: %v", ids(got))
	}
	if got, _ := m.EventsAfter(ctx, 0, "", 2); len(got) != 2 || got[1].ID != 9 {
		t.Fatalf("limit: %v", ids(got))
	}
	if last, _ := m.LastEventID(ctx); last != 12 {
		t.Fatalf("last %d", last)
	}
	var oe *stream.OrderError
	if err := m.AppendEvents(ctx, ev(13, "", 1), ev(13, "", 1)); !errors.As(err, &oe) || oe.Got != 13 || m.Len() != 5 {
		t.Fatalf("out of order: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.EventsAfter(cancelled, 0, "", 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}

	// The byte bound: 3 events of about 1 KiB fit in 3.5 KiB; a huge one
	// is kept alone.
	b := stream.NewMemoryStore(100, 3500)
	for i := int64(1); i <= 10; i++ {
		_ = b.AppendEvents(ctx, ev(i, "", 1000))
	}
	if b.Len() != 3 {
		t.Fatalf("byte bound holds %d", b.Len())
	}
	_ = b.AppendEvents(ctx, ev(11, "", 10000))
	if got, _ := b.EventsAfter(ctx, 0, "", 0); len(got) != 1 || got[0].ID != 11 {
		t.Fatalf("huge event: %v", ids(got))
	}

	// The zero value works, with the default bounds.
	var z stream.MemoryStore
	if err := z.AppendEvents(ctx, ev(1, "", 1)); err != nil || z.Len() != 1 {
		t.Fatalf("zero value: %v", err)
	}
}

// pageFailing fails every EventsAfter after the first.
type pageFailing struct {
	*stream.MemoryStore
	calls atomic.Int32
}

func (p *pageFailing) EventsAfter(ctx context.Context, after int64, task string, limit int) ([]stream.Event, error) {
	if p.calls.Add(1) > 1 {
		return nil, errDisk
	}
	return p.MemoryStore.EventsAfter(ctx, after, task, limit)
}

// A replay whose later store page fails reports the rest of the store's
// range as a gap and goes on with the memory ring and live events.
func TestReplayFailsMidway(t *testing.T) {
	var logs bytes.Buffer
	store := &pageFailing{MemoryStore: stream.NewMemoryStore(0, 0)}
	h := newHub(t, stream.WithStore(store), stream.WithMemory(8, 0),
		stream.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	for range 1000 {
		h.Publish("x", "", nil)
	}
	s := subscribe(t, h, stream.Filter{}, 0)
	var e stream.Event
	for want := int64(1); ; want++ {
		if e = next(t, s); e.ID != want {
			break
		}
	}
	g := gap(t, e)
	if g.Reason != stream.GapReplayFailed || g.FromID < 2 || g.ToID != 992 || g.Missed != g.ToID-g.FromID+1 ||
		!strings.Contains(g.Error, "disk on fire") {
		t.Fatalf("gap %+v", g)
	}
	if e := next(t, s); e.ID != 993 {
		t.Fatalf("after the gap: %d", e.ID)
	}
	h.Publish(stream.EventToolState, "", map[string]any{"bad": make(chan int)})
	if !strings.Contains(logs.String(), "payload does not encode") {
		t.Fatalf("log: %s", logs.String())
	}
}
