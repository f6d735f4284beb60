package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/tool"
)

// SessionLog records the gateway's client sessions as tasks: a session
// starts a task named after its client, every call of the session is
// recorded under that task, and the task ends when the session does,
// saying how. The task log implements it through an adapter (serve's).
type SessionLog interface {
	// SessionStarted is told of a session when the gateway first sees it
	// (its initialize request, or its first request if it skipped one).
	SessionStarted(ctx context.Context, s Session)
	// SessionEnded is told once, when the session has ended.
	SessionEnded(ctx context.Context, s Session, end SessionEnd)
}

// Session is a client session as the gateway records it.
type Session struct {
	// Task is the id of the session's task; its calls carry it.
	Task string
	// Route is where the client connected: "/mcp",
	// "/servers/NAME/mcp", "/virtual/NAME/mcp", or "stdio".
	Route string
	// ClientName and ClientVersion are the client's clientInfo, as it
	// introduced itself at initialize ("" if it did not).
	ClientName, ClientVersion string
	// Protocol is the MCP protocol version negotiated.
	Protocol string
	// Sessionless says the "session" is a client of protocol 2026-07-28
	// or later over HTTP, which has none: the task holds the calls of
	// one client identity (ClientName, ClientVersion) of one caller on
	// the route, and ends after the idle timeout without a call
	// (docs/gateway.md).
	Sessionless bool
	// Caller is who opened the session (its initialize request's
	// caller; a sessionless client's); nil when no authentication is
	// configured. The session is its alone (owners.go).
	Caller  *identity.Ref
	Started time.Time
}

// How a session ended, in [SessionEnd.How].
const (
	// EndClosed: the client ended it (HTTP DELETE; end of stdin).
	EndClosed = "closed"
	// EndIdle: no request came for the session idle timeout.
	EndIdle = "idle"
	// EndShutdown: the gateway stopped.
	EndShutdown = "shutdown"
)

// SessionEnd says how a session ended.
type SessionEnd struct {
	// How is EndClosed, EndIdle or EndShutdown.
	How string
	// Message says it in a sentence.
	Message string
	At      time.Time
}

// clients tracks the client sessions of the gateway's routes, and which
// HTTP request each call arrived in.
type clients struct {
	log  SessionLog
	idle time.Duration // the HTTP session idle timeout, for messages
	// ended is told of each session that ended, after its calls in
	// flight were cancelled (the window of re-issued requests ends those
	// it keeps in their grace).
	ended func(sid string)

	stopping atomic.Bool   // BeginShutdown was called
	nextPost atomic.Uint64 // names the POSTs in flight (the client cannot set the header: it is overwritten)
	authOn   atomic.Bool   // MuxAuth verifies callers (callerOf)
	wg       sync.WaitGroup

	mu      sync.Mutex
	byPtr   map[*mcp.ServerSession]*tracked
	byID    map[string]*tracked        // HTTP sessions by id
	deleted map[string]bool            // session ids the client sent DELETE for
	posts   map[string]context.Context // HTTP request contexts by postHeader value

	// Clients without a session (era.go): their tasks by route and
	// identity, the task of each temporary session making a call, and
	// the subscriptions/listen streams open.
	byClient    map[string]*client
	sessionless map[*mcp.ServerSession]*client
	listens     map[*mcp.ServerSession]struct{}
	maxClients  int // maxClients; tests lower it
}

func newClients(log SessionLog, idle time.Duration) *clients {
	return &clients{log: log, idle: idle, byPtr: map[*mcp.ServerSession]*tracked{}, byID: map[string]*tracked{},
		deleted: map[string]bool{}, posts: map[string]context.Context{},
		byClient: map[string]*client{}, sessionless: map[*mcp.ServerSession]*client{}, listens: map[*mcp.ServerSession]struct{}{},
		maxClients: maxClients}
}

// tracked is a session the gateway follows, with the idle timeout of its
// route.
type tracked struct {
	Session
	idle time.Duration
	ss   *mcp.ServerSession

	// Guarded by clients.mu.
	ended bool
	// closed says the client ended the session (stdio: its end of the
	// connection), whatever the gateway does meanwhile.
	closed bool
	// An HTTP session ends after idle without a request: timer runs
	// while no POST of the session is being served (posts counts them).
	posts int
	timer *time.Timer
	// The tools/calls the gateway answers itself (lean.go) in flight,
	// by raw JSON-RPC id, and the answers their questions to the client
	// wait for, by the id of the question.
	calls map[string]context.CancelCauseFunc
	asks  map[string]chan clientAnswer
}

// track starts following a session, and its task, the first time it is
// seen: from the initialize request's parameters when it is one. idle is
// its route's idle timeout (0: the gateway's).
func (s *clients) track(ctx context.Context, ss *mcp.ServerSession, route string, idle time.Duration, init *mcp.InitializeParams) {
	s.mu.Lock()
	if s.byPtr[ss] != nil {
		s.mu.Unlock()
		return
	}
	if idle <= 0 {
		idle = s.idle
	}
	rec := &tracked{Session: Session{Task: ss.ID(), Route: route, Caller: identity.RefFrom(ctx), Started: time.Now()}, idle: idle, ss: ss}
	if rec.Task == "" {
		// A stdio session has no id of its own.
		rec.Task = tool.NewID()
	}
	if init == nil {
		init = ss.InitializeParams()
	}
	if init != nil {
		rec.Protocol = init.ProtocolVersion
		if ci := init.ClientInfo; ci != nil {
			rec.ClientName, rec.ClientVersion = ci.Name, ci.Version
		}
	}
	s.byPtr[ss] = rec
	if id := ss.ID(); id != "" {
		// The go-sdk's own idle timeout would not see the requests the
		// gateway answers itself: the gateway keeps the timeout.
		s.byID[id] = rec
		rec.timer = time.AfterFunc(idle, func() { _ = ss.Close() })
	}
	s.wg.Add(1)
	s.mu.Unlock()
	if s.log != nil {
		s.log.SessionStarted(context.WithoutCancel(ctx), rec.Session)
	}
	go s.watch(ss, rec)
}

// task returns the task of a session the gateway tracks, else its id.
func (s *clients) task(ss *mcp.ServerSession) string {
	if ss == nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec := s.byPtr[ss]; rec != nil {
		return rec.Task
	}
	if c := s.sessionless[ss]; c != nil {
		return c.Task
	}
	return ss.ID()
}

// watch waits for the session to end and records how.
func (s *clients) watch(ss *mcp.ServerSession, rec *tracked) {
	defer s.wg.Done()
	_ = ss.Wait()
	end := SessionEnd{At: time.Now()}
	s.mu.Lock()
	deleted := s.deleted[ss.ID()] || rec.closed
	delete(s.deleted, ss.ID())
	delete(s.byPtr, ss)
	if s.byID[ss.ID()] == rec {
		delete(s.byID, ss.ID())
	}
	rec.ended = true
	if rec.timer != nil {
		rec.timer.Stop()
	}
	calls := rec.calls
	rec.calls = nil
	s.mu.Unlock()
	// The calls of a session end with it, as the go-sdk ends those it
	// runs.
	for _, cancel := range calls {
		cancel(errSessionEnded)
	}
	if s.ended != nil {
		s.ended(rec.Task)
	}
	switch {
	case deleted:
		end.How, end.Message = EndClosed, "the client closed the session"
	case s.stopping.Load():
		end.How, end.Message = EndShutdown, "the gateway stopped"
	case rec.Route == routeStdio:
		end.How, end.Message = EndClosed, "the client closed the connection"
	default:
		end.How, end.Message = EndIdle, "no request from the client for "+rec.idle.String()+": the session timed out"
	}
	if s.log != nil {
		s.log.SessionEnded(context.Background(), rec.Session, end)
	}
}

// routeStdio names the stdio transport's sessions.
const routeStdio = "stdio"

// postHeader carries, from the HTTP handler to the tool handler, the HTTP
// request a call arrived in: the go-sdk gives a tool handler that
// request's header (RequestExtra.Header) but not its context.
const postHeader = "Toolmux-Request"

// errClientGone ends a call whose client closed the HTTP request it came
// in (the cause the records and the approval queue quote).
var errClientGone = errors.New("the client closed the request (its connection ended)")

// serveHTTP wraps an MCP handler: each POST is registered, so its calls
// can be bound to it, and each DELETE marks its session closed by the
// client. A client cannot set the header itself: it is overwritten.
func (s *clients) serveHTTP(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del(postHeader)
		switch r.Method {
		case http.MethodPost:
			id := strconv.FormatUint(s.nextPost.Add(1), 36)
			r.Header.Set(postHeader, id)
			s.mu.Lock()
			s.posts[id] = r.Context()
			s.mu.Unlock()
			defer func() {
				s.mu.Lock()
				delete(s.posts, id)
				s.mu.Unlock()
			}()
		case http.MethodDelete:
			if sid := r.Header.Get("Mcp-Session-Id"); sid != "" {
				s.mu.Lock()
				s.markDeletedLocked(sid)
				s.mu.Unlock()
			}
		}
		h.ServeHTTP(w, r)
	})
}

// errSessionEnded ends the calls of a session that ended.
var errSessionEnded = errors.New("the client's session ended")

// lookup returns the session with id sid on route, if the gateway tracks
// it. A session its client sent DELETE for is not returned: the go-sdk
// closes it after answering the DELETE, and a request that comes in
// between must be answered as of a session that ended (404, by the
// go-sdk, which the request goes to when it is not served here).
func (s *clients) lookup(sid, route string) *tracked {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec := s.byID[sid]; rec != nil && rec.Route == route && !rec.ended && !s.deleted[sid] {
		return rec
	}
	return nil
}

// busy notes a POST of session sid being served, until the returned
// function is called: meanwhile the session does not idle out.
func (s *clients) busy(sid string) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.byID[sid]
	if rec == nil || rec.ended {
		return func() {}
	}
	if rec.posts++; rec.posts == 1 {
		rec.timer.Stop()
	}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if rec.posts--; rec.posts == 0 && !rec.ended {
			rec.timer.Reset(rec.idle)
		}
	}
}

// markDeletedLocked notes a DELETE for session sid, if the gateway
// tracks such a session (so that ids of unknown sessions cannot grow the
// set); s.mu is held.
func (s *clients) markDeletedLocked(sid string) {
	if s.byID[sid] != nil {
		s.deleted[sid] = true
	}
}

// bind returns ctx ended also when the HTTP request the call arrived in
// ends: toolmux keeps no event store to resume a stream from, so once
// that request is gone the answer can never be delivered, and a call
// still waiting for approval must be withdrawn (and one running
// cancelled) rather than go on for nobody. Calls that did not arrive over
// HTTP (stdio, in memory) are bound by their session alone.
//
// The call's context carries the caller of the request it came in
// (callerOf), for every decision after: the policy's, the approver's.
func (s *clients) bind(ctx context.Context, extra *mcp.RequestExtra) (context.Context, context.CancelFunc) {
	if extra == nil || extra.Header == nil {
		return ctx, func() {}
	}
	post := s.post(extra.Header.Get(postHeader))
	if post == nil {
		if s.authOn.Load() {
			return identity.With(ctx, unknownCaller), func() {}
		}
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(carryOrigin(ctx, post))
	if c := identity.From(post); c != nil {
		// The request's caller, not the session's context's.
		ctx = identity.With(ctx, c)
	}
	stop := context.AfterFunc(post, func() { cancel(errClientGone) })
	return ctx, func() {
		stop()
		cancel(nil)
	}
}

// wait waits for the sessions' watchers, after the sessions were closed.
func (s *clients) wait() { s.wg.Wait() }

// inputEnded marks the stdio sessions as ended by their client.
func (s *clients) inputEnded() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rec := range s.byPtr {
		if rec.Route == routeStdio {
			rec.closed = true
		}
	}
}
