package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/mcpsource"
)

// routeServer is the fixture as a route's sessions start it: with a name
// of its own, so that its processes are told apart from the one the
// manager starts for itself.
func routeServer(t *testing.T, name string, args ...string) mcpsource.Config {
	return mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio, Command: testservers.Fixture(t),
		Args: append([]string{"-name", name}, args...)}
}

// serverProcs returns the live processes this test started with
// "-name name", and the zombies among its children: processes that exited
// and were never reaped.
func serverProcs(name string) (live []int, zombies []int) {
	for _, p := range testservers.Children(os.Getpid()) {
		if p.State == 'Z' {
			zombies = append(zombies, p.PID)
			continue
		}
		if i := slices.Index(p.Args, "-name"); i >= 0 && i+1 < len(p.Args) && p.Args[i+1] == name {
			live = append(live, p.PID)
		}
	}
	return live, zombies
}

// settle waits until the route runs want processes of the server name, no
// child of the test is a zombie, and the route counts want sessions open.
func settle(t *testing.T, g *gateway.Gateway, name string, want int) {
	t.Helper()
	var live, zombies []int
	var open int
	ok := testservers.Eventually(15*time.Second, func() bool {
		live, zombies = serverProcs(name)
		open = g.PassthroughSessions()[0].Open
		return len(live) == want && len(zombies) == 0 && open == want
	})
	if !ok {
		t.Fatalf("want %d processes and sessions: processes %v, zombies %v, %d sessions open", want, live, zombies, open)
	}
}

// refusal is a 503 a client received.
type refusal struct {
	retryAfter string
	contentTyp string
	body       []byte
}

// refusals records the 503 answers of the gateway on their way to a real
// client, whose own error says only "Service Unavailable".
type refusals struct {
	mu  sync.Mutex
	got []refusal
}

func (rs *refusals) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		return resp, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	rs.mu.Lock()
	rs.got = append(rs.got, refusal{resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"), body})
	rs.mu.Unlock()
	return resp, nil
}

func (rs *refusals) list() []refusal {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return slices.Clone(rs.got)
}

// openSession opens a client session on url, through rs.
func openSession(ctx context.Context, url string, rs *refusals) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "cap-test"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: rs}}, legacySession)
}

func callPID(t *testing.T, cs *mcp.ClientSession) int {
	t.Helper()
	var pid int
	if _, err := fmt.Sscan(callText(t, cs, "pid"), &pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// checkLimitError checks that body is the JSON-RPC error of a full route
// with the default limit, answering a request.
func checkLimitError(t *testing.T, body []byte) {
	t.Helper()
	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		t.Fatalf("not a JSON-RPC message: %v: %s", err, body)
	}
	resp, ok := msg.(*jsonrpc.Response)
	var e *jsonrpc.Error
	if !ok || !errors.As(resp.Error, &e) || !resp.ID.IsValid() {
		t.Fatalf("not an error answering a request: %s", body)
	}
	for _, want := range []string{"server fx", "limit of 8 passthrough sessions", "idle sessions end after 5m",
		"servers.fx.passthrough.max_sessions", "passthrough.max_sessions for every server"} {
		if !strings.Contains(e.Message, want) {
			t.Errorf("message %q lacks %q", e.Message, want)
		}
	}
	var data struct {
		Server      string `json:"server"`
		MaxSessions int    `json:"max_sessions"`
	}
	if e.Code != gateway.CodeSessionLimit || json.Unmarshal(e.Data, &data) != nil || data.Server != "fx" || data.MaxSessions != 8 {
		t.Errorf("code %d, data %s", e.Code, e.Data)
	}
}

// The test: 40 clients open sessions on a stdio server's route at
// once; the route, at its default limit, runs 8 processes and never more,
// and the other 32 clients get a 503 whose body is a JSON-RPC error naming
// the server, the limit and the key that raises it. Sessions that end
// (DELETE) free their place and their process is reaped, and Close ends
// the rest; no zombie is left at any point.
func TestPassthroughSessionLimit(t *testing.T) {
	const clients = 40
	limit := gateway.DefaultMaxSessions
	pt := serveRoute(t, routeServer(t, "manager"), gateway.Route{Server: routeServer(t, "capped")})

	// The number of processes is sampled while the clients connect.
	stop := make(chan struct{})
	var most atomic.Int32
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			live, _ := serverProcs("capped")
			if n := int32(len(live)); n > most.Load() {
				most.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	rs := &refusals{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		mu       sync.Mutex
		sessions []*mcp.ClientSession
		failures []error
		wg       sync.WaitGroup
	)
	for range clients {
		wg.Go(func() {
			cs, err := openSession(ctx, pt.url, rs)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures = append(failures, err)
				return
			}
			sessions = append(sessions, cs)
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	t.Cleanup(func() {
		for _, cs := range sessions {
			cs.Close()
		}
	})

	if len(sessions) != limit || len(failures) != clients-limit {
		t.Fatalf("%d sessions, %d failures (%v)", len(sessions), len(failures), failures)
	}
	if n := most.Load(); n > int32(limit) {
		t.Errorf("%d processes at once, over the limit of %d", n, limit)
	}
	got := rs.list()
	if len(got) != clients-limit {
		t.Fatalf("%d refusals on the wire, want %d", len(got), clients-limit)
	}
	for _, r := range got {
		if r.retryAfter != "30" || r.contentTyp != "application/json" {
			t.Errorf("Retry-After %q, Content-Type %q", r.retryAfter, r.contentTyp)
		}
		checkLimitError(t, r.body)
	}
	settle(t, pt.g, "capped", limit)

	// Each session has a process of its own, the one its calls reach.
	pids := map[int]*mcp.ClientSession{}
	for _, cs := range sessions {
		pids[callPID(t, cs)] = cs
	}
	live, _ := serverProcs("capped")
	slices.Sort(live)
	if len(pids) != limit || !slices.Equal(live, slices.Sorted(mapKeys(pids))) {
		t.Fatalf("the sessions' processes %v, the route's %v", slices.Sorted(mapKeys(pids)), live)
	}
	if rs := pt.g.PassthroughSessions(); len(rs) != 1 || rs[0] != (gateway.RouteSessions{Server: "fx", Open: limit,
		Max: limit, IdleTimeout: gateway.DefaultIdleTimeout, Refused: int64(clients - limit)}) {
		t.Errorf("sessions: %+v", rs)
	}
	if index := getBody(t, pt.base+"/"); !strings.Contains(index, "/servers/fx/mcp (8 of 8 sessions open, 32 refused)") {
		t.Errorf("index: %s", index)
	}
	// Refusals are reported as they come, a burst of them at most once a
	// second.
	reports := pt.reports()
	if len(reports) == 0 || len(reports) >= clients-limit {
		t.Errorf("%d reports of %d refusals", len(reports), clients-limit)
	}
	for i, r := range reports {
		if r.Server != "fx" || r.Max != limit || r.Refused < 1 || i > 0 && r.Refused <= reports[i-1].Refused {
			t.Errorf("report %d: %+v", i, r)
		}
	}

	// Three sessions end: their processes are reaped, their places taken
	// again, and the next client is refused.
	var ended []int
	for _, cs := range sessions[:3] {
		pid := callPID(t, cs)
		ended = append(ended, pid)
		if err := cs.Close(); err != nil {
			t.Fatal(err)
		}
	}
	settle(t, pt.g, "capped", limit-3)
	for _, pid := range ended {
		if !testservers.ProcessGone(pid) {
			t.Errorf("process %d outlived its session", pid)
		}
	}
	for range 3 {
		cs, err := openSession(ctx, pt.url, rs)
		if err != nil {
			t.Fatalf("a freed place: %v", err)
		}
		sessions = append(sessions, cs)
	}
	if _, err := openSession(ctx, pt.url, rs); err == nil {
		t.Fatal("a client beyond the limit was served")
	}
	settle(t, pt.g, "capped", limit)

	// Close ends every session and process; the route then refuses
	// clients, saying why.
	if err := pt.g.Close(); err != nil {
		t.Fatal(err)
	}
	settle(t, pt.g, "capped", 0)
	status, _, body := postRPC(t, pt.url, "", rawInitialize)
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "shutting down") {
		t.Errorf("after Close: %d %s", status, body)
	}
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

const rawInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// postRPC sends one JSON-RPC message as a client without an SDK would, in the
// session sessionID ("" for none), and returns the status, the session id
// the gateway gave, and the JSON-RPC message answered (read from the event
// stream when the answer is one).
func postRPC(t *testing.T, url, sessionID, msg string) (int, string, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(msg))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	if sessionID != "" {
		req.Header.Set("Mcp-Session-Id", sessionID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), b
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), []byte(data)
		}
	}
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), nil
}

// wireError returns the error of a JSON-RPC answer, nil for a result.
func wireError(t *testing.T, body []byte) *jsonrpc.Error {
	t.Helper()
	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		t.Fatalf("not a JSON-RPC message: %v: %q", err, body)
	}
	resp, ok := msg.(*jsonrpc.Response)
	if !ok {
		t.Fatalf("not an answer: %s", body)
	}
	if resp.Error == nil {
		return nil
	}
	var e *jsonrpc.Error
	if !errors.As(resp.Error, &e) {
		t.Fatalf("error %T", resp.Error)
	}
	return e
}

// A session without requests for the idle timeout ends, and its process
// with it: a client that keeps its stream open but asks nothing, and one
// that initialized and went away. A call longer than the timeout keeps its
// session alive. The places of the ended sessions are free again.
func TestPassthroughIdleSessionsEnd(t *testing.T) {
	const idle = time.Second
	pt := serveRoute(t, routeServer(t, "manager"), gateway.Route{Server: routeServer(t, "idle"), MaxSessions: 3, IdleTimeout: idle})
	busy := dial(t, pt.url, &events{})
	quiet := dial(t, pt.url, &events{}) // its standing GET stream stays open
	busyPID, quietPID := callPID(t, busy), callPID(t, quiet)
	status, gone, body := postRPC(t, pt.url, "", rawInitialize) // and never heard of again
	if status != http.StatusOK || gone == "" || wireError(t, body) != nil {
		t.Fatalf("rawInitialize: %d %q %s", status, gone, body)
	}
	settle(t, pt.g, "idle", 3)

	// The busy client's call outlasts the idle timeout three times over.
	res, err := busy.CallTool(context.Background(), &mcp.CallToolParams{Name: "span", Arguments: map[string]any{"ms": 3 * idle.Milliseconds()}})
	if err != nil || res.IsError {
		t.Fatalf("a long call: %v %s", err, testservers.ResultText(res))
	}
	if pid := callPID(t, busy); pid != busyPID {
		t.Errorf("the busy session's process changed: %d, then %d", busyPID, pid)
	}
	settle(t, pt.g, "idle", 1)
	if !testservers.ProcessGone(quietPID) {
		t.Errorf("the quiet session's process %d runs on", quietPID)
	}
	if _, err := quiet.CallTool(context.Background(), &mcp.CallToolParams{Name: "pid"}); err == nil {
		t.Error("the quiet session was still served")
	}
	if status, _, _ := postRPC(t, pt.url, gone, `{"jsonrpc":"2.0","id":2,"method":"ping"}`); status != http.StatusNotFound {
		t.Errorf("the gone client's session: %d", status)
	}
	for range 2 {
		dial(t, pt.url, &events{})
	}
	settle(t, pt.g, "idle", 3)
}

// A connection attempt that fails (a server that exits at start, one that
// never answers the handshake) gives its place back, and its process is
// reaped: a route with room for one session still takes the next client.
func TestPassthroughFailedConnectFreesItsPlace(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"exits", []string{"-exit", "2"}, "exited with status 2"},
		// The error says how to raise the limit (toolmux.MCPSourceConfig
		// names the configuration's keys).
		{"hangs", []string{"-hang-init"}, "no MCP handshake within 500ms (connect_timeout is 500ms: raise it)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := routeServer(t, c.name, c.args...)
			srv.ConnectTimeout = 500 * time.Millisecond
			srv.ConnectTimeoutHint = "connect_timeout is 500ms: raise it"
			pt := serveRoute(t, routeServer(t, "manager"), gateway.Route{Server: srv, MaxSessions: 1})
			for range 3 {
				status, _, body := postRPC(t, pt.url, "", rawInitialize)
				e := wireError(t, body)
				if status != http.StatusOK || e == nil || e.Code == gateway.CodeSessionLimit || !strings.Contains(e.Message, c.want) {
					t.Fatalf("%d %s", status, body)
				}
				settle(t, pt.g, c.name, 0)
			}
		})
	}
}

// A request that arrives without a session (the server/discover probe of
// a newer client, a ping, a request before initialize) is answered by the
// gateway in a session the go-sdk makes for it and closes after it: no
// process is started, no place taken, and an initialize still finds one.
func TestPassthroughSessionlessRequests(t *testing.T) {
	pt := serveRoute(t, routeServer(t, "manager"), gateway.Route{Server: routeServer(t, "once"), MaxSessions: 1})
	for _, msg := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`,
		`not JSON`,
	} {
		status, sid, body := postRPC(t, pt.url, "", msg)
		live, _ := serverProcs("once")
		if s := pt.g.PassthroughSessions()[0]; s.Open != 0 || s.Refused != 0 || len(live) != 0 {
			t.Errorf("%s: answered %d %q %s; sessions %+v, processes %v", msg, status, sid, body, s, live)
		}
	}
	cs := dial(t, pt.url, &events{})
	callPID(t, cs)
	settle(t, pt.g, "once", 1)
}

// A session whose server could not be reached keeps no place; when it
// tries again and the route is full meanwhile, it is refused like a new
// client (with the JSON-RPC error, in a 200: the session exists), and
// served once a place is free.
func TestPassthroughRetryWhenFull(t *testing.T) {
	up := startUpstream(t)
	// The server is reached through a proxy that can be told to fail.
	target, err := url.Parse(up.url)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	var down atomic.Bool
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "down for now", http.StatusBadGateway)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	cfg := mcpsource.Config{Name: "fx", Transport: mcpsource.StreamableHTTP, URL: proxy.URL + "/mcp", ConnectTimeout: 5 * time.Second}
	pt := serveRoute(t, mcpsource.Config{Name: "fx", Transport: mcpsource.StreamableHTTP, URL: up.url + "/mcp"}, gateway.Route{Server: cfg, MaxSessions: 1})

	down.Store(true)
	status, sid, body := postRPC(t, pt.url, "", rawInitialize)
	if e := wireError(t, body); status != http.StatusOK || sid == "" || e == nil || !strings.Contains(e.Message, "unavailable") {
		t.Fatalf("rawInitialize while the server is down: %d %q %s", status, sid, body)
	}
	down.Store(false)
	other := dial(t, pt.url, &events{})
	if s := pt.g.PassthroughSessions()[0]; s.Open != 1 {
		t.Fatalf("sessions: %+v", s)
	}
	status, _, body = postRPC(t, pt.url, sid, `{"jsonrpc":"2.0","id":2,"method":"resources/list"}`)
	if e := wireError(t, body); status != http.StatusOK || e == nil || e.Code != gateway.CodeSessionLimit {
		t.Fatalf("the first session again, the route full: %d %s", status, body)
	}
	other.Close()
	ok := testservers.Eventually(10*time.Second, func() bool { return pt.g.PassthroughSessions()[0].Open == 0 })
	if !ok {
		t.Fatalf("sessions: %+v", pt.g.PassthroughSessions())
	}
	status, _, body = postRPC(t, pt.url, sid, `{"jsonrpc":"2.0","id":3,"method":"resources/list"}`)
	if e := wireError(t, body); status != http.StatusOK || e != nil {
		t.Fatalf("the first session, a place free: %d %s", status, body)
	}
	if s := pt.g.PassthroughSessions()[0]; s.Open != 1 || s.Refused != 1 {
		t.Errorf("sessions: %+v", s)
	}
}
