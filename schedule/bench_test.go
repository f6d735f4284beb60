package schedule_test

// Benchmarks of the scheduler; BENCHMARKS.md records the numbers and the
// command that reproduces them.

import (
	"context"
	"testing"
	"time"

	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/tool"
)

const (
	benchBatch = 32
	benchSleep = 200 // ms, per call
)

func benchFixture(b *testing.B) *manager.Manager {
	b.Helper()
	src, err := mcpsource.New(mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio,
		Command: testservers.Fixture(b), ConnectTimeout: 30 * time.Second, StopGrace: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close() })
	if _, err := m.Tools(context.Background()); err != nil {
		b.Fatal(err)
	}
	return m
}

func sleepBatch() []tool.Call {
	calls := make([]tool.Call, benchBatch)
	for i := range calls {
		calls[i] = tool.Call{Server: "fx", Tool: "slow", Arguments: map[string]any{"ms": benchSleep}}
	}
	return calls
}

func runBatch(b *testing.B, s *schedule.Scheduler, calls []tool.Call) {
	for i, o := range s.Run(context.Background(), calls) {
		if o.State != schedule.Success {
			b.Fatalf("call %d: %s %v", i, o.State, o.Record.Err())
		}
	}
}

// BenchmarkSleepBatch runs a batch of 32 read-only calls to the fixture's
// slow tool (200 ms each) over one stdio session, in parallel (the
// default) and one after the other, and reports the batch's wall time over
// one call's (x-single-call): 1 would be perfect parallelism, 32 is
// sequential.
func BenchmarkSleepBatch(b *testing.B) {
	for _, mode := range []struct {
		name string
		opt  schedule.Option
	}{
		{"parallel", nil},
		{"sequential", schedule.WithParallel(func(tool.Tool, tool.Call) bool { return false })},
	} {
		b.Run(mode.name, func(b *testing.B) {
			m := benchFixture(b)
			s := schedule.New(m, mode.opt)
			one := []tool.Call{{Server: "fx", Tool: "slow", Arguments: map[string]any{"ms": benchSleep}}}
			start := time.Now()
			runBatch(b, s, one)
			single := time.Since(start)
			calls := sleepBatch()
			b.ResetTimer()
			for range b.N {
				runBatch(b, s, calls)
			}
			b.StopTimer()
			perBatch := b.Elapsed() / time.Duration(b.N)
			b.ReportMetric(float64(perBatch)/float64(single), "x-single-call")
		})
	}
}

// instant is an in-process backend answering at once: what is left of a
// batch's time is the scheduler's own.
type instant struct{ def tool.Tool }

func (s instant) Call(_ context.Context, c tool.Call) *tool.Record {
	return &tool.Record{ID: c.ID, Server: c.Server, Tool: c.Tool, Arguments: c.Arguments, Result: tool.TextResult("ok")}
}

func (s instant) Tool(context.Context, string, string) (tool.Tool, error) { return s.def, nil }

// BenchmarkSchedulerOverhead measures the scheduler's cost per call
// against a backend that answers at once: one call per batch, and batches
// of 32 read-only calls (ns/op is per call in both).
func BenchmarkSchedulerOverhead(b *testing.B) {
	be := instant{def: tool.Tool{Server: "fx", Name: "echo", Annotations: tool.Annotations{ReadOnly: tool.Bool(true)}}}
	ctx := context.Background()
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			be.Call(ctx, tool.Call{Server: "fx", Tool: "echo"})
		}
	})
	for _, n := range []int{1, benchBatch} {
		b.Run("batch="+map[int]string{1: "1", benchBatch: "32"}[n], func(b *testing.B) {
			s := schedule.New(be, schedule.WithSink(schedule.SinkFunc(func(schedule.Event) {})))
			calls := make([]tool.Call, n)
			for i := range calls {
				calls[i] = tool.Call{Server: "fx", Tool: "echo", Arguments: map[string]any{}}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += n {
				s.Run(ctx, calls)
			}
		})
	}
}
