package tasklog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

// benchRecord is a typical record: a search call with a page of text.
func benchRecord(task string, i int) *tool.Record {
	start := time.Now()
	return &tool.Record{ID: tool.NewID(), Task: task, Session: "main", Server: "search", Tool: "google_search",
		Arguments: map[string]any{"q": fmt.Sprintf("query %d", i), "num": float64(10)},
		Result:    &tool.Result{Content: []tool.Content{{Type: tool.ContentText, Text: strings.Repeat("result text ", 100)}}},
		Started:   start, Ended: start.Add(time.Millisecond), Duration: time.Millisecond, Attempts: 1}
}

var durabilities = []struct {
	name string
	d    tasklog.Durability
}{{"full", tasklog.DurabilityFull}, {"process", tasklog.DurabilityProcess}}

// BenchmarkRecord measures one goroutine recording calls back to back.
func BenchmarkRecord(b *testing.B) {
	for _, d := range durabilities {
		b.Run(d.name, func(b *testing.B) {
			l := open(b, "", tasklog.WithDurability(d.d))
			recs := make([]*tool.Record, b.N)
			for i := range recs {
				recs[i] = benchRecord("bench", i)
			}
			b.ResetTimer()
			for i := range b.N {
				l.Record(ctx, recs[i])
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
			if s := l.Stats(); s.Lost != 0 {
				b.Fatalf("lost records: %+v", s)
			}
		})
	}
}

// BenchmarkRecordParallel measures 16 goroutines recording at once, each
// in its own task.
func BenchmarkRecordParallel(b *testing.B) {
	const workers = 16
	for _, d := range durabilities {
		b.Run(d.name, func(b *testing.B) {
			l := open(b, "", tasklog.WithDurability(d.d))
			var next atomic.Int64
			b.ResetTimer()
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					task := fmt.Sprint("bench-", w)
					for i := int(next.Add(1)); i <= b.N; i = int(next.Add(1)) {
						l.Record(ctx, benchRecord(task, i))
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
			if s := l.Stats(); s.Lost != 0 {
				b.Fatalf("lost records: %+v", s)
			}
		})
	}
}

// BenchmarkRecordLatency reports the median and 99th percentile of one
// Record call made by one goroutine.
func BenchmarkRecordLatency(b *testing.B) {
	for _, d := range durabilities {
		b.Run(d.name, func(b *testing.B) {
			l := open(b, "", tasklog.WithDurability(d.d))
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				rec := benchRecord("bench", i)
				t0 := time.Now()
				l.Record(ctx, rec)
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkAppendEvents measures events stored one per call and in
// batches of 64, as a stream hub might flush them.
func BenchmarkAppendEvents(b *testing.B) {
	data := json.RawMessage(`{"tool_call_id":"c1","tool_name":"search","tool_input":{"q":"capital of France"}}`)
	for _, d := range durabilities {
		for _, batch := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/batch=%d", d.name, batch), func(b *testing.B) {
				l := open(b, "", tasklog.WithDurability(d.d))
				evs := make([]tasklog.Event, batch)
				id := int64(0)
				b.ResetTimer()
				for n := 0; n < b.N; n += batch {
					for i := range evs {
						id++
						evs[i] = tasklog.Event{ID: id, Name: "tool_call", Task: "bench", Data: data}
					}
					if err := l.AppendEvents(ctx, evs...); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(id)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}

// simpleCalls runs n echo calls through a real scheduler and pipeline
// whose events go to a real stream hub, as the gateway runs a simple
// call, and returns each
// call's record and the events the hub hands its store for it (four
// tool_state and two tool_call, the result's text the record's).
func simpleCalls(b *testing.B, n int) ([]*tool.Record, [][]tasklog.Event) {
	b.Helper()
	got := &captureStore{}
	h, err := stream.NewHub(ctx, stream.WithStore(got), stream.WithPersistLinger(0), stream.WithPersistQueue(6*n+1))
	if err != nil {
		b.Fatal(err)
	}
	var recs []*tool.Record
	echo := tool.Tool{Server: "fx", Name: "echo", InputSchema: map[string]any{"type": "object"}}
	p, err := pipeline.New(echoBackend{echo}, pipeline.WithRecorder(pipeline.RecorderFunc(func(_ context.Context, r *tool.Record) {
		recs = append(recs, r)
	})))
	if err != nil {
		b.Fatal(err)
	}
	s := schedule.New(p, schedule.WithSink(stream.SchedulerSink(h)))
	for i := range n {
		s.Call(ctx, tool.Call{ID: tool.NewID(), Task: "session-bench", Session: "main", Server: "fx", Tool: "echo",
			Arguments: map[string]any{"message": fmt.Sprintf("hello %d", i)}})
	}
	if err := h.Close(ctx); err != nil {
		b.Fatal(err)
	}
	if len(recs) != n || len(got.evs) != 6*n {
		b.Fatalf("%d records and %d events for %d calls, want 1 and 6 each", len(recs), len(got.evs), n)
	}
	evs := make([][]tasklog.Event, n)
	for i := range n {
		for _, e := range got.evs[6*i : 6*i+6] {
			evs[i] = append(evs[i], tasklog.Event(e))
		}
	}
	return recs, evs
}

// captureStore keeps what a hub persists.
type captureStore struct {
	mu  sync.Mutex
	evs []stream.Event
}

func (c *captureStore) AppendEvents(_ context.Context, evs ...stream.Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evs = append(c.evs, evs...)
	return nil
}

func (c *captureStore) EventsAfter(context.Context, int64, string, int) ([]stream.Event, error) {
	return nil, nil
}

func (c *captureStore) LastEventID(context.Context) (int64, error) { return 0, nil }

// BenchmarkCallJournal measures what one simple call costs the journal in
// a gateway: its record (Log.Record, on the call's path) and its six
// events as the stream hub hands them over (AppendEvents, in batches of
// the events of 1 or 32 calls), then the index of both (Sync). cpu-ns/op
// is the process's CPU time per call, background indexing and the GC
// included; journal-B/call is what the segments grew by.
func BenchmarkCallJournal(b *testing.B) {
	for _, per := range []int{1, 32} {
		b.Run(fmt.Sprintf("calls-per-batch=%d", per), func(b *testing.B) {
			recs, evs := simpleCalls(b, b.N)
			l := open(b, "", tasklog.WithDurability(tasklog.DurabilityProcess))
			batch := make([]tasklog.Event, 0, 6*per)
			b.ResetTimer()
			cpu0 := processCPU(b)
			for i := range b.N {
				l.Record(ctx, recs[i])
				batch = append(batch, evs[i]...)
				if len(batch) == cap(batch) || i == b.N-1 {
					if err := l.AppendEvents(ctx, batch...); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
			}
			if err := l.Sync(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
			st, _, err := l.JournalStats()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(st.Bytes)/float64(b.N), "journal-B/call")
			if s := l.Stats(); s.Lost != 0 {
				b.Fatalf("lost records: %+v", s)
			}
		})
	}
}

// processCPU is the CPU time the process has used, every thread.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
