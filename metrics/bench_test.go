package metrics_test

import (
	"testing"
	"time"

	"github.com/toolmux/toolmux/metrics"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/tool"
)

// BenchmarkEvent is what --metrics adds to one call: the scheduler's
// state events of a call that succeeds (validating, scheduled, executing,
// success), each handed to the metrics.
func BenchmarkEvent(b *testing.B) {
	cat := tool.NewCatalog([]tool.Tool{{Server: "fx", Name: "echo"}}, []tool.ServerHealth{{Name: "fx", State: tool.StateReady}})
	m := metrics.New()
	m.Watch(metrics.Sources{Catalog: func() *tool.Catalog { return cat }})
	t0 := time.Now()
	rec := &tool.Record{Server: "fx", Tool: "echo"}
	evs := []schedule.Event{
		{Type: schedule.EventState, Server: "fx", Tool: "echo", State: schedule.Validating, Time: t0, FirstAt: t0},
		{Type: schedule.EventState, Server: "fx", Tool: "echo", State: schedule.Scheduled, Previous: schedule.Validating, Time: t0, FirstAt: t0},
		{Type: schedule.EventState, Server: "fx", Tool: "echo", State: schedule.Executing, Previous: schedule.Scheduled, Time: t0, FirstAt: t0},
		{Type: schedule.EventState, Server: "fx", Tool: "echo", State: schedule.Success, Previous: schedule.Executing, Time: t0.Add(time.Millisecond), FirstAt: t0, Record: rec},
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			for _, e := range evs {
				m.Event(e)
			}
		}
	})
}
