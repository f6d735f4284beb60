package fleet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/toolmux/toolmux/fleet"
)

// BenchmarkSummarize is the cost of one GET /api/fleet (the page's Fleet
// tab reads it every 2 s while it is shown) with a queue of N runs, on an
// embedded NATS server: the runs are submitted and stay queued (no
// worker), which is a sweep's state before the workers drain it.
func BenchmarkSummarize(b *testing.B) {
	for _, n := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("runs=%d", n), func(b *testing.B) {
			s, err := fleet.StartServer(fleet.ServerOptions{Listen: "127.0.0.1:0", StoreDir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Shutdown()
			ctx := context.Background()
			f, err := fleet.Connect(ctx, s.ClientURL(), "bench", fleet.Options{Lease: 10 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			for i := range n {
				if _, _, err := f.Submit(ctx, fleet.Request{ID: fmt.Sprintf("run-%05d", i), Task: "a task"}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for b.Loop() {
				sum, err := f.Summarize(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				if sum.Runs[fleet.StatusQueued] != n {
					b.Fatalf("%d queued, want %d", sum.Runs[fleet.StatusQueued], n)
				}
			}
		})
	}
}
