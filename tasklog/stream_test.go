package tasklog_test

import (
	"context"
	"testing"
	"time"

	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tasklog"
)

// A hub persisting to the task log: a second hub on the same log (a
// restarted gateway) continues the ids, and a client resuming after an id
// of the first hub gets exactly what it missed, from the log.
func TestLogIsTheStreamStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := tasklog.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	h1, err := stream.NewHub(ctx, stream.WithStore(l.StreamStore()))
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for i := range 5 {
		ev := h1.Publish(stream.EventMessage, "t1", stream.Message("m", string(rune('a'+i))))
		ids = append(ids, ev.ID)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := h1.Close(cctx); err != nil { // drains the persistence queue
		t.Fatal(err)
	}

	h2, err := stream.NewHub(ctx, stream.WithStore(l.StreamStore()), stream.WithMemory(1, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close(cctx)
	next := h2.Publish(stream.EventMessage, "t1", stream.Message("m", "f"))
	if next.ID <= ids[len(ids)-1] {
		t.Fatalf("the restarted hub reused ids: %d after %v", next.ID, ids)
	}
	sub, err := h2.Subscribe(cctx, stream.Filter{Task: "t1"}, ids[1])
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	want := append(append([]int64{}, ids[2:]...), next.ID)
	for _, w := range want {
		select {
		case ev := <-sub.Events():
			if ev.ID != w {
				t.Fatalf("resumed with id %d, want %d (%v)", ev.ID, w, want)
			}
		case <-cctx.Done():
			t.Fatalf("waiting for event %d", w)
		}
	}
}
