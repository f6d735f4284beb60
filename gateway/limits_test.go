package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/api"
	"github.com/toolmux/toolmux/funcsource"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/ratelimit"
)

// limitsGateway is a gateway behind the callers of ts, with the limits
// of lim, serving /mcp, a virtual server v (fx/*), a passthrough route up
// (the fixture server) and the API. fx__sink counts its calls; fx__block
// says it started on started, then waits for release to be closed.
type limitsGateway struct {
	url     string
	calls   atomic.Int64
	started chan struct{}
	release chan struct{}
	// sessions are the 2025-11-25 sessions opened by call, by route and
	// token: a session is its caller's own.
	sessions map[string]string
}

func newLimitsGateway(t *testing.T, ts tokens, lim *ratelimit.Limiter) *limitsGateway {
	t.Helper()
	lg := &limitsGateway{started: make(chan struct{}, 4), release: make(chan struct{})}
	sink := funcsource.Func("sink", "Takes data.", func(context.Context, struct{}) (string, error) {
		lg.calls.Add(1)
		return "sunk", nil
	})
	block := funcsource.Func("block", "Waits.", func(ctx context.Context, _ struct{}) (string, error) {
		lg.started <- struct{}{}
		select {
		case <-lg.release:
			return "released", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	up, err := mcpsource.New(mcpsource.Config{Name: "up", Transport: mcpsource.Stdio, Command: testservers.Fixture(t)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(funcsource.New("fx", sink, block), manager.ServerOptions{}), manager.WithSource(up, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(m, gateway.Options{Limits: lim,
		API:         api.New(api.Options{Catalog: m, Caller: m, Limits: lim}),
		Virtual:     []gateway.Virtual{{Name: "v", Tools: []string{"fx/*"}}},
		Passthrough: []gateway.Route{{Server: mcpsource.Config{Name: "up", Transport: mcpsource.Stdio, Command: testservers.Fixture(t)}}}})
	srv := httptest.NewServer(g.MuxAuth(gateway.Auth{Verifier: ts, Audiences: []string{testAudience}}, gateway.Security{Loopback: true}))
	t.Cleanup(func() {
		srv.Close()
		g.Close()
		m.Close()
	})
	lg.url = srv.URL
	return lg
}

// testAudience is the audience of the tokens of limitsGateway's callers.
const testAudience = "https://gw.example"

// jwtCaller is the caller of a token of subject sub named name.
func jwtCaller(sub, name string, groups ...string) *identity.Caller {
	return &identity.Caller{Subject: sub, Name: name, Groups: groups, Method: identity.MethodJWT, Audience: []string{testAudience}}
}

// session opens a session of protocol 2025-11-25 on route as the caller
// of token.
func (lg *limitsGateway) session(t *testing.T, route, token string) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t"}, nil).Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: lg.url + route, HTTPClient: &http.Client{Transport: bearerTransport(token)}}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("a session of %s as %s: %v", route, token, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// limitedAnswer is the answer to one call: its HTTP status and
// Retry-After, and its JSON-RPC result or error (the API's error).
type limitedAnswer struct {
	status     int
	retryAfter string
	body       string
	result     json.RawMessage
	err        *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    struct {
			Kind       string `json:"kind"`
			Limit      string `json:"limit"`
			Group      string `json:"group"`
			RetryAfter int    `json:"retry_after"`
		} `json:"data"`
	}
	apiErr *struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
	}
}

// callCase is a way a tool call reaches the gateway: a route and an era,
// or the API.
type callCase struct {
	name   string
	route  string // "" for the API
	tool   string // as the route names it
	modern bool
}

// sessionID returns the id of the caller of token's 2025-11-25 session of
// route, opening it the first time.
func (lg *limitsGateway) sessionID(t *testing.T, route, token string) string {
	t.Helper()
	key := route + "\x00" + token
	if id, ok := lg.sessions[key]; ok {
		return id
	}
	if lg.sessions == nil {
		lg.sessions = map[string]string{}
	}
	lg.sessions[key] = lg.session(t, route, token).ID()
	return lg.sessions[key]
}

// call makes one call of c as the caller of token.
func (lg *limitsGateway) call(t *testing.T, c callCase, token string) limitedAnswer {
	t.Helper()
	url, body := lg.url+c.route, ""
	header := http.Header{"Authorization": {"Bearer " + token}, "Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}}
	switch {
	case c.route == "":
		url, body = lg.url+"/api/tools/fx/"+c.tool+"/call", `{"arguments": {}}`
	case c.modern:
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": map[string]any{"name": c.tool, "arguments": map[string]any{}, "_meta": modernMeta}})
		body = string(b)
		header.Set("Mcp-Protocol-Version", "2026-07-28")
		header.Set("Mcp-Method", "tools/call")
		header.Set("Mcp-Name", c.tool)
	default:
		body = fmt.Sprintf(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":%q,"arguments":{}}}`, c.tool)
		header.Set("Mcp-Session-Id", lg.sessionID(t, c.route, token))
		header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header = header
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := limitedAnswer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(b)}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		for line := range strings.SplitSeq(string(b), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(d, `"id":9`) {
				b = []byte(d)
			}
		}
	}
	var m struct {
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %d %q", c.name, resp.StatusCode, b)
	}
	switch {
	case c.route == "" && resp.StatusCode >= 400:
		_ = json.Unmarshal(m.Error, &a.apiErr)
	case c.route == "":
		a.result = b
	case m.Error != nil:
		_ = json.Unmarshal(m.Error, &a.err)
	default:
		a.result = m.Result
	}
	return a
}

// admitted reports whether a is the answer of a call made (whatever the
// tool answered).
func (a limitedAnswer) admitted() bool {
	return a.status == http.StatusOK && a.result != nil && a.err == nil && a.apiErr == nil
}

// A group's limit is one budget for all its members: a call over it is
// refused before it is made, on /mcp, a virtual server and a passthrough
// route in both protocol eras and on the API, with the status of the
// era (200 for a session's request, 429 for a 2026-07-28 one and the
// API), a Retry-After of the seconds until the budget has a call again,
// and the error's kind, limit and group; a caller outside the group is
// not held to it. A real client of a session gets the JSON-RPC error.
func TestGroupRateLimitOnEveryRoute(t *testing.T) {
	cases := []callCase{
		{name: "/mcp 2025-11-25", route: "/mcp", tool: "fx__sink"},
		{name: "/mcp 2026-07-28", route: "/mcp", tool: "fx__sink", modern: true},
		{name: "virtual 2025-11-25", route: "/virtual/v/mcp", tool: "fx__sink"},
		{name: "virtual 2026-07-28", route: "/virtual/v/mcp", tool: "fx__sink", modern: true},
		{name: "passthrough 2025-11-25", route: "/servers/up/mcp", tool: "echo"},
		{name: "passthrough 2026-07-28", route: "/servers/up/mcp", tool: "echo", modern: true},
		{name: "API", tool: "sink"},
	}
	// A group per case, whose budget is one call a minute (so each case
	// starts with a full one), with two members: ai and bi.
	ts := tokens{"free": jwtCaller("u-free", "free")}
	groups := map[string]ratelimit.Limit{}
	for i := range cases {
		g := fmt.Sprint("team", i)
		groups[g] = ratelimit.Limit{CallsPerMinute: 1}
		for _, member := range []string{"a", "b"} {
			ts[fmt.Sprint(member, i)] = jwtCaller(fmt.Sprint("u-", member, i), fmt.Sprint(member, i), "dev", g)
		}
	}
	lim := ratelimit.New(ratelimit.Options{Groups: groups})
	lg := newLimitsGateway(t, ts, lim)
	for i, c := range cases {
		before := lg.calls.Load()
		if a := lg.call(t, c, fmt.Sprint("a", i)); !a.admitted() {
			t.Errorf("%s: the group's first call: %d %.300s", c.name, a.status, a.body)
			continue
		}
		a := lg.call(t, c, fmt.Sprint("b", i))
		wantStatus := http.StatusTooManyRequests
		if c.route != "" && !c.modern {
			wantStatus = http.StatusOK
		}
		secs, err := strconv.Atoi(a.retryAfter)
		if a.status != wantStatus || err != nil || secs < 1 || secs > 60 {
			t.Errorf("%s: another member's call over the budget: %d, Retry-After %q: %.300s", c.name, a.status, a.retryAfter, a.body)
		}
		switch {
		case c.route == "":
			if a.apiErr == nil || a.apiErr.Kind != "rate_limited" || !strings.Contains(a.apiErr.Message, fmt.Sprintf("group %q", fmt.Sprint("team", i))) {
				t.Errorf("%s: the API's error: %.300s", c.name, a.body)
			}
		case a.err == nil || a.err.Code != gateway.CodeRateLimited || a.err.Data.Kind != "rate_limited" || a.err.Data.Limit != "calls_per_minute" ||
			a.err.Data.Group != fmt.Sprint("team", i) || strconv.Itoa(a.err.Data.RetryAfter) != a.retryAfter ||
			!strings.Contains(a.err.Message, "rate_limits.groups.team"+strconv.Itoa(i)+".calls_per_minute"):
			t.Errorf("%s: the JSON-RPC error: %.400s", c.name, a.body)
		}
		// A caller outside the group goes on.
		if a := lg.call(t, c, "free"); !a.admitted() {
			t.Errorf("%s: a caller outside the group: %d %.300s", c.name, a.status, a.body)
		}
		if c.tool != "echo" {
			if got := lg.calls.Load() - before; got != 2 {
				t.Errorf("%s: the tool ran %d times, want 2 (the refused call not made)", c.name, got)
			}
		}
	}
	// A real client of a session: the error, with its code and data.
	cs := lg.session(t, "/mcp", "b0")
	_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "fx__sink", Arguments: map[string]any{}})
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != gateway.CodeRateLimited || !bytes.Contains(rpcErr.Data, []byte(`"kind":"rate_limited"`)) {
		t.Errorf("the go-sdk client: %v", err)
	}
	// Counted under bounded labels: callers not configured, not keys,
	// are "other".
	st := lim.Stats()
	if len(st.Calls) != 1 || st.Calls[0].Caller != "other" || len(st.Refused) != len(cases) {
		t.Errorf("stats: %+v", st)
	}
	for _, r := range st.Refused {
		if r.Caller != "other" || !strings.HasPrefix(r.Group, "team") || r.Limit != "calls_per_minute" {
			t.Errorf("refusal counted as %+v", r)
		}
	}
}

// Calls in flight: a caller's call while its limit's worth run is refused
// at once (Retry-After 1), on every route kind, another caller's goes on,
// and once the first ends the caller's next call is made.
func TestConcurrentLimit(t *testing.T) {
	lim := ratelimit.New(ratelimit.Options{PerCaller: ratelimit.Limit{Concurrent: 1}})
	ts := tokens{
		"ann": {Subject: identity.KeySubject("ann"), Name: "ann", Method: identity.MethodKey},
		"bob": {Subject: identity.KeySubject("bob"), Name: "bob", Method: identity.MethodKey},
	}
	lg := newLimitsGateway(t, ts, lim)
	cs := lg.session(t, "/mcp", "ann")
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "fx__block", Arguments: map[string]any{}})
		done <- err
	}()
	select {
	case <-lg.started:
	case err := <-done:
		t.Fatalf("the slow call ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the slow call did not start")
	}
	lg.sessions = map[string]string{"/mcp\x00ann": cs.ID()}
	cases := []callCase{
		{name: "/mcp 2025-11-25", route: "/mcp", tool: "fx__sink"},
		{name: "/mcp 2026-07-28", route: "/mcp", tool: "fx__sink", modern: true},
		{name: "passthrough 2026-07-28", route: "/servers/up/mcp", tool: "echo", modern: true},
		{name: "API", tool: "sink"},
	}
	for _, c := range cases {
		a := lg.call(t, c, "ann")
		if a.admitted() || a.retryAfter != "1" {
			t.Errorf("%s: a second call in flight: %d, Retry-After %q: %.300s", c.name, a.status, a.retryAfter, a.body)
		}
		if c.route != "" && (a.err == nil || a.err.Data.Limit != "concurrent" || a.err.Data.Group != "" || a.err.Data.RetryAfter != 1) {
			t.Errorf("%s: %.300s", c.name, a.body)
		}
		if a := lg.call(t, c, "bob"); !a.admitted() {
			t.Errorf("%s: another caller: %d %.300s", c.name, a.status, a.body)
		}
	}
	close(lg.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if a := lg.call(t, cases[0], "ann"); !a.admitted() {
		t.Errorf("after the slow call ended: %d %.300s", a.status, a.body)
	}
	want := []ratelimit.CallerCalls{{Caller: "ann", Calls: 2}, {Caller: "bob", Calls: uint64(len(cases))}}
	if st := lim.Stats(); fmt.Sprint(st.Calls) != fmt.Sprint(want) {
		t.Errorf("calls by caller: %+v, want %+v", st.Calls, want)
	}
}

// Without authentication, over stdio, there is one caller, held to
// per_caller: its call over the limit is a JSON-RPC error with the
// limit's data, and the tool does not run.
func TestStdioRateLimit(t *testing.T) {
	var calls atomic.Int64
	sink := funcsource.Func("sink", "Takes data.", func(context.Context, struct{}) (string, error) {
		calls.Add(1)
		return "sunk", nil
	})
	m, err := manager.New(manager.WithSource(funcsource.New("fx", sink), manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(m, gateway.Options{Limits: ratelimit.New(ratelimit.Options{PerCaller: ratelimit.Limit{CallsPerMinute: 1}})})
	// Closed after the stdio session ends (cleanups run last first).
	t.Cleanup(func() {
		g.Close()
		m.Close()
	})
	stdio := stdioClient(t, g, 4000)
	send := func(line string) map[string]any {
		t.Helper()
		var m map[string]any
		if err := json.Unmarshal([]byte(stdio(line)), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	call := `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"fx__sink","arguments":{}}}`
	if a := send(fmt.Sprintf(call, 2)); a["result"] == nil {
		t.Fatalf("the first call: %v", a)
	}
	a := send(fmt.Sprintf(call, 3))
	e, _ := a["error"].(map[string]any)
	data, _ := e["data"].(map[string]any)
	if e["code"] != float64(gateway.CodeRateLimited) || data["kind"] != "rate_limited" || data["limit"] != "calls_per_minute" ||
		data["retry_after"] == nil || !strings.Contains(fmt.Sprint(e["message"]), `caller "anonymous"`) {
		t.Errorf("the second call: %v", a)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the tool ran %d times, want 1", n)
	}
}
