package manager_test

// Benchmarks of the manager against real MCP server processes: the fixture
// server (internal/testservers/fixture, a go-sdk stdio server) and, where
// installed, @modelcontextprotocol/server-everything. Nothing is faked.
// BENCHMARKS.md at the module root records the numbers and how to
// reproduce them.

import (
	"context"
	"fmt"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/tool"
)

// benchEchoArgs is what every benchmark sends to echo, and benchEchoWant
// what both the fixture and server-everything answer.
const benchEchoWant = "Echo: hi"

func benchEchoArgs() map[string]any { return map[string]any{"message": "hi"} }

// benchSource returns a stdio source for command, not yet connected.
func benchSource(tb testing.TB, name, command string, args ...string) *mcpsource.Source {
	tb.Helper()
	src, err := mcpsource.New(mcpsource.Config{
		Name: name, Transport: mcpsource.Stdio, Command: command, Args: args,
		ConnectTimeout: 30 * time.Second, StopGrace: time.Second,
	})
	if err != nil {
		tb.Fatal(err)
	}
	return src
}

// benchManager returns a manager over srcs, closed when the benchmark (or
// the current run of it) ends.
func benchManager(tb testing.TB, srcs ...*mcpsource.Source) *manager.Manager {
	tb.Helper()
	var opts []manager.Option
	for _, s := range srcs {
		opts = append(opts, manager.WithSource(s, manager.ServerOptions{}))
	}
	m, err := manager.New(opts...)
	if err != nil {
		for _, s := range srcs {
			_ = s.Close()
		}
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = m.Close() })
	return m
}

// warmManager lists the tools and makes one verified echo call, so that the
// session is up and the catalog built before the timer starts.
func warmManager(tb testing.TB, m *manager.Manager, server string) {
	tb.Helper()
	ctx := context.Background()
	if _, err := m.Tools(ctx); err != nil {
		tb.Fatal(err)
	}
	for _, h := range m.Health() {
		if h.State != tool.StateReady {
			tb.Fatalf("server %s is %s after discovery: %s %s", h.Name, h.State, h.Error, h.Detail)
		}
	}
	checkRecord(tb, m.Call(ctx, tool.Call{Server: server, Tool: "echo", Arguments: benchEchoArgs()}))
}

// checkRecord fails the benchmark unless rec is a successful echo of "hi".
func checkRecord(tb testing.TB, rec *tool.Record) {
	tb.Helper()
	if err := recordProblem(rec); err != nil {
		tb.Fatal(err)
	}
}

// recordProblem is checkRecord for goroutines that must not call Fatal.
func recordProblem(rec *tool.Record) error {
	if err := rec.Err(); err != nil {
		return fmt.Errorf("call %s/%s: %w", rec.Server, rec.Tool, err)
	}
	if rec.Result == nil || len(rec.Result.Content) != 1 || rec.Result.Content[0].Text != benchEchoWant {
		return fmt.Errorf("call %s/%s: unexpected result %+v", rec.Server, rec.Tool, rec.Result)
	}
	return nil
}

// checkRaw fails the benchmark unless res is a successful echo of "hi".
func checkRaw(tb testing.TB, res *mcp.CallToolResult, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
	if res.IsError || len(res.Content) != 1 {
		tb.Fatalf("unexpected result %+v", res)
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); !ok || tc.Text != benchEchoWant {
		tb.Fatalf("unexpected content %#v", res.Content[0])
	}
}

// BenchmarkCallStdio compares the latency of one sequential tools/call on a
// warm stdio session made with the go-sdk alone (raw) with the same call
// through Manager.Call over an mcpsource stdio source (manager). Both talk
// to their own process of the same fixture binary.
func BenchmarkCallStdio(b *testing.B) {
	fixture := testservers.Fixture(b)

	b.Run("raw", func(b *testing.B) {
		ctx := context.Background()
		client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
		cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: exec.Command(fixture)}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cs.Close() })
		// List the tools as the manager's discovery does: the go-sdk keeps
		// the definitions and consults them on every call, so both sides do
		// the same work in the SDK.
		if _, err := cs.ListTools(ctx, nil); err != nil {
			b.Fatal(err)
		}
		args := benchEchoArgs()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: args})
		checkRaw(b, res, err)

		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: args})
			checkRaw(b, res, err)
		}
	})

	b.Run("manager", func(b *testing.B) {
		ctx := context.Background()
		m := benchManager(b, benchSource(b, "fx", fixture))
		warmManager(b, m, "fx")
		args := benchEchoArgs()

		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			checkRecord(b, m.Call(ctx, tool.Call{Server: "fx", Tool: "echo", Arguments: args}))
		}
	})
}

// BenchmarkPooledVsSpawn compares a call on a pooled, warm session of
// server-everything (pooled) with starting the server for every call:
// spawn the process, MCP handshake, one call, close (spawn), which is what
// a client that opens a stdio session per tool call pays.
func BenchmarkPooledVsSpawn(b *testing.B) {
	everything := testservers.NodeBin(b, "mcp-server-everything")

	b.Run("pooled", func(b *testing.B) {
		ctx := context.Background()
		m := benchManager(b, benchSource(b, "everything", everything))
		warmManager(b, m, "everything")
		args := benchEchoArgs()

		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			checkRecord(b, m.Call(ctx, tool.Call{Server: "everything", Tool: "echo", Arguments: args}))
		}
	})

	b.Run("spawn", func(b *testing.B) {
		ctx := context.Background()
		args := benchEchoArgs()
		var closing time.Duration
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			src := benchSource(b, "everything", everything)
			// The first call connects: spawn, initialize, then tools/call.
			res, err := src.Call(ctx, "echo", args)
			if err != nil {
				_ = src.Close()
				b.Fatal(err)
			}
			if len(res.Content) != 1 || res.Content[0].Text != benchEchoWant {
				_ = src.Close()
				b.Fatalf("unexpected result %+v", res)
			}
			start := time.Now()
			if err := src.Close(); err != nil {
				b.Fatal(err)
			}
			closing += time.Since(start)
		}
		b.ReportMetric(closing.Seconds()*1000/float64(b.N), "close-ms/op")
	})
}

// BenchmarkDiscovery20 measures building the catalog of 20 stdio servers
// that each take startDelay to start: all at once through one manager
// (parallel), one after another (sequential), and one alone (single).
// Closing the servers is not timed.
func BenchmarkDiscovery20(b *testing.B) {
	const servers = 20
	fixture := testservers.Fixture(b)
	// The fixture's own tools, as one server lists them: each server of
	// the catalog must list them all.
	toolsPerServer := func() int {
		m := benchManager(b, benchSource(b, "fx", fixture))
		cat, err := m.Tools(context.Background())
		if err != nil || cat.Len() == 0 {
			b.Fatalf("listing the fixture: %v", err)
		}
		return cat.Len()
	}()

	// discover builds a fresh manager over n fixture servers and lists them,
	// returning the manager for the caller to close with the timer stopped.
	discover := func(b *testing.B, n int, delay time.Duration) *manager.Manager {
		srcs := make([]*mcpsource.Source, n)
		opts := make([]manager.Option, n)
		for i := range srcs {
			srcs[i] = benchSource(b, fmt.Sprintf("fx%02d", i), fixture, "-start-delay", delay.String())
			opts[i] = manager.WithSource(srcs[i], manager.ServerOptions{})
		}
		m, err := manager.New(opts...)
		if err != nil {
			b.Fatal(err)
		}
		cat, err := m.Tools(context.Background())
		if err != nil {
			m.Close()
			b.Fatal(err)
		}
		if cat.Len() != n*toolsPerServer {
			for _, h := range cat.Servers() {
				b.Logf("%s: %s %s", h.Name, h.State, h.Error)
			}
			m.Close()
			b.Fatalf("catalog has %d tools, want %d", cat.Len(), n*toolsPerServer)
		}
		return m
	}
	closeUntimed := func(b *testing.B, m *manager.Manager) {
		b.StopTimer()
		if err := m.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}

	for _, delay := range []time.Duration{200 * time.Millisecond, 0} {
		b.Run(fmt.Sprintf("delay=%s", delay), func(b *testing.B) {
			b.Run("parallel", func(b *testing.B) {
				for range b.N {
					closeUntimed(b, discover(b, servers, delay))
				}
			})
			b.Run("sequential", func(b *testing.B) {
				for range b.N {
					for range servers {
						closeUntimed(b, discover(b, 1, delay))
					}
				}
			})
			b.Run("single", func(b *testing.B) {
				for range b.N {
					closeUntimed(b, discover(b, 1, delay))
				}
			})
		})
	}
}

// BenchmarkThroughput measures calls per second through one manager and
// one warm stdio session of the fixture shared by a number of concurrent
// callers. Each op is one echo call.
func BenchmarkThroughput(b *testing.B) {
	fixture := testservers.Fixture(b)
	for _, callers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			m := benchManager(b, benchSource(b, "fx", fixture))
			warmManager(b, m, "fx")
			args := benchEchoArgs()
			ctx := context.Background()

			var (
				next     atomic.Int64
				failOnce sync.Once
				failure  error
				wg       sync.WaitGroup
			)
			b.ReportAllocs()
			b.ResetTimer()
			for range callers {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						if err := recordProblem(m.Call(ctx, tool.Call{Server: "fx", Tool: "echo", Arguments: args})); err != nil {
							failOnce.Do(func() { failure = err })
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if failure != nil {
				b.Fatal(failure)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
		})
	}
}
