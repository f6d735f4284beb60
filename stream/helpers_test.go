package stream_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/toolmux/toolmux/stream"
)

// newHub returns a hub closed when the test ends.
func newHub(t testing.TB, opts ...stream.Option) *stream.Hub {
	t.Helper()
	h, err := stream.NewHub(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return h
}

// subscribe returns a subscription closed when the test ends.
func subscribe(t testing.TB, h *stream.Hub, f stream.Filter, after int64) *stream.Subscription {
	t.Helper()
	s, err := h.Subscribe(context.Background(), f, after)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// next returns the subscription's next event, failing the test when none
// comes within a generous time or the channel is closed.
func next(t testing.TB, s *stream.Subscription) stream.Event {
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

// gap decodes a gap marker.
func gap(t testing.TB, e stream.Event) stream.GapData {
	t.Helper()
	if e.Name != stream.EventGap || e.ID != 0 {
		t.Fatalf("not a gap marker: %+v", e)
	}
	var g stream.GapData
	if err := json.Unmarshal(e.Data, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

// waitFor polls cond until it holds, failing after 20 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

type n struct {
	N int `json:"n"`
}
