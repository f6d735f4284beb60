package main_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/internal/testservers"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes every
// ExportTraceServiceRequest posted to /v1/traces and keeps the spans.
type otlpReceiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
	// services are the service.name of the resources exported.
	services map[string]bool
	// raw are the request bodies as posted (protobuf, not compressed).
	raw [][]byte
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{services: map[string]bool{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "unexpected "+req.URL.Path+" "+req.Header.Get("Content-Type"), http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var in collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.raw = append(r.raw, body)
		for _, rs := range in.ResourceSpans {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					r.services[kv.GetValue().GetStringValue()] = true
				}
			}
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// env is the environment that sends a toolmux process's spans here,
// flushed every 100ms.
func (r *otlpReceiver) env() []string {
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + r.srv.URL, "OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_SERVICE_NAME=toolmux-test"}
}

// bodies returns every request body posted so far, as posted.
func (r *otlpReceiver) bodies() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.raw)
}

// span waits for the span named name (and, when parent is not nil, its
// child) and returns it.
func (r *otlpReceiver) span(t *testing.T, name string, parent *tracepb.Span) *tracepb.Span {
	t.Helper()
	var found *tracepb.Span
	if !testservers.Eventually(20*time.Second, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, s := range r.spans {
			if s.Name == name && (parent == nil || string(s.ParentSpanId) == string(parent.SpanId)) {
				found = s
				return true
			}
		}
		return false
	}) {
		r.mu.Lock()
		var names []string
		for _, s := range r.spans {
			names = append(names, s.Name)
		}
		r.mu.Unlock()
		t.Fatalf("no span %q among %q", name, names)
	}
	return found
}

// attr returns a span's attribute as a string ("" when absent).
func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			if v, ok := kv.GetValue().GetValue().(*commonpb.AnyValue_IntValue); ok {
				return fmt.Sprint(v.IntValue)
			}
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

// checkChild fails unless child's parent is parent, in parent's trace.
func checkChild(t *testing.T, parent, child *tracepb.Span) {
	t.Helper()
	if hex.EncodeToString(child.TraceId) != hex.EncodeToString(parent.TraceId) || hex.EncodeToString(child.ParentSpanId) != hex.EncodeToString(parent.SpanId) {
		t.Errorf("span %q (trace %x, parent %x) is not a child of %q (trace %x, span %x)",
			child.Name, child.TraceId, child.ParentSpanId, parent.Name, parent.TraceId, parent.SpanId)
	}
}

// TestServeTraces: a client's call through a real `toolmux serve` process
// with OTEL_EXPORTER_OTLP_ENDPOINT set is one trace, from the traceparent
// the client sent in _meta to the upstream server's request: the
// gateway's server span (child of the client's span), the call's
// execute_tool span, the upstream tools/call client span; and the
// upstream servers received that span's trace context, in _meta over
// stdio and streamable HTTP and in the HTTP headers too.
func TestServeTraces(t *testing.T) {
	t.Parallel()
	recv := startOTLPReceiver(t)
	upstream := testservers.StartFixtureHTTP(t, "-trace-context")
	dir := workspace(t, fmt.Sprintf(`servers:
  web:
    url: %s
    trust: true
  local:
    command: %s
    args: ["-trace-context"]
    trust: true
`, upstream, testservers.Fixture(t)))
	p := startServeEnv(t, binary, dir, "", recv.env())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := p.connect(t, ctx)
	defer cs.Close()

	// Requests without params have spans too (and do not take the
	// gateway down).
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := cs.Ping(ctx, nil); err != nil {
		t.Fatal(err)
	}
	recv.span(t, "tools/list", nil)
	recv.span(t, "ping", nil)

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	for i, name := range []string{"web__trace_context", "local__trace_context"} {
		clientSpan := fmt.Sprintf("00f067aa0ba902b%d", i)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{},
			Meta: mcp.Meta{"traceparent": "00-" + traceID + "-" + clientSpan + "-01", "tracestate": "vendor=x"}})
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %+v", name, err, res)
		}
		var got testservers.TraceContext
		if err := json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &got); err != nil {
			t.Fatal(err)
		}

		server := recv.span(t, "tools/call "+name, nil)
		if hex.EncodeToString(server.TraceId) != traceID || hex.EncodeToString(server.ParentSpanId) != clientSpan {
			t.Errorf("%s: gateway span in trace %x under %x, want the client's %s under %s", name, server.TraceId, server.ParentSpanId, traceID, clientSpan)
		}
		if server.Kind != tracepb.Span_SPAN_KIND_SERVER || attr(server, "mcp.method.name") != "tools/call" || attr(server, "mcp.session.id") == "" ||
			attr(server, "enduser.id") != "" { // no authentication: no caller
			t.Errorf("%s: gateway span %v %v", name, server.Kind, server.Attributes)
		}
		tool := strings.TrimPrefix(strings.TrimPrefix(name, "web__"), "local__")
		exec := recv.span(t, "execute_tool "+tool, server)
		checkChild(t, server, exec)
		if attr(exec, "gen_ai.operation.name") != "execute_tool" || attr(exec, "gen_ai.tool.name") != tool ||
			attr(exec, "gen_ai.tool.call.id") == "" || attr(exec, "toolmux.outcome.kind") != "success" || attr(exec, "toolmux.attempts") != "1" {
			t.Errorf("%s: execute_tool span attributes %v", name, exec.Attributes)
		}
		up := recv.span(t, "tools/call "+tool, exec)
		checkChild(t, exec, up)
		if up.Kind != tracepb.Span_SPAN_KIND_CLIENT {
			t.Errorf("%s: upstream span kind %v", name, up.Kind)
		}
		// The server received the upstream span's context.
		want := fmt.Sprintf("00-%s-%x-01", traceID, up.SpanId)
		if got.Meta != want {
			t.Errorf("%s: the server's _meta traceparent is %q, want %q", name, got.Meta, want)
		}
		if i == 0 && got.Header != want {
			t.Errorf("%s: the server's traceparent header is %q, want %q", name, got.Header, want)
		}
	}

	// A client that sends its trace context in the HTTP headers only.
	const headerSpan = "00f067aa0ba902c0"
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("Traceparent", "00-"+traceID+"-"+headerSpan+"-01")
		return http.DefaultTransport.RoundTrip(r)
	})}
	hcs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.url("/mcp"), HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer hcs.Close()
	if res, err := hcs.CallTool(ctx, &mcp.CallToolParams{Name: "web__echo", Arguments: map[string]any{"message": "hi"}}); err != nil || res.IsError {
		t.Fatalf("web__echo: %v %+v", err, res)
	}
	server := recv.span(t, "tools/call web__echo", nil)
	if hex.EncodeToString(server.TraceId) != traceID || hex.EncodeToString(server.ParentSpanId) != headerSpan {
		t.Errorf("header-only client: gateway span in trace %x under %x, want %s under %s", server.TraceId, server.ParentSpanId, traceID, headerSpan)
	}
	checkChild(t, recv.span(t, "execute_tool echo", server), recv.span(t, "tools/call echo", recv.span(t, "execute_tool echo", server)))

	// A client on protocol 2025-11-25, whose tools/call the gateway
	// answers itself (lean.go), by hand over HTTP.
	post := func(sid, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.url("/mcp"), strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"old","version":"1"}}}`)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	sid := resp.Header.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatalf("initialize: %s, no session", resp.Status)
	}
	resp = post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	resp.Body.Close()
	const leanSpan = "00f067aa0ba902d0"
	resp = post(sid, `{"jsonrpc":"2.0","id":"lean-1","method":"tools/call","params":{"name":"local__echo","arguments":{"message":"hi"},"_meta":{"traceparent":"00-`+traceID+`-`+leanSpan+`-01"}}}`)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "Echo: hi") {
		t.Fatalf("lean tools/call: %s %s", resp.Status, body)
	}
	lean := recv.span(t, "tools/call local__echo", nil)
	if hex.EncodeToString(lean.ParentSpanId) != leanSpan || attr(lean, "jsonrpc.request.id") != `"lean-1"` || attr(lean, "mcp.session.id") != sid {
		t.Errorf("lean call's gateway span: parent %x, attributes %v", lean.ParentSpanId, lean.Attributes)
	}
	leanExec := recv.span(t, "execute_tool echo", lean)
	recv.span(t, "tools/call echo", leanExec)

	recv.mu.Lock()
	defer recv.mu.Unlock()
	if !recv.services["toolmux-test"] {
		t.Errorf("service names %v: OTEL_SERVICE_NAME not applied", recv.services)
	}
}

// TestRunTraces: `toolmux run` with OTEL_EXPORTER_OTLP_ENDPOINT set sends
// an invoke_agent span with the run's token usage, a chat span per model
// request (its tokens) and the turn's execute_tool span under it; and the
// model server received each request with the traceparent of its chat
// span.
func TestRunTraces(t *testing.T) {
	t.Parallel()
	recv := startOTLPReceiver(t)
	dir := workspace(t, "")
	m := llmtest.OpenAI(t, llmtest.Replies(
		llmtest.Reply{Calls: []llmtest.Call{{Name: "builtin__read_file", Args: `{"path": "notes.txt"}`}}},
		llmtest.Reply{Content: "alpha, beta, gamma"},
	))
	r := runToolmux(t, dir, recv.env(), "run", "--model", "scripted", "--base-url", m.BaseURL(), "What is in notes.txt?")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	// run exits after flushing its spans: they are all there.
	run := recv.span(t, "invoke_agent main", nil)
	if attr(run, "gen_ai.operation.name") != "invoke_agent" || attr(run, "gen_ai.usage.input_tokens") != "30" ||
		attr(run, "gen_ai.usage.output_tokens") != "10" || attr(run, "toolmux.agent.status") != "answered" {
		t.Errorf("invoke_agent attributes: %v", run.Attributes)
	}
	recv.mu.Lock()
	var chats []*tracepb.Span
	for _, s := range recv.spans {
		if s.Name == "chat scripted" {
			chats = append(chats, s)
		}
	}
	recv.mu.Unlock()
	if len(chats) != 2 {
		t.Fatalf("%d chat spans, want 2", len(chats))
	}
	reqs := m.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests", len(reqs))
	}
	for i, c := range chats {
		checkChild(t, run, c)
		if attr(c, "gen_ai.operation.name") != "chat" || attr(c, "gen_ai.request.model") != "scripted" ||
			attr(c, "gen_ai.provider.name") != "openai" || attr(c, "gen_ai.usage.output_tokens") != "5" || attr(c, "gen_ai.usage.input_tokens") == "" {
			t.Errorf("chat span %d attributes: %v", i, c.Attributes)
		}
	}
	// Each request carried the traceparent of one of the chat spans.
	want := map[string]bool{}
	for _, c := range chats {
		want[fmt.Sprintf("00-%x-%x-01", c.TraceId, c.SpanId)] = true
	}
	for i, q := range reqs {
		if tp := q.Header.Get("Traceparent"); !want[tp] {
			t.Errorf("model request %d has traceparent %q, want one of %v", i, tp, want)
		}
	}
	exec := recv.span(t, "execute_tool read_file", run)
	if attr(exec, "toolmux.server") != "builtin" || attr(exec, "toolmux.outcome.kind") != "success" {
		t.Errorf("execute_tool attributes: %v", exec.Attributes)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
