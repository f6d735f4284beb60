package toolmux_test

// Benchmarks of toolmux as a library against the fastest stdio server there
// is (internal/testservers/echoserver: a hand-written JSON-RPC loop, no SDK),
// so that what they measure is the client side: the raw go-sdk, the
// manager, and the whole governed path. BENCHMARKS.md records the numbers.

import (
	"context"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/tool"
)

// BenchmarkLibraryCall makes one sequential echo call at a time on a warm
// session of the echo server:
//
//   - raw: the go-sdk's ClientSession.CallTool alone;
//   - manager: Manager.Call (mcpsource stdio source, the manager's
//     timeouts, breaker and record);
//   - governed: Runtime.Scheduler.Call, the path every toolmux call takes
//     (scheduler, policy gate, pipeline with the default middlewares and
//     the task log at its default durability, manager, events);
//   - governed-nolog: the same without a task log.
func BenchmarkLibraryCall(b *testing.B) {
	echo := testservers.EchoServer(b)
	ctx := context.Background()

	b.Run("raw", func(b *testing.B) {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).
			Connect(ctx, &mcp.CommandTransport{Command: exec.Command(echo)}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cs.Close() })
		if _, err := cs.ListTools(ctx, nil); err != nil {
			b.Fatal(err)
		}
		call := func() {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hi"}})
			if err != nil || res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "Echo: hi" {
				b.Fatalf("%v %+v", err, res)
			}
		}
		call()
		b.ReportAllocs()
		b.ResetTimer()
		cpu := startCPU()
		for range b.N {
			call()
		}
		cpu.report(b)
	})

	open := func(b *testing.B, taskLog bool) *toolmux.Runtime {
		b.Helper()
		cfg, err := config.Parse("bench.yaml", fmt.Appendf(nil, "builtin: {enabled: false}\nservers:\n  fx: {command: %s, trust: true}\n", echo))
		if err != nil {
			b.Fatal(err)
		}
		if taskLog {
			cfg.DataDir = b.TempDir()
		}
		rt, err := toolmux.Open(ctx, cfg, toolmux.Options{NoTaskLog: !taskLog})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { rt.Close(context.Background()) })
		return rt
	}
	check := func(b *testing.B, rec *tool.Record) {
		if err := rec.Err(); err != nil || rec.Result.Text() != "Echo: hi" {
			b.Fatalf("%v %+v", err, rec.Result)
		}
	}
	args := func() map[string]any { return map[string]any{"message": "hi"} }

	b.Run("manager", func(b *testing.B) {
		rt := open(b, false)
		check(b, rt.Manager.Call(ctx, tool.Call{Server: "fx", Tool: "echo", Arguments: args()}))
		b.ReportAllocs()
		b.ResetTimer()
		cpu := startCPU()
		for range b.N {
			check(b, rt.Manager.Call(ctx, tool.Call{Server: "fx", Tool: "echo", Arguments: args()}))
		}
		cpu.report(b)
	})
	for _, v := range []struct {
		name string
		log  bool
	}{{"governed", true}, {"governed-nolog", false}} {
		b.Run(v.name, func(b *testing.B) {
			rt := open(b, v.log)
			check(b, rt.Scheduler.Call(ctx, tool.Call{Server: "fx", Tool: "echo", Arguments: args(), Task: "bench"}))
			b.ReportAllocs()
			b.ResetTimer()
			cpu := startCPU()
			for range b.N {
				check(b, rt.Scheduler.Call(ctx, tool.Call{Server: "fx", Tool: "echo", Arguments: args(), Task: "bench"}))
			}
			cpu.report(b)
		})
	}
}

// cpuClock measures the CPU time this process (every thread, the
// garbage collector included; not the server, a child process) spends
// while a benchmark runs: on a shared machine it says more about a call's
// cost than the wall time, which includes waiting for the server and for
// a core.
type cpuClock time.Duration

func startCPU() cpuClock { return cpuClock(processCPU()) }

// report reports the CPU time per call since c started, as cpu-ns/op.
func (c cpuClock) report(b *testing.B) {
	b.ReportMetric(float64(processCPU()-time.Duration(c))/float64(b.N), "cpu-ns/op")
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// echoSource is an in-process source with one read-only tool, echo, that
// answers at once: what is left of a call's time is toolmux's own.
type echoSource struct{}

func (echoSource) Name() string { return "fx" }

func (echoSource) Tools(context.Context) ([]tool.Tool, error) {
	return []tool.Tool{{Name: "echo", Description: "Echoes the message.",
		InputSchema: map[string]any{"type": "object", "properties": map[string]any{"message": map[string]any{"type": "string"}},
			"required": []any{"message"}},
		Annotations: tool.Annotations{ReadOnly: tool.Bool(true)}}}, nil
}

func (echoSource) Call(_ context.Context, _ string, args map[string]any) (*tool.Result, error) {
	msg, _ := args["message"].(string)
	return tool.TextResult("Echo: " + msg), nil
}

func (echoSource) Close() error { return nil }

// BenchmarkGovernedOverhead measures toolmux's own cost per call, without
// any round trip: an in-process source that answers at once, called
// through the manager (manager), the pipeline (pipeline) and the whole
// governed path without a task log (governed: scheduler, policy gate,
// pipeline, manager, events to the hub).
func BenchmarkGovernedOverhead(b *testing.B) {
	ctx := context.Background()
	cfg, err := config.Parse("bench.yaml", []byte("builtin: {enabled: false}\n"))
	if err != nil {
		b.Fatal(err)
	}
	rt, err := toolmux.Open(ctx, cfg, toolmux.Options{NoTaskLog: true, Sources: []manager.Source{echoSource{}}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rt.Close(context.Background()) })
	check := func(b *testing.B, rec *tool.Record) {
		if err := rec.Err(); err != nil || rec.Result.Text() != "Echo: hi" {
			b.Fatalf("%v %+v", err, rec.Result)
		}
	}
	for _, v := range []struct {
		name string
		call func(context.Context, tool.Call) *tool.Record
	}{{"manager", rt.Manager.Call}, {"pipeline", rt.Pipeline.Call}, {"governed", rt.Scheduler.Call}} {
		b.Run(v.name, func(b *testing.B) {
			check(b, v.call(ctx, tool.Call{Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "hi"}, Task: "bench"}))
			b.ReportAllocs()
			for b.Loop() {
				check(b, v.call(ctx, tool.Call{Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "hi"}, Task: "bench"}))
			}
		})
	}
}
