package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/internal/testservers"
)

// legacyProtocol is the newest protocol with sessions: the go-sdk's
// client asks for 2026-07-28 unless told otherwise.
const legacyProtocol = "2025-11-25"

// eras are the protocol eras every MCP route speaks: sessions
// (2025-11-25) and requests that stand alone (2026-07-28).
var eras = []string{legacyProtocol, "2026-07-28"}

// inEachEra runs f as a subtest of t per protocol era.
func inEachEra(t *testing.T, f func(t *testing.T, era string)) {
	t.Helper()
	for _, era := range eras {
		t.Run(era, func(t *testing.T) { f(t, era) })
	}
}

// dialEra connects a client of impl with opts to the MCP endpoint url
// over streamable HTTP, in protocol era ("" leaves it to the client,
// which asks for 2026-07-28), and checks it speaks that era. The session
// is closed when the test ends.
func dialEra(t *testing.T, url, era string, impl *mcp.Implementation, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var so *mcp.ClientSessionOptions
	if era != "" {
		so = &mcp.ClientSessionOptions{ProtocolVersion: era}
	}
	cs, err := mcp.NewClient(impl, opts).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, so)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	if v := cs.InitializeResult().ProtocolVersion; era != "" && v != era {
		t.Fatalf("the client speaks %s, want %s", v, era)
	}
	return cs
}

// connect2026 connects a client of protocol 2026-07-28 (no session: each
// request carries its _meta) named name to route.
func (a *approvalsGateway) connect2026(t *testing.T, name, route string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	return dialEra(t, a.url+route, "2026-07-28", &mcp.Implementation{Name: name, Version: "2.0"}, opts)
}

// A 2026-07-28 client is served on /mcp without falling back, beside a
// 2025-11-25 session; its calls belong to the task of its identity on the
// route (one task for all its calls), which ends after the idle timeout
// without a call, and is started again by the next call.
func TestSessionlessClientTask(t *testing.T) {
	a := newApprovalsGateway(t, time.Minute, 500*time.Millisecond)
	old := a.connectHTTP(t, "old", nil)
	cs := a.connect2026(t, "modern", "/mcp", nil)
	// A fresh params each time: the go-sdk's client writes its _meta into
	// the params it is given.
	list := func() *mcp.CallToolParams {
		return &mcp.CallToolParams{Name: "builtin__list_directory", Arguments: map[string]any{"path": "."}}
	}
	for _, c := range []*mcp.ClientSession{cs, cs, old} {
		res, err := c.CallTool(context.Background(), list())
		if err != nil || res.IsError {
			t.Fatalf("%v %+v", err, res)
		}
	}
	s, ok := a.sessions.session("modern")
	if !ok || !s.Sessionless || s.Route != "/mcp" || s.ClientVersion != "2.0" || s.Protocol != "2026-07-28" || s.Task == "" {
		t.Fatalf("task of the sessionless client: %+v %v", s, ok)
	}
	o, _ := a.sessions.session("old")
	if got := a.calls.all(); len(got) != 3 || got[0] != s.Task || got[1] != s.Task || got[2] != o.Task || o.Sessionless {
		t.Fatalf("the calls' tasks: %v, want %s %s %s", got, s.Task, s.Task, o.Task)
	}
	waitEnd(t, a.sessions, s.Task, gateway.EndIdle)
	if _, err := cs.CallTool(context.Background(), list()); err != nil {
		t.Fatal(err)
	}
	if got := a.calls.all(); got[3] == s.Task || got[3] == "" {
		t.Fatalf("a call after the task ended has task %q", got[3])
	}
	last := a.calls.all()[3]
	a.g.Close()
	waitEnd(t, a.sessions, last, gateway.EndShutdown)
}

// post2026 posts one request of protocol 2026-07-28 (its _meta, its
// standard headers) and returns the HTTP status and the answer: the
// JSON-RPC message, the last one of an event stream.
func post2026(t *testing.T, url, method, name string, params map[string]any) (int, map[string]any) {
	t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	params["_meta"] = map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"elicitation": map[string]any{}},
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw", "version": "1"},
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	b = lastMessage(resp.Header.Get("Content-Type"), b)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %d %q", method, resp.StatusCode, b)
	}
	return resp.StatusCode, m
}

// lastMessage is the JSON-RPC message an answer of content type ct
// carries: the body itself, or the last data line of an event stream.
func lastMessage(ct string, b []byte) []byte {
	if !strings.HasPrefix(ct, "text/event-stream") {
		return b
	}
	var last string
	for line := range strings.SplitSeq(string(b), "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			last = data
		}
	}
	return []byte(last)
}

// On the wire: tools/list carries the caching hints (public, stale at
// once) and the same tools in the same order, sorted by name, every time,
// to both eras; an approval is a result of resultType input_required; a
// method /mcp does not serve is 404 to the new protocol.
func TestSessionlessWire(t *testing.T) {
	a := newApprovalsGateway(t, time.Minute, 0)
	var orders [][]string
	for range 3 {
		status, m := post2026(t, a.url+"/mcp", "tools/list", "", nil)
		res, _ := m["result"].(map[string]any)
		if status != http.StatusOK || res == nil || res["ttlMs"] != float64(0) || res["cacheScope"] != "public" || res["resultType"] != "complete" {
			t.Fatalf("tools/list: %d %v", status, m)
		}
		var names []string
		for _, tl := range res["tools"].([]any) {
			names = append(names, tl.(map[string]any)["name"].(string))
		}
		if len(names) < 5 || !slices.IsSorted(names) {
			t.Fatalf("tools/list order: %v", names)
		}
		orders = append(orders, names)
	}
	old := a.connectHTTP(t, "old", nil)
	lt, err := old.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var oldNames []string
	for _, tl := range lt.Tools {
		oldNames = append(oldNames, tl.Name)
	}
	if !slices.Equal(orders[0], orders[1]) || !slices.Equal(orders[0], orders[2]) || !slices.Equal(orders[0], oldNames) {
		t.Fatalf("the lists differ: %v", append(orders, oldNames))
	}

	status, m := post2026(t, a.url+"/mcp", "tools/call", "builtin__write_file",
		map[string]any{"name": "builtin__write_file", "arguments": map[string]any{"path": "w.txt", "content": "x"}})
	res, _ := m["result"].(map[string]any)
	if status != http.StatusOK || res == nil || res["resultType"] != "input_required" || res["inputRequests"] == nil || a.written("w.txt") {
		t.Fatalf("a call to approve: %d %v", status, m)
	}
	for _, q := range res["inputRequests"].(map[string]any) {
		if q.(map[string]any)["method"] != "elicitation/create" {
			t.Fatalf("the question: %v", q)
		}
	}

	status, m = post2026(t, a.url+"/mcp", "prompts/list", "", nil)
	if e, _ := m["error"].(map[string]any); status != http.StatusNotFound || e == nil || e["code"] != float64(-32601) || m["id"] != float64(7) {
		t.Fatalf("prompts/list on /mcp: %d %v", status, m)
	}
}

// A 2026-07-28 client's subscriptions/listen stream gets the list
// changes, and is ended by BeginShutdown (it would never end by itself,
// and a shutdown waits for the POSTs in flight).
func TestSessionlessListenEndsAtShutdown(t *testing.T) {
	a := newApprovalsGateway(t, time.Minute, 0)
	a.connect2026(t, "listener", "/mcp", &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {}})
	open := func() int {
		n := 0
		for range a.g.Server().Sessions() {
			n++
		}
		return n
	}
	if !testservers.Eventually(10*time.Second, func() bool { return open() == 1 }) {
		t.Fatalf("%d sessions open, want the listen stream's", open())
	}
	a.g.BeginShutdown()
	if !testservers.Eventually(10*time.Second, func() bool { return open() == 0 }) {
		t.Fatalf("%d sessions open after BeginShutdown", open())
	}
}
