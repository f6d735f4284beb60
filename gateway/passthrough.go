package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/jsonscan"
	"github.com/toolmux/toolmux/internal/mcpwire"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

// A passthrough route serves one configured MCP server at
// /servers/{name}/mcp under its own tool names, and forwards everything
// else of MCP between the client and that server: resources, prompts,
// completion, logging, progress, cancellation, sampling, elicitation,
// roots, list_changed notifications and ping.
//
// Every client session on the route gets an upstream session of its own
// (the link), opened with the server's configured transport when the
// client initializes: so the server's requests (sampling, elicitation,
// roots) and its notifications (logging, progress, resource updates) reach
// the client they belong to, and subscriptions and log levels stay per
// client. For a stdio server that means one process per client session.
// The client's capabilities are declared upstream as the client declared
// them (less the tasks extension: the route follows no task), and the
// server's are answered to the client, so each side sees what the other
// can do.
//
// The route serves at most MaxSessions client sessions (slot), and ends
// those idle for IdleTimeout: the go-sdk's session timeout, which closes
// the client session, and the link closes the upstream one.
//
// tools/list is the server's own list, less the tools the manager does not
// allow. tools/call is governed: it goes through the gateway's Caller (the
// scheduler, policy and approval, the pipeline, the manager) under the
// tool's own name, and only its last hop, made by the MCP source, is sent
// over the link (mcpsource.WithCallFunc), so that what the server asks or
// reports during the call reaches this client.
type route struct {
	g       *Gateway
	cfg     mcpsource.Config
	max     int           // client sessions served at once
	idle    time.Duration // idle client sessions are ended after it
	groups  []string      // who may use the route (Route.Groups)
	server  *mcp.Server
	handler http.Handler
	// modern and modernHandler serve the requests of the sessionless
	// protocol (2026-07-28 and later, passthrough_modern.go).
	modern        *mcp.Server
	modernHandler http.Handler
	modernImpl    *mcp.Implementation // the server modern's answers name
	parks         *parking            // calls waiting for a 2026-07-28 client's retry
	stateKey      [32]byte            // signs the requestState the gateway issues
	upModern      atomic.Bool         // the server has spoken 2026-07-28 on a link
	headerTools   map[string]string   // tools registered on modern, as JSON (syncHeaderTools)

	// closing is cancelled by close: links end, connects in progress stop.
	closing context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup // one per link, for its connect and its watch

	mu       sync.Mutex
	links    map[*mcp.ServerSession]*link
	shared   map[string]*link // 2026-07-28 clients' links, by identity
	closed   bool
	used     int       // slots taken or claimed
	refused  int64     // client sessions refused for the limit
	reported time.Time // when a refusal was last reported
}

func newRoute(g *Gateway, rt Route, version string) *route {
	cfg := rt.Server
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = mcpsource.DefaultConnectTimeout
	}
	if rt.MaxSessions <= 0 {
		rt.MaxSessions = DefaultMaxSessions
	}
	if rt.IdleTimeout <= 0 {
		rt.IdleTimeout = DefaultIdleTimeout
	}
	r := &route{g: g, cfg: cfg, max: rt.MaxSessions, idle: rt.IdleTimeout, groups: rt.Groups, links: map[*mcp.ServerSession]*link{}, shared: map[string]*link{}}
	r.parks = newParking(rt.MaxParked, rt.ParkTimeout)
	r.closing, r.stop = context.WithCancel(context.Background())
	// The capabilities, instructions and identity a client sees are the
	// server's, set per session when it initializes; until then the route
	// claims nothing.
	r.server = mcp.NewServer(&mcp.Implementation{Name: "toolmux/" + cfg.Name, Version: version}, &mcp.ServerOptions{
		Logger:       g.log,
		Capabilities: &mcp.ServerCapabilities{},
	})
	r.server.AddReceivingMiddleware(r.receive)
	r.server.AddReceivingMiddleware(g.callerMiddleware) // outermost (owners.go)
	r.server.AddSendingMiddleware(rewriteNotification)
	// Routes are served by Mux only, behind Protect; their sessions idle
	// out sooner than /mcp's, for each holds a server session.
	r.handler = g.jsonRPCErrors(g.clients.serveHTTP(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return r.server }, g.streamableOptions(true))),
		r.path(), r.leanCall, r.toolName)
	r.initModern(version)
	return r
}

// toolName names the route's tool name: its server's.
func (r *route) toolName(name string) (server, tool string) { return r.cfg.Name, name }

// close ends every client session of the route and its upstream session
// (and process), and waits for them.
func (r *route) close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.stop()
	r.parks.close()
	r.wg.Wait()
	// Sessions that never got a link (closed before they initialized).
	var errs []error
	for ss := range r.server.Sessions() {
		if err := ss.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// errRouteClosed answers requests that arrive while the gateway closes.
var errRouteClosed = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "toolmux: the gateway is shutting down"}

// link returns the upstream session of ss, opening it when there is none.
// The connection attempt belongs to the route, not to the request that
// started it: a request that gives up stops waiting, the attempt goes on
// for the others, bounded by ConnectTimeout and close. A failed attempt is
// forgotten, so the next request of the session tries again.
//
// A new link claims the slot taken for the request that created the
// session, or, when that one is spent (a link before it failed), takes
// another; none left is the limit's error.
func (r *route) link(ctx context.Context, ss *mcp.ServerSession, version string) (*link, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, errRouteClosed
	}
	l := r.links[ss]
	if l == nil {
		s := slotFrom(ctx)
		if !s.claim() {
			var refusal *jsonrpc.Error
			var report bool
			if s, refusal, report = r.takeLocked(); refusal != nil {
				r.mu.Unlock()
				if report {
					r.reportRefusal()
				}
				return nil, refusal
			}
			s.claim()
		}
		l = &link{r: r, ss: ss, slot: s, ready: make(chan struct{}), progress: map[any]*inflight{}}
		l.closing, l.stop = context.WithCancel(r.closing)
		r.links[ss] = l
		r.wg.Add(1)
		go l.run(version)
	}
	r.mu.Unlock()
	return l.await(ctx)
}

// path is where the route is served.
func (r *route) path() string { return "/servers/" + r.cfg.Name + "/mcp" }

func (r *route) forget(l *link) {
	r.mu.Lock()
	if l.ss == nil {
		if r.shared[l.key] == l {
			delete(r.shared, l.key)
		}
	} else if r.links[l.ss] == l {
		delete(r.links, l.ss)
	}
	r.mu.Unlock()
}

// Method names the route treats specially.
const (
	methodInitialize       = "initialize"
	methodToolsCall        = "tools/call"
	methodProgress         = "notifications/progress"
	methodRootsListChanged = "notifications/roots/list_changed"
)

// receive is the route server's receiving middleware: it answers
// initialize with the server's side of the handshake, governs tools/call,
// and forwards the rest over the session's link.
func (r *route) receive(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ss, _ := req.GetSession().(*mcp.ServerSession)
		switch method {
		case methodInitialize:
			res, err := next(ctx, method, req)
			if err != nil {
				return nil, err
			}
			if ss != nil {
				// A session that initialized is a task.
				init, _ := req.GetParams().(*mcp.InitializeParams)
				r.g.clients.track(ctx, ss, r.path(), r.idle, init)
			}
			ir, ok := res.(*mcp.InitializeResult)
			if !ok || ss == nil {
				return res, nil
			}
			l, err := r.link(ctx, ss, ir.ProtocolVersion)
			if err != nil {
				return nil, err
			}
			up := l.cs.InitializeResult()
			ir.Capabilities = forwardedCapabilities(up.Capabilities)
			ir.Instructions = up.Instructions
			if up.ServerInfo != nil {
				ir.ServerInfo = up.ServerInfo
			}
			return ir, nil
		case "notifications/initialized", "notifications/cancelled":
			return next(ctx, method, req)
		}
		if ss == nil {
			return next(ctx, method, req)
		}
		// A session that has not initialized is one the go-sdk made for a
		// request without a session (a client's server/discover probe, a
		// ping) and closes after it: the go-sdk answers it, and refuses
		// the rest, without the server. A session whose link failed at
		// initialize opens one again here.
		p := ss.InitializeParams()
		if p == nil {
			return next(ctx, method, req)
		}
		l, err := r.link(ctx, ss, p.ProtocolVersion)
		if err != nil {
			return nil, err
		}
		ctx, done := l.bind(ctx)
		defer done()
		if method == methodToolsCall {
			call, ok := req.(*mcp.CallToolRequest)
			if !ok {
				return next(ctx, method, req)
			}
			ctx, unbind := r.g.clients.bind(ctx, call.Extra)
			defer unbind()
			return r.callTool(ctx, l, call)
		}
		return l.forward(ctx, method, req, next)
	}
}

// forwardedCapabilities is what the route can offer of the server's
// capabilities: the standard features, which it forwards; not experimental
// ones or extensions, whose methods it does not know.
func forwardedCapabilities(up *mcp.ServerCapabilities) *mcp.ServerCapabilities {
	if up == nil {
		return &mcp.ServerCapabilities{}
	}
	return &mcp.ServerCapabilities{
		Completions: up.Completions,
		Logging:     up.Logging,
		Prompts:     up.Prompts,
		Resources:   up.Resources,
		Tools:       up.Tools,
	}
}

// callTool runs a tools/call through the governed Caller. An approval the
// policy asks for is put to the client with elicitation, as the go-sdk does
// for a tool's own questions with clients whose protocol predates multi
// round-trip requests (every client of a stateful route), and the call is
// made again with the answer.
func (r *route) callTool(ctx context.Context, l *link, req *mcp.CallToolRequest) (mcp.Result, error) {
	// What a server answers for a tool it does not have; a tool the
	// manager does not allow is one. While the server is down its tools
	// are not in the catalog: the governed call says why.
	t, args, refusal, err := r.admit(ctx, req.Params)
	if refusal != nil || err != nil {
		return result(refusal, err)
	}
	return r.windowed(ctx, t, l.ss, req.Params, args, func(ctx context.Context) (*mcp.CallToolResult, error) {
		return r.callSession(ctx, l, req.Params, args)
	})
}

// callSession makes a session's call, asking the client the approvals
// the policy asks for.
func (r *route) callSession(ctx context.Context, l *link, params *mcp.CallToolParamsRaw, args map[string]any) (*mcp.CallToolResult, error) {
	res, err := r.governed(ctx, l, params, args)
	if err != nil || res.InputRequests == nil {
		return res, err
	}
	elicit := l.ss.Elicit
	if st := leanStreamFrom(ctx); st != nil {
		elicit = st.elicit
	}
	// Nobody may be there to answer a call the window of re-issued
	// requests keeps: it is withdrawn if its client has left.
	approved := reissueApproving(ctx)
	answers := make(mcp.InputResponseMap, len(res.InputRequests))
	for key, q := range res.InputRequests {
		ep, ok := q.(*mcp.ElicitParams)
		if !ok {
			approved()
			return nil, fmt.Errorf("toolmux: cannot ask the client a %T", q)
		}
		if answers[key], err = elicit(ctx, ep); err != nil {
			approved()
			return nil, err
		}
	}
	approved()
	retry := *params
	retry.InputResponses = answers
	res, err = r.governed(ctx, l, &retry, args)
	if err == nil && res.InputRequests != nil {
		return nil, errors.New("toolmux: the approval was asked again after the client answered it")
	}
	return res, err
}

// windowed makes a tools/call of the route (run) through the gateway's
// window of re-issued requests (reissue.go) when it is one the window
// keeps: a tool the catalog knows (t, with its annotations), neither
// read-only nor idempotent, of a request with an identity (the client's
// session ss, or a 2026-07-28 request's clientInfo). Otherwise run is
// simply called.
func (r *route) windowed(ctx context.Context, t *tool.Tool, ss *mcp.ServerSession, params *mcp.CallToolParamsRaw, args map[string]any,
	run func(context.Context) (*mcp.CallToolResult, error)) (mcp.Result, error) {
	if t != nil {
		if res, err, ok := r.g.windowed(ctx, *t, callInput{session: ss, params: params}, args, run); ok {
			return result(res, err)
		}
	}
	return result(run(ctx))
}

// serverUp reports whether the catalog's health of server says it is ready.
func serverUp(cat *tool.Catalog, server string) bool {
	h, ok := cat.Server(server)
	return ok && h.State == tool.StateReady
}

// result returns res, or err without a (typed nil) result.
func result[R mcp.Result](res R, err error) (mcp.Result, error) {
	if err != nil {
		return nil, err
	}
	return res, nil
}

// governed makes one attempt of a call through the Caller, its last hop
// over the link.
func (r *route) governed(ctx context.Context, l *link, params *mcp.CallToolParamsRaw, args map[string]any) (*mcp.CallToolResult, error) {
	ss := l.ss
	if ss == nil {
		ss = modernSession(ctx)
	}
	q := &request{session: ss, declared: declaredFrom(ctx), answers: params.InputResponses}
	ctx = withRequest(ctx, q)
	var ask func(context.Context, mcp.InputRequest) (mcp.InputResponse, error)
	if l.ss != nil {
		ask = l.asker(ctx)
	}
	var asked *mcp.CallToolResult // the server's questions for a 2026-07-28 client
	ctx = mcpsource.WithCallFunc(ctx, r.cfg.Name, func(ctx context.Context, p *mcp.CallToolParams) (*tool.Result, error) {
		// The client's _meta (its progress token among it) goes upstream
		// as the client sent it, but for the tasks it may declare
		// (tasklessMeta: a stdio server's calls bypass the go-sdk's
		// middleware); the arguments are the pipeline's.
		p.Meta = maps.Clone(metaWithoutTasks(params.Meta))
		if l.ss == nil && l.upLegacy.Load() {
			// Nor what a 2026-07-28 client declares to a server on an
			// older protocol (as legacyMeta, which a stdio server's calls
			// bypass: they are written on its pipe, mcpsource/wire.go).
			p.Meta = deleteEraMeta(p.Meta)
		}
		if l.ss == nil && l.modernUp() {
			// A 2026-07-28 client's answers to the server's questions, and
			// the server's state; the gateway's own answers stay here.
			p.InputResponses = maps.Clone(params.InputResponses)
			maps.DeleteFunc(p.InputResponses, func(k string, _ mcp.InputResponse) bool { return strings.HasPrefix(k, approvalPrefix) })
			if len(p.InputResponses) == 0 {
				p.InputResponses = nil
			}
			p.RequestState = params.RequestState
		}
		done := l.track(ctx, p)
		defer done()
		// From here on the server may act on the call, whatever becomes
		// of it (reissue.go).
		reissueReached(ctx)
		for round := 1; ; round++ {
			h := &inputHolder{}
			res, err := l.conn.Call(context.WithValue(ctx, inputHolderKey{}, h), l.cs, p)
			if err != nil || h.res == nil {
				return res, err
			}
			if ask == nil {
				// The client answers by its retry.
				asked = h.res
				return res, nil
			}
			// A server on 2026-07-28, a client with a session: the client
			// is asked, and the call made again with its answers.
			if round >= maxRounds {
				return nil, fmt.Errorf("toolmux: the server asked more than %d rounds of questions", maxRounds)
			}
			answers, err := fulfil(ctx, ask, h.res.InputRequests)
			if err != nil {
				return nil, err
			}
			p.InputResponses, p.RequestState = answers, h.res.RequestState
		}
	})
	rec := r.g.caller.Call(ctx, tool.Call{Server: r.cfg.Name, Tool: params.Name, Arguments: args, Task: r.g.clients.task(l.ss)})
	if qs := q.questions(); qs != nil {
		return &mcp.CallToolResult{InputRequests: qs}, nil
	}
	if asked != nil {
		return &mcp.CallToolResult{InputRequests: asked.InputRequests, RequestState: asked.RequestState}, nil
	}
	// A JSON-RPC error the server answered goes to the client as it was
	// (after being recorded), as it would without the gateway.
	var wire *jsonrpc.Error
	if rec.Error != nil && rec.Result == nil && errors.As(rec.Error, &wire) && !mcpwire.LocalCode(wire.Code) {
		return nil, wire
	}
	return toMCP(rec), nil
}

// link is one client session of a route and the upstream session opened
// for it. It ends when either session ends, the server's process exits, or
// the route closes; then both sessions are closed, so a client whose
// server went away starts again with a new session.
type link struct {
	r  *route
	ss *mcp.ServerSession // nil for the link of 2026-07-28 clients
	// key and init, for a link of 2026-07-28 clients (no session): the
	// clients' identity, and the version, identity and capabilities their
	// requests declared.
	key  string
	init *mcp.InitializeParams

	slot  *slot         // released when the link has ended
	ready chan struct{} // closed when the connect attempt has ended
	ended chan struct{} // closed when a shared link has ended, its place free
	err   error         // why it failed; set before ready is closed
	cs    *mcp.ClientSession
	conn  *mcpsource.Conn
	// upLegacy is set once the server is known to speak a protocol before
	// 2026-07-28 on the link (legacyMeta).
	upLegacy atomic.Bool

	// closing is cancelled when the link ends: every request forwarded in
	// either direction is bound to it, because closing a go-sdk session
	// waits for the requests it is handling.
	closing context.Context
	stop    context.CancelFunc

	mu       sync.Mutex
	active   []*inflight       // client requests being forwarded, latest last
	progress map[any]*inflight // by progress token (as sent upstream)
	tokens   uint64            // progress tokens a shared link has issued
	idle     chan struct{}     // closed when active empties, if set
	users    int               // requests of a shared link being served
	used     time.Time         // when a shared link's last request ended
}

// cancelGrace is how long a closing link leaves the go-sdk to tell the
// server of the requests it cancelled.
const cancelGrace = 100 * time.Millisecond

// waitIdle waits, at most max, until no client request is being forwarded;
// it reports whether one was.
func (l *link) waitIdle(max time.Duration) bool {
	l.mu.Lock()
	if len(l.active) == 0 {
		l.mu.Unlock()
		return false
	}
	l.idle = make(chan struct{})
	idle := l.idle
	l.mu.Unlock()
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	}
	return true
}

// inflight is a client request being forwarded upstream.
type inflight struct {
	ctx context.Context
	// park, for a tools/call of a 2026-07-28 client, takes the server's
	// questions during the call to that client (passthrough_modern.go).
	park *parked
	// report, for a tools/call, receives its progress for the scheduler's
	// events too.
	report tool.ProgressFunc
	// token, on a shared link, is the progress token the client chose,
	// which went upstream as one of the link's own (track).
	token any
}

// run opens the upstream session, then waits for the link to end and
// closes both sessions.
func (l *link) run(version string) {
	defer l.r.wg.Done()
	if l.ended != nil {
		defer close(l.ended)
	}
	err := l.connect(version)
	if err != nil {
		l.err = err
		l.r.forget(l)
		l.slot.release()
		l.stop()
		close(l.ready)
		return
	}
	close(l.ready)
	ssDone, csDone := make(chan struct{}), make(chan struct{})
	if l.ss != nil {
		go func() { _ = l.ss.Wait(); close(ssDone) }()
	} else {
		// No client session to end with: the link ends when idle.
		go l.expire(ssDone)
	}
	go func() { _ = l.cs.Wait(); close(csDone) }()
	select {
	case <-ssDone:
	case <-csDone:
	case <-l.conn.Exited():
	case <-l.closing.Done():
	}
	// In-flight requests first: closing a session waits for them. The
	// go-sdk tells the server of a cancelled request from a goroutine of
	// its own, which closing the session right away would cut off: the
	// server's handler would run on.
	l.stop()
	if l.waitIdle(time.Second) {
		time.Sleep(cancelGrace)
	}
	_ = l.cs.Close()
	_ = l.conn.Close()
	if l.ss != nil {
		_ = l.ss.Close()
	}
	<-ssDone
	<-csDone
	l.r.forget(l)
	// The process has been reaped (Conn.Close waits for it): its place
	// is free.
	l.slot.release()
}

// connect opens the upstream session with the client's capabilities and
// identity and the protocol version it negotiated; a client at the newest
// version of either era has the server asked for 2026-07-28 first, and
// the go-sdk falls back to the initialize handshake (2025-11-25) with a
// server that does not speak it (upstreamVersion).
func (l *link) connect(version string) error {
	cfg := l.r.cfg
	caps, info := &mcp.ClientCapabilities{}, &mcp.Implementation{Name: "toolmux", Version: "dev"}
	if p := l.params(); p != nil {
		if p.Capabilities != nil {
			c := *p.Capabilities
			c.Extensions = withoutTasks(c.Extensions)
			caps = &c
		}
		if p.ClientInfo != nil {
			info = p.ClientInfo
		}
	}
	client := mcp.NewClient(info, &mcp.ClientOptions{
		Logger:       l.r.g.log,
		Capabilities: caps,
		// Questions a tool returns in its result are the client's to
		// answer; the gateway has no answers of its own.
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		// With handlers, a session on 2026-07-28 listens for list changes
		// (subscriptions/listen); fromServer forwards them before these
		// are reached.
		ToolListChangedHandler:     func(context.Context, *mcp.ToolListChangedRequest) {},
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) {},
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) {},
	})
	client.AddReceivingMiddleware(l.fromServer)
	client.AddSendingMiddleware(rewriteNotification, captureInput, l.legacyMeta, tasklessMeta)

	conn, err := mcpsource.Dial(cfg)
	if err != nil {
		return unavailable(cfg.Name, err)
	}
	// The session lives until the link ends (an HTTP stream is bound to
	// the context it was opened with); the timeout only cuts the
	// handshake short.
	life, cancel := context.WithCancel(l.closing)
	deadline, stopDeadline := context.WithTimeout(l.closing, cfg.ConnectTimeout)
	defer stopDeadline()
	stop := context.AfterFunc(deadline, cancel)
	v := upstreamVersion(version)
	if cfg.Transport == mcpsource.Stdio && v >= protocolModern {
		// A stdio server is not probed with server/discover: one that
		// predates it may leave a request before initialize unanswered,
		// and the handshake would wait out ConnectTimeout.
		v = protocolLegacyLatest
	}
	cs, err := client.Connect(life, conn.Transport(), &mcp.ClientSessionOptions{ProtocolVersion: v})
	if stop() && err == nil {
		l.cs, l.conn = cs, conn
		if l.modernUp() {
			l.r.upModern.Store(true)
		} else {
			l.upLegacy.Store(true)
		}
		// life is cancelled with l.closing.
		return nil
	}
	// Failed, timed out, or closed (possibly just after succeeding).
	if cs != nil {
		_ = cs.Close()
	}
	cancel()
	defer conn.Close()
	if l.r.closing.Err() != nil {
		return errRouteClosed
	}
	if deadline.Err() != nil {
		err = fmt.Errorf("no MCP handshake within %s", cfg.ConnectTimeout)
		if cfg.ConnectTimeoutHint != "" {
			err = fmt.Errorf("%w (%s)", err, cfg.ConnectTimeoutHint)
		}
	}
	if d := conn.Describe(); d != "" {
		err = fmt.Errorf("%w (%s)", err, d)
	}
	return unavailable(cfg.Name, err)
}

// withoutTasks returns the extensions a link declares upstream for its
// clients: theirs, less the tasks extension. The link follows no task (it
// dials without mcpsource's task-following, and the route offers no
// tasks), so a server told of it could answer a tools/call with a
// CreateTaskResult that nobody would poll. The clients' map is not
// changed.
func withoutTasks(ext map[string]any) map[string]any {
	if _, ok := ext[TasksExtension]; !ok {
		return ext
	}
	ext = maps.Clone(ext)
	delete(ext, TasksExtension)
	if len(ext) == 0 {
		return nil
	}
	return ext
}

// metaWithoutTasks returns m, or when the client capabilities a
// 2026-07-28 client's request carries in it (which a server on 2026-07-28
// reads per request) declare tasks, a copy without them (withoutTasks).
// Capabilities in another form than decoded JSON are the go-sdk's own,
// made from the link's, which declare no tasks.
func metaWithoutTasks(m mcp.Meta) mcp.Meta {
	caps, ok := m[mcp.MetaKeyClientCapabilities].(map[string]any)
	if !ok {
		return m
	}
	ext, ok := caps["extensions"].(map[string]any)
	if !ok {
		return m
	}
	if _, ok := ext[TasksExtension]; !ok {
		return m
	}
	caps = maps.Clone(caps)
	if ext = withoutTasks(ext); ext == nil {
		delete(caps, "extensions")
	} else {
		caps["extensions"] = ext
	}
	m = maps.Clone(m)
	m[mcp.MetaKeyClientCapabilities] = caps
	return m
}

// tasklessMeta is a sending middleware of every upstream client: what a
// client's request declares of tasks in its _meta does not go upstream
// (metaWithoutTasks).
func tasklessMeta(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if p := req.GetParams(); !isNil(p) {
			if m := p.GetMeta(); m != nil {
				p.SetMeta(metaWithoutTasks(m))
			}
		}
		return next(ctx, method, req)
	}
}

func unavailable(server string, err error) *jsonrpc.Error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("toolmux: server %s is unavailable: %v", server, err)}
}

// upstreamVersion is the version to ask the server for: the client's,
// unless this go-sdk does not know it; a client at 2025-11-25 or later has
// 2026-07-28 asked for, which the go-sdk's client tries with
// server/discover and, when the server does not speak it, falls back from
// to the initialize handshake at 2025-11-25. The gateway bridges the eras
// when client and server end up on different sides (passthrough_modern.go).
func upstreamVersion(v string) string {
	if v >= protocolLegacyLatest {
		return protocolModern
	}
	if v == "" || !slices.Contains(mcp.SupportedProtocolVersions(), v) {
		return protocolLegacyLatest
	}
	return v
}

// params is the version, identity and capabilities of the link's clients.
func (l *link) params() *mcp.InitializeParams {
	if l.ss == nil {
		return l.init
	}
	return l.ss.InitializeParams()
}

// modernUp reports whether the server speaks 2026-07-28 on the link.
func (l *link) modernUp() bool {
	r := l.cs.InitializeResult()
	return r != nil && r.ProtocolVersion >= protocolModern
}

// bind returns ctx, also cancelled when the link ends.
func (l *link) bind(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(l.closing, cancel)
	return ctx, func() { stop(); cancel() }
}

// track registers a client request being forwarded upstream, until the
// returned function is called: what the server sends meanwhile that relates
// to a request (its questions, its log messages) goes on that request's
// stream, and its progress reports find their way by token. Requests go
// upstream as the client made them: the gateway adds no progress token of
// its own, so a call's progress reaches the scheduler's events only when
// the client asked for progress.
//
// On a shared link the clients choose their tokens apart from each other,
// so two requests in flight may carry the same one: each goes upstream
// with a token of the link's own instead (p's _meta is changed until the
// returned function is called), mapped back when its progress is relayed
// (toModern).
func (l *link) track(ctx context.Context, p mcp.Params) func() {
	in := &inflight{ctx: ctx, report: tool.ProgressFrom(ctx), park: parkFrom(ctx)}
	var token any
	var meta mcp.Meta // p's own, put back at the end
	if !isNil(p) {
		meta = p.GetMeta()
		token = tokenKey(meta["progressToken"])
	}
	l.mu.Lock()
	if token != nil && l.ss == nil {
		l.tokens++
		in.token = meta["progressToken"]
		token = sharedTokenPrefix + strconv.FormatUint(l.tokens, 10)
		m := maps.Clone(meta)
		m["progressToken"] = token
		p.SetMeta(m)
	}
	l.active = append(l.active, in)
	if token != nil {
		l.progress[token] = in
	}
	l.mu.Unlock()
	return func() {
		if in.token != nil {
			p.SetMeta(meta)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.active = slices.DeleteFunc(l.active, func(x *inflight) bool { return x == in })
		if token != nil && l.progress[token] == in {
			delete(l.progress, token)
		}
		if len(l.active) == 0 && l.idle != nil {
			close(l.idle)
			l.idle = nil
		}
	}
}

// sharedTokenPrefix begins the progress tokens a shared link sends
// upstream in place of its clients' (track).
const sharedTokenPrefix = "toolmux-progress-"

// tokenKey returns a progress token usable as a map key (a string or a
// number, as the protocol has it), or nil.
func tokenKey(t any) any {
	switch t.(type) {
	case string, float64, int, int64:
		return t
	}
	return nil
}

// isNil reports whether p is nil or a nil pointer: the go-sdk hands
// handlers nil params for methods whose params may be missing.
func isNil(p any) bool {
	v := reflect.ValueOf(p)
	return !v.IsValid() || v.Kind() == reflect.Pointer && v.IsNil()
}

// related returns the client request a message of the server relates to:
// a progress report, by its token; a request or a log message, the latest
// request being forwarded; nil for the rest.
//
// The go-sdk's client does not say which of its requests a message of the
// server came with (over stdio nothing does), so the latest request is a
// guess. On a session's link every request is that client's, and the
// guess is the one an MCP client would make. On a shared link the
// requests may be several clients': a guess could put one client's
// question, or its log messages, to another, so a request or log message
// relates to a request only while that request is the link's only one.
func (l *link) related(method string, p mcp.Params) *inflight {
	l.mu.Lock()
	defer l.mu.Unlock()
	if pp, ok := p.(*mcp.ProgressNotificationParams); ok {
		if key := tokenKey(pp.ProgressToken); key != nil {
			return l.progress[key]
		}
		return nil
	}
	if strings.HasPrefix(method, "notifications/") && method != "notifications/message" {
		return nil
	}
	n := len(l.active)
	if n == 0 || l.ss == nil && n > 1 {
		return nil
	}
	return l.active[n-1]
}

// listedAs returns the server's listing of a tool (up) as the catalog
// lists it (c): the parts a pin covers (description, input schema,
// annotations) are the catalog's where they differ from the server's. The
// catalog lists a tool held because its server changed its definition
// with the pinned definition (pipeline.Pins.Shown): the route must not
// pass the new text on to the client's model, which the hold exists to
// stop, while the call is governed (refused tool_changed) like any other.
// A tool the server presents as the catalog has it goes through as the
// server sent it (its title, output schema, icons and _meta always do).
func listedAs(up *mcp.Tool, c tool.Tool) *mcp.Tool {
	want := mcpTool(c)
	if up.Description == want.Description && sameJSON(up.InputSchema, want.InputSchema) && sameJSON(up.Annotations, want.Annotations) {
		return up
	}
	out := *up
	out.Description, out.InputSchema, out.Annotations = want.Description, want.InputSchema, want.Annotations
	return &out
}

// sameJSON says whether a and b encode alike (maps with sorted keys).
func sameJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// inFlight is how many client requests are being forwarded on the link.
func (l *link) inFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.active)
}

// listTools lists the server's tools for a caller who sees sc: neither a
// tool the manager does not allow nor one the caller may not see
// (callers.go), each as the catalog holds it (listedAs).
func (l *link) listTools(ctx context.Context, sc policy.Scope, p *mcp.ListToolsParams) (*mcp.ListToolsResult, error) {
	res, err := l.cs.ListTools(ctx, p)
	if err != nil {
		return nil, upstreamError(l.r.cfg.Name, err)
	}
	cat, err := l.r.g.caller.Tools(ctx)
	if err != nil {
		return nil, err
	}
	res.Tools = slices.DeleteFunc(res.Tools, func(t *mcp.Tool) bool {
		_, ok := cat.Find(l.r.cfg.Name, t.Name)
		return !ok || !sc.Sees(l.r.cfg.Name, t.Name)
	})
	if sc.Limited() || len(l.r.groups) > 0 {
		res.CacheScope = cachePrivate // the caller's own list
	}
	for i, t := range res.Tools {
		c, _ := cat.Find(l.r.cfg.Name, t.Name)
		res.Tools[i] = listedAs(t, c)
	}
	if l.ss == nil {
		l.r.syncHeaderTools(res.Tools)
	}
	return res, nil
}

// forward sends a client's request or notification on to the server and
// returns the server's answer.
func (l *link) forward(ctx context.Context, method string, req mcp.Request, next mcp.MethodHandler) (mcp.Result, error) {
	cs := l.cs
	switch p := req.GetParams().(type) {
	case *mcp.PingParams:
		if err := cs.Ping(ctx, p); err != nil {
			return nil, upstreamError(l.r.cfg.Name, err)
		}
		return next(ctx, method, req)
	case *mcp.ListToolsParams:
		return l.listTools(ctx, l.r.g.toolScope(l.r.g.clients.callerOf(ctx, req.GetExtra())), p)
	case *mcp.ListResourcesParams:
		return answer(l, ctx, p, cs.ListResources)
	case *mcp.ListResourceTemplatesParams:
		return answer(l, ctx, p, cs.ListResourceTemplates)
	case *mcp.ReadResourceParams:
		if l.ss != nil && l.modernUp() {
			return rounds(l, ctx, p, cs.ReadResource,
				func(r *mcp.ReadResourceResult) (mcp.InputRequestMap, string) { return r.InputRequests, r.RequestState },
				func(p *mcp.ReadResourceParams, a mcp.InputResponseMap, s string) *mcp.ReadResourceParams {
					c := *p
					c.InputResponses, c.RequestState = a, s
					return &c
				})
		}
		return answer(l, ctx, p, cs.ReadResource)
	case *mcp.ListPromptsParams:
		return answer(l, ctx, p, cs.ListPrompts)
	case *mcp.GetPromptParams:
		if l.ss != nil && l.modernUp() {
			return rounds(l, ctx, p, cs.GetPrompt,
				func(r *mcp.GetPromptResult) (mcp.InputRequestMap, string) { return r.InputRequests, r.RequestState },
				func(p *mcp.GetPromptParams, a mcp.InputResponseMap, s string) *mcp.GetPromptParams {
					c := *p
					c.InputResponses, c.RequestState = a, s
					return &c
				})
		}
		return answer(l, ctx, p, cs.GetPrompt)
	case *mcp.CompleteParams:
		return answer(l, ctx, p, cs.Complete)
	case *mcp.SubscribeParams:
		if err := cs.Subscribe(ctx, p); err != nil {
			return nil, upstreamError(l.r.cfg.Name, err)
		}
		return &emptyResult{}, nil
	case *mcp.UnsubscribeParams:
		if err := cs.Unsubscribe(ctx, p); err != nil {
			return nil, upstreamError(l.r.cfg.Name, err)
		}
		return &emptyResult{}, nil
	case *mcp.SetLoggingLevelParams:
		if err := cs.SetLoggingLevel(ctx, p); err != nil {
			return nil, upstreamError(l.r.cfg.Name, err)
		}
		// The go-sdk keeps the level too.
		return next(ctx, method, req)
	case *mcp.ProgressNotificationParams:
		// The client's progress on a request of the server's.
		if err := cs.NotifyProgress(ctx, p); err != nil {
			l.r.g.log.Debug("forwarding progress", "server", l.r.cfg.Name, "error", err)
		}
		return nil, nil
	case *mcp.RootsListChangedParams:
		if err := notify(ctx, cs, methodRootsListChanged, p); err != nil {
			l.r.g.log.Debug("forwarding roots/list_changed", "server", l.r.cfg.Name, "error", err)
		}
		return nil, nil
	}
	return next(ctx, method, req)
}

// answer forwards one request with a result.
func answer[P mcp.Params, R mcp.Result](l *link, ctx context.Context, p P, call func(context.Context, P) (R, error)) (mcp.Result, error) {
	done := l.track(ctx, p)
	defer done()
	res, err := call(ctx, p)
	if err != nil {
		return nil, upstreamError(l.r.cfg.Name, err)
	}
	return res, nil
}

// rounds forwards a request of a client with a session to a server on
// 2026-07-28: questions the server answers with (input_required) are asked
// of the client, and the request made again with the answers.
func rounds[P mcp.Params, R mcp.Result](l *link, ctx context.Context, p P, call func(context.Context, P) (R, error),
	asked func(R) (mcp.InputRequestMap, string), retry func(P, mcp.InputResponseMap, string) P) (mcp.Result, error) {
	done := l.track(ctx, p)
	defer done()
	ask := l.asker(ctx)
	for round := 1; ; round++ {
		res, err := call(ctx, p)
		if err != nil {
			return nil, upstreamError(l.r.cfg.Name, err)
		}
		qs, state := asked(res)
		if qs == nil {
			return res, nil
		}
		if round >= maxRounds {
			return nil, fmt.Errorf("toolmux: the server asked more than %d rounds of questions", maxRounds)
		}
		answers, err := fulfil(ctx, ask, qs)
		if err != nil {
			return nil, err
		}
		p = retry(p, answers, state)
	}
}

// emptyResult is the {} of subscribe and unsubscribe.
type emptyResult struct{ mcp.ResultBase }

// fromServer is the upstream client's receiving middleware: the server's
// requests go to the client of the link and their answers back; its
// notifications go to the client as they are.
func (l *link) fromServer(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "ping" || method == "notifications/cancelled" {
			return next(ctx, method, req)
		}
		ctx, done := l.bind(ctx)
		defer done()
		p := req.GetParams()
		in := l.related(method, p)
		if l.ss == nil {
			return l.toModern(ctx, in, method, p, next, req)
		}
		down := ctx
		if in != nil {
			if st := leanStreamFrom(in.ctx); st != nil {
				return l.toLean(ctx, st, in, method, p, next, req)
			}
			down = relatedContext{ctx, in.ctx}
		}
		switch p := p.(type) {
		case *mcp.CreateMessageWithToolsParams:
			return toServer(l.ss.CreateMessageWithTools(down, p))
		case *mcp.ElicitParams:
			return toServer(l.ss.Elicit(down, p))
		case *mcp.ListRootsParams:
			return toServer(l.ss.ListRoots(down, p))
		case *mcp.ProgressNotificationParams:
			if in != nil && in.report != nil {
				in.report(tool.Progress{Progress: p.Progress, Total: p.Total, Message: p.Message})
			}
		}
		if strings.HasPrefix(method, "notifications/") {
			err := notify(down, l.ss, method, p)
			if err != nil && in != nil {
				// The request has been answered meanwhile: the go-sdk
				// hands a response to its caller at once but queues the
				// notifications read before it, so those sent just before
				// the server's answer can be handled just after ours.
				// They go on the client's own stream instead.
				err = notify(ctx, l.ss, method, p)
			}
			if err != nil {
				l.r.g.log.Debug("forwarding a notification", "server", l.r.cfg.Name, "method", method, "error", err)
			}
			return nil, nil
		}
		return next(ctx, method, req)
	}
}

// toLean sends what the server sends during a tools/call the gateway
// answers itself (lean.go) on that call's stream: its requests, whose
// answers go back to the server, and its notifications; a notification
// that comes after the answer goes on the client's own stream, as in
// fromServer.
func (l *link) toLean(ctx context.Context, st *leanStream, in *inflight, method string, p mcp.Params, next mcp.MethodHandler, req mcp.Request) (mcp.Result, error) {
	switch p := p.(type) {
	case *mcp.CreateMessageWithToolsParams:
		return toServer(leanAsk[mcp.CreateMessageWithToolsResult](ctx, st, method, p))
	case *mcp.ElicitParams:
		return toServer(st.elicit(ctx, p))
	case *mcp.ListRootsParams:
		return toServer(leanAsk[mcp.ListRootsResult](ctx, st, method, p))
	case *mcp.ProgressNotificationParams:
		if in.report != nil {
			in.report(tool.Progress{Progress: p.Progress, Total: p.Total, Message: p.Message})
		}
	}
	if !strings.HasPrefix(method, "notifications/") {
		return next(ctx, method, req)
	}
	if err := st.notify(method, p); err != nil {
		if err := notify(ctx, l.ss, method, p); err != nil {
			l.r.g.log.Debug("forwarding a notification", "server", l.r.cfg.Name, "method", method, "error", err)
		}
	}
	return nil, nil
}

// leanAsk asks the client of a lean stream and decodes its answer as R.
func leanAsk[R any](ctx context.Context, st *leanStream, method string, params any) (*R, error) {
	raw, err := st.request(ctx, method, params)
	if err != nil {
		return nil, err
	}
	res := new(R)
	if err := json.Unmarshal(raw, res); err != nil {
		return nil, fmt.Errorf("toolmux: the client's answer to %s: %w", method, err)
	}
	return res, nil
}

// toServer returns the client's answer to a request of the server, or its
// error as the client sent it.
func toServer[R mcp.Result](res R, err error) (mcp.Result, error) {
	var wire *jsonrpc.Error
	if errors.As(err, &wire) && !mcpwire.LocalCode(wire.Code) {
		err = wire
	}
	return result(res, err)
}

// upstreamError is the error a client gets for a request the server
// failed: the server's JSON-RPC error as it was, or an internal error
// saying what happened to the connection.
func upstreamError(server string, err error) error {
	var wire *jsonrpc.Error
	switch {
	case errors.As(err, &wire) && !mcpwire.LocalCode(wire.Code):
		return wire
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return unavailable(server, err)
}

// relatedContext lives as long as its Context but carries the values of
// req first: the go-sdk sends what is sent with it on the stream of the
// client request req is the context of.
type relatedContext struct {
	context.Context
	req context.Context
}

func (c relatedContext) Value(key any) any {
	if v := c.req.Value(key); v != nil {
		return v
	}
	return c.Context.Value(key)
}

type rewriteKey struct{}

type rewrite struct {
	method string
	params mcp.Params
}

// notify sends any notification to the peer of a session. The go-sdk
// exports senders for a few notifications only (progress among them), so
// notify sends a progress notification with the real one in its context,
// and rewriteNotification, a sending middleware of the route's server and
// of every upstream client, swaps it in.
func notify(ctx context.Context, s mcp.Session, method string, params mcp.Params) error {
	if p, ok := params.(*mcp.ProgressNotificationParams); ok && method == methodProgress {
		return notifyProgress(ctx, s, p)
	}
	return notifyProgress(context.WithValue(ctx, rewriteKey{}, rewrite{method, params}), s, &mcp.ProgressNotificationParams{})
}

func notifyProgress(ctx context.Context, s mcp.Session, p *mcp.ProgressNotificationParams) error {
	switch s := s.(type) {
	case *mcp.ServerSession:
		return s.NotifyProgress(ctx, p)
	case *mcp.ClientSession:
		return s.NotifyProgress(ctx, p)
	}
	return fmt.Errorf("toolmux: cannot notify a %T", s)
}

func rewriteNotification(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if rw, ok := ctx.Value(rewriteKey{}).(rewrite); ok && method == methodProgress {
			switch s := req.GetSession().(type) {
			case *mcp.ServerSession:
				req = &mcp.ServerRequest[mcp.Params]{Session: s, Params: rw.params}
			case *mcp.ClientSession:
				req = &mcp.ClientRequest[mcp.Params]{Session: s, Params: rw.params}
			}
			method = rw.method
			ctx = context.WithValue(ctx, rewriteKey{}, nil)
		}
		return next(ctx, method, req)
	}
}

// leanCall answers a tools/call of the route itself (lean.go): governed
// as in receive, its last hop over the session's link.
func (r *route) leanCall(w http.ResponseWriter, req *http.Request, sid string, body []byte, msg jsonscan.Message) bool {
	switch string(msg.Method) {
	case `"tools/list"`, `"ping"`:
		return r.leanBare(w, req, sid, body, msg)
	}
	rq, params, ok := leanRequest(req, body, msg)
	if !ok {
		return false
	}
	return r.serveLean(w, req, sid, rq.ID, func(ctx context.Context, l *link, st *leanStream) (any, error) {
		return r.callTool(withLeanStream(ctx, st), l, &mcp.CallToolRequest{Session: l.ss, Params: params})
	})
}

// leanBare answers a session's tools/list (without a cursor) or ping of
// the route itself (lean.go), as receive forwards them: the server's
// list, as the caller may see it; the server's answer to a ping.
func (r *route) leanBare(w http.ResponseWriter, req *http.Request, sid string, body []byte, msg jsonscan.Message) bool {
	method, _ := unquote(msg.Method)
	rq, ok := leanBare(req, body, msg, method)
	if !ok {
		return false
	}
	return r.serveLean(w, req, sid, rq.ID, func(ctx context.Context, l *link, _ *leanStream) (any, error) {
		if method == "ping" {
			if err := l.cs.Ping(ctx, nil); err != nil {
				return nil, upstreamError(r.cfg.Name, err)
			}
			return pingResult, nil
		}
		return l.listTools(ctx, r.g.toolScope(identity.From(ctx)), &mcp.ListToolsParams{})
	})
}

// serveLean serves request id of session sid of the route itself
// (clients.serveLean), run making its answer over the session's link; it
// reports false, having written nothing, when the session is not one of
// the route's, initialized.
func (r *route) serveLean(w http.ResponseWriter, req *http.Request, sid string, id json.RawMessage,
	run func(ctx context.Context, l *link, st *leanStream) (any, error)) bool {
	rec := r.g.clients.lookup(sid, r.path())
	if rec == nil || rec.ss.InitializeParams() == nil {
		return false
	}
	ss := rec.ss
	return r.g.clients.serveLean(w, req, rec, id, func(ctx context.Context, st *leanStream) (any, error) {
		l, err := r.link(ctx, ss, ss.InitializeParams().ProtocolVersion)
		if err != nil {
			return nil, err
		}
		ctx, done := l.bind(ctx)
		defer done()
		return run(ctx, l, st)
	})
}

// await waits until the link is up (or failed to come up), at most as
// long as ctx.
func (l *link) await(ctx context.Context) (*link, error) {
	select {
	case <-l.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if l.err != nil {
		return nil, l.err
	}
	return l, nil
}
