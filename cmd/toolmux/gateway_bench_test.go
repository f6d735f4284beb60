package main_test

// Benchmarks of `toolmux serve` as a real process (BENCHMARKS.md §8):
//
//   - BenchmarkGatewayHop: a tools/call through the gateway against the
//     same call made directly to the upstream server (and through
//     TBXark/mcp-proxy when TOOLMUX_BENCH_MCP_PROXY names its binary);
//   - BenchmarkEventFanout: calls through /mcp with 0 or 10 SSE subscribers
//     of /api/events reading the stream;
//   - BenchmarkRecordedCall: calls with the task log off, with process
//     durability and with full durability.
//
// The upstream is the fixture command serving streamable HTTP (-http), a
// process of its own; every client is an MCP session of its own (go-sdk
// StreamableClientTransport, its own HTTP transport), as separate agents
// would be. Each op is one echo call whose result is checked; the metrics
// are the median and 99th percentile of the calls' latencies and the
// calls per second of all clients together.
//
// Benchmarks run only with -bench, so `go test` does not build or start
// anything for them.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tasklog"
)

var (
	benchBuild    sync.Once
	benchBinPath  string
	benchBuildErr error
	benchBuildOut []byte
)

// benchBinary returns toolmux built without the race detector: the tests'
// binary (TestMain) is a -race build, and the race detector's cost is not
// the gateway's. It is built once, next to the tests' binary, so TestMain
// removes it.
func benchBinary(b testing.TB) string {
	b.Helper()
	benchBuild.Do(func() {
		benchBinPath = filepath.Join(filepath.Dir(binary), "toolmux-bench")
		args := []string{"build", "-o", benchBinPath}
		if os.Getenv("TOOLMUX_PPROF_ADDR") != "" {
			// The gateway serves net/http/pprof there (pprof.go).
			args = append(args, "-tags", "toolmux_pprof")
		}
		benchBuildOut, benchBuildErr = exec.Command("go", append(args, ".")...).CombinedOutput()
	})
	if benchBuildErr != nil {
		b.Fatalf("building toolmux: %v\n%s", benchBuildErr, benchBuildOut)
	}
	return benchBinPath
}

// benchProc is a server process started by a benchmark, stopped when the
// benchmark that started it ends.
type benchProc struct {
	cmd    *exec.Cmd
	out    *testservers.SyncBuffer
	exited chan struct{}
	once   sync.Once
}

// startBenchProc starts cmd and waits until its output contains ready.
func startBenchProc(b *testing.B, cmd *exec.Cmd, ready string) *benchProc {
	b.Helper()
	p := &benchProc{cmd: cmd, out: new(testservers.SyncBuffer), exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	b.Cleanup(func() { p.stop(b) })
	gone := func() bool {
		select {
		case <-p.exited:
			return true
		default:
			return false
		}
	}
	if !testservers.Eventually(30*time.Second, func() bool { return gone() || strings.Contains(p.out.String(), ready) }) || gone() {
		b.Fatalf("%s did not start (no %q in its output):\n%s", filepath.Base(cmd.Path), ready, p.out.String())
	}
	return p
}

// stop sends SIGTERM, waits up to 15 s for a clean exit, then kills the
// process group.
func (p *benchProc) stop(b *testing.B) {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			b.Logf("%s did not stop within 15s after SIGTERM; killed", filepath.Base(p.cmd.Path))
		}
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	})
}

// benchGateway is one `toolmux serve` process.
type benchGateway struct {
	*benchProc
	base    string // http://127.0.0.1:PORT
	dataDir string
}

// startBenchServe runs `toolmux serve` with the fixture at upstream as its one
// server, fx (streamable HTTP, trusted), no built-in tools, and extra as
// further configuration.
func startBenchServe(b *testing.B, upstream, extra string) *benchGateway {
	b.Helper()
	dir := b.TempDir()
	cfg := fmt.Sprintf(`builtin: {enabled: false}
servers:
  fx:
    url: %s
    transport: http
    trust: true
%s`, upstream, extra)
	path := filepath.Join(dir, "toolmux.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		b.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", testservers.FreePort(b))
	g := &benchGateway{base: "http://" + addr, dataDir: filepath.Join(dir, "data")}
	cmd := exec.Command(benchBinary(b), "serve", "--addr", addr, "--config", path, "--data-dir", g.dataDir)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+dir)
	g.benchProc = startBenchProc(b, cmd, "toolmux: serving ")
	return g
}

// startBenchServeStdio runs `toolmux serve` with command as its one server,
// fx, over stdio (trusted), no built-in tools, and extra as further
// configuration.
func startBenchServeStdio(b *testing.B, command, extra string, args ...string) *benchGateway {
	b.Helper()
	dir := b.TempDir()
	cfg := fmt.Sprintf("builtin: {enabled: false}\nservers:\n  fx:\n    command: %s\n    trust: true\n%s", command, extra)
	path := filepath.Join(dir, "toolmux.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		b.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", testservers.FreePort(b))
	g := &benchGateway{base: "http://" + addr, dataDir: filepath.Join(dir, "data")}
	cmd := exec.Command(benchBinary(b), append([]string{"serve", "--addr", addr, "--config", path, "--data-dir", g.dataDir}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+dir)
	g.benchProc = startBenchProc(b, cmd, "toolmux: serving ")
	return g
}

// startBenchMCPProxyStdio runs TBXark/mcp-proxy (streamable HTTP) in front of
// command over stdio, as users run it, and returns its endpoint and pid.
func startBenchMCPProxyStdio(b *testing.B, bin, command string) (string, int) {
	return startBenchMCPProxyOf(b, bin, map[string]any{"command": command, "transportType": "stdio"})
}

// startBenchMCPProxy runs TBXark/mcp-proxy (streamable HTTP, stateless, its
// default for that type) in front of upstream and returns its endpoint
// and process id.
func startBenchMCPProxy(b *testing.B, bin, upstream string) (string, int) {
	return startBenchMCPProxyOf(b, bin, map[string]any{"url": upstream, "transportType": "streamable-http"})
}

// startBenchMCPProxyOf runs mcp-proxy in front of one server, fx, described
// as its configuration describes servers.
func startBenchMCPProxyOf(b *testing.B, bin string, server map[string]any) (string, int) {
	b.Helper()
	dir := b.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", testservers.FreePort(b))
	cfg, err := json.Marshal(map[string]any{
		"mcpProxy": map[string]any{
			"baseURL": "http://" + addr, "addr": addr, "name": "mcp-proxy", "version": "1.0.0",
			"type": "streamable-http", "options": map[string]any{"logEnabled": false},
		},
		"mcpServers": map[string]any{"fx": server},
	})
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, cfg, 0o644); err != nil {
		b.Fatal(err)
	}
	p := startBenchProc(b, exec.Command(bin, "-config", path), "<fx> Handling requests at")
	return "http://" + addr + "/fx/mcp", p.cmd.Process.Pid
}

// startBenchUpstream runs the fixture as a streamable HTTP server and returns
// its endpoint and process id (which its pid tool tells).
func startBenchUpstream(b *testing.B) (string, int) {
	b.Helper()
	url := testservers.StartFixtureHTTP(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "pid"})
	if err != nil {
		b.Fatal(err)
	}
	pid, err := strconv.Atoi(res.Content[0].(*mcp.TextContent).Text)
	if err != nil {
		b.Fatal(err)
	}
	return url, pid
}

// benchConnect opens n MCP sessions (protocol 2025-11-25) to endpoint,
// each with an HTTP transport of its own, lists the tools and makes one
// call on each. They are closed when the benchmark ends.
func benchConnect(b *testing.B, endpoint, name string, n int) []*mcp.ClientSession {
	b.Helper()
	return benchConnectVersion(b, endpoint, name, n, legacyProtocol)
}

// benchConnectVersion is benchConnect with clients of protocol version
// (2026-07-28: clients without a session).
func benchConnectVersion(b *testing.B, endpoint, name string, n int, version string) []*mcp.ClientSession {
	return benchConnectAs(b, endpoint, name, n, version, "")
}

// benchConnectAs is benchConnectVersion with token as every request's
// bearer credential ("" for none).
func benchConnectAs(b *testing.B, endpoint, name string, n int, version, token string) []*mcp.ClientSession {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := make([]*mcp.ClientSession, n)
	for i := range out {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		var rt http.RoundTripper = tr
		if token != "" {
			rt = benchBearer{tr, "Bearer " + token}
		}
		c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: rt}},
			&mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			b.Fatalf("client %d: %v", i, err)
		}
		b.Cleanup(func() {
			_ = cs.Close()
			tr.CloseIdleConnections()
		})
		tools, err := cs.ListTools(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if !slices.ContainsFunc(tools.Tools, func(t *mcp.Tool) bool { return t.Name == name }) {
			b.Fatalf("%s lists no tool %s", endpoint, name)
		}
		if err := benchCheck(ctx, cs, name, "warm-up"); err != nil {
			b.Fatal(err)
		}
		out[i] = cs
	}
	return out
}

// benchBearer sends a bearer credential with every request.
type benchBearer struct {
	rt     http.RoundTripper
	header string
}

func (t benchBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", t.header)
	return t.rt.RoundTrip(r)
}

// BenchmarkGatewayIdentity measures what knowing who calls costs a call
// on `toolmux serve`'s governed /mcp (the fixture over stdio, the task log
// on): no authentication (none), an API key of the data directory (key),
// and an access token of ORY Hydra verified as a JWT (jwt: its signature
// checked once, the verdict kept for its next requests, as a client sends
// one token until it expires), in both protocol eras, TBXark/mcp-proxy in
// the same run when TOOLMUX_BENCH_MCP_PROXY names it.
func BenchmarkGatewayIdentity(b *testing.B) {
	fixture := testservers.Fixture(b)
	h := testservers.StartHydra(b)
	const resource = "https://gw.bench"
	h.CreateClient(b, testservers.HydraClient{ID: "bench", Secret: hydraSecret, Audience: []string{resource}, Scope: "mcp"})
	jwtToken := h.Token(b, "bench", hydraSecret, resource, "mcp")
	run := func(b *testing.B, endpoint, name string, pid int, token string) {
		for _, version := range []string{legacyProtocol, "2026-07-28"} {
			for _, n := range []int{1, 16} {
				b.Run(fmt.Sprintf("protocol=%s/clients=%d", version, n), func(b *testing.B) {
					benchCallLoop(b, benchConnectAs(b, endpoint, name, n, version, token), name, benchWatched{name: "client", pid: -1},
						benchWatched{name: "proxy", pid: pid}, benchWatched{name: "upstream", pid: pid, children: true})
				})
			}
		}
	}
	b.Run("none", func(b *testing.B) {
		g := startBenchServeStdio(b, fixture, "")
		run(b, g.base+"/mcp", "fx__echo", g.cmd.Process.Pid, "")
	})
	b.Run("key", func(b *testing.B) {
		g := startBenchServeStdio(b, fixture, "")
		out, err := exec.Command(benchBinary(b), "keys", "add", "bench", "--data-dir", g.dataDir).Output()
		if err != nil {
			b.Fatal(err)
		}
		key := strings.TrimSpace(string(out))
		// serve follows the store: the key counts once /api/info names
		// its caller.
		if !testservers.Eventually(10*time.Second, func() bool {
			req, _ := http.NewRequest(http.MethodGet, g.base+"/api/info", nil)
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			var in struct{ Caller *struct{ Name string } }
			return json.NewDecoder(resp.Body).Decode(&in) == nil && in.Caller != nil && in.Caller.Name == "bench"
		}) {
			b.Fatal("serve never took the key")
		}
		run(b, g.base+"/mcp", "fx__echo", g.cmd.Process.Pid, key)
	})
	b.Run("jwt", func(b *testing.B) {
		g := startBenchServeStdio(b, fixture, fmt.Sprintf("auth:\n  resource: %s\n  issuers:\n    - issuer: %s\n", resource, h.Issuer))
		run(b, g.base+"/mcp", "fx__echo", g.cmd.Process.Pid, jwtToken)
	})
	b.Run("mcp-proxy", func(b *testing.B) {
		bin := os.Getenv("TOOLMUX_BENCH_MCP_PROXY")
		if bin == "" {
			b.Skip("TOOLMUX_BENCH_MCP_PROXY (the path of a TBXark/mcp-proxy binary) is not set")
		}
		endpoint, pid := startBenchMCPProxyStdio(b, bin, fixture)
		run(b, endpoint, "echo", pid, "")
	})
}

// benchCheck calls tool name and checks its answer: the everything
// server's test_simple_text (no arguments, a fixed text), or else an
// echo tool with message.
func benchCheck(ctx context.Context, cs *mcp.ClientSession, name, message string) error {
	if !strings.HasSuffix(name, everythingTool) {
		return benchEcho(ctx, cs, name, message)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{}})
	if err != nil {
		return err
	}
	if res.IsError || len(res.Content) != 1 {
		return fmt.Errorf("%s: unexpected result %+v", name, res.Content)
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); !ok || tc.Text == "" {
		return fmt.Errorf("%s: unexpected result %+v", name, res.Content[0])
	}
	return nil
}

// everythingTool is the everything server's tool the benchmarks call.
const everythingTool = "test_simple_text"

// benchEcho calls the echo tool with message and checks the answer.
func benchEcho(ctx context.Context, cs *mcp.ClientSession, name, message string) error {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{"message": message}})
	if err != nil {
		return err
	}
	if res.IsError || len(res.Content) == 0 {
		return fmt.Errorf("%s: error result %+v", name, res.Content)
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); !ok || !strings.Contains(tc.Text, "Echo: "+message) {
		return fmt.Errorf("%s: unexpected result %+v", name, res.Content[0])
	}
	return nil
}

// benchCPUTime returns the CPU time (user and system, all threads) process
// pid has used, in steps of its 10 ms clock ticks; pid -1 is this process.
func benchCPUTime(pid int) time.Duration {
	if pid == -1 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			return 0
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	// utime and stime are the 14th and 15th fields; the 3rd follows the
	// parenthesised command name.
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// benchWatched is a process whose CPU time per call is reported as
// cpu-NAME-µs: the benchmark's own (pid -1: the clients), the proxy's,
// the upstream's; or, with children set, the sum of the children of pid
// (the stdio servers a gateway started), as they are when the timer starts.
type benchWatched struct {
	name     string
	pid      int
	children bool
}

// pids are the processes w watches.
func (w benchWatched) pids() []int {
	if !w.children {
		return []int{w.pid}
	}
	var out []int
	for _, c := range testservers.Children(w.pid) {
		out = append(out, c.PID)
	}
	return out
}

// benchCallLoop makes b.N echo calls, spread over the sessions, each session
// making one call at a time, and reports the latencies' p50 and p99,
// calls/s and the CPU time per call of the watched processes. It returns
// when the timer started.
func benchCallLoop(b *testing.B, sessions []*mcp.ClientSession, name string, watch ...benchWatched) time.Time {
	b.Helper()
	ctx := context.Background()
	pids := make([][]int, len(watch))
	cpu0 := make([]time.Duration, len(watch))
	for i, w := range watch {
		pids[i] = w.pids()
		for _, pid := range pids[i] {
			cpu0[i] += benchCPUTime(pid)
		}
	}
	var (
		next    atomic.Int64
		mu      sync.Mutex
		failure error
		wg      sync.WaitGroup
	)
	lats := make([][]time.Duration, len(sessions))
	b.ResetTimer()
	start := time.Now()
	for i, cs := range sessions {
		wg.Go(func() {
			lat := make([]time.Duration, 0, b.N/len(sessions)+1)
			for n := next.Add(1); n <= int64(b.N); n = next.Add(1) {
				msg := "m" + strconv.FormatInt(n, 10)
				t0 := time.Now()
				err := benchCheck(ctx, cs, name, msg)
				lat = append(lat, time.Since(t0))
				if err != nil {
					mu.Lock()
					failure = errors.Join(failure, err)
					mu.Unlock()
					return
				}
			}
			lats[i] = lat
		})
	}
	wg.Wait()
	b.StopTimer()
	if failure != nil {
		b.Fatal(failure)
	}
	for i, w := range watch {
		var cpu time.Duration
		for _, pid := range pids[i] {
			cpu += benchCPUTime(pid)
		}
		b.ReportMetric(float64((cpu-cpu0[i]).Microseconds())/float64(b.N), "cpu-"+w.name+"-µs")
	}
	all := slices.Concat(lats...)
	slices.Sort(all)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	b.ReportMetric(us(all[len(all)/2]), "p50-µs")
	b.ReportMetric(us(all[len(all)*99/100]), "p99-µs")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
	return start
}

var benchClientCounts = []int{1, 16, 64}

// BenchmarkGatewayHop measures echo calls made directly to the upstream
// streamable HTTP server, through `toolmux serve` (which adds scheduler,
// policy, pipeline with the task log, and events), and through
// TBXark/mcp-proxy, at 1, 16 and 64 concurrent clients.
//
// The metrics cpu-client-µs, cpu-proxy-µs and cpu-upstream-µs are the CPU
// time per call of the benchmark process (the clients), of the gateway or
// mcp-proxy process, and of the upstream process.
func BenchmarkGatewayHop(b *testing.B) {
	upstream, upPID := startBenchUpstream(b)
	run := func(b *testing.B, endpoint, name string, proxyPID int) {
		watch := []benchWatched{{name: "client", pid: -1}, {name: "upstream", pid: upPID}}
		if proxyPID != 0 {
			watch = append(watch, benchWatched{name: "proxy", pid: proxyPID})
		}
		for _, n := range benchClientCounts {
			b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
				benchCallLoop(b, benchConnect(b, endpoint, name, n), name, watch...)
			})
		}
	}
	b.Run("direct", func(b *testing.B) { run(b, upstream, "echo", 0) })
	b.Run("gateway", func(b *testing.B) {
		g := startBenchServe(b, upstream, "")
		run(b, g.base+"/mcp", "fx__echo", g.cmd.Process.Pid)
	})
	b.Run("mcp-proxy", func(b *testing.B) {
		bin := os.Getenv("TOOLMUX_BENCH_MCP_PROXY")
		if bin == "" {
			b.Skip("TOOLMUX_BENCH_MCP_PROXY (the path of a TBXark/mcp-proxy binary) is not set")
		}
		endpoint, pid := startBenchMCPProxy(b, bin, upstream)
		run(b, endpoint, "echo", pid)
	})
}

// BenchmarkGatewayEras measures echo calls through `toolmux serve`'s /mcp
// (an HTTP upstream, as BenchmarkGatewayHop) by clients of the two
// protocol eras: 2025-11-25 sessions, whose tools/call the gateway
// answers itself (lean.go), and 2026-07-28 clients without a session,
// whose requests go through the go-sdk's stateless handler (a temporary
// session per request, the _meta decoded and checked).
func BenchmarkGatewayEras(b *testing.B) {
	upstream, upPID := startBenchUpstream(b)
	g := startBenchServe(b, upstream, "")
	watch := []benchWatched{{name: "client", pid: -1}, {name: "upstream", pid: upPID}, {name: "proxy", pid: g.cmd.Process.Pid}}
	for _, version := range []string{legacyProtocol, "2026-07-28"} {
		for _, n := range []int{1, 16} {
			b.Run(fmt.Sprintf("protocol=%s/clients=%d", version, n), func(b *testing.B) {
				benchCallLoop(b, benchConnectVersion(b, g.base+"/mcp", "fx__echo", n, version), "fx__echo", watch...)
			})
		}
	}
}

// BenchmarkGatewayStdio is BenchmarkGatewayHop with a stdio upstream, as
// users run their servers: the fixture (a go-sdk server), spawned by the
// gateway. Echo calls through `toolmux serve`'s governed /mcp (journal on,
// default settings), through its passthrough route /servers/fx/mcp (every
// client session a process of its own), and through TBXark/mcp-proxy (one
// shared stdio session), at 1, 16 and 64 concurrent clients; gateway-nolog
// is the governed /mcp with the task log off, gateway-metrics with
// --metrics.
// cpu-upstream-µs sums the stdio servers the gateway started.
func BenchmarkGatewayStdio(b *testing.B) {
	fixture := testservers.Fixture(b)
	run := func(b *testing.B, endpoint, name string, proxyPID int) {
		for _, n := range benchClientCounts {
			b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
				sessions := benchConnect(b, endpoint, name, n)
				benchCallLoop(b, sessions, name, benchWatched{name: "client", pid: -1},
					benchWatched{name: "proxy", pid: proxyPID}, benchWatched{name: "upstream", pid: proxyPID, children: true})
			})
		}
	}
	b.Run("gateway", func(b *testing.B) {
		g := startBenchServeStdio(b, fixture, "")
		run(b, g.base+"/mcp", "fx__echo", g.cmd.Process.Pid)
	})
	// The same route with no task log: what the durable record of every
	// call and event costs is the difference.
	b.Run("gateway-nolog", func(b *testing.B) {
		g := startBenchServeStdio(b, fixture, "task_log: {enabled: false}\n")
		run(b, g.base+"/mcp", "fx__echo", g.cmd.Process.Pid)
	})
	// The same route with --metrics: what counting every call (and its
	// approval wait) costs is the difference. Nobody scrapes: a scrape
	// reads the parts' counters, off the calls' path.
	b.Run("gateway-metrics", func(b *testing.B) {
		g := startBenchServeStdio(b, fixture, "", "--metrics")
		run(b, g.base+"/mcp", "fx__echo", g.cmd.Process.Pid)
	})
	// The same route with traces on, every call sampled, exported over
	// OTLP/HTTP to a local receiver that reads and drops them: what
	// tracing costs per call is the difference.
	b.Run("gateway-traced", func(b *testing.B) {
		recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
		}))
		b.Cleanup(recv.Close) // after the gateway's own cleanup: its last spans are flushed
		g := startBenchServeStdio(b, fixture, "telemetry: {enabled: true, endpoint: "+recv.URL+"}\n")
		run(b, g.base+"/mcp", "fx__echo", g.cmd.Process.Pid)
	})
	b.Run("passthrough", func(b *testing.B) {
		g := startBenchServeStdio(b, fixture, "passthrough: {max_sessions: 100}\n")
		run(b, g.base+"/servers/fx/mcp", "echo", g.cmd.Process.Pid)
	})
	b.Run("mcp-proxy", func(b *testing.B) {
		bin := os.Getenv("TOOLMUX_BENCH_MCP_PROXY")
		if bin == "" {
			b.Skip("TOOLMUX_BENCH_MCP_PROXY (the path of a TBXark/mcp-proxy binary) is not set")
		}
		endpoint, pid := startBenchMCPProxyStdio(b, bin, fixture)
		run(b, endpoint, "echo", pid)
	})
}

// benchSubscriber reads /api/events and counts what it receives.
type benchSubscriber struct {
	events atomic.Int64 // events, markers excluded
	missed atomic.Int64 // the sum of the gap markers' missed
	last   atomic.Int64 // when the last event arrived, Unix ns
}

// benchSubscribe attaches n subscribers to the gateway's event stream (live
// events only). They are detached when the benchmark ends.
func benchSubscribe(b *testing.B, base string, n int) []*benchSubscriber {
	b.Helper()
	subs := make([]*benchSubscriber, n)
	for i := range subs {
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/events", nil)
		if err != nil {
			b.Fatal(err)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			b.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("GET /api/events: %s", resp.Status)
		}
		// The hub subscribes before it answers: from here on, every event
		// is queued for this subscriber.
		s := &benchSubscriber{}
		done := make(chan struct{})
		go func() {
			defer close(done)
			d := stream.NewDecoder(resp.Body)
			for {
				e, err := d.NextEvent()
				if err != nil {
					return
				}
				switch e.Name {
				case stream.EventHeartbeat:
				case stream.EventGap:
					var g stream.GapData
					_ = json.Unmarshal(e.Data, &g)
					s.missed.Add(g.Missed)
				default:
					s.events.Add(1)
					s.last.Store(time.Now().UnixNano())
				}
			}
		}()
		b.Cleanup(func() {
			cancel()
			resp.Body.Close()
			<-done
			tr.CloseIdleConnections()
		})
		subs[i] = s
	}
	return subs
}

// benchSettle waits until the subscribers have received nothing for 300 ms
// (at most 30 s) and returns their totals.
func benchSettle(subs []*benchSubscriber) (events, missed int64, last time.Time) {
	total := func() (e, m int64) {
		for _, s := range subs {
			e += s.events.Load()
			m += s.missed.Load()
		}
		return e, m
	}
	deadline := time.Now().Add(30 * time.Second)
	pe, pm := total()
	quiet := time.Now()
	for time.Since(quiet) < 300*time.Millisecond && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		if e, m := total(); e != pe || m != pm {
			pe, pm, quiet = e, m, time.Now()
		}
	}
	for _, s := range subs {
		if t := s.last.Load(); t > last.UnixNano() {
			last = time.Unix(0, t)
		}
	}
	return pe, pm, last
}

// BenchmarkEventFanout measures echo calls through `toolmux serve` with 0
// and with 10 SSE subscribers of /api/events attached, each reading and
// decoding the stream, and the events delivered to the subscribers per
// second (all subscribers together, from the first call until the last
// event arrived). The task log has its default settings.
func BenchmarkEventFanout(b *testing.B) {
	upstream, _ := startBenchUpstream(b)
	for _, nsubs := range []int{0, 10} {
		b.Run(fmt.Sprintf("subscribers=%d", nsubs), func(b *testing.B) {
			g := startBenchServe(b, upstream, "")
			for _, n := range []int{1, 16} {
				b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
					sessions := benchConnect(b, g.base+"/mcp", "fx__echo", n)
					subs := benchSubscribe(b, g.base, nsubs)
					start := benchCallLoop(b, sessions, "fx__echo", benchWatched{name: "client", pid: -1}, benchWatched{name: "proxy", pid: g.cmd.Process.Pid})
					if nsubs == 0 {
						return
					}
					events, missed, last := benchSettle(subs)
					b.ReportMetric(float64(events)/last.Sub(start).Seconds(), "events/s")
					b.ReportMetric(float64(events)/float64(nsubs)/float64(b.N), "events/call")
					b.ReportMetric(float64(missed), "missed")
				})
			}
		})
	}
}

// BenchmarkRecordedCall measures echo calls through `toolmux serve` with
// the task log off (task_log.enabled: false: neither calls nor events are
// stored) and on, with each durability. Every call is recorded (one call
// record, synchronously, before the answer) and its events are stored
// (asynchronously, in batches). At the end the task log is checked to hold
// every call made.
func BenchmarkRecordedCall(b *testing.B) {
	upstream, _ := startBenchUpstream(b)
	for _, v := range []struct{ name, cfg string }{
		{"tasklog=off", "task_log: {enabled: false}\n"},
		{"tasklog=process", "task_log: {durability: process}\n"},
		{"tasklog=full", "task_log: {durability: full}\n"},
	} {
		b.Run(v.name, func(b *testing.B) {
			g := startBenchServe(b, upstream, v.cfg)
			var made int64
			for _, n := range []int{1, 16} {
				b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
					sessions := benchConnect(b, g.base+"/mcp", "fx__echo", n)
					benchCallLoop(b, sessions, "fx__echo", benchWatched{name: "proxy", pid: g.cmd.Process.Pid})
					made += int64(n + b.N)
				})
			}
			if made == 0 { // the leaves were filtered out
				return
			}
			g.stop(b)
			if v.name == "tasklog=off" {
				if tasklog.Exists(g.dataDir) {
					b.Errorf("task_log.enabled: false, yet there is a task log in %s", g.dataDir)
				}
				return
			}
			disk := benchDiskBytes(b, g.dataDir)
			calls, events, maxID := benchCountLog(b, g.dataDir)
			if calls != made {
				b.Errorf("task log holds %d calls; %d were made", calls, made)
			}
			b.Logf("task log: %d calls recorded of %d made; %d events stored, ids up to %d; the data directory takes %d bytes (du), %.0f per call",
				calls, made, events, maxID, disk, float64(disk)/float64(made))
		})
	}
}

// benchDiskBytes is what dir takes on disk, as du counts it (blocks).
func benchDiskBytes(b *testing.B, dir string) int64 {
	b.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// benchCountLog returns the number of call records and events in the task log
// of dir, and the largest event id.
func benchCountLog(b *testing.B, dir string) (calls, events, maxID int64) {
	b.Helper()
	ctx := context.Background()
	l, err := tasklog.Open(ctx, dir)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	tasks, err := l.Tasks(ctx, tasklog.Filter{})
	if err != nil {
		b.Fatal(err)
	}
	for _, t := range tasks {
		calls += int64(t.Calls)
	}
	loose, err := l.Calls(ctx, "")
	if err != nil {
		b.Fatal(err)
	}
	calls += int64(len(loose))
	evs, err := l.EventsAfter(ctx, 0, "", 0)
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range evs {
		maxID = max(maxID, e.ID)
	}
	return calls, int64(len(evs)), maxID
}

// BenchmarkJournalSoak runs 32 clients calling echo through `toolmux serve`
// for TOOLMUX_SOAK (default 60s; the soak is 5m) with the task
// log's retention scaled down to max_bytes TOOLMUX_SOAK_BYTES (default
// 8MiB), and logs, every 5s, what the data directory takes (du) and the
// gateway's resident memory: both should rise to a plateau and stay there.
// It reports the calls made, the last and the largest of each.
func BenchmarkJournalSoak(b *testing.B) {
	dur := 60 * time.Second
	if v, err := time.ParseDuration(os.Getenv("TOOLMUX_SOAK")); err == nil {
		dur = v
	}
	limit := "8MiB"
	if v := os.Getenv("TOOLMUX_SOAK_BYTES"); v != "" {
		limit = v
	}
	upstream, _ := startBenchUpstream(b)
	g := startBenchServe(b, upstream, "task_log: {retention: {max_bytes: "+limit+"}}\n")
	defer g.stop(b)
	sessions := benchConnect(b, g.base+"/mcp", "fx__echo", 32)
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var calls, failed atomic.Int64
	var wg sync.WaitGroup
	for _, cs := range sessions {
		wg.Go(func() {
			for ctx.Err() == nil {
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "fx__echo", Arguments: map[string]any{"message": "soak"}})
				if err != nil || res.IsError {
					failed.Add(1)
					continue
				}
				calls.Add(1)
			}
		})
	}
	var maxDisk, maxRSS, disk, rss int64
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	start := time.Now()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
		}
		disk, rss = benchDiskBytes(b, g.dataDir), benchRSS(g.cmd.Process.Pid)
		maxDisk, maxRSS = max(maxDisk, disk), max(maxRSS, rss)
		b.Logf("%5.0fs  %8d calls  data dir %6.1f MiB  rss %6.1f MiB", time.Since(start).Seconds(), calls.Load(),
			float64(disk)/(1<<20), float64(rss)/(1<<20))
	}
	wg.Wait()
	if failed.Load() > 0 {
		b.Errorf("%d calls failed", failed.Load())
	}
	b.ReportMetric(float64(calls.Load()), "calls")
	b.ReportMetric(float64(disk)/(1<<20), "disk-MiB")
	b.ReportMetric(float64(maxDisk)/(1<<20), "max-disk-MiB")
	b.ReportMetric(float64(rss)/(1<<20), "rss-MiB")
	b.ReportMetric(float64(maxRSS)/(1<<20), "max-rss-MiB")
}

// benchRSS is a process's resident memory in bytes (0 when unknown).
func benchRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// BenchmarkGatewayEverything is the serving path against TBXark/mcp-proxy
// as issue 25 measures it: the go-sdk's conformance everything-server over
// stdio behind `toolmux serve`'s governed /mcp (task log on, default
// durability) and its passthrough route, and behind mcp-proxy when
// TOOLMUX_BENCH_MCP_PROXY names its binary; go-sdk clients of both
// protocol eras, 1 and 16 at once, calling test_simple_text.
func BenchmarkGatewayEverything(b *testing.B) {
	server := buildEverythingServer(b)
	run := func(b *testing.B, endpoint, name string, pid int) {
		for _, version := range []string{legacyProtocol, "2026-07-28"} {
			for _, n := range []int{1, 16} {
				b.Run(fmt.Sprintf("protocol=%s/clients=%d", version, n), func(b *testing.B) {
					benchCallLoop(b, benchConnectVersion(b, endpoint, name, n, version), name, benchWatched{name: "client", pid: -1},
						benchWatched{name: "proxy", pid: pid}, benchWatched{name: "upstream", pid: pid, children: true})
				})
			}
		}
	}
	b.Run("gateway", func(b *testing.B) {
		g := startBenchServeStdio(b, server, "")
		run(b, g.base+"/mcp", "fx__"+everythingTool, g.cmd.Process.Pid)
	})
	b.Run("passthrough", func(b *testing.B) {
		g := startBenchServeStdio(b, server, "passthrough: {max_sessions: 100}\n")
		run(b, g.base+"/servers/fx/mcp", everythingTool, g.cmd.Process.Pid)
	})
	b.Run("mcp-proxy", func(b *testing.B) {
		bin := os.Getenv("TOOLMUX_BENCH_MCP_PROXY")
		if bin == "" {
			b.Skip("TOOLMUX_BENCH_MCP_PROXY (the path of a TBXark/mcp-proxy binary) is not set")
		}
		endpoint, pid := startBenchMCPProxyStdio(b, bin, server)
		run(b, endpoint, everythingTool, pid)
	})
}
