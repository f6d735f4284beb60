package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/tool"
)

// upstream is an MCP server written for these tests, over streamable HTTP:
// every feature the passthrough route forwards, in both directions.
type upstream struct {
	url          string
	writes       atomic.Int32
	rootsChanged atomic.Int32
	asking       atomic.Int32 // calls of ask running
	cancelled    chan string
	// entered gets the name of a gated tool (ask_gated, progress_gated,
	// hold) or of slow when its call has reached the server; gate lets
	// ask_gated and progress_gated go on, release lets hold answer.
	entered chan string
	gate    chan struct{}
	release chan struct{}
}

func startUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{cancelled: make(chan string, 4), entered: make(chan string, 4), gate: make(chan struct{}), release: make(chan struct{})}
	s := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "9.9"}, &mcp.ServerOptions{
		Instructions: "upstream instructions",
		CompletionHandler: func(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{req.Params.Argument.Value + "-completed"}}}, nil
		},
		RootsListChangedHandler: func(context.Context, *mcp.RootsListChangedRequest) { u.rootsChanged.Add(1) },
		SubscribeHandler:        func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler:      func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	ro := &mcp.ToolAnnotations{ReadOnlyHint: true}
	type none struct{}
	textResult := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
	}
	mcp.AddTool(s, &mcp.Tool{Name: "parts", Annotations: ro}, func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, any, error) {
		size := int64(3)
		return &mcp.CallToolResult{
			Meta: mcp.Meta{"upstream/meta": "kept"},
			Content: []mcp.Content{
				&mcp.TextContent{Text: "one", Annotations: &mcp.Annotations{Priority: 0.5}},
				&mcp.ImageContent{Data: []byte{1, 2, 3}, MIMEType: "image/png"},
				&mcp.AudioContent{Data: []byte{4, 5}, MIMEType: "audio/wav"},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "test://r", MIMEType: "text/plain", Text: "embedded"}},
				&mcp.ResourceLink{URI: "test://l", Name: "l", Size: &size},
			},
			StructuredContent: map[string]any{"answer": 42},
		}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "sample", Annotations: ro}, func(ctx context.Context, req *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 10,
			Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hello?"}}}})
		if err != nil {
			return nil, nil, err
		}
		return textResult("sampled: " + res.Content.(*mcp.TextContent).Text), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "ask", Annotations: ro}, func(ctx context.Context, req *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
		u.asking.Add(1)
		defer u.asking.Add(-1)
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "your name?", RequestedSchema: map[string]any{
			"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}})
		if err != nil {
			return nil, nil, err
		}
		return textResult(fmt.Sprintf("%s %v", res.Action, res.Content["name"])), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "roots", Annotations: ro}, func(ctx context.Context, req *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.ListRoots(ctx, nil)
		if err != nil {
			return nil, nil, err
		}
		var uris []string
		for _, r := range res.Roots {
			uris = append(uris, r.URI)
		}
		return textResult(strings.Join(uris, ",")), nil, nil
	})
	// log and progress answer pause_ms after their last notification.
	type pause struct {
		PauseMS int `json:"pause_ms,omitempty"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "log", Annotations: ro}, func(ctx context.Context, req *mcp.CallToolRequest, in pause) (*mcp.CallToolResult, any, error) {
		for _, m := range []string{"first", "second"} {
			_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "up", Data: m})
		}
		time.Sleep(time.Duration(in.PauseMS) * time.Millisecond)
		return textResult("logged"), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "progress", Annotations: ro}, func(ctx context.Context, req *mcp.CallToolRequest, in pause) (*mcp.CallToolResult, any, error) {
		for i := range 3 {
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: float64(i + 1), Total: 3})
		}
		time.Sleep(time.Duration(in.PauseMS) * time.Millisecond)
		return textResult("done"), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "slow", Annotations: ro}, func(ctx context.Context, _ *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
		u.entered <- "slow"
		select {
		case <-ctx.Done():
			u.cancelled <- "slow"
			return nil, nil, ctx.Err()
		case <-time.After(30 * time.Second):
			return textResult("too late"), nil, nil
		}
	})
	// The gated tools let a test have calls in flight at once, in an order
	// of its choosing.
	mcp.AddTool(s, &mcp.Tool{Name: "ask_gated", Annotations: ro}, func(ctx context.Context, req *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
		u.entered <- "ask_gated"
		select {
		case <-u.gate:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "your name?", RequestedSchema: map[string]any{
			"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}})
		if err != nil {
			return textResult("not asked: " + err.Error()), nil, nil
		}
		return textResult(fmt.Sprintf("%s %v", res.Action, res.Content["name"])), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "progress_gated", Annotations: ro}, func(ctx context.Context, req *mcp.CallToolRequest, in pause) (*mcp.CallToolResult, any, error) {
		u.entered <- "progress_gated"
		select {
		case <-u.gate:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		for i := range 3 {
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: float64(i + 1), Total: 3})
		}
		time.Sleep(time.Duration(in.PauseMS) * time.Millisecond)
		return textResult("done"), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "hold", Annotations: ro}, func(ctx context.Context, _ *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
		u.entered <- "hold"
		select {
		case <-u.release:
			return textResult("held"), nil, nil
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	})
	// caps answers the capabilities the gateway declared for its client.
	mcp.AddTool(s, &mcp.Tool{Name: "caps", Annotations: ro}, func(_ context.Context, req *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
		b, err := json.Marshal(req.Session.InitializeParams().Capabilities)
		return textResult(string(b)), nil, err
	})
	mcp.AddTool(s, &mcp.Tool{Name: "touch", Annotations: ro}, func(ctx context.Context, _ *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
		_ = s.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: "test://watched"})
		return textResult("touched"), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "add_prompt", Annotations: ro}, func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, any, error) {
		s.AddPrompt(&mcp.Prompt{Name: "added"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{}}, nil
		})
		return textResult("added"), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "write"}, func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, any, error) {
		u.writes.Add(1)
		return textResult("written"), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "secret", Annotations: ro}, func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, any, error) {
		return textResult("secret"), nil, nil
	})
	s.AddTool(&mcp.Tool{Name: "reject", Annotations: ro, InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "rejected on purpose"}
	})
	read := func(text string) mcp.ResourceHandler {
		return func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: text}}}, nil
		}
	}
	s.AddResource(&mcp.Resource{Name: "static", URI: "test://static", MIMEType: "text/plain"}, read("static text"))
	s.AddResource(&mcp.Resource{Name: "watched", URI: "test://watched", MIMEType: "text/plain"}, read("watched text"))
	s.AddResourceTemplate(&mcp.ResourceTemplate{Name: "item", URITemplate: "test://item/{id}"}, read("an item"))
	s.AddPrompt(&mcp.Prompt{Name: "greet", Arguments: []*mcp.PromptArgument{{Name: "who", Required: true}}},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "hello " + req.Params.Arguments["who"]}}}}, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(hs.Close)
	u.url = hs.URL
	return u
}

// chain is toolmux serve's Caller: the pipeline's catalog, calls through
// the scheduler (policy, approval) and the pipeline (records).
type chain struct {
	*pipeline.Pipeline
	s *schedule.Scheduler
}

func (c chain) Call(ctx context.Context, call tool.Call) *tool.Record { return c.s.Call(ctx, call) }

type passthrough struct {
	url     string // of the route
	base    string // of the gateway
	g       *gateway.Gateway
	mu      sync.Mutex
	records []*tool.Record
	refused []gateway.RouteSessions // as reported to OnSessionRefused
}

func (p *passthrough) reports() []gateway.RouteSessions {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.refused)
}

func (p *passthrough) recorded() []*tool.Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.records)
}

// servePassthrough serves the server of cfg behind the whole governed chain
// in default approval mode, asking approvals through elicitation, and
// returns the URL of its passthrough route.
func servePassthrough(t *testing.T, cfg mcpsource.Config, deny ...string) *passthrough {
	t.Helper()
	return serveRoute(t, cfg, gateway.Route{Server: cfg}, deny...)
}

// serveRoute is servePassthrough for a route of its own: the manager
// reaches the server with cfg, the route's sessions with rt.Server.
func serveRoute(t *testing.T, cfg mcpsource.Config, rt gateway.Route, deny ...string) *passthrough {
	t.Helper()
	src, err := mcpsource.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{Deny: deny}))
	if err != nil {
		t.Fatal(err)
	}
	pt := &passthrough{}
	p, err := pipeline.New(m, pipeline.WithRecorder(pipeline.RecorderFunc(func(_ context.Context, rec *tool.Record) {
		pt.mu.Lock()
		pt.records = append(pt.records, rec)
		pt.mu.Unlock()
	})))
	if err != nil {
		t.Fatal(err)
	}
	engine, err := policy.New(policy.ModeDefault, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := schedule.New(p, schedule.WithGate(policy.NewGate(engine, policy.WithApprover(gateway.ElicitApprover{}))))
	pt.g = gateway.New(chain{p, s}, gateway.Options{Passthrough: []gateway.Route{rt}, OnSessionRefused: func(rs gateway.RouteSessions) {
		pt.mu.Lock()
		pt.refused = append(pt.refused, rs)
		pt.mu.Unlock()
	}})
	hs := httptest.NewServer(pt.g.Mux("", gateway.Security{Loopback: true}))
	t.Cleanup(func() {
		pt.g.Close()
		hs.Close()
		m.Close()
	})
	pt.base = hs.URL
	pt.url = hs.URL + "/servers/" + rt.Server.Name + "/mcp"
	return pt
}

// events is what a client of the route receives.
type events struct {
	client   *mcp.Client
	mu       sync.Mutex
	logs     []string
	progress []float64
	updated  []string
	prompts  int
	asked    []string
}

func (e *events) add(f func(*events)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f(e)
}

func (e *events) read(f func(*events) bool) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return f(e)
}

// approvalAnswer is how the test client's user answers toolmux's approval
// questions.
var approvalAnswer atomic.Value

// legacySession has a client open a session (protocol 2025-11-25): the
// go-sdk's client asks for 2026-07-28 by default, which a passthrough route
// serves without sessions (passthrough_modern_test.go).
var legacySession = &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}

func dial(t *testing.T, url string, ev *events) *mcp.ClientSession {
	t.Helper()
	return dialOver(t, &mcp.StreamableClientTransport{Endpoint: url}, ev)
}

func dialOver(t *testing.T, transport mcp.Transport, ev *events) *mcp.ClientSession {
	t.Helper()
	return dialWith(t, transport, ev, "passthrough-test", legacySession)
}

// dialWith is dialOver with a client name and session options of its own.
func dialWith(t *testing.T, transport mcp.Transport, ev *events, name string, opts *mcp.ClientSessionOptions) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: name}, &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: "a sample"}}, nil
		},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			ev.add(func(e *events) { e.asked = append(e.asked, req.Params.Message) })
			if strings.HasPrefix(req.Params.Message, "toolmux: approve") {
				// "deny" is the form's "No": a person's answer however
				// soon it comes (a decline at once is a headless
				// client's, approve.go).
				d, _ := approvalAnswer.Load().(string)
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": d}}, nil
			}
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
		},
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			ev.add(func(e *events) { e.logs = append(e.logs, fmt.Sprint(req.Params.Data)) })
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			if req.Params.ProgressToken == "tok" {
				ev.add(func(e *events) { e.progress = append(e.progress, req.Params.Progress) })
			}
		},
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			ev.add(func(e *events) { e.updated = append(e.updated, req.Params.URI) })
		},
		PromptListChangedHandler: func(context.Context, *mcp.PromptListChangedRequest) {
			ev.add(func(e *events) { e.prompts++ })
		},
	})
	c.AddRoots(&mcp.Root{URI: "file:///work", Name: "work"})
	ev.client = c
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, transport, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func callText(t *testing.T, cs *mcp.ClientSession, name string) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		t.Fatalf("%s: error result %s", name, testservers.ResultText(res))
	}
	return testservers.ResultText(res)
}

// Everything between a client and the server crosses the route: the
// handshake, tools under their own names (denied ones hidden), the
// server's requests to the client, its notifications, resources, prompts,
// completion, logging, progress and ping.
func TestPassthroughForwardsEverything(t *testing.T) {
	up := startUpstream(t)
	pt := servePassthrough(t, mcpsource.Config{Name: "up", Transport: mcpsource.StreamableHTTP, URL: up.url + "/mcp"}, "secret")
	ev := &events{}
	cs := dial(t, pt.url, ev)
	ctx := context.Background()

	ir := cs.InitializeResult()
	if ir.ServerInfo.Name != "upstream" || ir.Instructions != "upstream instructions" {
		t.Errorf("handshake: %+v %q", ir.ServerInfo, ir.Instructions)
	}
	c := ir.Capabilities
	if c.Tools == nil || c.Prompts == nil || c.Resources == nil || !c.Resources.Subscribe || c.Completions == nil || c.Logging == nil {
		t.Errorf("capabilities: %+v", c)
	}

	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	if !slices.Contains(names, "parts") || !slices.Contains(names, "write") || slices.Contains(names, "secret") || slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, "__") }) {
		t.Errorf("tools: %v", names)
	}

	// The result is the server's, every part of it.
	direct, err := mcp.NewClient(&mcp.Implementation{Name: "direct"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: up.url + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := direct.CallTool(ctx, &mcp.CallToolParams{Name: "parts"})
	direct.Close()
	if err != nil {
		t.Fatal(err)
	}
	got, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "parts"})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := mustJSON(t, want), mustJSON(t, got); a != b {
		t.Errorf("result changed on the way:\n%s\n%s", a, b)
	}

	// The server's requests reach this client, and its answers go back.
	if s := callText(t, cs, "sample"); s != "sampled: a sample" {
		t.Errorf("sampling: %q", s)
	}
	if s := callText(t, cs, "ask"); s != "accept Ada" {
		t.Errorf("elicitation: %q", s)
	}
	if s := callText(t, cs, "roots"); s != "file:///work" {
		t.Errorf("roots: %q", s)
	}
	ev.client.AddRoots(&mcp.Root{URI: "file:///more", Name: "more"})
	if !testservers.Eventually(5*time.Second, func() bool { return up.rootsChanged.Load() > 0 }) {
		t.Error("roots/list_changed did not reach the server")
	}
	if s := callText(t, cs, "roots"); s != "file:///more,file:///work" {
		t.Errorf("roots after the change: %q", s)
	}

	// Notifications: log messages at the level the client set, progress
	// under the client's token, list changes.
	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	callText(t, cs, "log")
	params := &mcp.CallToolParams{Name: "progress"}
	params.SetProgressToken("tok")
	if _, err := cs.CallTool(ctx, params); err != nil {
		t.Fatal(err)
	}
	callText(t, cs, "add_prompt")
	ok := testservers.Eventually(5*time.Second, func() bool {
		return ev.read(func(e *events) bool { return len(e.logs) == 2 && len(e.progress) == 3 && e.prompts > 0 })
	})
	if !ok {
		ev.read(func(e *events) bool {
			t.Errorf("logs %v, progress %v, prompt list changes %d", e.logs, e.progress, e.prompts)
			return true
		})
	}

	// Resources, and updates for this client's subscriptions only.
	lr, err := cs.ListResources(ctx, nil)
	if err != nil || len(lr.Resources) != 2 {
		t.Fatalf("resources: %v %+v", err, lr)
	}
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://item/7"})
	if err != nil || rr.Contents[0].Text != "an item" {
		t.Fatalf("read: %v %+v", err, rr)
	}
	lt, err := cs.ListResourceTemplates(ctx, nil)
	if err != nil || len(lt.ResourceTemplates) != 1 || lt.ResourceTemplates[0].URITemplate != "test://item/{id}" {
		t.Fatalf("templates: %v %+v", err, lt)
	}
	_, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://missing"})
	var wire *jsonrpc.Error
	if !errors.As(err, &wire) || wire.Code != mcp.CodeResourceNotFound || !strings.Contains(string(wire.Data), "test://missing") {
		t.Errorf("the server's error, as it was: %v", err)
	}
	other := &events{}
	cs2 := dial(t, pt.url, other)
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "test://watched"}); err != nil {
		t.Fatal(err)
	}
	callText(t, cs2, "touch")
	ok = testservers.Eventually(5*time.Second, func() bool {
		return ev.read(func(e *events) bool { return slices.Contains(e.updated, "test://watched") })
	})
	if !ok {
		t.Error("the subscriber was not told of the update")
	}
	if other.read(func(e *events) bool { return len(e.updated) > 0 }) {
		t.Error("a client that did not subscribe was told of the update")
	}
	if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: "test://watched"}); err != nil {
		t.Fatal(err)
	}

	// Prompts and completion.
	gp, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "greet", Arguments: map[string]string{"who": "you"}})
	if err != nil || gp.Messages[0].Content.(*mcp.TextContent).Text != "hello you" {
		t.Fatalf("prompt: %v %+v", err, gp)
	}
	cr, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "greet"}, Argument: mcp.CompleteParamsArgument{Name: "who", Value: "y"}})
	if err != nil || !slices.Equal(cr.Completion.Values, []string{"y-completed"}) {
		t.Fatalf("completion: %v %+v", err, cr)
	}
	if err := cs.Ping(ctx, nil); err != nil {
		t.Errorf("ping: %v", err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Tool calls on the route are governed like those on /mcp: denied tools
// are unknown, approvals are asked of the client, every call is recorded
// under the server's and the tool's own names, and the server's JSON-RPC
// errors reach the client as they were.
func TestPassthroughGovernsToolCalls(t *testing.T) {
	up := startUpstream(t)
	pt := servePassthrough(t, mcpsource.Config{Name: "up", Transport: mcpsource.StreamableHTTP, URL: up.url + "/mcp"}, "secret")
	ev := &events{}
	cs := dial(t, pt.url, ev)
	ctx := context.Background()

	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "secret"})
	var wire *jsonrpc.Error
	if !errors.As(err, &wire) || wire.Code != jsonrpc.CodeInvalidParams || !strings.Contains(wire.Message, "unknown tool") {
		t.Errorf("denied tool: %v", err)
	}

	approvalAnswer.Store("deny")
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "write"})
	if err != nil || !res.IsError || !strings.Contains(testservers.ResultText(res), "denied") || up.writes.Load() != 0 {
		t.Fatalf("declined: %v %s, %d writes", err, testservers.ResultText(res), up.writes.Load())
	}
	approvalAnswer.Store("once")
	if s := callText(t, cs, "write"); s != "written" || up.writes.Load() != 1 {
		t.Fatalf("approved: %q, %d writes", s, up.writes.Load())
	}
	if n := ev.read(func(e *events) bool { return len(e.asked) == 2 }); !n {
		ev.read(func(e *events) bool { t.Errorf("questions: %q", e.asked); return true })
	}

	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "reject"})
	if !errors.As(err, &wire) || wire.Code != jsonrpc.CodeInvalidParams || wire.Message != "rejected on purpose" {
		t.Errorf("the server's error: %v", err)
	}

	var seen []string
	for _, rec := range pt.recorded() {
		seen = append(seen, rec.Server+"/"+rec.Tool)
	}
	for _, want := range []string{"up/write", "up/reject"} {
		if !slices.Contains(seen, want) {
			t.Errorf("%s not recorded: %v", want, seen)
		}
	}
}

// What the server sends about a request (its questions, log messages and
// progress during a call) goes on the stream of the client's request, so a
// client that opens no stream of its own gets it too. (Notifications sent
// at the very moment of the server's answer can come after the gateway's,
// on the client's own stream: hence the pause.)
func TestPassthroughRelatesToTheRequest(t *testing.T) {
	up := startUpstream(t)
	pt := servePassthrough(t, mcpsource.Config{Name: "up", Transport: mcpsource.StreamableHTTP, URL: up.url + "/mcp"})
	ev := &events{}
	cs := dialOver(t, &mcp.StreamableClientTransport{Endpoint: pt.url, DisableStandaloneSSE: true}, ev)
	ctx := context.Background()
	if s := callText(t, cs, "sample"); s != "sampled: a sample" {
		t.Errorf("sampling: %q", s)
	}
	if s := callText(t, cs, "ask"); s != "accept Ada" {
		t.Errorf("elicitation: %q", s)
	}
	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "log", Arguments: map[string]any{"pause_ms": 50}}); err != nil {
		t.Fatal(err)
	}
	params := &mcp.CallToolParams{Name: "progress", Arguments: map[string]any{"pause_ms": 50}}
	params.SetProgressToken("tok")
	if _, err := cs.CallTool(ctx, params); err != nil {
		t.Fatal(err)
	}
	ok := testservers.Eventually(5*time.Second, func() bool {
		return ev.read(func(e *events) bool { return len(e.logs) == 2 && len(e.progress) == 3 })
	})
	if !ok {
		ev.read(func(e *events) bool { t.Errorf("logs %v, progress %v", e.logs, e.progress); return true })
	}
}

// A client that gives up on a call cancels it at the server.
func TestPassthroughCancellation(t *testing.T) {
	up := startUpstream(t)
	pt := servePassthrough(t, mcpsource.Config{Name: "up", Transport: mcpsource.StreamableHTTP, URL: up.url + "/mcp"})
	cs := dial(t, pt.url, &events{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow"})
		errc <- err
	}()
	// The client gives up once the call is at the server, so it is the
	// cancellation, not the call, that has to travel.
	wait, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	up.waitEntered(t, wait, "slow")
	cancel()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("the call was not cancelled")
		}
	case <-wait.Done():
		t.Fatal("the cancelled call never ended")
	}
	select {
	case <-up.cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the server never saw the cancellation")
	}
}

// Close does not wait for calls in flight: it cancels them, at the server
// too.
func TestPassthroughCloseDuringCall(t *testing.T) {
	up := startUpstream(t)
	pt := servePassthrough(t, mcpsource.Config{Name: "up", Transport: mcpsource.StreamableHTTP, URL: up.url + "/mcp"})
	cs := dial(t, pt.url, &events{})
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "slow"})
		errc <- err
	}()
	wait, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	up.waitEntered(t, wait, "slow")
	closed := make(chan struct{})
	go func() {
		pt.g.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the call")
	}
	select {
	case <-up.cancelled:
	case <-time.After(10 * time.Second):
		t.Error("the server's handler was not cancelled")
	}
	select {
	case <-errc:
	case <-time.After(10 * time.Second):
		t.Error("the client's call never ended")
	}
}

// A stdio server runs one process per client session, which ends with the
// session, and Close ends the rest.
func TestPassthroughStdioProcessPerSession(t *testing.T) {
	pt := servePassthrough(t, mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio, Command: testservers.Fixture(t)})
	pid := func(cs *mcp.ClientSession) int {
		var n int
		if _, err := fmt.Sscan(callText(t, cs, "pid"), &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	a, b := dial(t, pt.url, &events{}), dial(t, pt.url, &events{})
	pa, pb := pid(a), pid(b)
	if pa == pb || pa == 0 {
		t.Fatalf("two sessions, processes %d and %d", pa, pb)
	}
	if pid(a) != pa {
		t.Error("a session's calls went to another process")
	}
	a.Close()
	if !testservers.Eventually(10*time.Second, func() bool { return testservers.ProcessGone(pa) }) {
		t.Errorf("process %d outlived its session", pa)
	}
	if testservers.ProcessGone(pb) {
		t.Fatal("closing one session ended another's process")
	}
	pt.g.Close()
	if !testservers.ProcessGone(pb) {
		t.Errorf("process %d outlived Close", pb)
	}
}

// An unknown server gets a 404 saying which servers have a route; the
// token is checked first.
func TestPassthroughRoutes(t *testing.T) {
	g := gateway.New(chain{}, gateway.Options{Passthrough: []gateway.Route{{Server: mcpsource.Config{Name: "up", Transport: mcpsource.StreamableHTTP, URL: "http://127.0.0.1:1/mcp"}}}})
	defer g.Close()
	hs := httptest.NewServer(g.Mux("sekret", gateway.Security{Loopback: true}))
	defer hs.Close()
	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, hs.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/servers/nope/mcp", ""); code != http.StatusUnauthorized {
		t.Errorf("without the token: %d", code)
	}
	code, body := get("/servers/nope/mcp", "sekret")
	var rpc struct {
		Error struct {
			Code    int
			Message string
		}
	}
	if err := json.Unmarshal([]byte(body), &rpc); err != nil {
		t.Fatalf("unknown server: not a JSON-RPC error: %q", body)
	}
	msg := rpc.Error.Message
	if code != http.StatusNotFound || rpc.Error.Code != -32000 || !strings.Contains(msg, `"nope"`) || !strings.Contains(msg, "up") || !strings.Contains(msg, "/mcp only") {
		t.Errorf("unknown server: %d %q", code, body)
	}
	if code, body := get("/", "sekret"); code != http.StatusOK || !strings.Contains(body, "/servers/up/mcp") {
		t.Errorf("index: %d %q", code, body)
	}
}

// A server that cannot be reached, or dies at start, fails the client's
// initialize with an error that names it and says why.
func TestPassthroughServerDown(t *testing.T) {
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", testservers.FreePort(t))
	for _, c := range []struct {
		cfg  mcpsource.Config
		want []string
	}{
		{mcpsource.Config{Name: "down", Transport: mcpsource.StreamableHTTP, URL: url, ConnectTimeout: 5 * time.Second},
			[]string{"server down is unavailable"}},
		{mcpsource.Config{Name: "broken", Transport: mcpsource.Stdio, Command: testservers.Fixture(t), Args: []string{"-exit", "2"}},
			[]string{"server broken is unavailable", "exited with status 2", "FIXTURE_API_KEY is not set"}},
	} {
		pt := servePassthrough(t, c.cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: pt.url}, legacySession)
		cancel()
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want %q", c.cfg.Name, err, w)
			}
		}
	}
}

// A session the client DELETEd is gone for every request after the
// DELETE's answer, on the passthrough route, /mcp and a virtual server
// alike (serve --stdio has no DELETE: its session ends with its pipe): those the
// gateway answers itself (tools/list, ping, tools/call) as well as those
// the go-sdk does. The gateway learned that the session ended only once
// the go-sdk had closed it, after the DELETE's answer: a request in
// between was answered (the conformance suite's
// server-session-terminated-returns-404, now and then).
func TestDeletedSessionIsGoneAtOnce(t *testing.T) {
	up := startUpstream(t)
	pt := servePassthrough(t, mcpsource.Config{Name: "up", Transport: mcpsource.StreamableHTTP, URL: up.url})
	post := func(url, sid, body string) (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", legacyProtocol)
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return res, string(b)
	}
	// A virtual server's route, on a gateway of the fixture.
	_, vbase := fixtureGateway(t, gateway.Options{Virtual: []gateway.Virtual{{Name: "v", Tools: []string{"fx/echo"}}}}, manager.ServerOptions{})
	for _, url := range []string{pt.url, pt.base + "/mcp", vbase + "/virtual/v/mcp"} {
		for _, method := range []string{"tools/list", "ping", "tools/call"} {
			// Many times: the window was short.
			for i := range 20 {
				res, body := post(url, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+legacyProtocol+`","capabilities":{},"clientInfo":{"name":"deleter","version":"1"}}}`)
				sid := res.Header.Get("Mcp-Session-Id")
				if sid == "" {
					t.Fatalf("%s: no session: %d %s", url, res.StatusCode, body)
				}
				if res, body := post(url, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); res.StatusCode/100 != 2 {
					t.Fatalf("initialized: %d %s", res.StatusCode, body)
				}
				del, _ := http.NewRequest(http.MethodDelete, url, nil)
				del.Header.Set("Mcp-Session-Id", sid)
				del.Header.Set("Mcp-Protocol-Version", legacyProtocol)
				dres, err := http.DefaultClient.Do(del)
				if err != nil {
					t.Fatal(err)
				}
				dres.Body.Close()
				if dres.StatusCode/100 != 2 {
					t.Fatalf("DELETE: %d", dres.StatusCode)
				}
				params := `{}`
				if method == "tools/call" {
					params = `{"name":"up__echo","arguments":{}}`
					if strings.Contains(url, "/virtual/") {
						params = `{"name":"fx__echo","arguments":{"message":"m"}}`
					}
				}
				if res, body := post(url, sid, `{"jsonrpc":"2.0","id":2,"method":"`+method+`","params":`+params+`}`); res.StatusCode != http.StatusNotFound {
					t.Fatalf("%s %s #%d after DELETE: %d %s, want 404", url, method, i, res.StatusCode, body)
				}
			}
		}
	}
}
