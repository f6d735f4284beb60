package stream

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countedPayload is a lazily posted payload that counts its encodings.
type countedPayload struct {
	Text     string `json:"text"`
	encodes  *atomic.Int32
	sizeHalf int
}

func (p countedPayload) sizeHint() int { return p.sizeHalf * 2 }

func (p countedPayload) appendJSON(b []byte) ([]byte, bool) {
	p.encodes.Add(1)
	b = append(b, `{"text":`...)
	b = appendString(b, p.Text)
	return append(b, '}'), true
}

func lazyHub(t *testing.T, opts ...Option) *Hub {
	t.Helper()
	h, err := NewHub(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = h.Close(ctx)
	})
	return h
}

func receive(t *testing.T, s *Subscription) Event {
	t.Helper()
	select {
	case e, ok := <-s.Events():
		if !ok {
			t.Fatal("subscription ended")
		}
		return e
	case <-time.After(20 * time.Second):
		t.Fatal("no event within 20s")
	}
	panic("unreachable")
}

// A payload posted lazily is encoded only when someone needs its bytes,
// and then once for everyone: nothing while nobody watches, one encoding
// shared by every subscriber and replay.
func TestLazyPayloadsAreEncodedOnceWhenNeeded(t *testing.T) {
	h := lazyHub(t)
	var encodes atomic.Int32
	for i := range 5 {
		h.publish([]posted{lazily(h, EventToolState, "t", countedPayload{Text: strings.Repeat("x", i), encodes: &encodes})})
	}
	if n := encodes.Load(); n != 0 {
		t.Fatalf("%d payloads encoded with nobody watching", n)
	}
	for range 3 {
		s, err := h.Subscribe(context.Background(), Filter{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			e := receive(t, s)
			var d struct{ Text string }
			if err := json.Unmarshal(e.Data, &d); err != nil || d.Text != strings.Repeat("x", i) || e.ID != int64(i+1) {
				t.Fatalf("event %d: %+v %s %v", i, e, e.Data, err)
			}
		}
		s.Close()
	}
	if n := encodes.Load(); n != 5 {
		t.Errorf("%d encodings for 5 events replayed to 3 subscribers, want 5", n)
	}
	// A live subscriber encodes on its own goroutine what it is sent.
	s, err := h.Subscribe(context.Background(), Filter{}, Live)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h.publish([]posted{lazily(h, EventToolState, "t", countedPayload{Text: "live", encodes: &encodes})})
	if e := receive(t, s); string(e.Data) != `{"text":"live"}` {
		t.Errorf("live event %s", e.Data)
	}
}

// The store is handed encoded events, encoded by the goroutine that
// persists them.
func TestLazyPayloadsReachTheStoreEncoded(t *testing.T) {
	store := NewMemoryStore(0, 0)
	h := lazyHub(t, WithStore(store), WithPersistLinger(0))
	var encodes atomic.Int32
	h.publish([]posted{lazily(h, EventToolState, "t", countedPayload{Text: "stored", encodes: &encodes})})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := h.Close(ctx); err != nil { // it persists what is queued
		t.Fatal(err)
	}
	evs, err := store.EventsAfter(context.Background(), 0, "", 0)
	if err != nil || len(evs) != 1 || string(evs[0].Data) != `{"text":"stored"}` || evs[0].Name != EventToolState {
		t.Fatalf("store holds %+v %v", evs, err)
	}
	if n := encodes.Load(); n != 1 {
		t.Errorf("%d encodings, want 1", n)
	}
}

// The memory ring bounds lazy events by their size hints, before any is
// encoded: the newest are kept, the oldest go.
func TestLazyPayloadsCountAgainstTheRing(t *testing.T) {
	h := lazyHub(t, WithMemory(1000, 10_000))
	var encodes atomic.Int32
	for range 10 {
		h.publish([]posted{lazily(h, EventToolState, "t", countedPayload{Text: "big", encodes: &encodes, sizeHalf: 1_500})})
	}
	if n := h.mem.Len(); n != 3 {
		t.Errorf("the ring holds %d events of about 3 kB under a 10 kB bound, want 3", n)
	}
	if n := encodes.Load(); n != 0 {
		t.Errorf("%d encoded", n)
	}
}
