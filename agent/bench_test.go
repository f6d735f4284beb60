package agent_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/agent"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/funcsource"
	"github.com/toolmux/toolmux/llm"
	"github.com/toolmux/toolmux/manager"
)

// benchModel is a model that answers at once, so that what a benchmark
// measures is the runtime around it: each run it calls bench__noop with a
// new argument on every turn but the last, then answers. It checks that
// every turn after the first was shown the previous turn's result.
type benchModel struct {
	turns int // model turns per run, the last one the answer
	n     int // turns of the current run so far
	calls int // ids of calls, over every run
	err   error
	// onLast, when set, is called at the start of a run's last turn with
	// the request (the history is then at its longest).
	onLast func(llm.Request)
}

func (m *benchModel) Complete(_ context.Context, req llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	m.n++
	if m.n > 1 && m.err == nil {
		last := req.Messages[len(req.Messages)-1]
		if last.Role != llm.RoleTool || last.IsError || !strings.HasPrefix(last.Content, "ok") {
			m.err = fmt.Errorf("turn %d was not shown the tool's result: %+v", m.n, last)
		}
	}
	if m.n >= m.turns {
		if m.onLast != nil {
			m.onLast(req)
		}
		m.n = 0
		const answer = "done"
		if onDelta != nil {
			onDelta(llm.Delta{Content: answer, Attempt: 1})
		}
		return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Content: answer}, StopReason: llm.StopEnd, Attempts: 1}, nil
	}
	m.calls++
	id := strconv.Itoa(m.calls)
	return &llm.Response{
		Message: llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{
			{ID: "call_" + id, Name: "bench__noop", Arguments: `{"i":` + id + `}`},
		}},
		StopReason: llm.StopToolCalls,
		Attempts:   1,
	}, nil
}

// benchRuntime is the whole runtime of toolmux.Open on config.Default()
// (the built-in tools on the package directory, the default pipeline and
// policy) with one funcsource tool, bench__noop, which returns "ok" and
// resultBytes-2 more bytes, new ones each call (as a real result would
// be). taskLog keeps the task log in a temporary directory.
func benchRuntime(b *testing.B, m llm.Model, taskLog bool, resultBytes int, ag func(*config.Agent)) *agent.Agent {
	b.Helper()
	type noopArgs struct {
		I int `json:"i"`
	}
	src := funcsource.New("bench", funcsource.Func("noop", "Does nothing.", func(_ context.Context, in noopArgs) (string, error) {
		if resultBytes <= 2 {
			return "ok", nil
		}
		var sb strings.Builder
		sb.Grow(resultBytes)
		sb.WriteString("ok")
		line := fmt.Sprintf(" result of call %d, line of filler text.\n", in.I)
		for sb.Len() < resultBytes {
			sb.WriteString(line[:min(len(line), resultBytes-sb.Len())])
		}
		return sb.String(), nil
	}, funcsource.ReadOnly()))
	cfg := config.Default()
	if taskLog {
		cfg.DataDir = b.TempDir()
	}
	if ag != nil {
		ag(&cfg.Agent)
	}
	ctx := context.Background()
	rt, err := toolmux.Open(ctx, cfg, toolmux.Options{Model: m, Sources: []manager.Source{src}, NoTaskLog: !taskLog})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := rt.Close(cctx); err != nil {
			b.Errorf("close: %v", err)
		}
	})
	if taskLog != (rt.Log != nil) {
		b.Fatalf("task log: want %v, have %v", taskLog, rt.Log != nil)
	}
	a, err := rt.Agent()
	if err != nil {
		b.Fatal(err)
	}
	return a
}

// BenchmarkTurnOverhead measures what toolmux costs per model turn, the
// model's and the tool's own time excluded: the model answers at once and
// the tool does nothing but return "ok" (or, in the 2KiB-results variant,
// 2 KiB of text, which every layer that reads results then reads). One op
// is one model turn. The turns are made as
// runs of 10 (nine turns with one tool call each, then the answer), so
// that every turn sees a history of realistic length and the cost of
// starting and finishing a run is shared by its turns, as in real use;
// one run of b.N turns would instead measure a history of b.N/2 turns on
// average, and grow with b.N. BENCHMARKS.md, section 10, records the
// numbers of both benchmarks and what they mean.
func BenchmarkTurnOverhead(b *testing.B) {
	const perRun = 10
	for _, v := range []struct {
		name        string
		taskLog     bool
		resultBytes int
	}{{"no-tasklog", false, 2}, {"no-tasklog-2KiB-results", false, 2048}, {"tasklog", true, 2}} {
		b.Run(v.name, func(b *testing.B) {
			m := &benchModel{turns: perRun}
			a := benchRuntime(b, m, v.taskLog, v.resultBytes, nil)
			ctx := context.Background()
			// One run first: the catalog is listed and the tool
			// selection index built, once per runtime.
			if _, err := a.Run(ctx, "warm up"); err != nil {
				b.Fatal(err)
			}
			runs := 0
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; {
				m.turns = min(perRun, b.N-done)
				res, err := a.Run(ctx, "call the tool until done")
				if err != nil {
					b.Fatal(err)
				}
				if res.Status != agent.StatusAnswered || res.Calls != m.turns-1 || res.Answer != "done" {
					b.Fatalf("run: %+v", res)
				}
				done += m.turns
				runs++
			}
			b.StopTimer()
			if m.err != nil {
				b.Fatal(m.err)
			}
			b.ReportMetric(float64(runs), "runs")
		})
	}
}

// BenchmarkRun200Turns measures the memory of a long run: one op is one
// run of 200 model turns, 199 of them calling a tool whose result is 2 KiB
// of text new each call, at the default context settings (the latest 5
// results sent whole, older ones elided) and with no elision for
// comparison. Metrics:
//
//   - live-MiB: the heap in use (after a GC) at the start of the 200th
//     turn, less the heap before the run: the run's working set at its
//     largest, the history above all;
//   - retained-MiB: the heap after the last run less the heap before the
//     first (after a GC each), in all, not per run: what runs leave
//     behind in the runtime. It does not grow with b.N: it is the event
//     hub's ring of recent events (4096 by default), filling up;
//   - alloc-MiB/run: every byte allocated during the run, garbage
//     included;
//   - sent-KiB/turn200: the text of the 200th request's messages, what
//     the model is sent at the end.
//
// The GCs and the reading of the statistics are outside the timer.
func BenchmarkRun200Turns(b *testing.B) {
	const turns = 200
	for _, v := range []struct {
		name    string
		taskLog bool
		keep    int
	}{
		{"defaults", false, config.DefaultKeepToolResults},
		{"no-elision", false, -1},
		{"defaults-tasklog", true, config.DefaultKeepToolResults},
	} {
		b.Run(v.name, func(b *testing.B) {
			var live, sent uint64
			var ms runtime.MemStats
			m := &benchModel{turns: turns}
			m.onLast = func(req llm.Request) {
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&ms)
				live += ms.HeapInuse
				for _, msg := range req.Messages {
					sent += uint64(len(msg.Content) + len(msg.Reasoning))
					for _, c := range msg.ToolCalls {
						sent += uint64(len(c.Arguments))
					}
				}
				b.StartTimer()
			}
			a := benchRuntime(b, m, v.taskLog, 2048, func(c *config.Agent) {
				c.MaxTurns = turns
				c.Context.KeepToolResults = v.keep
			})
			ctx := context.Background()
			if _, err := a.Run(ctx, "warm up"); err != nil {
				b.Fatal(err)
			}
			live, sent = 0, 0
			var allocated uint64
			runtime.GC()
			runtime.ReadMemStats(&ms)
			first := ms.HeapInuse
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&ms)
				heap0, total0 := ms.HeapInuse, ms.TotalAlloc
				live -= heap0
				b.StartTimer()

				res, err := a.Run(ctx, "call the tool until done")

				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				if res.Status != agent.StatusAnswered || res.Calls != turns-1 {
					b.Fatalf("run: %+v", res)
				}
				runtime.ReadMemStats(&ms)
				allocated += ms.TotalAlloc - total0
				b.StartTimer()
			}
			b.StopTimer()
			runtime.GC()
			runtime.ReadMemStats(&ms)
			last := ms.HeapInuse
			if m.err != nil {
				b.Fatal(m.err)
			}
			const mib = 1 << 20
			n := float64(b.N)
			b.ReportMetric(float64(int64(live))/n/mib, "live-MiB")
			b.ReportMetric((float64(last)-float64(first))/mib, "retained-MiB")
			b.ReportMetric(float64(allocated)/n/mib, "alloc-MiB/run")
			b.ReportMetric(float64(sent)/n/1024, "sent-KiB/turn200")
		})
	}
}
