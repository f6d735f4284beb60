package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/bm25"
	"github.com/toolmux/toolmux/internal/jsonscan"
	"github.com/toolmux/toolmux/internal/mcpwire"
	"github.com/toolmux/toolmux/internal/toolglob"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

// A view is what one MCP endpoint of the gateway shows of the catalog, and
// how its tools/call reaches the Caller: /mcp (and stdio) shows every tool
// under its exposed name; a virtual server (/virtual/NAME/mcp) shows the
// tools its patterns pick, renamed and redescribed as configured. With
// tool search on, a view lists only its pinned tools and the two
// meta-tools, find_tools and call_tool (search.go); every tool of the view
// stays callable, directly or through call_tool, by the same governed path
// (Gateway.callTool: the scheduler, the policy, the pipeline, the task
// log).
type view struct {
	g      *Gateway
	route  string // where it is served: routeMCP, or /virtual/NAME/mcp
	server *mcp.Server
	// pick returns a catalog tool as the view shows it (Exposed is the
	// name shown), or false when the view leaves it out; nil shows every
	// tool as the catalog names it.
	pick   func(tool.Tool) (tool.Tool, bool)
	search ToolSearch
	pinned []toolglob.Pattern
	// code, when set, offers run_code (codemode.go).
	code *CodeMode
	// handler serves a virtual server's route (nil for /mcp: Mux builds
	// its own).
	handler http.Handler
	// impl is the server the view's answers name; instructions are its
	// instructions to clients.
	impl         *mcp.Implementation
	instructions string
	// groups, for a virtual server, are the groups whose members may use
	// it (none: everyone).
	groups []string

	mu     sync.Mutex
	synced *tool.Catalog
	// listed are the tools registered with the server, by name shown;
	// registered are their definitions as the server has them, meta-tools
	// included (what its tools/list answers, modern.go).
	listed     map[string]tool.Tool
	registered map[string]*mcp.Tool
	// tools are every tool of the view, as shown; byName indexes them
	// (nil when pick is nil: the catalog's Lookup does).
	tools     []tool.Tool
	byName    map[string]int
	searching bool        // the meta-tools are registered
	index     *bm25.Index // built by the first find_tools of a catalog
}

// newView returns a view served by server. Patterns that do not parse
// (the configuration checks them first) pin nothing, and are logged.
func newView(g *Gateway, route string, server *mcp.Server, pick func(tool.Tool) (tool.Tool, bool), s ToolSearch) *view {
	pinned, err := toolglob.ParseAll(s.Pinned, true)
	if err != nil {
		g.log.Error("toolmux: tool search of "+route+": a pinned pattern is invalid; nothing is pinned", "err", err)
	}
	return &view{g: g, route: route, server: server, pick: pick, search: s, pinned: pinned, code: g.code,
		listed: map[string]tool.Tool{}, registered: map[string]*mcp.Tool{}}
}

// sync registers the tools the view lists for the current catalog,
// replacing changed ones and removing those gone (the go-sdk tells the
// clients with notifications/tools/list_changed).
func (v *view) sync(ctx context.Context) error {
	cat, err := v.g.caller.Tools(ctx)
	if err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if cat == v.synced {
		return nil
	}
	tools, byName := cat.Tools(), map[string]int(nil)
	if v.pick != nil {
		tools, byName = v.picked(cat)
	}
	searching := v.search.on(len(tools))
	want := make(map[string]tool.Tool, len(tools))
	for _, t := range tools {
		if !searching {
			want[t.Exposed] = t
		} else if _, ok := toolglob.Any(v.pinned, t.Server, t.Name); ok {
			want[t.Exposed] = t
		}
	}
	var gone []string
	for name := range v.listed {
		if _, ok := want[name]; !ok {
			gone = append(gone, name)
		}
	}
	if v.searching && !searching {
		gone = append(gone, metaFindTools, metaCallTool)
	}
	if len(gone) > 0 {
		v.server.RemoveTools(gone...)
		for _, name := range gone {
			delete(v.registered, name)
		}
	}
	add := func(t *mcp.Tool, h mcp.ToolHandler) {
		v.server.AddTool(t, h)
		v.registered[t.Name] = t
	}
	for _, t := range tools {
		w, ok := want[t.Exposed]
		if !ok {
			continue
		}
		if old, ok := v.listed[t.Exposed]; ok && sameTool(old, w) {
			continue
		}
		add(mcpTool(w), v.g.handler(w))
	}
	if searching && !v.searching {
		add(findToolsTool(v.search.limit()), v.metaHandler(metaFindTools))
		add(callToolTool, v.metaHandler(metaCallTool))
	}
	if v.code != nil {
		// Its description declares the tools listed beside it: made
		// again with every catalog.
		add(runCodeTool(v.declared(tools, want), searching), v.metaHandler(metaRunCode))
	}
	v.listed, v.tools, v.byName, v.searching, v.index, v.synced = want, tools, byName, searching, nil, cat
	return nil
}

// picked returns the catalog's tools the view shows, as it shows them,
// and their index by name. Two tools shown under one name (a rename onto
// another tool's name) keep the first, in the catalog's order.
func (v *view) picked(cat *tool.Catalog) ([]tool.Tool, map[string]int) {
	var tools []tool.Tool
	byName := map[string]int{}
	for _, t := range cat.Tools() {
		s, ok := v.pick(t)
		if !ok {
			continue
		}
		if _, dup := byName[s.Exposed]; dup || isMeta(s.Exposed) || v.isRunCode(s.Exposed) {
			v.g.log.Warn("toolmux: a tool of "+v.route+" is left out: its name is taken", "tool", t.Server+"/"+t.Name, "name", s.Exposed)
			continue
		}
		byName[s.Exposed] = len(tools)
		tools = append(tools, s)
	}
	return tools, byName
}

// lookupLocked returns the view's tool shown as name; v.mu is held.
func (v *view) lookupLocked(name string) (tool.Tool, bool) {
	if v.synced == nil {
		return tool.Tool{}, false
	}
	if v.byName == nil {
		return v.synced.Lookup(name)
	}
	i, ok := v.byName[name]
	if !ok {
		return tool.Tool{}, false
	}
	return v.tools[i], true
}

// toolName names the tool the view shows as name, if it has it.
func (v *view) toolName(name string) (server, tl string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if t, ok := v.lookupLocked(name); ok {
		return t.Server, t.Name
	}
	return "", name
}

// target is what a tools/call of a view reaches: a meta-tool, or a tool.
type target struct {
	meta string
	t    tool.Tool
}

// resolve says what a call of name by a caller who sees sc reaches;
// registered is true when the name is one the server has registered
// (the go-sdk calls its handler). A name of the view that is not listed
// (tool search hides it) is still called, governed: a client that knows
// it need not search again. On /mcp, a name of a server that is down
// (server__tool) is called the governed way too, to be answered with
// server_unavailable and the server's last error and stderr. Any other
// name, and a name of a tool the caller may not see, is an
// invalid-params error whose data holds the kind, tool_not_registered,
// and the closest tool name the caller sees.
func (v *view) resolve(sc policy.Scope, name string) (tg target, registered bool, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.synced == nil {
		return tg, true, nil // the go-sdk answers, as before any sync
	}
	if v.searching && isMeta(name) || v.isRunCode(name) {
		return target{meta: name}, true, nil
	}
	if t, ok := v.lookupLocked(name); ok && sc.Sees(t.Server, t.Name) {
		if !v.searching {
			return target{t: t}, true, nil // every tool is listed
		}
		_, listed := v.listed[name]
		return target{t: t}, listed, nil
	} else if ok {
		return tg, false, v.unknownLocked(sc, name)
	}
	if v.pick == nil {
		if t, ok := downServerTool(v.synced, name); ok && sc.Sees(t.Server, t.Name) {
			return target{t: t}, false, nil
		}
	}
	return tg, false, v.unknownLocked(sc, name)
}

// unknownLocked is the error answering a call of a name the view does
// not have, or the caller may not see; v.mu is held.
func (v *view) unknownLocked(sc policy.Scope, name string) error {
	sug := v.suggestLocked(sc, name)
	data, _ := json.Marshal(unknownToolData{Kind: tool.KindToolNotRegistered, Suggestion: sug})
	// The message names the closest tool too: a model or a person reads
	// the message, seldom the data.
	msg := fmt.Sprintf("unknown tool %q", name)
	if sug != "" {
		msg += fmt.Sprintf("; did you mean %q?", sug)
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: msg, Data: data}
}

// suggestLocked returns the name of the tool closest to name among those
// of the view the caller sees, as the view shows them (a virtual server's
// own names, a bare tool name finding the name it is shown as); v.mu is
// held.
func (v *view) suggestLocked(sc policy.Scope, name string) string {
	if v.synced == nil {
		return ""
	}
	if v.pick == nil && !sc.Limited() {
		return v.synced.Suggest(name)
	}
	var names, targets []string
	for _, t := range v.tools {
		if sc.Sees(t.Server, t.Name) {
			names = append(names, t.Exposed, t.Name)
			targets = append(targets, t.Exposed, t.Exposed)
		}
	}
	if s := tool.Closest(name, names); s != "" {
		return targets[slices.Index(names, s)]
	}
	return ""
}

// shownTo reports whether a tool listed as name is shown to a caller who
// sees sc: the meta-tools always are.
func (v *view) shownTo(sc policy.Scope, name string) bool {
	if isMeta(name) || v.isRunCode(name) || !sc.Limited() {
		return true
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.shownToLocked(sc, name)
}

// shownToLocked is shownTo of a limited scope; v.mu is held.
func (v *view) shownToLocked(sc policy.Scope, name string) bool {
	t, ok := v.lookupLocked(name)
	return ok && sc.Sees(t.Server, t.Name)
}

// downServerTool returns the tool a name of a server that is down stands
// for: while a server is down its tools are not in the catalog.
func downServerTool(cat *tool.Catalog, name string) (tool.Tool, bool) {
	var prefix string
	var server tool.ServerHealth
	for _, h := range cat.Servers() {
		// The longest prefix wins: server names may contain the separator.
		p := tool.Sanitize(h.Name) + tool.Separator
		if strings.HasPrefix(name, p) && len(name) > len(p) && len(p) > len(prefix) {
			prefix, server = p, h
		}
	}
	if prefix != "" && server.State != tool.StateReady {
		return tool.Tool{Server: server.Name, Name: name[len(prefix):]}, true
	}
	return tool.Tool{}, false
}

// dispatch makes a call of the view, by the caller ctx carries.
func (v *view) dispatch(ctx context.Context, tg target, in callInput) *mcp.CallToolResult {
	switch tg.meta {
	case metaFindTools:
		return v.findTools(v.g.toolScope(identity.From(ctx)), in)
	case metaCallTool:
		return v.callTool(ctx, in)
	case metaRunCode:
		return v.runCode(ctx, in)
	}
	return v.g.callTool(ctx, tg.t, in)
}

// metaHandler is the go-sdk's handler of a meta-tool.
func (v *view) metaHandler(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ctx, done := v.g.clients.bind(ctx, req.Extra)
		defer done()
		return v.dispatch(ctx, target{meta: name}, sdkInput(ctx, req)), nil
	}
}

// sdkInput is the callInput of a tools/call the go-sdk hands a handler.
func sdkInput(ctx context.Context, req *mcp.CallToolRequest) callInput {
	in := callInput{session: req.Session, params: req.Params}
	if tok := req.Params.GetProgressToken(); tok != nil {
		in.progress = func(p *mcp.ProgressNotificationParams) {
			_ = req.Session.NotifyProgress(context.WithoutCancel(ctx), p)
		}
	}
	return in
}

// syncMiddleware brings the registered tools up to date with the catalog
// before a client looks at them or calls one, answers calls of names
// that are not registered (see resolve), and shows each caller only the
// tools it may see: tools/list is filtered, and a call of another tool is
// answered as the call of one that does not exist.
func (v *view) syncMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/list" && method != "tools/call" {
			return next(ctx, method, req)
		}
		if err := v.sync(ctx); err != nil {
			return nil, err
		}
		sc := v.g.toolScope(v.g.clients.callerOf(ctx, req.GetExtra()))
		if call, ok := req.(*mcp.CallToolRequest); ok && method == "tools/call" {
			tg, registered, err := v.resolve(sc, call.Params.Name)
			if err != nil {
				return nil, err
			}
			if !registered {
				ctx, done := v.g.clients.bind(ctx, call.Extra)
				defer done()
				return v.dispatch(ctx, tg, sdkInput(ctx, call)), nil
			}
		}
		res, err := next(ctx, method, req)
		if lr, ok := res.(*mcp.ListToolsResult); ok && err == nil && (sc.Limited() || len(v.groups) > 0) {
			// The go-sdk's list is the route's: what this caller may not
			// see is taken out of it (a copy: the go-sdk may keep it). A
			// list that is the caller's own, or of a route only some may
			// use, is not for an intermediary to serve to anyone else.
			out := *lr
			out.Tools = slices.DeleteFunc(slices.Clone(lr.Tools), func(t *mcp.Tool) bool { return !v.shownTo(sc, t.Name) })
			out.CacheScope = cachePrivate
			return &out, nil
		}
		return res, err
	}
}

// leanCall answers a request of the view itself: a session's tools/call
// (lean.go), or, without a session (sid ""), a tools/call, tools/list or
// server/discover of the new protocol (modern.go).
func (v *view) leanCall(w http.ResponseWriter, r *http.Request, sid string, body []byte, msg jsonscan.Message) bool {
	if sid == "" {
		switch string(msg.Method) {
		case `"` + mcpwire.MethodToolsCall + `"`:
			return v.modernCall(w, r, body, msg)
		case `"tools/list"`:
			return v.modernList(w, r, body, msg)
		case `"` + methodDiscover + `"`:
			return v.modernDiscover(w, r, body, msg)
		}
		return false
	}
	switch string(msg.Method) {
	case `"tools/list"`, `"ping"`:
		return v.leanBare(w, r, sid, body, msg)
	}
	req, params, ok := leanRequest(r, body, msg)
	if !ok {
		return false
	}
	rec := v.g.clients.lookup(sid, v.route)
	if rec == nil || rec.ss.InitializeParams() == nil {
		return false
	}
	return v.g.clients.serveLean(w, r, rec, req.ID, func(ctx context.Context, st *leanStream) (_ any, err error) {
		if v.g.tracer != nil {
			var sp trace.Span
			ctx, sp = v.g.startSpan(ctx, mcpwire.MethodToolsCall, params.Name, params.Meta, r.Header, sid, req.ID)
			defer func() { endSpan(sp, err) }()
		}
		if err := v.sync(ctx); err != nil {
			return nil, err
		}
		tg, _, err := v.resolve(v.g.toolScope(identity.From(ctx)), params.Name)
		if err != nil {
			return nil, err
		}
		return v.dispatch(ctx, tg, callInput{session: rec.ss, params: params, progress: st.progress, elicit: st.elicit}), nil
	})
}

// modernCall answers a tools/call of the new protocol of the view
// itself, when it can (modern.go).
func (v *view) modernCall(w http.ResponseWriter, r *http.Request, body []byte, msg jsonscan.Message) bool {
	mc, ok := readModernCall(r, body, msg)
	if !ok {
		return false
	}
	ctx := r.Context()
	if err := v.sync(ctx); err != nil {
		return false // the go-sdk's path answers it
	}
	tg, _, unresolved := v.resolve(v.g.toolScope(identity.From(ctx)), mc.params.Name)
	if unresolved == nil && tg.meta == "" && bindsHeaders(tg.t.InputSchema) {
		return false // the go-sdk checks its Mcp-Param-* headers
	}
	v.g.serveModern(w, r, mc.req.ID, v.impl, func(ctx context.Context, st *leanStream) (_ *mcp.CallToolResult, err error) {
		if v.g.tracer != nil {
			var sp trace.Span
			ctx, sp = v.g.startSpan(ctx, mcpwire.MethodToolsCall, mc.params.Name, mc.params.Meta, r.Header, "", mc.req.ID)
			defer func() { endSpan(sp, err) }()
		}
		if unresolved != nil {
			return nil, unresolved // as the go-sdk's path answers it
		}
		c, done := v.g.clients.clientTask(ctx, mc.declared, v.route)
		defer done()
		return v.dispatch(ctx, tg, callInput{declared: mc.declared, task: c.Task, params: mc.params, progress: st.progress}), nil
	})
	return true
}

// list is the view's answer to a tools/list without a cursor, in either
// era: the tools the caller who sees sc may see of those registered with
// the view's server, as the go-sdk lists them (by name, with the same
// caching hints, on one page); ok is false for a view of more tools than
// a page holds, which is the go-sdk's to page through.
func (v *view) list(ctx context.Context, sc policy.Scope) (_ *mcp.ListToolsResult, ok bool) {
	v.mu.Lock()
	if len(v.registered) > mcp.DefaultPageSize {
		v.mu.Unlock()
		return nil, false
	}
	res := &mcp.ListToolsResult{Tools: make([]*mcp.Tool, 0, len(v.registered))}
	for name, t := range v.registered {
		if isMeta(name) || v.isRunCode(name) || !sc.Limited() || v.shownToLocked(sc, name) {
			res.Tools = append(res.Tools, t)
		}
	}
	v.mu.Unlock()
	slices.SortFunc(res.Tools, func(a, b *mcp.Tool) int { return strings.Compare(a.Name, b.Name) })
	setCacheable(ctx, nil, &res.Cacheable)
	if sc.Limited() || len(v.groups) > 0 {
		res.CacheScope = cachePrivate // as syncMiddleware marks the go-sdk's
	}
	return res, true
}

// leanBare answers a session's tools/list (without a cursor) or ping of
// the view itself (lean.go).
func (v *view) leanBare(w http.ResponseWriter, r *http.Request, sid string, body []byte, msg jsonscan.Message) bool {
	method, _ := unquote(msg.Method)
	req, ok := leanBare(r, body, msg, method)
	if !ok {
		return false
	}
	rec := v.g.clients.lookup(sid, v.route)
	if rec == nil || rec.ss.InitializeParams() == nil {
		return false
	}
	ctx := r.Context()
	var res any = pingResult
	if method == "tools/list" {
		if v.sync(ctx) != nil {
			return false // the go-sdk's path answers it
		}
		if res, ok = v.list(ctx, v.g.toolScope(identity.From(ctx))); !ok {
			return false
		}
	}
	return v.g.clients.serveLean(w, r, rec, req.ID, func(ctx context.Context, _ *leanStream) (any, error) {
		if v.g.tracer != nil && v.route == routeMCP {
			_, sp := v.g.startSpan(ctx, method, "", nil, r.Header, sid, nil)
			defer endSpan(sp, nil)
		}
		return res, nil
	})
}

// modernList answers a tools/list of the new protocol of the view itself,
// when it can (modern.go): the view's list (list), naming the server.
func (v *view) modernList(w http.ResponseWriter, r *http.Request, body []byte, msg jsonscan.Message) bool {
	req, p, _, ok := readModernMeta(r, body, msg, "tools/list")
	if !ok {
		return false
	}
	ctx := r.Context()
	if err := v.sync(ctx); err != nil {
		return false // the go-sdk's path answers it
	}
	res, ok := v.list(ctx, v.g.toolScope(identity.From(ctx)))
	if !ok {
		return false
	}
	res.Meta = mcp.Meta{metaServerInfo: v.impl}
	v.replyModern(w, r, req, p, res)
	return true
}

// modernDiscover answers a server/discover of the new protocol of the
// view itself, when it can (modern.go), as the go-sdk's server would:
// the versions it speaks, its capabilities and instructions.
func (v *view) modernDiscover(w http.ResponseWriter, r *http.Request, body []byte, msg jsonscan.Message) bool {
	req, p, _, ok := readModernMeta(r, body, msg, methodDiscover)
	if !ok {
		return false
	}
	res := &mcp.DiscoverResult{Meta: mcp.Meta{metaServerInfo: v.impl}, SupportedVersions: mcp.SupportedProtocolVersions(),
		Capabilities: v.g.capabilities(), Instructions: v.instructions}
	setCacheable(r.Context(), nil, &res.Cacheable)
	v.replyModern(w, r, req, p, res)
	return true
}

// replyModern answers req, a request of the new protocol other than a
// call, with res, in a span of its own when the gateway traces, as its
// middleware traces the go-sdk's answers (/mcp's).
func (v *view) replyModern(w http.ResponseWriter, r *http.Request, req *mcpwire.Request, p *mcpwire.CallParams, res mcp.Result) {
	if v.g.tracer != nil && v.route == routeMCP {
		_, sp := v.g.startSpan(r.Context(), req.Method, "", p.Meta, r.Header, "", nil)
		defer endSpan(sp, nil)
	}
	replyModern(w, req.ID, res, nil)
}
