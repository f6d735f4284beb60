package pipeline_test

// Benchmarks of the governance pipeline's cost: the default chain in front
// of a real stdio MCP server (the fixture, internal/testservers/fixture)
// compared with the bare manager call (BenchmarkPipelineOverhead), and the
// chain alone in front of an in-process stub (BenchmarkChainOnly).
// BENCHMARKS.md at the module root records the numbers and how to
// reproduce them.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/tool"
)

const (
	benchServer  = "fx"
	benchTool    = "echo"
	benchTask    = "bench-task"
	benchSession = "main"
	// benchCommitEvery is how many calls make a turn in the dedupe
	// variants: the turn is committed after that many calls.
	benchCommitEvery = 100
	// benchTaskCalls is how many calls one task holds in the dedupe
	// variants; then the task ends and a new one starts, so that the state
	// of duplicate detection stays the size of a long task however large
	// b.N grows. It is also the number of distinct messages.
	benchTaskCalls = 10_000
)

// benchDedupeConfig dedupes echo on its message with policy "reject".
func benchDedupeConfig() config.Pipeline {
	return config.Pipeline{Dedupe: config.Dedupe{Tools: []config.DedupeTool{{
		Tools: benchServer + "/" + benchTool, Keys: []string{"message"}, Policy: "reject",
	}}}}
}

// benchMessages returns the distinct messages of the dedupe variants, made
// before the timer starts.
func benchMessages() []string {
	msgs := make([]string, benchTaskCalls)
	for i := range msgs {
		msgs[i] = "hi " + strconv.Itoa(i)
	}
	return msgs
}

// benchCaller is what the benchmarks call: a manager or a pipeline.
type benchCaller interface {
	Call(ctx context.Context, call tool.Call) *tool.Record
}

// checkEcho fails the benchmark unless rec is a successful echo of msg.
func checkEcho(tb testing.TB, rec *tool.Record, msg string) {
	tb.Helper()
	if rec == nil {
		tb.Fatal("no record")
	}
	if err := rec.Err(); err != nil {
		tb.Fatalf("call %s/%s: %v", rec.Server, rec.Tool, err)
	}
	want := "Echo: " + msg
	if rec.Result == nil || len(rec.Result.Content) != 1 || rec.Result.Content[0].Text != want {
		tb.Fatalf("call %s/%s: got %+v, want the text %q", rec.Server, rec.Tool, rec.Result, want)
	}
}

// checkNoError fails the benchmark if the call failed; it is cheap enough
// for every call.
func checkNoError(tb testing.TB, rec *tool.Record) {
	if rec == nil || rec.Error != nil {
		tb.Helper()
		if rec == nil {
			tb.Fatal("no record")
		}
		tb.Fatalf("call %s/%s: %v", rec.Server, rec.Tool, rec.Error)
	}
}

// fixtureManager returns a manager over one stdio fixture process, with the
// catalog built and one verified echo call made, closed when the current
// run of the benchmark ends.
func fixtureManager(b *testing.B) *manager.Manager {
	b.Helper()
	src, err := mcpsource.New(mcpsource.Config{
		Name: benchServer, Transport: mcpsource.Stdio, Command: testservers.Fixture(b),
		ConnectTimeout: 30 * time.Second, StopGrace: time.Second,
	})
	if err != nil {
		b.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		_ = src.Close()
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close() })
	ctx := context.Background()
	if _, err := m.Tools(ctx); err != nil {
		b.Fatal(err)
	}
	for _, h := range m.Health() {
		if h.State != tool.StateReady {
			b.Fatalf("server %s is %s after discovery: %s %s", h.Name, h.State, h.Error, h.Detail)
		}
	}
	checkEcho(b, m.Call(ctx, tool.Call{Server: benchServer, Tool: benchTool, Arguments: map[string]any{"message": "hi"}}), "hi")
	return m
}

// benchPipeline builds the chain cfg describes around backend, with a data
// directory of its own.
func benchPipeline(b *testing.B, backend pipeline.Backend, cfg config.Pipeline) *pipeline.Pipeline {
	b.Helper()
	p, err := pipeline.New(backend, append(pipeline.FromConfig(cfg), pipeline.WithDataDir(b.TempDir()))...)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// runFixed calls echo with {"message":"hi"} b.N times, one call after the
// other, and returns the duration of each call when timed is set.
func runFixed(b *testing.B, c benchCaller, timed bool) []time.Duration {
	ctx := context.Background()
	call := tool.Call{Task: benchTask, Session: benchSession, Server: benchServer, Tool: benchTool,
		Arguments: map[string]any{"message": "hi"}}
	checkEcho(b, c.Call(ctx, call), "hi")
	var durs []time.Duration
	if timed {
		durs = make([]time.Duration, b.N)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		var start time.Time
		if timed {
			start = time.Now()
		}
		rec := c.Call(ctx, call)
		if timed {
			durs[i] = time.Since(start)
		}
		checkNoError(b, rec)
	}
	b.StopTimer()
	return durs
}

// runDedupe calls echo through p b.N times with a new message each time,
// committing the turn every benchCommitEvery calls and starting a new task
// every benchTaskCalls calls, and returns the duration of each call when
// timed is set. The arguments map is reused: nothing keeps it after a call.
func runDedupe(b *testing.B, p *pipeline.Pipeline, timed bool) []time.Duration {
	ctx := context.Background()
	msgs := benchMessages()
	task := benchTask + "-warm"
	call := tool.Call{Task: task, Session: benchSession, Server: benchServer, Tool: benchTool,
		Arguments: map[string]any{"message": "hi"}}
	// The first call runs; the same query again is refused.
	checkEcho(b, p.Call(ctx, call), "hi")
	if rec := p.Call(ctx, call); tool.KindOf(rec.Err()) != tool.KindDuplicateQuery {
		b.Fatalf("a repeated query was not refused: %v", rec.Err())
	}
	p.EndTask(task)
	var durs []time.Duration
	if timed {
		durs = make([]time.Duration, b.N)
	}
	args := call.Arguments
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		j := i % benchTaskCalls
		if j == 0 {
			if i > 0 {
				p.EndTask(call.Task)
			}
			call.Task = benchTask + "-" + strconv.Itoa(i/benchTaskCalls)
		}
		args["message"] = msgs[j]
		var start time.Time
		if timed {
			start = time.Now()
		}
		rec := p.Call(ctx, call)
		if timed {
			durs[i] = time.Since(start)
		}
		checkNoError(b, rec)
		if (j+1)%benchCommitEvery == 0 {
			p.Commit(call.Task, call.Session)
		}
	}
	b.StopTimer()
	p.EndTask(call.Task)
	return durs
}

// reportP50 reports the median of the per-call durations.
func reportP50(b *testing.B, durs []time.Duration) {
	if len(durs) == 0 {
		return
	}
	slices.Sort(durs)
	b.ReportMetric(float64(durs[len(durs)/2].Nanoseconds()), "p50-ns/op")
}

// BenchmarkPipelineOverhead compares one sequential echo call on a warm
// stdio session of the fixture through the bare manager (manager) with the
// same call through the default pipeline chain (pipeline), and through the
// default chain with duplicate detection of echo's message, policy reject,
// a new message every call (pipeline-dedupe). Each variant talks to its own
// fixture process.
func BenchmarkPipelineOverhead(b *testing.B) {
	b.Run("manager", func(b *testing.B) {
		m := fixtureManager(b)
		reportP50(b, runFixed(b, m, true))
	})
	b.Run("pipeline", func(b *testing.B) {
		m := fixtureManager(b)
		p := benchPipeline(b, m, config.Pipeline{})
		reportP50(b, runFixed(b, p, true))
	})
	b.Run("pipeline-dedupe", func(b *testing.B) {
		m := fixtureManager(b)
		p := benchPipeline(b, m, benchDedupeConfig())
		reportP50(b, runDedupe(b, p, true))
	})
}

// stubBackend is an in-process pipeline.Backend: Call returns a small
// record echoing "hi" (a fresh record around a shared, never modified
// result), Tool the fixture's echo definition (the input schema the
// manager reports for it), Tools a catalog of that one tool.
type stubBackend struct {
	echo   tool.Tool
	result *tool.Result
	cat    *tool.Catalog
}

func newStubBackend(b *testing.B) *stubBackend {
	b.Helper()
	var schema map[string]any
	// As the manager reports the fixture's echo.
	const text = `{"additionalProperties":false,"properties":{"message":{"description":"text to echo back","type":"string"}},"required":["message"],"type":"object"}`
	if err := json.Unmarshal([]byte(text), &schema); err != nil {
		b.Fatal(err)
	}
	echo := tool.Tool{Server: benchServer, Name: benchTool, Exposed: tool.ExposedName(benchServer, benchTool),
		Description: "Echoes the message back.", InputSchema: schema,
		Annotations: tool.Annotations{ReadOnly: tool.Bool(true), Idempotent: tool.Bool(false)}}
	return &stubBackend{
		echo:   echo,
		result: tool.TextResult("Echo: hi"),
		cat:    tool.NewCatalog([]tool.Tool{echo}, []tool.ServerHealth{{Name: benchServer, Transport: "stdio", State: tool.StateReady, Tools: 1}}),
	}
}

func (s *stubBackend) Call(_ context.Context, call tool.Call) *tool.Record {
	if call.Server != benchServer || call.Tool != benchTool {
		return &tool.Record{ID: call.ID, Server: call.Server, Tool: call.Tool, Arguments: call.Arguments,
			Error: &tool.Error{Kind: tool.KindToolNotRegistered, Message: fmt.Sprintf("no tool %s/%s", call.Server, call.Tool)}}
	}
	return &tool.Record{ID: call.ID, Task: call.Task, Session: call.Session, Server: call.Server, Tool: call.Tool,
		Name: s.echo.Exposed, Arguments: call.Arguments, Result: s.result, Attempts: 1}
}

func (s *stubBackend) Tool(_ context.Context, server, name string) (tool.Tool, error) {
	if server != benchServer || name != benchTool {
		return tool.Tool{}, &tool.Error{Kind: tool.KindToolNotRegistered, Server: server, Tool: name, Message: "no such tool"}
	}
	return s.echo, nil
}

func (s *stubBackend) Tools(context.Context) (*tool.Catalog, error) { return s.cat, nil }

// BenchmarkChainOnly measures the pipeline's own cost, without the MCP
// round trip: the stub backend alone (backend), the default chain in front
// of it (default), the default chain with duplicate detection of echo's
// message, policy reject, a new message every call (dedupe), and each
// middleware of the default chain alone in front of the stub (only=NAME).
// The stub echoes "hi" whatever the message.
func BenchmarkChainOnly(b *testing.B) {
	b.Run("backend", func(b *testing.B) {
		runFixed(b, newStubBackend(b), false)
	})
	b.Run("default", func(b *testing.B) {
		runFixed(b, benchPipeline(b, newStubBackend(b), config.Pipeline{}), false)
	})
	b.Run("dedupe", func(b *testing.B) {
		runDedupe(b, benchPipeline(b, newStubBackend(b), benchDedupeConfig()), false)
	})
	for _, name := range pipeline.DefaultOrder() {
		b.Run("only="+name, func(b *testing.B) {
			runFixed(b, benchPipeline(b, newStubBackend(b), config.Pipeline{Order: []string{name}}), false)
		})
	}
}
