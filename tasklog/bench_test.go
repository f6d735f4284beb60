package tasklog_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
