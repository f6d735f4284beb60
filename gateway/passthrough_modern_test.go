package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/mcpsource"
)

// modern is a 2026-07-28 client session: no initialize, the route chosen
// per request.
var modern = &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"}

// A 2026-07-28 client on a route whose server has sessions (2025-11-25):
// the gateway's approval is asked as input_required and answered by the
// client's retry; the server's elicitation and sampling during a call are
// put to the client as input_required while the call waits upstream; its
// progress reaches the client on the request's stream; a list change of
// the server reaches the client's subscriptions/listen.
func TestPassthroughModernClient(t *testing.T) {
	up := startUpstream(t)
	pt := servePassthrough(t, mcpsource.Config{Name: "up", Transport: mcpsource.StreamableHTTP, URL: up.url})
	ev := &events{}
	cs := dialWith(t, &mcp.StreamableClientTransport{Endpoint: pt.url}, ev, "modern-test", modern)
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("the route speaks %s", v)
	}
	if got := cs.InitializeResult().ServerInfo; got == nil || got.Name != "upstream" {
		t.Errorf("server/discover answered the route's identity, not the server's: %+v", got)
	}

	approvalAnswer.Store("once")
	if got := callText(t, cs, "write"); got != "written" {
		t.Errorf("write: %q", got)
	}
	if !ev.read(func(e *events) bool { return len(e.asked) == 1 && strings.HasPrefix(e.asked[0], "toolmux: approve") }) {
		t.Errorf("asked: %q", ev.asked)
	}
	if got := callText(t, cs, "ask"); got != "accept Ada" {
		t.Errorf("ask: %q", got)
	}
	if got := callText(t, cs, "sample"); got != "sampled: a sample" {
		t.Errorf("sample: %q", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A notification sent at the instant of the server's answer may be
	// handled after it (the go-sdk queues notifications, not answers), and
	// a 2026-07-28 client has no standing stream for late ones: the server
	// pauses before answering.
	params := &mcp.CallToolParams{Name: "progress", Arguments: map[string]any{"pause_ms": 50}}
	params.SetProgressToken("tok")
	if _, err := cs.CallTool(ctx, params); err != nil {
		t.Fatal(err)
	}
	if !testservers.Eventually(5*time.Second, func() bool { return ev.read(func(e *events) bool { return len(e.progress) == 3 }) }) {
		t.Errorf("progress: %v", ev.progress)
	}

	if got := callText(t, cs, "add_prompt"); got != "added" {
		t.Errorf("add_prompt: %q", got)
	}
	if !testservers.Eventually(5*time.Second, func() bool { return ev.read(func(e *events) bool { return e.prompts > 0 }) }) {
		t.Error("the server's prompts/list_changed did not reach the client's listen")
	}
	prompts, err := cs.ListPrompts(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range prompts.Prompts {
		names = append(names, p.Name)
	}
	if !strings.Contains(strings.Join(names, ","), "added") {
		t.Errorf("prompts: %v", names)
	}
}

// A route serves at most MaxParked parked calls; one more is cancelled
// with an error naming the key. A parked call unanswered for ParkTimeout
// is withdrawn: its place is free again, and a late retry is told so.
func TestPassthroughParkedBounds(t *testing.T) {
	up := startUpstream(t)
	cfg := mcpsource.Config{Name: "up", Transport: mcpsource.StreamableHTTP, URL: up.url}
	pt := serveRoute(t, cfg, gateway.Route{Server: cfg, MaxParked: 1, ParkTimeout: 200 * time.Millisecond})

	first := modernCall(t, pt.url, "ask", "")
	state, _ := first["requestState"].(string)
	if first["resultType"] != "input_required" || state == "" {
		t.Fatalf("not parked: %v", first)
	}
	// Within the timeout, the one place is taken; after it, free again.
	var second map[string]any
	if !testservers.Eventually(10*time.Second, func() bool {
		second = modernCall(t, pt.url, "ask", "")
		return second["resultType"] == "input_required"
	}) {
		t.Fatalf("the place of a call parked past its timeout was not given back: %v", second)
	}
	late := modernCall(t, pt.url, "ask", state)
	if msg, _ := late["error"].(string); !strings.Contains(msg, "no longer waiting") {
		t.Errorf("a late retry: %v", late)
	}
	// The second call is withdrawn at its timeout too, and the server is
	// told while the link lives. (A route closed with a call still
	// parked tells the server on a best-effort basis only: see
	// docs/gateway.md.)
	if !testservers.Eventually(20*time.Second, func() bool { return up.asking.Load() == 0 }) {
		t.Errorf("%d calls of ask still run upstream after their timeout", up.asking.Load())
	}
}

// When the route is full of other 2026-07-28 clients' links, an idle one
// is ended to make room instead of refusing the new client, whatever its
// protocol.
func TestPassthroughModernLinksMakeRoom(t *testing.T) {
	up := startUpstream(t)
	cfg := mcpsource.Config{Name: "up", Transport: mcpsource.StreamableHTTP, URL: up.url}
	pt := serveRoute(t, cfg, gateway.Route{Server: cfg, MaxSessions: 1})
	for _, name := range []string{"first", "second", "third"} {
		cs := dialWith(t, &mcp.StreamableClientTransport{Endpoint: pt.url}, &events{}, name, modern)
		if got := callText(t, cs, "secret"); got != "secret" {
			t.Errorf("%s: %q", name, got)
		}
	}
	if rs := pt.g.PassthroughSessions(); len(rs) != 1 || rs[0].Open > 1 || rs[0].Refused != 0 {
		t.Errorf("sessions: %+v", rs)
	}
	// A client with a session gets the place too.
	cs := dialWith(t, &mcp.StreamableClientTransport{Endpoint: pt.url}, &events{}, "legacy", legacySession)
	if got := callText(t, cs, "secret"); got != "secret" {
		t.Errorf("legacy: %q", got)
	}
}

// modernCall posts a tools/call of a 2026-07-28 client that declared
// elicitation, as raw HTTP, with state as its requestState (and no
// answers), and returns the result, or {"error": message}.
func modernCall(t *testing.T, url, name, state string) map[string]any {
	t.Helper()
	params := map[string]any{
		"name": name, "arguments": map[string]any{},
		"_meta": map[string]any{
			"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
			"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw", "version": "1"},
			"io.modelcontextprotocol/clientCapabilities": map[string]any{"elicitation": map[string]any{"form": map[string]any{}}},
		},
	}
	if state != "" {
		params["requestState"] = state
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", name)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	raw := string(b)
	for _, line := range strings.Split(raw, "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(d, `"id":1`) {
			raw = d
		}
	}
	var msg struct {
		Result map[string]any `json:"result"`
		Error  *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(raw), &msg); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	if msg.Error != nil {
		return map[string]any{"error": msg.Error.Message}
	}
	if msg.Result == nil {
		t.Fatalf("no result: %s", raw)
	}
	return msg.Result
}

// startModernOnly serves an MCP server that speaks only 2026-07-28
// (stateless): its tools ask by input_required (ask: elicitation, sample:
// sampling) and add a tool (add_tool), a list change for its listeners.
func startModernOnly(t *testing.T) string {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "modern-only", Version: "1"}, &mcp.ServerOptions{SupportedProtocolVersions: []string{"2026-07-28"}})
	type none struct{}
	text := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
	}
	// Read-only: the gateway asks no approval of them.
	ro := &mcp.ToolAnnotations{ReadOnlyHint: true}
	mcp.AddTool(s, &mcp.Tool{Name: "ask", Annotations: ro}, func(_ context.Context, req *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
		if a, ok := req.Params.InputResponses["name"].(*mcp.ElicitResult); ok {
			return text(fmt.Sprintf("%s %v", a.Action, a.Content["name"])), nil, nil
		}
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"name": &mcp.ElicitParams{Message: "your name?",
			RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}}}}, nil, nil
	})
	// Not read-only: the gateway asks an approval first.
	mcp.AddTool(s, &mcp.Tool{Name: "ask_write"}, func(_ context.Context, req *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
		if a, ok := req.Params.InputResponses["name"].(*mcp.ElicitResult); ok {
			return text(fmt.Sprintf("wrote for %v", a.Content["name"])), nil, nil
		}
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"name": &mcp.ElicitParams{Message: "your name?",
			RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "sample", Annotations: ro}, func(_ context.Context, req *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
		if a, ok := req.Params.InputResponses["q"].(*mcp.CreateMessageWithToolsResult); ok && len(a.Content) > 0 {
			if tc, ok := a.Content[0].(*mcp.TextContent); ok {
				return text("sampled: " + tc.Text), nil, nil
			}
		}
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"q": &mcp.CreateMessageParams{MaxTokens: 10,
			Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hello?"}}}}}}, nil, nil
	})
	// caps answers the capabilities the request declared for its client.
	mcp.AddTool(s, &mcp.Tool{Name: "caps", Annotations: ro}, func(_ context.Context, req *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
		b, err := json.Marshal(req.Params.GetMeta()[mcp.MetaKeyClientCapabilities])
		return text(string(b)), nil, err
	})
	// state answers the requestState it was sent.
	mcp.AddTool(s, &mcp.Tool{Name: "state", Annotations: ro}, func(_ context.Context, req *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
		return text("state: " + req.Params.RequestState), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "add_tool", Annotations: ro}, func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, any, error) {
		mcp.AddTool(s, &mcp.Tool{Name: "added"}, func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, any, error) {
			return text("added"), nil, nil
		})
		return text("adding"), nil, nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(hs.Close)
	return hs.URL
}

// A client with a session (2025-11-25) on a route whose server speaks
// only 2026-07-28: the server's input_required questions are asked of the
// client on its session and the call made again with the answers; the
// server's list changes (on the link's subscriptions/listen) reach the
// client's session.
func TestPassthroughLegacyClientModernServer(t *testing.T) {
	url := startModernOnly(t)
	pt := servePassthrough(t, mcpsource.Config{Name: "m", Transport: mcpsource.StreamableHTTP, URL: url})
	var toolsChanged atomic.Int32
	ev := &events{}
	c := mcp.NewClient(&mcp.Implementation{Name: "legacy"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			ev.add(func(e *events) { e.asked = append(e.asked, req.Params.Message) })
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
		},
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: "a sample"}}, nil
		},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { toolsChanged.Add(1) },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: pt.url}, legacySession)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	if got := callText(t, cs, "ask"); got != "accept Ada" {
		t.Errorf("ask: %q", got)
	}
	if !ev.read(func(e *events) bool { return len(e.asked) == 1 && e.asked[0] == "your name?" }) {
		t.Errorf("asked: %q", ev.asked)
	}
	if got := callText(t, cs, "sample"); got != "sampled: a sample" {
		t.Errorf("sample: %q", got)
	}
	if got := callText(t, cs, "add_tool"); got != "adding" {
		t.Errorf("add_tool: %q", got)
	}
	if !testservers.Eventually(5*time.Second, func() bool { return toolsChanged.Load() > 0 }) {
		t.Error("the server's tools/list_changed did not reach the client's session")
	}
}

// A 2026-07-28 client on a route whose server speaks 2026-07-28 too: the
// server's questions and the client's answers cross as they are, after the
// gateway's own approval, which is asked once: its answer rides in the
// gateway's requestState through the server's round.
func TestPassthroughModernApprovalThenServerQuestion(t *testing.T) {
	url := startModernOnly(t)
	pt := servePassthrough(t, mcpsource.Config{Name: "m", Transport: mcpsource.StreamableHTTP, URL: url})
	ev := &events{}
	cs := dialWith(t, &mcp.StreamableClientTransport{Endpoint: pt.url}, ev, "modern-test", modern)
	approvalAnswer.Store("once")
	if got := callText(t, cs, "ask_write"); got != "wrote for Ada" {
		t.Errorf("ask_write: %q", got)
	}
	if !ev.read(func(e *events) bool {
		return len(e.asked) == 2 && strings.HasPrefix(e.asked[0], "toolmux: approve") && e.asked[1] == "your name?"
	}) {
		t.Errorf("asked: %q", ev.asked)
	}
	if got := callText(t, cs, "sample"); got != "sampled: a sample" {
		t.Errorf("sample: %q", got)
	}
}

// 2026-07-28 clients of a stdio server (which speaks 2025-11-25): one
// process per client identity, shared by that identity's requests, ended
// after the route's idle timeout without a request, and by Close.
func TestPassthroughModernStdio(t *testing.T) {
	cfg := mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio, Command: testservers.Fixture(t)}
	pt := serveRoute(t, cfg, gateway.Route{Server: cfg, IdleTimeout: 300 * time.Millisecond})
	pid := func(cs *mcp.ClientSession) int {
		var n int
		if _, err := fmt.Sscan(callText(t, cs, "pid"), &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	a := dialWith(t, &mcp.StreamableClientTransport{Endpoint: pt.url}, &events{}, "a", modern)
	a2 := dialWith(t, &mcp.StreamableClientTransport{Endpoint: pt.url}, &events{}, "a", modern)
	b := dialWith(t, &mcp.StreamableClientTransport{Endpoint: pt.url}, &events{}, "b", modern)
	pa, pa2, pb := pid(a), pid(a2), pid(b)
	if pa != pa2 || pa == pb || pa == 0 {
		t.Fatalf("identities a, a, b got processes %d, %d, %d", pa, pa2, pb)
	}
	if !testservers.Eventually(10*time.Second, func() bool { return testservers.ProcessGone(pa) && testservers.ProcessGone(pb) }) {
		t.Fatalf("processes %d and %d outlived the idle timeout", pa, pb)
	}
	// The next request opens the link again.
	pa3 := pid(a)
	if pa3 == pa || pa3 == 0 {
		t.Errorf("after idling out: process %d", pa3)
	}
	pt.g.Close()
	if !testservers.ProcessGone(pa3) {
		t.Errorf("process %d outlived Close", pa3)
	}
}

// waitEntered waits for the gated tool want to reach the server, first
// of those not yet waited for.
func (u *upstream) waitEntered(t *testing.T, ctx context.Context, want string) {
	t.Helper()
	select {
	case got := <-u.entered:
		if got != want {
			t.Fatalf("%s reached the server, want %s", got, want)
		}
	case <-ctx.Done():
		t.Fatalf("%s did not reach the server", want)
	}
}

// sharedLinkClients connects two 2026-07-28 clients of one identity,
// so of one shared link, to a passthrough route of a new upstream.
func sharedLinkClients(t *testing.T) (up *upstream, a, b *mcp.ClientSession, evA, evB *events) {
	t.Helper()
	up = startUpstream(t)
	pt := servePassthrough(t, mcpsource.Config{Name: "up", Transport: mcpsource.StreamableHTTP, URL: up.url})
	evA, evB = &events{}, &events{}
	a = dialWith(t, &mcp.StreamableClientTransport{Endpoint: pt.url}, evA, "same", modern)
	b = dialWith(t, &mcp.StreamableClientTransport{Endpoint: pt.url}, evB, "same", modern)
	return up, a, b, evA, evB
}

// On a link shared by 2026-07-28 clients, a server on an older protocol
// does not say which call its request comes from: with two calls in
// flight, its question is refused rather than put to whichever call came
// last (here another client's), and the other call goes on untouched.
func TestPassthroughSharedLinkServerRequest(t *testing.T) {
	up, a, b, evA, evB := sharedLinkClients(t)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type answer struct {
		text string
		err  error
	}
	call := func(cs *mcp.ClientSession, name string) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name})
			if err != nil {
				ch <- answer{err: err}
				return
			}
			ch <- answer{text: testservers.ResultText(res)}
		}()
		return ch
	}
	entered := func(want string) { t.Helper(); up.waitEntered(t, ctx, want) }
	gotA := call(a, "ask_gated")
	entered("ask_gated")
	gotB := call(b, "hold")
	entered("hold")
	close(up.gate) // ask_gated elicits now

	var resA answer
	select {
	case resA = <-gotA:
	case <-ctx.Done():
		t.Fatal("ask_gated did not end")
	}
	if resA.err != nil || !strings.HasPrefix(resA.text, "not asked: ") || !strings.Contains(resA.text, "2 requests") {
		t.Errorf("ask_gated: %+v, want its question refused", resA)
	}
	close(up.release)
	select {
	case resB := <-gotB:
		if resB.err != nil || resB.text != "held" {
			t.Errorf("hold: %+v", resB)
		}
	case <-ctx.Done():
		t.Fatal("hold did not end")
	}
	for name, ev := range map[string]*events{"a": evA, "b": evB} {
		if !ev.read(func(e *events) bool { return len(e.asked) == 0 }) {
			t.Errorf("client %s was asked %q", name, ev.asked)
		}
	}
	// Alone on the link, a call's question reaches its client.
	if got := callText(t, a, "ask"); got != "accept Ada" {
		t.Errorf("ask alone: %q", got)
	}
}

// Two clients on a shared link may use the same progress token: each
// call's progress reaches its own client only.
func TestPassthroughSharedLinkProgressTokens(t *testing.T) {
	up, a, b, evA, evB := sharedLinkClients(t)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	call := func(cs *mcp.ClientSession, name string, args map[string]any) {
		p := &mcp.CallToolParams{Name: name, Arguments: args}
		p.SetProgressToken("tok")
		go func() {
			_, err := cs.CallTool(ctx, p)
			errs <- err
		}()
	}
	entered := func(want string) { t.Helper(); up.waitEntered(t, ctx, want) }
	// The pause keeps a's progress from racing its answer (see
	// TestPassthroughModernClient).
	call(a, "progress_gated", map[string]any{"pause_ms": 50})
	entered("progress_gated")
	call(b, "hold", nil)
	entered("hold")
	close(up.gate)
	if !testservers.Eventually(10*time.Second, func() bool { return evA.read(func(e *events) bool { return len(e.progress) == 3 }) }) {
		t.Errorf("a's progress: %v", evA.progress)
	}
	close(up.release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if !evB.read(func(e *events) bool { return len(e.progress) == 0 }) {
		t.Errorf("b got a's progress: %v", evB.progress)
	}
}

// A 2026-07-28 client's subscriptions/listen on a passthrough route is
// ended by BeginShutdown (it would never end by itself, and a shutdown
// waits for the POSTs in flight), and one opened after it is refused.
func TestPassthroughListenEndsAtShutdown(t *testing.T) {
	up := startUpstream(t)
	pt := servePassthrough(t, mcpsource.Config{Name: "up", Transport: mcpsource.StreamableHTTP, URL: up.url})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	listen := func() *http.Response {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": map[string]any{
			"_meta": map[string]any{
				"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
				"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw", "version": "1"},
				"io.modelcontextprotocol/clientCapabilities": map[string]any{},
			},
			"notifications": map[string]any{"toolsListChanged": true},
		}})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, pt.url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", "subscriptions/listen")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	resp := listen()
	// The acknowledgement: the stream is open.
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() && !strings.Contains(lines.Text(), "notifications/subscriptions/acknowledged") {
	}
	if lines.Err() != nil || ctx.Err() != nil {
		t.Fatalf("no acknowledgement: %v %v", lines.Err(), ctx.Err())
	}
	ended := make(chan struct{})
	go func() {
		for lines.Scan() {
		}
		close(ended)
	}()
	pt.g.BeginShutdown()
	select {
	case <-ended:
	case <-ctx.Done():
		t.Fatal("the listen stream outlived BeginShutdown")
	}
	b, err := io.ReadAll(listen().Body)
	if err != nil || !strings.Contains(string(b), "shutting down") {
		t.Errorf("a listen opened while stopping: %q %v", b, err)
	}
}

// A passthrough route offers no tasks and its links follow none, so the
// tasks extension a client declares is not declared to the server: not at
// the link's handshake, for a client with a session or without, nor in the
// _meta of a 2026-07-28 client's request to a server on 2026-07-28. The
// client's other capabilities go upstream as they were.
func TestPassthroughDeclaresNoTasksUpstream(t *testing.T) {
	legacy := startUpstream(t).url
	modernURL := startModernOnly(t)
	for _, tc := range []struct {
		name, url string
		opts      *mcp.ClientSessionOptions
	}{
		{"2025 client, 2025 server", legacy, legacySession},
		{"2026 client, 2025 server", legacy, modern},
		{"2026 client, 2026 server", modernURL, modern},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pt := servePassthrough(t, mcpsource.Config{Name: "up", Transport: mcpsource.StreamableHTTP, URL: tc.url})
			caps := &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{}}
			caps.AddExtension(gateway.TasksExtension, nil)
			caps.AddExtension("example.com/other", nil)
			c := mcp.NewClient(&mcp.Implementation{Name: "tasks-client"}, &mcp.ClientOptions{Capabilities: caps})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: pt.url}, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cs.Close() })
			var got struct {
				Elicitation map[string]any `json:"elicitation"`
				Extensions  map[string]any `json:"extensions"`
			}
			text := callText(t, cs, "caps")
			if err := json.Unmarshal([]byte(text), &got); err != nil {
				t.Fatalf("%q: %v", text, err)
			}
			if _, ok := got.Extensions[gateway.TasksExtension]; ok || got.Elicitation == nil || got.Extensions["example.com/other"] == nil {
				t.Errorf("the server was told %s", text)
			}
		})
	}
}

// A requestState the gateway did not issue: to a server on 2025-11-25,
// which has none of its own, it is refused (-32602, naming
// requestState), on tools/call as on prompts/get; to a server on
// 2026-07-28 it is the server's to judge, and reaches it as it was sent.
// One with the gateway's prefix that does not verify is refused on both.
func TestPassthroughForeignState(t *testing.T) {
	legacy := servePassthrough(t, mcpsource.Config{Name: "up", Transport: mcpsource.StreamableHTTP, URL: startUpstream(t).url})
	if res := modernCall(t, legacy.url, "parts", ""); res["error"] != nil {
		t.Fatalf("without a state: %v", res)
	}
	for _, state := range []string{"garbage", "toolmux1.forged.sig"} {
		res := modernCall(t, legacy.url, "parts", state)
		if msg, _ := res["error"].(string); !strings.Contains(msg, "requestState") || !strings.Contains(msg, "not one the gateway issued") {
			t.Errorf("%q to a 2025-11-25 server: %v", state, res)
		}
	}
	status, m := post2026(t, legacy.url, "prompts/get", "greet",
		map[string]any{"name": "greet", "arguments": map[string]any{"who": "Ada"}, "requestState": "garbage"})
	if e, _ := m["error"].(map[string]any); status != http.StatusBadRequest || e == nil || e["code"] != float64(-32602) ||
		!strings.Contains(fmt.Sprint(e["message"]), "requestState") {
		t.Errorf("prompts/get with a state to a 2025-11-25 server: %d %v", status, m)
	}

	modern := servePassthrough(t, mcpsource.Config{Name: "up", Transport: mcpsource.StreamableHTTP, URL: startModernOnly(t)})
	res := modernCall(t, modern.url, "state", "the server's own")
	if content, _ := res["content"].([]any); len(content) != 1 || content[0].(map[string]any)["text"] != "state: the server's own" {
		t.Errorf("a state to a 2026-07-28 server: %v", res)
	}
	res = modernCall(t, modern.url, "state", "toolmux1.forged.sig")
	if msg, _ := res["error"].(string); !strings.Contains(msg, "not one the gateway issued") {
		t.Errorf("a forged state of the gateway's to a 2026-07-28 server: %v", res)
	}
}

// What a 2026-07-28 client declares in a request's _meta (its version,
// identity, capabilities, log level) does not reach a server the route
// speaks an older protocol with, whichever way the call goes upstream (a
// stdio server's calls are written on the pipe by the gateway, not by
// the go-sdk's client, whose middleware strips them on other requests):
// such a server would take the call as one of the newer protocol. The
// rest of the _meta goes as the client sent it.
func TestPassthroughModernMetaToOlderServers(t *testing.T) {
	stdio := mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio, Command: testservers.Fixture(t), Args: []string{"-trace-context"}}
	pt := serveRoute(t, stdio, gateway.Route{Server: stdio})
	for _, opts := range []*mcp.ClientSessionOptions{modern, {ProtocolVersion: "2025-11-25"}} {
		cs := dialWith(t, &mcp.StreamableClientTransport{Endpoint: pt.url}, &events{}, "keys", opts)
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "trace_context", Meta: mcp.Meta{"x-test": "kept"}})
		if err != nil || res.IsError {
			t.Fatalf("%v %+v", err, res)
		}
		var tc testservers.TraceContext
		if err := json.Unmarshal([]byte(testservers.ResultText(res)), &tc); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(tc.MetaKeys, []string{"x-test"}) {
			t.Errorf("a stdio server on 2025-11-25 got the _meta keys %v from a client on %s", tc.MetaKeys, cs.InitializeResult().ProtocolVersion)
		}
	}
}
