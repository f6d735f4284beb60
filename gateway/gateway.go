// Package gateway serves toolmux's governed catalog as an MCP server, so any
// MCP client connects once and gets every configured server's tools under
// their exposed names (server__tool) at /mcp (or over stdio), each call
// going through the scheduler, the policy, the pipeline and the manager.
// Over HTTP it also serves virtual servers (/virtual/{name}/mcp: the tools
// a configuration picks, renamed), and each configured MCP server on a
// passthrough route of its own, /servers/{name}/mcp: that server's tools
// under their own names, still governed, and everything else of MCP
// forwarded between the client and the server.
//
// Every route speaks both protocol eras: 2025-11-25 sessions and
// sessionless 2026-07-28 requests, which differ only at the edge (lean.go,
// modern.go: the gateway reads tools/call, tools/list, server/discover and
// ping itself; everything else goes to the go-sdk's handlers). Around the
// call: approvals asked of whoever can answer now (approve.go), MCP tasks
// (tasks.go), re-issued requests answered from their first execution
// (reissue.go), who calls and what they may see (auth.go, callers.go,
// owners.go), limits and bounds (limits.go, bounds.go, listens.go), and
// the web page and API. docs/gateway.md describes it; docs/design.md
// draws the path of a call.
package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolmux/toolmux/codemode"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/ratelimit"
	"github.com/toolmux/toolmux/tool"
)

// Caller is what the gateway needs from the manager (or from a pipeline
// wrapped around it).
type Caller interface {
	Tools(ctx context.Context) (*tool.Catalog, error)
	Call(ctx context.Context, call tool.Call) *tool.Record
}

// Options configure a Gateway.
type Options struct {
	// Name and Version are announced to clients.
	Name, Version string
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Passthrough are the MCP servers served one by one at
	// /servers/{name}/mcp by Mux, each with the transport settings it is
	// configured with (the Config's Name is the route's name) and the
	// bounds of its sessions. Their tool calls still go through the
	// Caller, whose source for the server must be an mcpsource.Source.
	Passthrough []Route
	// OnSessionRefused, when set, is told when a passthrough route refuses
	// a client session for its limit (at most once a second per route,
	// with the counts so far); when nil, refusals are logged instead.
	OnSessionRefused func(RouteSessions)
	// API is served by Mux under /api/, behind the token (the api
	// package's handler).
	API http.Handler
	// Metrics, when set, is served by Mux at /metrics, behind the token
	// (the metrics package's handler).
	Metrics http.Handler
	// Sessions, when set, is told of every client session, on every
	// route, as it starts and ends: each is a task (docs/gateway.md).
	Sessions SessionLog
	// SessionTimeout ends an HTTP client's session after this long
	// without a request; 0 means SessionIdleTimeout.
	SessionTimeout time.Duration
	// ToolSearch configures tool search on /mcp and stdio (search.go):
	// the zero value lists every tool, as without it.
	ToolSearch ToolSearch
	// CodeMode offers run_code on /mcp, stdio and the virtual servers
	// (codemode.go); the zero value does not.
	CodeMode CodeMode
	// Virtual are the virtual servers served by Mux at
	// /virtual/{name}/mcp (virtual.go), each a subset of the catalog.
	Virtual []Virtual
	// MaxDepth is the deepest nesting of a call's arguments accepted, on
	// /mcp and the passthrough routes: a deeper call is answered with an
	// invalid_tool_params error result without being made. 0 means
	// tool.DefaultMaxDepth. (The go-sdk refuses whole messages nested
	// deeper than 1000 levels before they reach the gateway.)
	MaxDepth int
	// Reissue bounds the window of re-issued requests (reissue.go): a
	// tools/call of a tool neither read-only nor idempotent, re-issued
	// by its client, is answered from its first execution.
	Reissue Reissue
	// Tracer, when set, makes a server span of every MCP request (see
	// trace.go), a child of the trace context the client sent, which
	// Propagator reads from the request's params._meta or HTTP headers.
	Tracer     trace.Tracer
	Propagator propagation.TextMapPropagator
	// Tasks configure MCP tasks (tasks.go) on /mcp and the virtual
	// servers; the zero value turns them off.
	Tasks Tasks
	// MaxArgumentBytes bounds the JSON of a call's arguments, and the rest
	// of a message again, before they are decoded (bounds.go), when the
	// Caller does not say its own bound (a pipeline.Pipeline, or
	// Scheduled around one, does: validate.max_argument_bytes); 0 means
	// pipeline.DefaultMaxArgumentBytes.
	MaxArgumentBytes int64
	// LargeBody, when set, is told when a message of LargeBodyBytes or
	// more has been answered, whether or not it made a call: toolmux
	// serve gives the memory back after it once idle, as after calls.
	LargeBody func()
	// Listens bounds the subscriptions/listen streams open at once, on
	// the gateway and per client (listens.go), on every HTTP route.
	Listens Listens
	// Limits admits every tools/call, on every route and in both eras,
	// within the limits of its caller and of its caller's groups
	// (limits.go); nil: no limits.
	Limits *ratelimit.Limiter
	// AdminGroups are the groups whose members see every caller's MCP
	// tasks (owners.go); nil means AdminGroup.
	AdminGroups []string
	// Visibility says which tools each caller may see and call (the
	// groups section, policy.VisibilityFromConfig; a reload may change
	// it): on every route, tools/list shows a caller its tools only, and
	// its call of another is answered as the call of a tool that does
	// not exist (callers.go). nil, or a nil result: every caller sees
	// every tool.
	Visibility func() *policy.Visibility
	// AuthTimeout bounds how long a call of a session waits for its
	// user to give a credential the call lacks (authchan.go): the URL
	// elicitation's answer, then the credential itself; 0 means
	// policy.DefaultApprovalTimeout.
	AuthTimeout time.Duration
	// AwaitCredentials says that whoever keeps the credentials tells the
	// gateway when a user gives one (CredentialGiven: serve's
	// /api/secrets): a call whose user accepted to give it waits for it
	// before it is made again. Without it, the call is made again as
	// soon as the user accepted.
	AwaitCredentials bool
}

// Gateway is an MCP server whose tools are the caller's catalog.
type Gateway struct {
	caller  Caller
	server  *mcp.Server
	log     *slog.Logger
	api     http.Handler
	metrics http.Handler
	depth   int
	code    *CodeMode    // nil: no run_code
	maxArgs int64        // Options.MaxArgumentBytes
	large   func()       // Options.LargeBody; nil: not told
	tracer  trace.Tracer // nil: no spans
	prop    propagation.TextMapPropagator
	reissue *reissue // nil: off

	main    *view            // /mcp and stdio
	virtual map[string]*view // virtual servers by name

	routes    map[string]*route // passthrough routes by server name
	onRefused func(RouteSessions)
	clients   *clients
	listens   *listens
	tasks     *taskRunner // nil: MCP tasks are off
	limits    *ratelimit.Limiter
	admins    []string // Options.AdminGroups
	visible   func() *policy.Visibility

	creds       credWatch     // calls waiting for a credential (authchan.go)
	authTimeout time.Duration // Options.AuthTimeout
	awaitCreds  bool          // Options.AwaitCredentials
}

// New returns a gateway in front of c. The catalog is read on the first
// tools/list or tools/call, and again whenever it has changed.
func New(c Caller, o Options) *Gateway {
	if o.Name == "" {
		o.Name = "toolmux"
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = SessionIdleTimeout
	}
	g := &Gateway{caller: c, log: o.Logger, api: o.API, metrics: o.Metrics, onRefused: o.OnSessionRefused, depth: o.MaxDepth, maxArgs: o.MaxArgumentBytes, large: o.LargeBody, visible: o.Visibility,
		clients: newClients(o.Sessions, o.SessionTimeout),
		tracer:  o.Tracer, prop: o.Propagator, reissue: newReissue(o.Reissue, o.Sessions), limits: o.Limits}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	g.listens = newListens(o.Listens)
	g.authTimeout, g.awaitCreds = cmpDur(o.AuthTimeout, policy.DefaultApprovalTimeout), o.AwaitCredentials
	g.admins = o.AdminGroups
	if g.admins == nil {
		g.admins = []string{AdminGroup}
	}
	if g.reissue != nil {
		g.clients.ended = g.reissue.sessionEnded
	}
	g.tasks = newTaskRunner(g, o.Tasks)
	if g.reissue != nil {
		g.reissue.tasks = g.tasks
	}
	if o.CodeMode.Enabled {
		// The engine is looked for once: a gateway without it offers
		// no run_code rather than a tool every call of which fails.
		if path, err := codemode.FindEngine(o.CodeMode.Bounds.Engine); err != nil {
			g.log.Error("toolmux: code mode is on, but run_code is not offered: " + err.Error())
		} else {
			code := o.CodeMode
			code.Bounds.Engine = path
			if code.Bounds.Programs == nil {
				code.Bounds.Programs = codemode.NewPrograms(0)
			}
			g.code = &code
		}
	}
	impl := &mcp.Implementation{Name: o.Name, Version: o.Version}
	const instructions = "Tools of several servers, named server__tool. Calls are governed by toolmux."
	g.server = mcp.NewServer(impl, &mcp.ServerOptions{
		Logger:       g.log,
		Instructions: instructions,
		Capabilities: g.capabilities(),
		SetCacheable: setCacheable,
	})
	g.main = newView(g, routeMCP, g.server, nil, o.ToolSearch)
	g.main.impl, g.main.instructions = impl, instructions
	g.server.AddReceivingMiddleware(g.sessionMiddleware, g.main.syncMiddleware)
	if g.tracer != nil {
		// Added late, so outer: the span covers the other two.
		g.server.AddReceivingMiddleware(g.traceMiddleware)
	}
	g.server.AddReceivingMiddleware(g.callerMiddleware) // outermost (owners.go)
	g.virtual = make(map[string]*view, len(o.Virtual))
	for _, vs := range o.Virtual {
		g.virtual[vs.Name] = newVirtual(g, vs, o.Version)
	}
	g.routes = make(map[string]*route, len(o.Passthrough))
	for _, rt := range o.Passthrough {
		g.routes[rt.Server.Name] = newRoute(g, rt, o.Version)
	}
	return g
}

// capabilities are what /mcp and the virtual servers announce: tools,
// whose list changes, and the tasks extension when tasks are on.
func (g *Gateway) capabilities() *mcp.ServerCapabilities {
	c := &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}}
	if g.tasks != nil {
		c.AddExtension(TasksExtension, map[string]any{})
	}
	return c
}

// Server returns the MCP server, to run on any go-sdk transport.
func (g *Gateway) Server() *mcp.Server { return g.server }

// Handler returns the streamable HTTP handler of the MCP endpoint.
func (g *Gateway) Handler() http.Handler { return g.streamable(false) }

// streamable returns the MCP handler of /mcp: both protocol eras (era.go).
func (g *Gateway) streamable(protected bool) http.Handler {
	return g.jsonRPCErrors(g.eras(g.server, protected), routeMCP, g.main.leanCall, g.main.toolName)
}

// eras returns the pair of go-sdk handlers serving server, sessions and
// sessionless requests (era.go).
func (g *Gateway) eras(server *mcp.Server, protected bool) eras {
	get := func(*http.Request) *mcp.Server { return server }
	return eras{
		legacy: g.clients.serveHTTP(mcp.NewStreamableHTTPHandler(get, g.streamableOptions(protected))),
		modern: g.clients.serveHTTP(mcp.NewStreamableHTTPHandler(get, g.statelessOptions(protected))),
	}
}

// streamableOptions are the options of an MCP handler. Where Protect runs
// in front of it, the go-sdk's own DNS-rebinding check (loopback listener,
// non-loopback Host) and body limit (4 MiB) are turned off: Protect does
// the same check with the configured allowed hosts, and bounds bodies by
// the configured limit.
func (g *Gateway) streamableOptions(protected bool) *mcp.StreamableHTTPOptions {
	// Idle sessions are ended by the gateway (clients.go), which sees
	// the requests it answers itself too.
	o := &mcp.StreamableHTTPOptions{Logger: g.log, DisableLocalhostProtection: protected}
	if protected {
		o.MaxRequestBodyBytes = -1
	}
	return o
}

// SessionIdleTimeout ends an HTTP client's session of /mcp after this long
// without a request: clients that vanish without closing their session
// would otherwise hold it, and its goroutines, for the life of the gateway.
// Passthrough routes have their own (Route.IdleTimeout).
const SessionIdleTimeout = 30 * time.Minute

// InputEnded says the stdio client closed its end of the connection: the
// stdio sessions ended because their client left, even if the gateway
// stops right after (serve --stdio stops when its input ends), so their
// tasks end closed rather than shutdown.
func (g *Gateway) InputEnded() { g.clients.inputEnded() }

// BeginShutdown says the gateway is stopping: sessions that end from now
// on end by a shutdown (their tasks say so), not because their client
// closed them. Close implies it; call it earlier when the sessions may end
// before Close is reached (serve --stdio, whose transport ends with the
// signal).
func (g *Gateway) BeginShutdown() {
	g.clients.stopping.Store(true)
	g.clients.stopListens()
}

// Close ends every client session, HTTP and stdio alike, and on the
// passthrough routes the upstream sessions (and stdio processes) opened for
// them, and records the end of each session's task. Serving stops
// elsewhere (the HTTP server's Shutdown, the stdio transport's end); Close
// releases what the sessions hold.
func (g *Gateway) Close() error {
	g.BeginShutdown()
	g.reissue.close()
	defer g.clients.wait()
	if g.tasks != nil {
		// The tasks still running end failed, saying the gateway
		// stopped, before the task log closes.
		g.tasks.close()
	}
	var errs []error
	for _, r := range g.routes {
		if err := r.close(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, v := range g.virtual {
		for ss := range v.server.Sessions() {
			if err := ss.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for ss := range g.server.Sessions() {
		if err := ss.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	g.clients.closeClients()
	return errors.Join(errs...)
}

// sessionMiddleware tracks the client sessions of /mcp, each a task: an
// HTTP session from its initialize on (one that never initializes is one
// the go-sdk makes for a request without a session, such as a client's
// server/discover probe, and ends after it: no task); a stdio connection
// from its first request, since a client on protocol 2026-07-28 sends no
// initialize.
func (g *Gateway) sessionMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ss, ok := req.GetSession().(*mcp.ServerSession)
		if !ok {
			return next(ctx, method, req)
		}
		if sessionless(ss, req) {
			return g.sessionlessMiddleware(ctx, routeMCP, ss, method, req, next)
		}
		stdio := ss.ID() == ""
		if stdio && method == "tools/call" {
			// The limits, before anything else (limits.go).
			release, err := g.admitStdio(ctx)
			if err != nil {
				return nil, err
			}
			defer release()
			// Before the call, which must carry the session's task.
			g.clients.track(ctx, ss, routeStdio, 0, nil)
		}
		res, err := next(ctx, method, req)
		switch {
		case method == "initialize" && err == nil:
			route := routeMCP
			if stdio {
				route = routeStdio
			}
			init, _ := req.GetParams().(*mcp.InitializeParams)
			g.clients.track(ctx, ss, route, 0, init)
		case stdio:
			// After the request, which may have told who the client is
			// (server/discover, a 2026-07-28 request's _meta).
			g.clients.track(ctx, ss, routeStdio, 0, nil)
		}
		return res, err
	}
}

// unknownToolData is the data of the error answering a call of a tool of
// no configured server.
type unknownToolData struct {
	Kind       tool.Kind `json:"kind"`
	Suggestion string    `json:"suggestion,omitempty"`
}

// Sync registers the tools of the current catalog on every endpoint
// (/mcp and the virtual servers), replacing changed ones and removing
// those that are gone (clients are told via list_changed).
func (g *Gateway) Sync(ctx context.Context) error {
	errs := []error{g.main.sync(ctx)}
	for _, v := range g.virtual {
		errs = append(errs, v.sync(ctx))
	}
	return errors.Join(errs...)
}

func sameTool(a, b tool.Tool) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

func mcpTool(t tool.Tool) *mcp.Tool {
	schema := any(t.InputSchema)
	if t.InputSchema == nil {
		schema = map[string]any{"type": "object"}
	}
	out := &mcp.Tool{
		Name:        t.Exposed,
		Title:       t.Title,
		Description: t.Description,
		InputSchema: schema,
	}
	if t.OutputSchema != nil {
		out.OutputSchema = t.OutputSchema
	}
	a := t.Annotations
	if a.ReadOnly != nil || a.Destructive != nil || a.Idempotent != nil || a.OpenWorld != nil || a.Title != "" {
		out.Annotations = &mcp.ToolAnnotations{
			Title:           a.Title,
			ReadOnlyHint:    t.IsReadOnly(),
			IdempotentHint:  a.Idempotent != nil && *a.Idempotent,
			DestructiveHint: a.Destructive,
			OpenWorldHint:   a.OpenWorld,
		}
	}
	return out
}

func (g *Gateway) handler(t tool.Tool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		// The call ends with the HTTP request it came in, when the client
		// goes away.
		ctx, done := g.clients.bind(ctx, req.Extra)
		defer done()
		return g.callTool(ctx, t, sdkInput(ctx, req)), nil
	}
}

// callInput is what a tools/call brings, whichever path it came by (the
// go-sdk's, or the gateway's own in lean.go), and how to reach its client
// while it runs.
type callInput struct {
	session *mcp.ServerSession
	// declared and task stand for the session of a 2026-07-28 request
	// the gateway answers itself (modern.go): what its _meta declared,
	// and the task of its client.
	declared *mcp.InitializeParams
	task     string
	params   *mcp.CallToolParamsRaw
	// progress sends a progress notification to the client; nil when it
	// asked for none.
	progress func(*mcp.ProgressNotificationParams)
	// elicit, when set, asks the client on the request's own stream.
	elicit func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error)
	// parent is the id of the run_code call whose program makes the call
	// (codemode.go); "" for a call of the client's own.
	parent string
}

// callTool makes one call of t through the Caller and renders its record.
func (g *Gateway) callTool(ctx context.Context, t tool.Tool, in callInput) *mcp.CallToolResult {
	args, err := g.decodeArgs(in.params.Arguments)
	if err != nil {
		return errorResult(&tool.Error{Kind: tool.KindInvalidParams, Server: t.Server, Tool: t.Name, Message: err.Error()})
	}
	return g.callArgs(ctx, t, in, args)
}

// callArgs makes one call of t with args, decoded, through the Caller.
func (g *Gateway) callArgs(ctx context.Context, t tool.Tool, in callInput, args map[string]any) *mcp.CallToolResult {
	if res, ok := g.reissued(ctx, t, in, args); ok {
		return res // a re-issued request (reissue.go)
	}
	if tok := in.params.GetProgressToken(); tok != nil && in.progress != nil {
		ctx = tool.WithProgress(ctx, func(p tool.Progress) {
			in.progress(&mcp.ProgressNotificationParams{ProgressToken: tok, Progress: p.Progress, Total: p.Total, Message: p.Message})
		})
	}
	// One MCP session is one task: first-use instructions and duplicate
	// detection are per client session.
	r := &request{session: in.session, declared: in.declared, answers: withState(in.params.InputResponses, in.params.RequestState), elicit: in.elicit}
	ctx = withRequest(ctx, r)
	rec := g.callRecord(ctx, t, in, args)
	if q := r.questions(); q != nil {
		// The call waits for the client's answer to an approval
		// question; the client retries it with the answer.
		return inputRequired(q)
	}
	if e := needsAuth(rec); e != nil {
		// Its caller's credential is missing: the user is sent to give
		// it (authchan.go).
		switch g.authorize(ctx, r, e) {
		case authAsked:
			res := inputRequired(r.questions())
			res.RequestState = authState(r.answers)
			return res
		case authGiven:
			rec = g.callRecord(ctx, t, in, args)
		}
	}
	return sentResult(rec)
}

// callRecord makes one call of t with args through the Caller, and returns
// its record; ctx carries the request the approver asks through. The
// window of re-issued requests is told whether the call reached its
// server (reissue.go).
func (g *Gateway) callRecord(ctx context.Context, t tool.Tool, in callInput, args map[string]any) *tool.Record {
	rec := g.caller.Call(ctx, tool.Call{Server: t.Server, Tool: t.Name, Arguments: args, Task: g.taskOf(in), Parent: in.parent})
	if reachedServer(rec) {
		reissueReached(ctx)
	}
	return rec
}

// taskOf is the task a call of in belongs to: its client's.
func (g *Gateway) taskOf(in callInput) string {
	if in.task != "" {
		return in.task
	}
	return g.clients.task(in.session)
}

// decodeArgs decodes a call's arguments, refusing those nested deeper
// than the limit.
func (g *Gateway) decodeArgs(raw json.RawMessage) (map[string]any, error) {
	args, err := decodeArgs(raw)
	if err != nil {
		return nil, err
	}
	if e := tool.CheckDepth(args, g.depth); e != nil {
		return nil, errors.New(e.Message)
	}
	return args, nil
}

func decodeArgs(raw json.RawMessage) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var args map[string]any
	if err := dec.Decode(&args); err != nil {
		return nil, fmt.Errorf("arguments must be a JSON object: %v", err)
	}
	if args == nil {
		return map[string]any{}, nil
	}
	return args, nil
}

// toMCP renders a call record as the MCP result the client sees: what the
// pipeline would show a model (pipeline.Format). Failures are tool results
// with isError set, so the model can read what went wrong; the error kind and
// any rollback advice travel in _meta.
func toMCP(rec *tool.Record) *mcp.CallToolResult {
	out := &mcp.CallToolResult{IsError: rec.Error != nil || rec.Result != nil && rec.Result.IsError}
	for _, c := range pipeline.Format(rec) {
		out.Content = append(out.Content, toMCPContent(c))
	}
	if out.Content == nil {
		out.Content = []mcp.Content{}
	}
	if rec.Result != nil {
		out.StructuredContent = rec.Result.Structured
		out.Meta = rec.Result.Meta
	}
	if rec.Error != nil {
		out.Meta = withMeta(out.Meta, "toolmux/error_kind", string(rec.Error.Kind))
	}
	if rec.Verdict != nil && rec.Verdict.Rollback {
		out.Meta = withMeta(out.Meta, "toolmux/rollback", rec.Verdict.Reason)
	}
	return out
}

func withMeta(m mcp.Meta, k string, v any) mcp.Meta {
	out := make(mcp.Meta, len(m)+1)
	for key, val := range m {
		out[key] = val
	}
	out[k] = v
	return out
}

func errorResult(e *tool.Error) *mcp.CallToolResult {
	return toMCP(&tool.Record{Server: e.Server, Tool: e.Tool, Error: e})
}

func toMCPContent(c tool.Content) mcp.Content {
	var ann *mcp.Annotations
	if a := c.Annotations; a != nil {
		ann = &mcp.Annotations{LastModified: a.LastModified, Priority: a.Priority}
		for _, r := range a.Audience {
			ann.Audience = append(ann.Audience, mcp.Role(r))
		}
	}
	switch c.Type {
	case tool.ContentText:
		return &mcp.TextContent{Text: c.Text, Annotations: ann, Meta: c.Meta}
	case tool.ContentImage:
		return &mcp.ImageContent{Data: c.Data, MIMEType: c.MIMEType, Annotations: ann, Meta: c.Meta}
	case tool.ContentAudio:
		return &mcp.AudioContent{Data: c.Data, MIMEType: c.MIMEType, Annotations: ann, Meta: c.Meta}
	case tool.ContentResource:
		r := &mcp.EmbeddedResource{Annotations: ann, Meta: c.Meta}
		if c.Resource != nil {
			r.Resource = &mcp.ResourceContents{URI: c.Resource.URI, MIMEType: c.Resource.MIMEType, Text: c.Resource.Text, Blob: c.Resource.Blob, Meta: c.Resource.Meta}
		}
		return r
	case tool.ContentResourceLink:
		return &mcp.ResourceLink{URI: c.URI, Name: c.Name, Title: c.Title, Description: c.Description, MIMEType: c.MIMEType, Size: c.Size, Annotations: ann, Meta: c.Meta}
	}
	return &mcp.TextContent{Text: c.Text}
}
