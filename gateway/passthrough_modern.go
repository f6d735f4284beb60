package gateway

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/jsonscan"
	"github.com/toolmux/toolmux/internal/mcpwire"
	"github.com/toolmux/toolmux/tool"
)

// The sessionless protocol (2026-07-28) on a passthrough route.
//
// A 2026-07-28 client has no session: each request carries its version,
// identity and capabilities, and is served by a second go-sdk server of the
// route behind a stateless handler (modern, modernHandler), chosen per
// request by its MCP-Protocol-Version header (modernRequest). Its upstream
// session is a shared link: one per route and client identity (clientInfo
// and declared capabilities, identityKey), opened at the identity's first
// request, taking one of the route's MaxSessions places, and ended after
// IdleTimeout without a request, as a client session's link is.
//
// Upstream, a link asks the server for 2026-07-28 and falls back to
// 2025-11-25 with a server that does not speak it, so four pairs meet:
//
//   - 2025 client, 2025 server: passthrough.go, as before.
//   - 2026 client, 2026 server: input_required results, inputResponses and
//     requestState cross as they are (the gateway's own approval answers
//     ride in a signed requestState of its own, stateKey).
//   - 2025 client, 2026 server: the server's input_required questions are
//     asked of the client on its session (elicitation/create,
//     sampling/createMessage, roots/list) and the request retried upstream
//     with the answers (fulfil), within the one request of the client.
//   - 2026 client, 2025 server: the server's requests during a tools/call
//     are put to the client as input_required with a requestState naming
//     the call, which goes on upstream, parked (parking); the client's
//     retry answers the server's requests, and the gateway waits on for
//     the call's result.

// maxRounds bounds the questions asked for one request (as the go-sdk's
// clients do).
const maxRounds = 10

// initModern makes the route's server for 2026-07-28 requests.
func (r *route) initModern(version string) {
	if _, err := rand.Read(r.stateKey[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	// The capabilities say which list changes a client may listen for
	// (subscriptions/listen); the server's own, forwarded, are what
	// server/discover answers.
	r.modernImpl = &mcp.Implementation{Name: "toolmux/" + r.cfg.Name, Version: version}
	r.modern = mcp.NewServer(r.modernImpl, &mcp.ServerOptions{
		Logger: r.g.log,
		Capabilities: &mcp.ServerCapabilities{
			Tools:     &mcp.ToolCapabilities{ListChanged: true},
			Prompts:   &mcp.PromptCapabilities{ListChanged: true},
			Resources: &mcp.ResourceCapabilities{ListChanged: true},
		},
	})
	r.modern.AddReceivingMiddleware(r.receiveModern)
	r.modern.AddReceivingMiddleware(r.g.callerMiddleware) // outermost (owners.go)
	r.modern.AddSendingMiddleware(rewriteNotification)
	// As on /mcp, a request's handler ends with its HTTP request
	// (statelessOptions): a call the window of re-issued requests keeps
	// goes on for the grace on a context of its own, and only a result
	// handed to a request whose client is still there counts as delivered
	// (reissue.go, served). Without it the handler of a request whose
	// client had left would wait for the call's end and take its result
	// for delivered (no write error tells the gateway otherwise: the
	// answer to a gone client is dropped or buffered), and forget it: a
	// re-issue would then run the call again.
	// Registered with the gateway's clients as the other routes' POSTs
	// are, so that a request's caller is found as theirs is (callerOf).
	h := r.g.clients.serveHTTP(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return r.modern }, r.g.statelessOptions(true)))
	r.modernHandler = r.g.modernErrors(h, r.path(), r.toolName, r.modernOwn)
}

// modernErrors checks what the go-sdk would not before it serves a
// 2026-07-28 request: the body's nesting (which the go-sdk's decoder
// bounds by failing), a body over the gateway's limit, a tools/call over
// a limit of its caller (limits.go), a listen stream over its bounds
// (listens.go). Every refusal is a JSON-RPC error, as on
// the stateful routes, with the same checks (checkMessage) and the same
// writer: what the go-sdk's stateless handler refuses in plain text (a
// Content-Type or Accept it does not take, a batch, an id that is not a
// string or a number) is made JSON-RPC by rpcErrorWriter; its own
// JSON-RPC errors, with the HTTP statuses the protocol asks for, pass as
// they are. As that wrapper, it gives a tools/call of route its origin,
// the identity the window of re-issued requests keys it by, and passes a
// notifications/cancelled to the window (reissue.go); the go-sdk's
// stateless handler hands the request's context values on to the call.
//
// A tools/call the gateway can answer itself (modern.go) is answered by
// own, if set, rather than the go-sdk.
func (g *Gateway) modernErrors(h http.Handler, route string, names toolNamer,
	own func(w http.ResponseWriter, r *http.Request, body []byte, msg jsonscan.Message) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &rpcErrorWriter{ResponseWriter: w}
		if r.Method == http.MethodPost && r.Body != nil {
			body, ok := g.readBody(w, r)
			if !ok {
				return
			}
			defer g.answered(body)
			msg := jsonscan.Scan(body)
			if !g.admitBody(w, r, body, msg, names) { // bounds.go
				return
			}
			releaseCall, admitted := g.admitCall(w, r, body, msg, true) // limits.go
			if !admitted {
				return
			}
			defer releaseCall()
			if cw.id, ok = checkMessage(w, body, msg, true); !ok {
				return
			}
			release, admitted := g.admitListen(w, r, route, body, msg)
			if !admitted {
				return
			}
			defer release()
			if g.reissue != nil {
				r = g.reissue.take(r, route, body, msg) // reissue.go
			}
			if own != nil && own(w, r, body, msg) {
				return
			}
		}
		h.ServeHTTP(cw, r)
		cw.finish()
		if g.reissue != nil {
			g.reissue.served(r, cw.failed)
		}
	})
}

type modernSessionKey struct{}

// modernSession returns the go-sdk session of the 2026-07-28 request ctx
// belongs to.
func modernSession(ctx context.Context) *mcp.ServerSession {
	ss, _ := ctx.Value(modernSessionKey{}).(*mcp.ServerSession)
	return ss
}

// receiveModern is the receiving middleware of the route's server for
// 2026-07-28 requests: server/discover answered with the server's side,
// tools/call governed, the rest forwarded over the identity's link.
func (r *route) receiveModern(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ss, _ := req.GetSession().(*mcp.ServerSession)
		if method == "subscriptions/listen" && ss != nil {
			// A listen is the go-sdk's: the route's list changes are
			// sent on it (listChanged). It never ends by itself, so it
			// is followed, as on /mcp, for a shutdown to end it.
			if !r.g.clients.listening(ss) {
				return nil, errStopping
			}
			defer r.g.clients.listened(ss)
			return next(ctx, method, req)
		}
		if method == "notifications/cancelled" || ss == nil {
			return next(ctx, method, req)
		}
		init := ss.InitializeParams()
		if method == "server/discover" {
			// The go-sdk sets the request's identity in its handler.
			res, err := next(ctx, method, req)
			if err != nil {
				return nil, err
			}
			init = ss.InitializeParams()
			if init == nil {
				return res, nil
			}
			l, err := r.sharedLink(ctx, init)
			if err != nil {
				return nil, err
			}
			if dr, ok := res.(*mcp.DiscoverResult); ok {
				serversSide(dr, l.cs.InitializeResult())
			}
			return res, nil
		}
		if init == nil {
			return next(ctx, method, req)
		}
		l, err := r.sharedLink(ctx, init)
		if err != nil {
			return nil, err
		}
		defer l.use()()
		ctx, done := l.bind(ctx)
		defer done()
		ctx = context.WithValue(ctx, modernSessionKey{}, ss)
		// The request's caller, for every decision about its call.
		ctx = identity.With(ctx, r.g.clients.callerOf(ctx, req.GetExtra()))
		if method == methodToolsCall {
			call, ok := req.(*mcp.CallToolRequest)
			if !ok {
				return next(ctx, method, req)
			}
			res, err := r.callToolModern(ctx, l, ss, call)
			if cr, ok := res.(*mcp.CallToolResult); ok && err == nil && cr.InputRequests == nil && !cr.NeedsInput() {
				// The go-sdk marks complete only the results of the
				// tools it has registered (the gateway's own path,
				// serveModern, marks its answers itself).
				return completed(cr)
			}
			return res, err
		}
		if err := foreignState(req, l.modernUp()); err != nil {
			return nil, err
		}
		return l.forward(ctx, method, req, next)
	}
}

// identityKey is what 2026-07-28 clients share a link by: their identity
// (clientInfo) and the capabilities they declare, which the upstream
// session declares for them.
func identityKey(p *mcp.InitializeParams) string {
	b, _ := json.Marshal(struct {
		Info *mcp.Implementation     `json:"i"`
		Caps *mcp.ClientCapabilities `json:"c"`
	}{p.ClientInfo, p.Capabilities})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// sharedLink returns the link of the 2026-07-28 clients with init's
// identity, opening it when there is none; it takes a place of the route's
// MaxSessions, or fails with the limit's error.
func (r *route) sharedLink(ctx context.Context, init *mcp.InitializeParams) (*link, error) {
	key := anyClient
	if !r.upModern.Load() {
		key = identityKey(init)
	}
	// (A server on 2026-07-28 gets each request's client identity and
	// capabilities with the request, the go-sdk's client adding its own
	// only where the request has none: one link serves every client.)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, errRouteClosed
	}
	l := r.shared[key]
	if l != nil && l.closing.Err() != nil {
		// It is ending (idle, or its server gone) and holds its place
		// until it has closed: a request bound to it now would be
		// cancelled with it. Another is opened once it has ended.
		r.mu.Unlock()
		select {
		case <-l.ended:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return r.sharedLink(ctx, init)
	}
	if l == nil {
		if r.used >= r.max {
			if victim := r.idleSharedLocked(); victim != nil {
				r.mu.Unlock()
				if err := r.evict(ctx, victim); err != nil {
					return nil, err
				}
				return r.sharedLink(ctx, init)
			}
		}
		s, refusal, report := r.takeLocked()
		if refusal != nil {
			r.mu.Unlock()
			if report {
				r.reportRefusal()
			}
			return nil, refusal
		}
		s.claim()
		p := *init
		l = &link{r: r, key: key, init: &p, slot: s, ready: make(chan struct{}), ended: make(chan struct{}), progress: map[any]*inflight{}, used: time.Now()}
		l.closing, l.stop = context.WithCancel(r.closing)
		r.shared[key] = l
		r.wg.Add(1)
		go l.run(protocolModern)
	}
	r.mu.Unlock()
	return l.await(ctx)
}

// takeRoom is take, ending the idle link of 2026-07-28 clients unused the
// longest when the route is full: such a link holds no client's session,
// and the next request of its clients opens one again.
func (r *route) takeRoom(ctx context.Context) (*slot, *jsonrpc.Error) {
	for {
		r.mu.Lock()
		var victim *link
		if !r.closed && r.used >= r.max {
			victim = r.idleSharedLocked()
		}
		r.mu.Unlock()
		if victim == nil {
			return r.take()
		}
		if err := r.evict(ctx, victim); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
		}
	}
}

// evict ends l and waits until its place is free.
func (r *route) evict(ctx context.Context, l *link) error {
	l.stop()
	select {
	case <-l.ended:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// anyClient keys the one link of every 2026-07-28 client when the server
// speaks 2026-07-28 too.
const anyClient = "*"

// idleSharedLocked returns the link of 2026-07-28 clients unused the
// longest among those serving no request, or nil.
func (r *route) idleSharedLocked() *link {
	var victim *link
	var since time.Time
	for _, l := range r.shared {
		select {
		case <-l.ready:
		default:
			continue // still connecting
		}
		l.mu.Lock()
		idle, used := l.users == 0 && len(l.active) == 0, l.used
		l.mu.Unlock()
		if idle && (victim == nil || used.Before(since)) {
			victim, since = l, used
		}
	}
	return victim
}

// use counts a request served on a shared link until the returned
// function is called: a link with a request being served is not idle.
func (l *link) use() func() {
	l.mu.Lock()
	l.users++
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		l.users--
		l.used = time.Now()
		l.mu.Unlock()
	}
}

// expire closes done when the shared link has served no request for the
// route's idle timeout, or when the link ends.
func (l *link) expire(done chan struct{}) {
	defer close(done)
	t := time.NewTimer(l.r.idle)
	defer t.Stop()
	for {
		select {
		case <-l.closing.Done():
			return
		case <-t.C:
		}
		l.mu.Lock()
		users, left := l.users, l.r.idle-time.Since(l.used)
		l.mu.Unlock()
		if users == 0 && left <= 0 {
			return
		}
		if users > 0 || left < time.Millisecond {
			left = l.r.idle
		}
		t.Reset(left)
	}
}

// toModern forwards what the server sends on a shared link: its requests
// during a tools/call go to the parked call (the client answers them by
// its retry), its notifications about a request on that request's stream,
// its list changes to the route's listeners.
func (l *link) toModern(ctx context.Context, in *inflight, method string, p mcp.Params, next mcp.MethodHandler, req mcp.Request) (mcp.Result, error) {
	if pp, ok := p.(*mcp.ProgressNotificationParams); ok && in != nil && in.token != nil {
		c := *pp
		c.ProgressToken = in.token
		p = &c
	}
	switch p := p.(type) {
	case *mcp.CreateMessageWithToolsParams:
		return l.askParked(ctx, in, method, p)
	case *mcp.ElicitParams:
		return l.askParked(ctx, in, method, p)
	case *mcp.ListRootsParams:
		return l.askParked(ctx, in, method, p)
	case *mcp.ProgressNotificationParams:
		if in != nil && in.report != nil {
			in.report(tool.Progress{Progress: p.Progress, Total: p.Total, Message: p.Message})
		}
	}
	if !strings.HasPrefix(method, "notifications/") {
		return next(ctx, method, req)
	}
	switch method {
	case "notifications/tools/list_changed", "notifications/prompts/list_changed", "notifications/resources/list_changed":
		l.r.listChanged(method)
		return nil, nil
	}
	if in == nil {
		// Resource updates and whatever else concerns no request: a
		// 2026-07-28 client has no stream to receive them on but its
		// listen, which carries list changes only.
		return nil, nil
	}
	reqCtx, ss := in.ctx, modernSession(in.ctx)
	if in.park != nil {
		reqCtx, ss = in.park.waiting()
	}
	if reqCtx != nil && ss == nil {
		// A request the gateway answers itself (modern.go): on its own
		// stream.
		if st := leanStreamFrom(reqCtx); st != nil {
			if err := st.notify(method, p); err != nil && !errors.Is(err, mcpwire.ErrAnswered) {
				l.r.g.log.Debug("forwarding a notification", "server", l.r.cfg.Name, "method", method, "error", err)
			}
		}
		return nil, nil
	}
	if ss == nil {
		return nil, nil
	}
	if err := notify(relatedContext{ctx, reqCtx}, ss, method, p); err != nil {
		l.r.g.log.Debug("forwarding a notification", "server", l.r.cfg.Name, "method", method, "error", err)
	}
	return nil, nil
}

// askParked hands a request of the server to the 2026-07-28 client's call
// it came during, and returns the client's answer. Which call that is is
// known only while it is the link's one request in flight (related): with
// more, the server is refused rather than one client asked another's
// question.
func (l *link) askParked(ctx context.Context, in *inflight, method string, q mcp.InputRequest) (mcp.Result, error) {
	if in == nil || in.park == nil {
		if n := l.inFlight(); n > 1 {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf(
				"toolmux: %s cannot be asked of a client on protocol %s while %d requests of its clients are in flight on the session: "+
					"the server's request does not say which one it belongs to", method, protocolModern, n)}
		}
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError,
			Message: fmt.Sprintf("toolmux: %s cannot be asked of a client on protocol %s outside a tool call", method, protocolModern)}
	}
	a, err := in.park.ask(ctx, q)
	if err != nil {
		return nil, err
	}
	res, ok := a.(mcp.Result)
	if !ok {
		return nil, fmt.Errorf("toolmux: the client answered %s with a %T", method, a)
	}
	return res, nil
}

// listChanged tells the route's 2026-07-28 listeners that the server's
// list changed. The go-sdk sends its list changes when its own features
// change, so one is added and removed (its notifications are debounced
// into one).
func (r *route) listChanged(method string) {
	const name = "toolmux-list-changed"
	switch method {
	case "notifications/tools/list_changed":
		r.modern.AddTool(&mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{}, nil
			})
		r.modern.RemoveTools(name)
	case "notifications/prompts/list_changed":
		r.modern.AddPrompt(&mcp.Prompt{Name: name}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{}, nil
		})
		r.modern.RemovePrompts(name)
	case "notifications/resources/list_changed":
		uri := "toolmux:list-changed"
		r.modern.AddResource(&mcp.Resource{Name: name, URI: uri}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{}, nil
		})
		r.modern.RemoveResources(uri)
	}
}

// syncHeaderTools registers on the route's 2026-07-28 server the tools
// whose arguments are bound to HTTP headers (x-mcp-header in their input
// schema), as the server listed them: the go-sdk checks a tools/call's
// Mcp-Param-* headers against the tool it knows by that name. Other tools
// are not registered (the route's handlers answer for them); a tool is
// registered again only when its definition changed, since each change is
// a list change for the listeners.
func (r *route) syncHeaderTools(tools []*mcp.Tool) {
	for _, t := range tools {
		b, err := json.Marshal(t)
		if err != nil || !bytes.Contains(b, []byte(`"x-mcp-header"`)) {
			continue
		}
		r.mu.Lock()
		same := r.headerTools[t.Name] == string(b)
		if !same {
			if r.headerTools == nil {
				r.headerTools = map[string]string{}
			}
			r.headerTools[t.Name] = string(b)
		}
		r.mu.Unlock()
		if !same {
			addHeaderTool(r.modern, t)
		}
	}
}

// addHeaderTool registers t; one the go-sdk refuses (it panics on a
// schema it cannot use) is left unchecked.
func addHeaderTool(s *mcp.Server, t *mcp.Tool) {
	defer func() { _ = recover() }()
	s.AddTool(t, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, errors.New("toolmux: not reached: the route answers tools/call")
	})
}

// eraMeta are the _meta keys of the sessionless protocol's requests: the
// client's version, identity, capabilities and log level.
var eraMeta = []string{mcp.MetaKeyProtocolVersion, mcp.MetaKeyClientInfo, mcp.MetaKeyClientCapabilities, mcp.MetaKeyLogLevel}

// legacyMeta is a sending middleware of every upstream client: a request
// of a 2026-07-28 client goes to a server on an older protocol without
// the keys of the newer one, which such a server takes as a request of the
// newer protocol and refuses.
func (l *link) legacyMeta(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if l.ss != nil || !l.upLegacy.Load() {
			return next(ctx, method, req)
		}
		if p := req.GetParams(); !isNil(p) {
			if m := p.GetMeta(); m != nil && hasEraMeta(m) {
				m = maps.Clone(m)
				p.SetMeta(deleteEraMeta(m))
			}
		}
		return next(ctx, method, req)
	}
}

func hasEraMeta(m mcp.Meta) bool {
	return slices.ContainsFunc(eraMeta, func(k string) bool { _, ok := m[k]; return ok })
}

// deleteEraMeta deletes the keys of the sessionless protocol from m (nil
// when none is left).
func deleteEraMeta(m mcp.Meta) mcp.Meta {
	for _, k := range eraMeta {
		delete(m, k)
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

type inputHolderKey struct{}

// inputHolder receives the input_required result of a tools/call made on
// a 2026-07-28 upstream session, which the MCP source's conversion to a
// tool.Result would lose.
type inputHolder struct{ res *mcp.CallToolResult }

// captureInput is a sending middleware of every upstream client: a
// tools/call's input_required result goes to the call's inputHolder.
func captureInput(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if h, ok := ctx.Value(inputHolderKey{}).(*inputHolder); ok && err == nil {
			if cr, ok := res.(*mcp.CallToolResult); ok && cr.InputRequests != nil {
				h.res = cr
			}
		}
		return res, err
	}
}

// asker asks the client of a session-bound link one of a 2026-07-28
// server's questions, on the stream of the request it came with (lean.go)
// or on the session.
func (l *link) asker(ctx context.Context) func(context.Context, mcp.InputRequest) (mcp.InputResponse, error) {
	st := leanStreamFrom(ctx)
	return func(ctx context.Context, q mcp.InputRequest) (mcp.InputResponse, error) {
		switch q := q.(type) {
		case *mcp.ElicitParams:
			if st != nil {
				return st.elicit(ctx, q)
			}
			return l.ss.Elicit(ctx, q)
		case *mcp.CreateMessageWithToolsParams:
			if st != nil {
				return leanAsk[mcp.CreateMessageWithToolsResult](ctx, st, "sampling/createMessage", q)
			}
			return l.ss.CreateMessageWithTools(ctx, q)
		case *mcp.CreateMessageParams:
			if st != nil {
				return leanAsk[mcp.CreateMessageResult](ctx, st, "sampling/createMessage", q)
			}
			return l.ss.CreateMessage(ctx, q)
		case *mcp.ListRootsParams:
			if st != nil {
				return leanAsk[mcp.ListRootsResult](ctx, st, "roots/list", q)
			}
			return l.ss.ListRoots(ctx, q)
		}
		return nil, fmt.Errorf("toolmux: cannot ask the client a %T", q)
	}
}

// fulfil asks the client of a session-bound link every question of a
// 2026-07-28 server's input_required result, one after the other.
func fulfil(ctx context.Context, ask func(context.Context, mcp.InputRequest) (mcp.InputResponse, error), qs mcp.InputRequestMap) (mcp.InputResponseMap, error) {
	if len(qs) == 0 {
		// The server sheds load: an empty set of questions.
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "toolmux: the server is busy, retry later"}
	}
	answers := make(mcp.InputResponseMap, len(qs))
	for key, q := range qs {
		a, err := ask(ctx, q)
		if err != nil {
			return nil, err
		}
		answers[key] = a
	}
	return answers, nil
}

// inputRequiredState is a tools/call result asking the client qs, to be
// retried with state: built from its wire form, which is what sets its
// result type.
func inputRequiredState(qs mcp.InputRequestMap, state string) (*mcp.CallToolResult, error) {
	b, err := json.Marshal(map[string]any{"resultType": "input_required", "inputRequests": qs, "requestState": state, "content": []any{}})
	if err != nil {
		return nil, err
	}
	res := new(mcp.CallToolResult)
	if err := json.Unmarshal(b, res); err != nil {
		return nil, err
	}
	return res, nil
}

// completed marks a tools/call result complete, as a 2026-07-28 result
// must say (resultType), through its wire form, which is what sets it.
func completed(res *mcp.CallToolResult) (*mcp.CallToolResult, error) {
	b, err := json.Marshal(res)
	if err != nil || len(b) < 2 || b[0] != '{' {
		return nil, fmt.Errorf("toolmux: encoding a result: %w", err)
	}
	if hasMember(b, "resultType") {
		return res, nil
	}
	b = withResultType(b, `"complete"`)
	out := new(mcp.CallToolResult)
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("toolmux: decoding a result: %w", err)
	}
	return out, nil
}

// approvalPrefix begins the keys of the gateway's own approval questions
// (approvalKey).
const approvalPrefix = "toolmux-approval-"

// statePrefix begins a requestState of the gateway's, which a 2026-07-28
// client echoes back; any other is the server's, forwarded as it is to a
// server that speaks 2026-07-28 (openState).
const statePrefix = "toolmux1."

// gatewayState is a requestState of the gateway's: the approvals the
// client has answered (asked again otherwise, each retry being a request
// of its own), the server's state, and the parked call the retry answers.
type gatewayState struct {
	Approvals mcp.InputResponseMap `json:"a,omitempty"`
	Upstream  string               `json:"u,omitempty"`
	Parked    string               `json:"p,omitempty"`
	// Issued is when (Unix seconds): approvals carried are good for the
	// retries of one call, not for calls made again later.
	Issued int64 `json:"t"`
}

// sealState encodes s, signed with the route's key so that a client
// cannot forge an approval.
func (r *route) sealState(s gatewayState) string {
	s.Issued = time.Now().Unix()
	b, _ := json.Marshal(s)
	mac := hmac.New(sha256.New, r.stateKey[:])
	mac.Write(b)
	return statePrefix + base64.RawURLEncoding.EncodeToString(b) + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// errTamperedState answers a requestState of the gateway's whose signature
// does not hold.
var errTamperedState = &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "toolmux: the requestState is not one the gateway issued"}

// errForeignState answers a requestState the gateway did not issue when
// the server speaks 2025-11-25, which has no requestState of its own:
// the state can be nobody's, and going on without it would make a retry
// a new call (an approval asked again, a question of the server's lost).
var errForeignState = &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "toolmux: the requestState is not one the gateway issued, " +
	"and the server speaks " + protocolLegacyLatest + ", which has none of its own: retry the request without it, or with the requestState the last answer gave"}

// openState decodes a requestState of a tools/call: the gateway's,
// checked; else, when the server speaks 2026-07-28 (upModern), the
// server's, which only the server can judge; else refused.
func (r *route) openState(state string, upModern bool) (gatewayState, error) {
	body, ok := strings.CutPrefix(state, statePrefix)
	if !ok {
		if state != "" && !upModern {
			return gatewayState{}, errForeignState
		}
		return gatewayState{Upstream: state}, nil
	}
	payload, sig, ok := strings.Cut(body, ".")
	if !ok {
		return gatewayState{}, errTamperedState
	}
	b, err1 := base64.RawURLEncoding.DecodeString(payload)
	got, err2 := base64.RawURLEncoding.DecodeString(sig)
	if err1 != nil || err2 != nil {
		return gatewayState{}, errTamperedState
	}
	mac := hmac.New(sha256.New, r.stateKey[:])
	mac.Write(b)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return gatewayState{}, errTamperedState
	}
	var s gatewayState
	if err := json.Unmarshal(b, &s); err != nil {
		return gatewayState{}, errTamperedState
	}
	if age := time.Since(time.Unix(s.Issued, 0)); age > r.parks.timeout+time.Minute {
		return gatewayState{}, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(
			"toolmux: the requestState is %s old; make the request again without it", age.Round(time.Second))}
	}
	return s, nil
}

// foreignState refuses the requestState of a prompts/get or
// resources/read going to a server on 2025-11-25 (not upModern): the
// gateway issues none for them, and the server has none of its own. To a
// server on 2026-07-28 the state is the server's, forwarded.
func foreignState(req mcp.Request, upModern bool) error {
	var state string
	switch p := req.GetParams().(type) {
	case *mcp.GetPromptParams:
		state = p.RequestState
	case *mcp.ReadResourceParams:
		state = p.RequestState
	}
	if state != "" && !upModern {
		return errForeignState
	}
	return nil
}

// callToolModern runs a 2026-07-28 client's tools/call: governed, its last
// hop over the identity's link. The call runs apart from the HTTP request
// so that, when a server on an older protocol asks a question during it,
// the question can be answered to the client as input_required while the
// call waits upstream (parked), for the client's retry.
func (r *route) callToolModern(ctx context.Context, l *link, ss *mcp.ServerSession, req *mcp.CallToolRequest) (mcp.Result, error) {
	st, err := r.openState(req.Params.RequestState, l.modernUp())
	if err != nil {
		return nil, err
	}
	if st.Parked != "" {
		return r.resume(ctx, l, ss, st.Parked, req.Params.InputResponses)
	}
	t, args, refusal, err := r.admit(ctx, req.Params)
	if refusal != nil || err != nil {
		return result(refusal, err)
	}
	// A request answering a parked call (above) is a retry of a call that
	// has not ended; any other is a call of its own, which the window of
	// re-issued requests may have seen already (its key holds the
	// inputResponses, so a retry answering the gateway's or a 2026-07-28
	// server's questions is another request than the one asked).
	return r.windowed(ctx, t, nil, req.Params, args, func(ctx context.Context) (*mcp.CallToolResult, error) {
		return r.startModern(ctx, l, ss, req.Params, st, args)
	})
}

// startModern starts a 2026-07-28 client's call (in) and waits for it;
// st is the state its requestState carried.
func (r *route) startModern(ctx context.Context, l *link, ss *mcp.ServerSession, in *mcp.CallToolParamsRaw, st gatewayState, args map[string]any) (*mcp.CallToolResult, error) {
	// The answers of the approvals asked in earlier rounds, then this
	// round's; the server gets its own and its state.
	params := *in
	answers := maps.Clone(st.Approvals)
	if answers == nil {
		answers = mcp.InputResponseMap{}
	}
	maps.Copy(answers, in.InputResponses)
	params.InputResponses, params.RequestState = answers, st.Upstream

	p := &parked{key: l.key, asks: make(chan *question), done: make(chan outcome, 1)}
	p.ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(l.closing, p.cancel)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		stop()
		p.cancel()
		return nil, errRouteClosed
	}
	r.wg.Add(1)
	r.mu.Unlock()
	release := l.use()
	go func() {
		defer r.wg.Done()
		res, err := r.governed(context.WithValue(p.ctx, parkKey{}, p), l, &params, args)
		if err == nil && res.InputRequests != nil {
			// Questions for the client, the gateway's or the server's:
			// the approvals answered so far ride along.
			approvals := mcp.InputResponseMap{}
			for k, v := range answers {
				if strings.HasPrefix(k, approvalPrefix) {
					approvals[k] = v
				}
			}
			state := res.RequestState
			if len(approvals) > 0 || strings.HasPrefix(state, statePrefix) {
				state = r.sealState(gatewayState{Approvals: approvals, Upstream: state})
			}
			var ir *mcp.CallToolResult
			ir, err = inputRequiredState(res.InputRequests, state)
			res = ir
		}
		// The link is released before the client has the answer, so that
		// its next request finds the link idle.
		p.cancel()
		stop()
		release()
		p.done <- outcome{res, err}
	}()
	res, err := r.await(ctx, ss, p)
	if err != nil {
		return nil, err
	}
	cr, _ := res.(*mcp.CallToolResult)
	if p.id != "" && reissueLeft(ctx) {
		// The call, kept by the window of re-issued requests after its
		// client left, was parked for a question of the server's: nobody
		// is there to answer, so it is withdrawn (cancelled upstream)
		// rather than left parked, and a re-issue gets that, not a second
		// execution. (p.id is set by park, on this goroutine.)
		if r.parks.take(p.id, p.key) != nil {
			p.cancel()
		}
		return errorResult(&tool.Error{Kind: tool.KindCancelled, Server: r.cfg.Name, Tool: in.Name, Message: fmt.Sprintf(
			"the server asked the client a question after the client's request had ended; nobody was there to answer it, so the call was cancelled upstream: %v",
			errClientGone)}), nil
	}
	return cr, nil
}

// admit checks a tools/call before it is governed, as callTool does: a
// tool the server does not have (or the manager does not allow, or the
// caller ctx carries may not see) is the server's error, arguments that
// are not an object a refusal. It returns the tool as the catalog has it
// (nil while the server is down) and the arguments.
func (r *route) admit(ctx context.Context, params *mcp.CallToolParamsRaw) (*tool.Tool, map[string]any, *mcp.CallToolResult, error) {
	cat, err := r.g.caller.Tools(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	t, ok := cat.Find(r.cfg.Name, params.Name)
	if !r.g.toolScope(identity.From(ctx)).Sees(r.cfg.Name, params.Name) {
		// Whatever the server's state: as a tool it does not have.
		return nil, nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", params.Name)}
	}
	if !ok && serverUp(cat, r.cfg.Name) {
		return nil, nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", params.Name)}
	}
	args, err := r.g.decodeArgs(params.Arguments)
	if err != nil {
		return nil, nil, errorResult(&tool.Error{Kind: tool.KindInvalidParams, Server: r.cfg.Name, Tool: params.Name, Message: err.Error()}), nil
	}
	if !ok {
		return nil, args, nil, nil
	}
	return &t, args, nil, nil
}

type parkKey struct{}

func parkFrom(ctx context.Context) *parked {
	p, _ := ctx.Value(parkKey{}).(*parked)
	return p
}

// outcome is how a call ended.
type outcome struct {
	res *mcp.CallToolResult
	err error
}

// A parked call is a 2026-07-28 client's tools/call that goes on upstream
// while the client answers the server's questions by retrying.
type parked struct {
	id     string
	key    string // the client identity it belongs to
	ctx    context.Context
	cancel context.CancelFunc
	asks   chan *question // the server's requests, taken by await
	done   chan outcome   // the call's end

	mu      sync.Mutex
	pending map[string]*question // put to the client, not yet answered
	n       int                  // questions so far, for their keys
	reqCtx  context.Context      // the request waiting for the call, if any
	reqSS   *mcp.ServerSession
	timer   *time.Timer // withdraws it while parked
}

// question is a request of the server's waiting for the client's answer.
type question struct {
	key    string
	req    mcp.InputRequest
	answer chan mcp.InputResponse
}

// ask puts a request of the server's to the client and waits for the
// answer its retry brings.
func (p *parked) ask(ctx context.Context, req mcp.InputRequest) (mcp.InputResponse, error) {
	q := &question{req: req, answer: make(chan mcp.InputResponse, 1)}
	select {
	case p.asks <- q:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.ctx.Done():
		return nil, p.ctx.Err()
	}
	select {
	case a := <-q.answer:
		return a, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.ctx.Done():
		return nil, p.ctx.Err()
	}
}

// waiting returns the request now waiting for the call: its progress and
// log messages go on that request's stream.
func (p *parked) waiting() (context.Context, *mcp.ServerSession) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reqCtx, p.reqSS
}

func (p *parked) setWaiting(ctx context.Context, ss *mcp.ServerSession) {
	p.mu.Lock()
	p.reqCtx, p.reqSS = ctx, ss
	p.mu.Unlock()
}

// await waits for the call's end, or a question of the server's, which
// parks the call and is answered to the client as input_required; the
// client's request ending first withdraws the call.
func (r *route) await(ctx context.Context, ss *mcp.ServerSession, p *parked) (mcp.Result, error) {
	p.setWaiting(ctx, ss)
	defer p.setWaiting(nil, nil)
	select {
	case o := <-p.done:
		return result(o.res, o.err)
	case q := <-p.asks:
		p.mu.Lock()
		if p.pending == nil {
			p.pending = map[string]*question{}
		}
		p.n++
		q.key = fmt.Sprintf("toolmux-upstream-%d", p.n)
		p.pending[q.key] = q
		p.mu.Unlock()
		return r.park(p)
	case <-ctx.Done():
		p.cancel()
		return nil, ctx.Err()
	}
}

// park keeps p for the client's retry, bounded in number and time, and
// answers the client with the questions it has pending.
func (r *route) park(p *parked) (mcp.Result, error) {
	if err := r.parks.put(p); err != nil {
		p.cancel()
		return nil, err
	}
	p.mu.Lock()
	qs := make(mcp.InputRequestMap, len(p.pending))
	for k, q := range p.pending {
		qs[k] = q.req
	}
	p.mu.Unlock()
	return inputRequiredState(qs, r.sealState(gatewayState{Parked: p.id}))
}

// resume takes up a parked call with the answers of the client's retry.
func (r *route) resume(ctx context.Context, l *link, ss *mcp.ServerSession, id string, answers mcp.InputResponseMap) (mcp.Result, error) {
	p := r.parks.take(id, l.key)
	if p == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(
			"toolmux: the call this requestState names is no longer waiting for an answer (it ended, or waited longer than %s)", shortDuration(r.parks.timeout))}
	}
	p.mu.Lock()
	for k, q := range p.pending {
		if a, ok := answers[k]; ok {
			q.answer <- a
			delete(p.pending, k)
		}
	}
	left := len(p.pending)
	p.mu.Unlock()
	if left > 0 {
		return r.park(p)
	}
	return r.await(ctx, ss, p)
}

// parking holds a route's parked calls.
type parking struct {
	max     int
	timeout time.Duration

	mu    sync.Mutex
	calls map[string]*parked
}

func newParking(max int, timeout time.Duration) *parking {
	if max <= 0 {
		max = DefaultMaxParked
	}
	if timeout <= 0 {
		timeout = DefaultParkTimeout
	}
	return &parking{max: max, timeout: timeout, calls: map[string]*parked{}}
}

// put parks p until it is taken, or withdrawn (and cancelled) after the
// timeout.
func (k *parking) put(p *parked) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.calls) >= k.max {
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf(
			"toolmux: %d calls already wait for their clients' answers on this route (passthrough.max_parked); the call was cancelled", k.max)}
	}
	if p.id == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		p.id = hex.EncodeToString(b[:])
	}
	k.calls[p.id] = p
	p.timer = time.AfterFunc(k.timeout, func() {
		k.mu.Lock()
		mine := k.calls[p.id] == p
		if mine {
			delete(k.calls, p.id)
		}
		k.mu.Unlock()
		if mine {
			p.cancel()
		}
	})
	return nil
}

// take returns the parked call id of the client identity key, no longer
// parked, or nil.
func (k *parking) take(id, key string) *parked {
	k.mu.Lock()
	defer k.mu.Unlock()
	p := k.calls[id]
	if p == nil || p.key != key {
		return nil
	}
	delete(k.calls, id)
	p.timer.Stop()
	return p
}

// close withdraws every parked call (the route closes).
func (k *parking) close() {
	k.mu.Lock()
	calls := k.calls
	k.calls = map[string]*parked{}
	k.mu.Unlock()
	for _, p := range calls {
		p.timer.Stop()
		p.cancel()
	}
}

// modernOwn answers a 2026-07-28 request of the route itself, when it
// can (modern.go): a tools/call, a tools/list, a server/discover.
func (r *route) modernOwn(w http.ResponseWriter, req *http.Request, body []byte, msg jsonscan.Message) bool {
	switch string(msg.Method) {
	case `"` + mcpwire.MethodToolsCall + `"`:
		return r.modernCall(w, req, body, msg)
	case `"tools/list"`:
		return r.modernList(w, req, body, msg)
	case `"` + methodDiscover + `"`:
		return r.modernDiscover(w, req, body, msg)
	}
	return false
}

// modernList answers a 2026-07-28 tools/list (without a cursor) of the
// route itself: the server's list over the identity's link, as
// receiveModern forwards it.
func (r *route) modernList(w http.ResponseWriter, req *http.Request, body []byte, msg jsonscan.Message) bool {
	rq, _, declared, ok := readModernMeta(req, body, msg, "tools/list")
	if !ok {
		return false
	}
	ctx := req.Context()
	res, err := func() (*mcp.ListToolsResult, error) {
		l, err := r.sharedLink(ctx, declared)
		if err != nil {
			return nil, err
		}
		defer l.use()()
		ctx, done := l.bind(ctx)
		defer done()
		return l.listTools(ctx, r.g.toolScope(identity.From(ctx)), &mcp.ListToolsParams{})
	}()
	if err == nil {
		res.Meta = withMetaOnce(res.Meta, metaServerInfo, r.modernImpl)
	}
	replyModern(w, rq.ID, res, err)
	return true
}

// modernDiscover answers a 2026-07-28 server/discover of the route
// itself, as receiveModern does: the versions the go-sdk speaks, the
// server's capabilities (those the route forwards), instructions and
// name, from the identity's link.
func (r *route) modernDiscover(w http.ResponseWriter, req *http.Request, body []byte, msg jsonscan.Message) bool {
	rq, _, declared, ok := readModernMeta(req, body, msg, methodDiscover)
	if !ok {
		return false
	}
	l, err := r.sharedLink(req.Context(), declared)
	if err != nil {
		replyModern(w, rq.ID, nil, err)
		return true
	}
	res := &mcp.DiscoverResult{SupportedVersions: mcp.SupportedProtocolVersions(), Meta: mcp.Meta{metaServerInfo: r.modernImpl}}
	// The go-sdk's hints when a server sets none: public, stale at once.
	setCacheable(req.Context(), nil, &res.Cacheable)
	serversSide(res, l.cs.InitializeResult())
	replyModern(w, rq.ID, res, nil)
	return true
}

// serversSide gives a route's server/discover answer the server's side,
// from its initialize: the capabilities the route forwards, its
// instructions, and its name where it gave one.
func serversSide(dr *mcp.DiscoverResult, up *mcp.InitializeResult) {
	dr.Capabilities = forwardedCapabilities(up.Capabilities)
	dr.Instructions = up.Instructions
	if up.ServerInfo != nil {
		m := dr.GetMeta()
		if m == nil {
			m = mcp.Meta{}
		}
		m[metaServerInfo] = up.ServerInfo
		dr.SetMeta(m)
	}
}

// withMetaOnce is m with k set to v unless it is set (a copy when m is
// not nil: m may be another's).
func withMetaOnce(m mcp.Meta, k string, v any) mcp.Meta {
	if _, ok := m[k]; ok {
		return m
	}
	out := make(mcp.Meta, len(m)+1)
	maps.Copy(out, m)
	out[k] = v
	return out
}

// modernCall answers a 2026-07-28 tools/call of the route itself, when
// it can (modern.go): as receiveModern does, without the go-sdk's
// temporary session; the client's declared capabilities stand for the
// session's, and the answer's stream for its stream.
func (r *route) modernCall(w http.ResponseWriter, req *http.Request, body []byte, msg jsonscan.Message) bool {
	mc, ok := readModernCall(req, body, msg)
	if !ok {
		return false
	}
	r.mu.Lock()
	_, bound := r.headerTools[mc.params.Name]
	r.mu.Unlock()
	if bound {
		return false // the go-sdk checks its Mcp-Param-* headers
	}
	r.g.serveModern(w, req, mc.req.ID, r.modernImpl, func(ctx context.Context, st *leanStream) (*mcp.CallToolResult, error) {
		l, err := r.sharedLink(ctx, mc.declared)
		if err != nil {
			return nil, err
		}
		defer l.use()()
		ctx, done := l.bind(ctx)
		defer done()
		ctx = withDeclared(withLeanStream(ctx, st), mc.declared)
		res, err := r.callToolModern(ctx, l, nil, &mcp.CallToolRequest{Params: mc.params})
		if err != nil {
			return nil, err
		}
		cr, ok := res.(*mcp.CallToolResult)
		if !ok {
			return nil, fmt.Errorf("toolmux: the call's result is a %T", res)
		}
		return cr, nil
	})
	return true
}

type declaredKey struct{}

// withDeclared carries what a 2026-07-28 client the gateway answers
// itself declared (modern.go), for the approvals of its call.
func withDeclared(ctx context.Context, p *mcp.InitializeParams) context.Context {
	return context.WithValue(ctx, declaredKey{}, p)
}

func declaredFrom(ctx context.Context) *mcp.InitializeParams {
	p, _ := ctx.Value(declaredKey{}).(*mcp.InitializeParams)
	return p
}
