package manager_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/toolmux/toolmux/builtin"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/tool"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func stdio(t *testing.T, name string, args ...string) *mcpsource.Source {
	t.Helper()
	s, err := mcpsource.New(mcpsource.Config{
		Name: name, Transport: mcpsource.Stdio, Command: testservers.Fixture(t), Args: args,
		ConnectTimeout: 10 * time.Second, MinBackoff: 10 * time.Millisecond, StopGrace: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newManager(t *testing.T, opts ...manager.Option) *manager.Manager {
	t.Helper()
	m, err := manager.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func do(m *manager.Manager, server, name string, args map[string]any) *tool.Record {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return m.Call(ctx, tool.Call{Server: server, Tool: name, Arguments: args})
}

func kind(r *tool.Record) tool.Kind { return tool.KindOf(r.Err()) }

// countingServer is the in-process fixture behind a real HTTP listener,
// counting the tools/call requests that reach it.
type countingServer struct {
	url   string
	calls atomic.Int32
	srv   *mcp.Server
}

func httpFixture(t *testing.T, transport string) *countingServer {
	t.Helper()
	cs := &countingServer{srv: testservers.NewServer(testservers.Options{})}
	cs.srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/call" {
				cs.calls.Add(1)
			}
			return next(ctx, method, req)
		}
	})
	var h http.Handler
	if transport == mcpsource.SSE {
		h = mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return cs.srv }, nil)
	} else {
		h = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return cs.srv }, nil)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		for ss := range cs.srv.Sessions() {
			ss.Close()
		}
		ts.Close()
	})
	cs.url = ts.URL
	return cs
}

func TestDiscoveryIsolatesFailingServers(t *testing.T) {
	ws := t.TempDir()
	b, err := builtin.New(ws)
	if err != nil {
		t.Fatal(err)
	}
	hung, err := mcpsource.New(mcpsource.Config{
		Name: "hung", Transport: mcpsource.Stdio, Command: testservers.Fixture(t),
		Args: []string{"-hang-init", "-ignore-term"}, ConnectTimeout: 500 * time.Millisecond, StopGrace: 3 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(t,
		manager.WithSource(b, manager.ServerOptions{}),
		manager.WithSource(stdio(t, "good"), manager.ServerOptions{}),
		manager.WithSource(hung, manager.ServerOptions{ConnectTimeout: 500 * time.Millisecond}),
		manager.WithSource(stdio(t, "broken", "-exit", "2"), manager.ServerOptions{}),
		manager.WithSource(stdio(t, "off"), manager.ServerOptions{Disabled: true}),
	)
	cat, err := m.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The hung server ignores SIGTERM; it is still being shut down, so
	// discovery did not wait for it beyond its connect timeout.
	if h, _ := cat.Server("hung"); h.State != tool.StateFailed || !strings.Contains(h.Error, "handshake within 500ms") {
		t.Errorf("hung server health: %+v", h)
	}
	if h, _ := cat.Server("broken"); h.State != tool.StateFailed || !strings.Contains(h.Detail, "FIXTURE_API_KEY") {
		t.Errorf("broken server health: %+v", h)
	}
	if h, _ := cat.Server("off"); h.State != tool.StateDisabled {
		t.Errorf("disabled server health: %+v", h)
	}
	if h, _ := cat.Server("good"); h.State != tool.StateReady || h.Tools == 0 {
		t.Errorf("good server health: %+v", h)
	}
	for _, name := range []string{"good__echo", "builtin__read_file", "builtin__grep"} {
		if _, ok := cat.Lookup(name); !ok {
			t.Errorf("%s missing from catalog", name)
		}
	}
	for _, tl := range cat.Tools() {
		if tl.Server == "hung" || tl.Server == "broken" || tl.Server == "off" {
			t.Errorf("tool from a failed server in catalog: %+v", tl)
		}
	}
	if r := do(m, "off", "echo", nil); kind(r) != tool.KindServerUnavailable {
		t.Errorf("call to disabled server: %+v", r.Error)
	}
}

func TestDeniedToolCannotBeCalledOnAnyTransport(t *testing.T) {
	sse := httpFixture(t, mcpsource.SSE)
	stream := httpFixture(t, mcpsource.StreamableHTTP)
	mk := func(name, transport, url string) *mcpsource.Source {
		s, err := mcpsource.New(mcpsource.Config{Name: name, Transport: transport, URL: url})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	b, err := builtin.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	perServer := manager.ServerOptions{Deny: []string{"pid"}}
	m := newManager(t,
		manager.WithFilter(nil, []string{"*/echo", "builtin/grep"}),
		manager.WithSource(stdio(t, "stdio"), perServer),
		manager.WithSource(mk("sse", mcpsource.SSE, sse.url), perServer),
		manager.WithSource(mk("http", mcpsource.StreamableHTTP, stream.url), perServer),
		manager.WithSource(b, manager.ServerOptions{}),
	)
	cat, err := m.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, server := range []string{"stdio", "sse", "http"} {
		for _, denied := range []string{"echo", "pid"} {
			if _, ok := cat.Find(server, denied); ok {
				t.Errorf("%s/%s is denied but in the catalog", server, denied)
			}
			r := do(m, server, denied, map[string]any{"message": "x"})
			if kind(r) != tool.KindPolicyViolation {
				t.Errorf("%s/%s: got %v, want policy_violation", server, denied, r.Err())
			}
		}
		if r := do(m, server, "parts", nil); r.Err() != nil {
			t.Errorf("%s/parts should be allowed: %v", server, r.Err())
		}
	}
	if r := do(m, "builtin", "grep", map[string]any{"pattern": "x"}); kind(r) != tool.KindPolicyViolation {
		t.Errorf("builtin/grep: %v", r.Err())
	}
	// Denied calls never reached the HTTP servers: only the allowed
	// "parts" call did.
	if sse.calls.Load() != 1 || stream.calls.Load() != 1 {
		t.Errorf("tools/call requests reaching servers: sse %d, http %d; want 1 each", sse.calls.Load(), stream.calls.Load())
	}
}

func TestAllowList(t *testing.T) {
	m := newManager(t,
		manager.WithFilter([]string{"fx/e*", "fx/parts"}, nil),
		manager.WithSource(stdio(t, "fx"), manager.ServerOptions{Allow: []string{"echo", "parts", "pid"}}),
	)
	cat, err := m.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tl := range cat.Tools() {
		got = append(got, tl.Name)
	}
	if !slices.Equal(got, []string{"echo", "parts"}) {
		t.Errorf("allowed tools %v", got)
	}
	if r := do(m, "fx", "pid", nil); kind(r) != tool.KindPolicyViolation {
		t.Errorf("pid passes the server's allow list but not the global one: %v", r.Err())
	}
}

func TestPerToolTimeoutCancelsServerSide(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "marker")
	m := newManager(t, manager.WithSource(stdio(t, "fx", "-marker", marker), manager.ServerOptions{
		Timeout: time.Hour, ToolTimeouts: map[string]time.Duration{"hang": 300 * time.Millisecond},
	}))
	// Started first, so that the 300ms are the call's, at the server.
	if r := do(m, "fx", "pid", nil); r.Err() != nil {
		t.Fatal(r.Err())
	}
	r := do(m, "fx", "hang", nil)
	if kind(r) != tool.KindTimeout || !strings.Contains(r.Error.Message, "timed out after 300ms") {
		t.Fatalf("got %+v", r.Error)
	}
	ok := testservers.Eventually(5*time.Second, func() bool {
		b, _ := os.ReadFile(marker)
		return strings.Contains(string(b), "cancelled hang")
	})
	if !ok {
		t.Error("the server's handler was not cancelled")
	}
	if r := do(m, "fx", "slow", map[string]any{"ms": 10}); r.Err() != nil {
		t.Errorf("other tools keep the server timeout: %v", r.Err())
	}
}

func TestCallerCancellation(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "marker")
	m := newManager(t, manager.WithSource(stdio(t, "fx", "-marker", marker), manager.ServerOptions{}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The caller gives up once the call is at the server.
	go func() {
		testservers.Eventually(30*time.Second, func() bool {
			b, _ := os.ReadFile(marker)
			return ctx.Err() != nil || strings.Contains(string(b), "entered hang")
		})
		cancel()
	}()
	r := m.Call(ctx, tool.Call{Server: "fx", Tool: "hang"})
	if kind(r) != tool.KindCancelled {
		t.Fatalf("got %+v", r.Error)
	}
}

func TestRetryOnlyWhenSafe(t *testing.T) {
	flag := filepath.Join(t.TempDir(), "flag")
	m := newManager(t, manager.WithSource(stdio(t, "fx"), manager.ServerOptions{
		Retry: manager.Retry{MaxAttempts: 3, InitialBackoff: 10 * time.Millisecond},
	}))
	// crash_once is read-only: the crash is retried after a restart.
	r := do(m, "fx", "crash_once", map[string]any{"flag": flag})
	if r.Err() != nil || r.Result.Text() != "survived" || r.Attempts != 2 {
		t.Fatalf("crash_once: attempts %d, err %v", r.Attempts, r.Err())
	}
	// crash is not safe to repeat: one attempt, and the crash is reported.
	r = do(m, "fx", "crash", nil)
	if kind(r) != tool.KindServerUnavailable || r.Attempts != 1 {
		t.Fatalf("crash: attempts %d, err %v", r.Attempts, r.Err())
	}
	if !strings.Contains(r.Error.Detail, "simulated crash") {
		t.Errorf("crash error lacks stderr: %+v", r.Error)
	}
	// The next call restarts the server.
	if r := do(m, "fx", "echo", map[string]any{"message": "back"}); r.Err() != nil {
		t.Fatalf("after crash: %v", r.Err())
	}
	if h := m.Health()[0]; h.Restarts != 2 {
		t.Errorf("restarts %d, want 2", h.Restarts)
	}
}

func TestRetryConfiguredTool(t *testing.T) {
	m := newManager(t, manager.WithSource(stdio(t, "fx"), manager.ServerOptions{
		Retry: manager.Retry{MaxAttempts: 2, InitialBackoff: time.Millisecond, Tools: []string{"cr*"}},
	}))
	// Listed as safe to repeat: retried, crashes again, reported after 2 attempts.
	r := do(m, "fx", "crash", nil)
	if kind(r) != tool.KindServerUnavailable || r.Attempts != 2 {
		t.Fatalf("attempts %d, err %v", r.Attempts, r.Err())
	}
}

func TestCircuitBreakerFailsFast(t *testing.T) {
	dir := t.TempDir()
	counter := filepath.Join(dir, "starts")
	script := filepath.Join(dir, "server.sh")
	body := fmt.Sprintf("#!/bin/sh\necho start >> %q\nexec %q -exit 2\n", counter, testservers.Fixture(t))
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := mcpsource.New(mcpsource.Config{Name: "flaky", Transport: mcpsource.Stdio, Command: script, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(t, manager.WithSource(src, manager.ServerOptions{
		Retry:   manager.Retry{MaxAttempts: 1},
		Breaker: manager.Breaker{Failures: 2, Cooldown: time.Hour},
	}))
	starts := func() int {
		b, _ := os.ReadFile(counter)
		return strings.Count(string(b), "start")
	}
	for i := range 2 {
		if r := do(m, "flaky", "echo", nil); kind(r) != tool.KindServerUnavailable {
			t.Fatalf("call %d: %v", i, r.Err())
		}
	}
	before := starts()
	r := do(m, "flaky", "echo", nil)
	if kind(r) != tool.KindServerUnavailable || !strings.Contains(r.Error.Message, "circuit breaker open") {
		t.Fatalf("third call: %+v", r.Error)
	}
	if !strings.Contains(r.Error.Detail, "FIXTURE_API_KEY") && !strings.Contains(r.Error.Detail, "exited with status 2") {
		t.Errorf("breaker error does not carry the last error: %q", r.Error.Detail)
	}
	if starts() != before {
		t.Errorf("the open breaker still started the server (%d -> %d starts)", before, starts())
	}
	if h := m.Health()[0]; h.State != tool.StateFailed || !strings.Contains(h.Error, "circuit breaker open") {
		t.Errorf("health: %+v", h)
	}
}

func TestCatalogRefreshOnListChanged(t *testing.T) {
	counted := &countingSource{Source: stdio(t, "fx")}
	m := newManager(t, manager.WithSource(counted, manager.ServerOptions{}))
	cat, err := m.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	again, _ := m.Tools(context.Background())
	if again != cat || counted.lists.Load() != 1 {
		t.Fatalf("catalog not cached: %d listings", counted.lists.Load())
	}
	if r := do(m, "fx", "add_tool", nil); r.Err() != nil {
		t.Fatal(r.Err())
	}
	var found bool
	testservers.Eventually(5*time.Second, func() bool {
		c, err := m.Tools(context.Background())
		if err == nil {
			_, found = c.Lookup("fx__added_1")
		}
		return found
	})
	if !found {
		t.Fatal("catalog never showed the added tool")
	}
	if r := do(m, "fx", "added_1", nil); r.Err() != nil || r.Result.Text() != "added_1" {
		t.Errorf("calling the added tool: %v", r.Err())
	}
}

func TestCatalogFollowsListingsMadeByCalls(t *testing.T) {
	m := newManager(t, manager.WithSource(stdio(t, "fx"), manager.ServerOptions{}))
	if _, err := m.Tools(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := do(m, "fx", "add_tool", nil); r.Err() != nil {
		t.Fatal(r.Err())
	}
	// Calling the new tool at once re-lists the server from the call path
	// (the list_changed notification may not even have arrived yet).
	ok := testservers.Eventually(5*time.Second, func() bool { return do(m, "fx", "added_1", nil).Err() == nil })
	if !ok {
		t.Fatal("the added tool never became callable")
	}
	cat, err := m.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cat.Lookup("fx__added_1"); !ok {
		t.Error("the catalog does not show a tool the manager already called")
	}
}

func TestCallListsLazilyAndSuggests(t *testing.T) {
	m := newManager(t, manager.WithSource(stdio(t, "fx"), manager.ServerOptions{}))
	r := do(m, "fx", "ecoh", map[string]any{"message": "x"})
	if kind(r) != tool.KindToolNotRegistered || r.Error.Suggestion != "echo" {
		t.Errorf("typo: %+v", r.Error)
	}
	r = do(m, "fz", "echo", nil)
	if kind(r) != tool.KindServerNotFound || r.Error.Suggestion != "fx" {
		t.Errorf("unknown server: %+v", r.Error)
	}
	r = do(m, "fx", "echo", map[string]any{"message": "lazy"})
	if r.Err() != nil || r.Result.Text() != "Echo: lazy" || r.Name != "fx__echo" || r.Attempts != 1 || r.ID == "" {
		t.Errorf("record: %+v", r)
	}
	if r.Duration <= 0 || r.Ended.Before(r.Started) {
		t.Errorf("timestamps: %v %v %v", r.Started, r.Ended, r.Duration)
	}
}

func TestToolErrorKind(t *testing.T) {
	m := newManager(t, manager.WithSource(stdio(t, "fx"), manager.ServerOptions{}))
	r := do(m, "fx", "fail", nil)
	if kind(r) != tool.KindToolError || r.Result == nil || !strings.Contains(r.Error.Message, "failed on purpose") {
		t.Errorf("got %+v", r)
	}
}

func TestConcurrentCallsShareOneSession(t *testing.T) {
	m := newManager(t, manager.WithSource(stdio(t, "fx"), manager.ServerOptions{}))
	pids := make([]string, 32)
	var wg sync.WaitGroup
	for i := range pids {
		wg.Go(func() {
			r := do(m, "fx", "pid", nil)
			if r.Err() == nil {
				pids[i] = r.Result.Text()
			}
		})
	}
	wg.Wait()
	for _, p := range pids {
		if p == "" || p != pids[0] {
			t.Fatalf("pids: %v", pids)
		}
	}
}

func TestCloseStopsEverything(t *testing.T) {
	m, err := manager.New(
		manager.WithSource(stdio(t, "a", "-child"), manager.ServerOptions{}),
		manager.WithSource(stdio(t, "b"), manager.ServerOptions{}),
	)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Tools(context.Background()); err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, h := range m.Health() {
		if h.PID == 0 {
			t.Fatalf("%s has no process: %+v", h.Name, h)
		}
		pids = append(pids, h.PID)
	}
	if err := m.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	gone := testservers.Eventually(5*time.Second, func() bool {
		for _, p := range pids {
			if !testservers.ProcessGone(p) {
				return false
			}
		}
		return true
	})
	if !gone {
		t.Errorf("processes left after Close: %v", pids)
	}
	if r := do(m, "a", "echo", nil); kind(r) != tool.KindServerUnavailable {
		t.Errorf("call after Close: %v", r.Err())
	}
}

func TestPanickingSource(t *testing.T) {
	m := newManager(t, manager.WithSource(panicky{}, manager.ServerOptions{}))
	r := do(m, "panicky", "boom", nil)
	if kind(r) != tool.KindExecutionFailed || !strings.Contains(r.Error.Message, "panicked") {
		t.Errorf("got %+v", r.Error)
	}
}

func TestNameCollisionsAreResolved(t *testing.T) {
	m := newManager(t,
		manager.WithSource(fake{name: "a.b", tools: []string{"x"}}, manager.ServerOptions{}),
		manager.WithSource(fake{name: "a_b", tools: []string{"x"}}, manager.ServerOptions{}),
	)
	cat, err := m.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if cat.Len() != 2 || len(cat.Collisions()) != 1 {
		t.Fatalf("%d tools, collisions %+v", cat.Len(), cat.Collisions())
	}
	t1, _ := cat.Find("a.b", "x")
	t2, _ := cat.Find("a_b", "x")
	if t1.Exposed != "a_b__x" || !strings.HasPrefix(t2.Exposed, "a_b__x_") {
		t.Errorf("names %q and %q", t1.Exposed, t2.Exposed)
	}
	if r := do(m, "a_b", "x", nil); r.Err() != nil || r.Name != t2.Exposed {
		t.Errorf("call: %+v", r)
	}
}

func TestDuplicateSourceNames(t *testing.T) {
	_, err := manager.New(
		manager.WithSource(fake{name: "x"}, manager.ServerOptions{}),
		manager.WithSource(fake{name: "x"}, manager.ServerOptions{}),
	)
	if err == nil {
		t.Fatal("duplicate names accepted")
	}
}

type countingSource struct {
	*mcpsource.Source
	lists atomic.Int32
}

func (c *countingSource) Tools(ctx context.Context) ([]tool.Tool, error) {
	c.lists.Add(1)
	return c.Source.Tools(ctx)
}

type panicky struct{}

func (panicky) Name() string { return "panicky" }
func (panicky) Tools(context.Context) ([]tool.Tool, error) {
	return []tool.Tool{{Name: "boom"}}, nil
}
func (panicky) Call(context.Context, string, map[string]any) (*tool.Result, error) {
	panic("kaboom")
}
func (panicky) Close() error { return nil }

type fake struct {
	name  string
	tools []string
}

func (f fake) Name() string { return f.name }
func (f fake) Tools(context.Context) ([]tool.Tool, error) {
	var out []tool.Tool
	for _, n := range f.tools {
		out = append(out, tool.Tool{Name: n})
	}
	return out, nil
}
func (f fake) Call(_ context.Context, name string, _ map[string]any) (*tool.Result, error) {
	return tool.TextResult(f.name + "/" + name), nil
}
func (fake) Close() error { return nil }

var (
	_ = errors.New
	_ = strconv.Itoa
)

func TestToolDefinition(t *testing.T) {
	m := newManager(t, manager.WithSource(stdio(t, "fx"), manager.ServerOptions{Deny: []string{"pid"}}))
	def, err := m.Tool(context.Background(), "fx", "echo")
	if err != nil || def.Exposed != "fx__echo" || def.InputSchema["type"] != "object" || !def.IsReadOnly() {
		t.Errorf("echo: %+v %v", def, err)
	}
	for name, want := range map[string]tool.Kind{"pid": tool.KindPolicyViolation, "ecoh": tool.KindToolNotRegistered} {
		if _, err := m.Tool(context.Background(), "fx", name); tool.KindOf(err) != want {
			t.Errorf("%s: got %v, want %s", name, err, want)
		}
	}
	if _, err := m.Tool(context.Background(), "nope", "echo"); tool.KindOf(err) != tool.KindServerNotFound {
		t.Errorf("unknown server: %v", err)
	}
}

// The observer hears every server discovery lists, start and end, with
// the tools the filters let through or the failure; disabled servers are
// not listed, and listings made for a call are not reported.
func TestListingObserver(t *testing.T) {
	var (
		mu     sync.Mutex
		events []manager.Listing
	)
	observe := func(l manager.Listing) {
		mu.Lock()
		events = append(events, l)
		mu.Unlock()
	}
	m := newManager(t,
		manager.WithListingObserver(observe),
		manager.WithSource(stdio(t, "good"), manager.ServerOptions{Deny: []string{"pid"}}),
		manager.WithSource(stdio(t, "broken", "-exit", "2"), manager.ServerOptions{}),
		manager.WithSource(stdio(t, "off"), manager.ServerOptions{Disabled: true}),
	)
	cat, err := m.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := slices.Clone(events)
	mu.Unlock()
	started, ended := map[string]int{}, map[string]manager.Listing{}
	for _, l := range got {
		if !l.Done {
			if _, over := ended[l.Server]; over {
				t.Errorf("%s: a start after its end", l.Server)
			}
			started[l.Server]++
			continue
		}
		ended[l.Server] = l
	}
	if started["good"] != 1 || started["broken"] != 1 || len(started) != 2 || len(ended) != 2 {
		t.Fatalf("events %+v", got)
	}
	inCatalog := 0
	for _, tl := range cat.Tools() {
		if tl.Server == "good" {
			inCatalog++
		}
	}
	if _, denied := cat.Find("good", "pid"); denied {
		t.Error("denied tool in the catalog")
	}
	if g := ended["good"]; g.Err != nil || g.Tools != inCatalog || g.Tools == 0 || g.Took <= 0 {
		t.Errorf("good: %+v (%d tools in the catalog)", g, inCatalog)
	}
	if b := ended["broken"]; tool.KindOf(b.Err) != tool.KindServerUnavailable || b.Took <= 0 {
		t.Errorf("broken: %+v", b)
	}

	// A call looking up a tool lists nothing new; a refresh reports again.
	if r := do(m, "good", "echo", map[string]any{"message": "x"}); r.Err() != nil {
		t.Fatal(r.Err())
	}
	if _, err := m.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	n := len(events)
	mu.Unlock()
	if n != len(got)+4 {
		t.Errorf("%d events after a refresh, want %d", n, len(got)+4)
	}
}

// A deadline of the caller's own makes the call a timeout, whose message
// gives the deadline's cause.
func TestCallerDeadlineIsATimeout(t *testing.T) {
	m := newManager(t, manager.WithSource(stdio(t, "fx"), manager.ServerOptions{}))
	if _, err := m.Tools(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeoutCause(context.Background(), 200*time.Millisecond, errors.New("--timeout 200ms ran out"))
	defer cancel()
	r := m.Call(ctx, tool.Call{Server: "fx", Tool: "hang"})
	if kind(r) != tool.KindTimeout || !strings.Contains(r.Error.Message, "--timeout 200ms ran out") {
		t.Fatalf("got %+v", r.Error)
	}
}

// A call carrying the definition it was admitted against is made against
// it without another lookup: its annotations decide whether a transport
// failure is retried, its exposed name names the record. A definition of
// another tool (the call was redirected) is ignored.
func TestCallUsesTheAdmittedDefinition(t *testing.T) {
	m := newManager(t, manager.WithSource(stdio(t, "fx"), manager.ServerOptions{
		Retry: manager.Retry{MaxAttempts: 2, InitialBackoff: time.Millisecond},
	}))
	ctx := context.Background()
	def, err := m.Tool(ctx, "fx", "crash")
	if err != nil {
		t.Fatal(err)
	}
	if def.IsIdempotent() {
		t.Fatal("the fixture's crash is idempotent; the test needs a tool that is not")
	}
	// As the scheduler admitted it: safe to repeat.
	def.Annotations.Idempotent = tool.Bool(true)
	def.Exposed = "fx__crash_as_admitted"
	r := m.Call(ctx, tool.Call{Server: "fx", Tool: "crash", Definition: &def})
	if kind(r) != tool.KindServerUnavailable || r.Attempts != 2 {
		t.Errorf("crash as admitted idempotent: attempts %d, err %v; want 2 attempts", r.Attempts, r.Err())
	}
	if r.Name != "fx__crash_as_admitted" {
		t.Errorf("record name %q, want the admitted definition's", r.Name)
	}
	r = m.Call(ctx, tool.Call{Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "hi"}, Definition: &def})
	if r.Err() != nil || r.Result.Text() != "Echo: hi" || r.Name != "fx__echo" {
		t.Errorf("a call carrying another tool's definition: %v %q %q", r.Err(), r.Result.Text(), r.Name)
	}
}
