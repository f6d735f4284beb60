package toolmux_test

// Benchmarks of toolmux as a library against the fastest stdio server there
// is (internal/testservers/echoserver: a hand-written JSON-RPC loop, no SDK),
// so that what they measure is the client side: the raw go-sdk, the
// manager, and the whole governed path. BENCHMARKS.md records the numbers.

import (
	"context"
	"fmt"
	"os/exec"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/internal/testservers"
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
		for range b.N {
			call()
		}
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
		for range b.N {
			check(b, rt.Manager.Call(ctx, tool.Call{Server: "fx", Tool: "echo", Arguments: args()}))
		}
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
			for range b.N {
				check(b, rt.Scheduler.Call(ctx, tool.Call{Server: "fx", Tool: "echo", Arguments: args(), Task: "bench"}))
			}
		})
	}
}
