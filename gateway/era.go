package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/tool"
)

// Both protocol eras on one route. MCP 2026-07-28 has no sessions: every
// request carries the client's version, capabilities and identity in its
// _meta (and the version in the Mcp-Protocol-Version header). The go-sdk
// serves it only from a streamable handler with Stateless set, which makes
// a temporary session for each request; a stateful handler refuses it. So
// /mcp and each virtual server have two go-sdk handlers on the same
// mcp.Server (its tools, their sync and its list_changed shared), and each
// POST goes to the one of its era, chosen as the specification's version
// negotiation says (newEra). GETs and DELETEs, which the new protocol does
// not have, go to the stateful handler.

// eras is an MCP route's pair of handlers: legacy (stateful, sessions
// from initialize on) and modern (stateless, 2026-07-28 and later). As an
// http.Handler it is the legacy one; jsonRPCErrors sends a POST of the
// new protocol to modern.
type eras struct {
	legacy, modern http.Handler
}

func (e eras) ServeHTTP(w http.ResponseWriter, r *http.Request) { e.legacy.ServeHTTP(w, r) }

// pick returns the handler of a request's era.
func pick(h http.Handler, modern bool) http.Handler {
	if e, ok := h.(eras); ok {
		if modern {
			return e.modern
		}
		return e.legacy
	}
	return h
}

// metaProtocolVersion is the _meta key of a 2026-07-28 request's version.
const metaProtocolVersion = "io.modelcontextprotocol/protocolVersion"

// newEra reports whether a POST belongs to the sessionless protocol: its
// Mcp-Protocol-Version header names 2026-07-28 or later, or its params'
// _meta carries a protocol version, or it is server/discover (the new
// protocol's first request, which an older client never sends).
//
// The body is looked into only when it may say so and cheaply: a client
// of 2025-06-18 or later sends the header with every request but
// initialize, and a 2026-07-28 client with every request, so when the
// header is there, a version older than 2026-07-28 is a session's request
// unless its body names the _meta key (the go-sdk then answers the
// mismatch); a body is decoded only if it names the key or the method
// literally. A session's tools/call (the gateway's own path, lean.go)
// costs one substring search. A body that spells them with escapes goes
// to the sessions' handler, which refuses a 2026-07-28 request: its
// client falls back to a session.
func newEra(h http.Header, body []byte) bool {
	v := h.Get("Mcp-Protocol-Version")
	if v >= multiRoundTrip {
		return true
	}
	hasKey := bytes.Contains(body, []byte(metaProtocolVersion))
	if !hasKey && (v != "" || !bytes.Contains(body, []byte(methodDiscover))) {
		return false
	}
	var m struct {
		Method string `json:"method"`
		Params struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &m) != nil {
		return false // a batch, or malformed: the legacy handler judges it
	}
	if m.Method == methodDiscover {
		return true
	}
	_, ok := m.Params.Meta[metaProtocolVersion]
	return ok
}

const methodDiscover = "server/discover"

// unserved reports whether a request of the new protocol names a method
// route does not serve: /mcp and the virtual servers serve tools only
// (their server/discover declares no other capability), yet the go-sdk
// would answer prompts/list, resources/list and the like with empty
// lists, which a 2026-07-28 client reads as a capability the server did
// not declare. They are answered 404, method not found, as the new
// protocol answers a method a server does not have. (A legacy session
// still gets the go-sdk's empty lists, as before.)
func unserved(route, method string) bool {
	if strings.HasPrefix(route, "/servers/") {
		return false // a passthrough route serves what its server has
	}
	return strings.HasPrefix(method, "prompts/") || strings.HasPrefix(method, "resources/") || method == "completion/complete"
}

// statelessOptions are the options of a route's handler of the new
// protocol: as streamableOptions, sessionless. A request's handler ends
// with its HTTP request (PropagateRequestCancellation): on 2026-07-28 the
// POST is the whole life of a request, and an answer nobody can receive
// is not worth computing.
func (g *Gateway) statelessOptions(protected bool) *mcp.StreamableHTTPOptions {
	o := g.streamableOptions(protected)
	o.Stateless = true
	o.PropagateRequestCancellation = true
	return o
}

// sessionless reports whether a request came over HTTP without a session:
// a 2026-07-28 request, in the temporary session the go-sdk's stateless
// handler makes for it. (A stdio session has no id either, but its
// requests carry no HTTP header.)
func sessionless(ss *mcp.ServerSession, req mcp.Request) bool {
	extra := req.GetExtra()
	return ss.ID() == "" && extra != nil && extra.Header != nil
}

// sessionlessMiddleware is what a route's session middleware does for a
// request without a session: a tools/call is given the task of its client
// (clients.client) for as long as it runs; a subscriptions/listen stream
// is followed so that a shutdown can end it.
func (g *Gateway) sessionlessMiddleware(ctx context.Context, route string, ss *mcp.ServerSession, method string,
	req mcp.Request, next mcp.MethodHandler) (mcp.Result, error) {
	switch method {
	case "tools/call":
		defer g.clients.client(ctx, ss, route)()
	case "subscriptions/listen":
		if !g.clients.listening(ss) {
			// The gateway is stopping: the stream would hold the
			// shutdown up for nothing.
			return nil, errStopping
		}
		defer g.clients.listened(ss)
	}
	return next(ctx, method, req)
}

// errStopping refuses a listen stream opened while the gateway stops.
var errStopping = errors.New("toolmux is shutting down")

// A client of the new protocol has no session, so no session's task: its
// calls belong to the task of its identity on the route (the name and
// version of the clientInfo in its requests' _meta, "" if it sends none),
// started at its first call and ended after the route's idle timeout
// without a call, or when the gateway stops. So every call still has a
// task, and the page shows a client's calls together.

// maxClients bounds the tasks of sessionless clients open at once
// (clients.maxClients): the identity is the client's to choose, so
// without a bound a client could make the gateway hold one per request.
// Beyond it the least recently active idle one is ended first.
const maxClients = 1024

// client is the task of a sessionless client on a route.
type client struct {
	Session
	key   string
	idle  time.Duration
	calls int         // in flight; guarded by clients.mu
	last  time.Time   // of its last call's end or start
	timer *time.Timer // runs while no call is in flight
	ended bool
}

// client gives the call running in the temporary session ss the task of
// its client on route, started if there is none, until the returned
// function is called.
func (s *clients) client(ctx context.Context, ss *mcp.ServerSession, route string) func() {
	c, done := s.clientTask(ctx, ss.InitializeParams(), route)
	s.mu.Lock()
	s.sessionless[ss] = c
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.sessionless, ss)
		s.mu.Unlock()
		done()
	}
}

// clientTask returns the task of the client that declared p on route,
// started if there is none, held by one more call until done is called.
func (s *clients) clientTask(ctx context.Context, p *mcp.InitializeParams, route string) (_ *client, done func()) {
	var name, version, protocol string
	if p != nil {
		protocol = p.ProtocolVersion
		if p.ClientInfo != nil {
			name, version = p.ClientInfo.Name, p.ClientInfo.Version
		}
	}
	// One caller's client is not another's, whatever it calls itself.
	caller := identity.RefFrom(ctx)
	key := route + "\x00" + name + "\x00" + version
	if caller != nil {
		key += "\x00" + caller.Key
	}
	s.mu.Lock()
	c := s.byClient[key]
	started := c == nil
	var evicted *client
	if started {
		if len(s.byClient) >= s.maxClients {
			evicted = s.oldestIdleLocked()
		}
		c = &client{Session: Session{Task: tool.NewID(), Route: route, ClientName: name, ClientVersion: version,
			Protocol: protocol, Sessionless: true, Caller: caller, Started: time.Now()}, key: key, idle: s.idle}
		s.byClient[key] = c
		s.wg.Add(1)
	}
	c.calls++
	c.last = time.Now()
	if c.timer != nil {
		c.timer.Stop()
	}
	s.mu.Unlock()
	if evicted != nil {
		s.endClient(evicted, SessionEnd{At: time.Now(), How: EndIdle,
			Message: "more clients without a session than the gateway keeps tasks for: the least recently active one's task ended"})
	}
	if started && s.log != nil {
		s.log.SessionStarted(context.WithoutCancel(ctx), c.Session)
	}
	return c, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		c.last = time.Now()
		if c.calls--; c.calls > 0 || c.ended {
			return
		}
		if c.timer == nil {
			c.timer = time.AfterFunc(c.idle, func() { s.idleClient(c) })
		} else {
			c.timer.Reset(c.idle)
		}
	}
}

// oldestIdleLocked takes out the least recently active client with no
// call in flight, if any; s.mu is held.
func (s *clients) oldestIdleLocked() *client {
	var old *client
	for _, c := range s.byClient {
		if c.calls == 0 && (old == nil || c.last.Before(old.last)) {
			old = c
		}
	}
	if old != nil {
		s.takeClientLocked(old)
	}
	return old
}

// takeClientLocked marks c ended and forgets it; s.mu is held. Whoever
// takes it records its end (endClient), once.
func (s *clients) takeClientLocked(c *client) {
	c.ended = true
	if c.timer != nil {
		c.timer.Stop()
	}
	if s.byClient[c.key] == c {
		delete(s.byClient, c.key)
	}
}

// idleClient ends c's task when its idle timeout has passed without a
// call (unless a call started meanwhile).
func (s *clients) idleClient(c *client) {
	s.mu.Lock()
	if c.ended || c.calls > 0 || time.Since(c.last) < c.idle {
		s.mu.Unlock()
		return
	}
	s.takeClientLocked(c)
	s.mu.Unlock()
	s.endClient(c, SessionEnd{At: time.Now(), How: EndIdle,
		Message: "no call from the client for " + c.idle.String() + ": its task ended"})
}

// endClient records the end of a client's task taken out.
func (s *clients) endClient(c *client, end SessionEnd) {
	defer s.wg.Done()
	if s.log != nil {
		s.log.SessionEnded(context.Background(), c.Session, end)
	}
}

// closeClients ends the tasks of the sessionless clients: the gateway
// stops.
func (s *clients) closeClients() {
	s.mu.Lock()
	var all []*client
	for _, c := range s.byClient {
		s.takeClientLocked(c)
		all = append(all, c)
	}
	s.mu.Unlock()
	for _, c := range all {
		s.endClient(c, SessionEnd{At: time.Now(), How: EndShutdown, Message: "the gateway stopped"})
	}
}

// listening notes a subscriptions/listen stream of temporary session ss,
// so that a shutdown ends it; false when the gateway is stopping already.
func (s *clients) listening(ss *mcp.ServerSession) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping.Load() {
		return false
	}
	s.listens[ss] = struct{}{}
	return true
}

// listened forgets a listen stream that ended.
func (s *clients) listened(ss *mcp.ServerSession) {
	s.mu.Lock()
	delete(s.listens, ss)
	s.mu.Unlock()
}

// stopListens ends the subscriptions/listen streams: a stream never ends
// by itself, and a shutdown waits for the POSTs in flight (a client told
// nothing more reconnects to whichever gateway serves next).
func (s *clients) stopListens() {
	s.mu.Lock()
	sessions := make([]*mcp.ServerSession, 0, len(s.listens))
	for ss := range s.listens {
		sessions = append(sessions, ss)
	}
	s.mu.Unlock()
	for _, ss := range sessions {
		_ = ss.Close()
	}
}

// The caching hints of list results (SEP-2549: ttlMs, cacheScope), the
// same on every route of the gateway's own (and on server/discover).
//
// cacheScope is "public": a list does not depend on who asks. The view of
// a route is the same for every client (one token, no per-client filter;
// tool search, pinning and a virtual server's renames are per route, not
// per client), so any cache may serve it to any client of the route.
//
// ttlMs is 0, "stale at once": the catalog changes under the clients at
// any time (a server crashes, is restarted, comes back; a reload adds and
// removes servers), and a client that does not listen (list_changed on a
// legacy session's stream, subscriptions/listen on 2026-07-28) would act
// on a list up to the TTL old. A re-list costs a client one request to a
// gateway that answers it from the tools it has registered; what a
// model's prompt cache needs is the same list in the same order, which
// the order of tools/list gives (sorted by name, stable across calls and
// pages) whatever the TTL.
const listTTLMs = 0

// setCacheable is the servers' ServerOptions.SetCacheable.
func setCacheable(_ context.Context, _ mcp.Request, c *mcp.Cacheable) {
	c.TTLMs = listTTLMs
	c.CacheScope = "public"
}

// inputRequired is the result asking the client of a 2026-07-28 request
// the questions q, to be answered by retrying the request: resultType
// input_required. The go-sdk sets it on results of the tools it has
// registered; a call it does not see as one (a tool hidden by tool
// search, one of a server that is down) is answered by the gateway's
// middleware, so the result says it itself. The field is unexported: it
// is set the one way the go-sdk offers, by decoding.
func inputRequired(q mcp.InputRequestMap) *mcp.CallToolResult {
	res := new(mcp.CallToolResult)
	_ = json.Unmarshal([]byte(`{"resultType":"input_required"}`), res)
	res.InputRequests = q
	return res
}

// protocolModern is the first protocol version without sessions: no
// initialize, the client's version, identity and capabilities in every
// request's _meta, multi round-trip requests (input_required) instead of
// the server's requests to the client.
const protocolModern = multiRoundTrip

// protocolLegacyLatest is the newest protocol version with sessions (the
// initialize handshake).
const protocolLegacyLatest = "2025-11-25"

// modernRequest reports whether an HTTP request is of the sessionless
// protocol: its MCP-Protocol-Version header names 2026-07-28 or later,
// which such a client sends with every request (server/discover
// included). Requests of the older protocols carry an older version, or
// none before initialize.
func modernRequest(req *http.Request) bool {
	return req.Header.Get("Mcp-Protocol-Version") >= protocolModern
}
