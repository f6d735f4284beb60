package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/identity"
)

// Ownership (docs/identity.md "Ownership", docs/gateway.md): what a
// caller makes on the gateway belongs to it. An MCP task is read,
// answered and cancelled by its caller only (and by members of
// Options.AdminGroups); a client session is used by the caller that
// opened it only; a re-issued request is answered from the execution of
// the same caller's request only. To any other caller these are not
// found, as an id nobody made is, so that an id learnt or guessed tells
// nothing. Where no authentication is configured there is no caller, and
// everything is everyone's, as before.

// scope is what the caller ctx carries sees of what callers own.
func (g *Gateway) scope(ctx context.Context) identity.Scope {
	return identity.ScopeOf(identity.From(ctx), g.admins)
}

// callerMiddleware gives a request the go-sdk serves the caller of the
// HTTP request it came in: a method handler of a session gets the
// context of the session, which carries the caller of its initialize
// request (or none), not the request's own. Added last to a server, it is
// outermost: every middleware and handler after it sees the caller.
func (g *Gateway) callerMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if x := req.GetExtra(); x != nil && x.Header != nil {
			if c := g.clients.postCaller(x.Header.Get(postHeader)); c != nil {
				ctx = identity.With(ctx, c)
			}
		}
		return next(ctx, method, req)
	}
}

// postCaller returns the caller of the POST in flight named id (the
// postHeader clients.serveHTTP set); nil when none.
func (s *clients) postCaller(id string) *identity.Caller {
	if id == "" {
		return nil
	}
	s.mu.Lock()
	post := s.posts[id]
	s.mu.Unlock()
	if post == nil {
		return nil
	}
	return identity.From(post)
}

// foreignSession reports whether session sid, which the gateway tracks,
// was opened by another caller than the one ctx carries. A request
// without a caller (no authentication) uses any session.
func (s *clients) foreignSession(sid string, ctx context.Context) bool {
	c := identity.From(ctx)
	if c == nil || sid == "" {
		return false
	}
	s.mu.Lock()
	rec := s.byID[sid]
	s.mu.Unlock()
	return rec != nil && (rec.Caller == nil || rec.Caller.Key != c.Key())
}

// refuseForeignSession answers a request naming a session of another
// caller as one naming a session that does not exist is answered (404,
// -32001 "session not found"), and reports whether it did.
func (g *Gateway) refuseForeignSession(w http.ResponseWriter, r *http.Request, id json.RawMessage) bool {
	if !g.clients.foreignSession(r.Header.Get(sessionHeader), r.Context()) {
		return false
	}
	writeRPCError(w, http.StatusNotFound, id, codeSessionNotFound, "session not found")
	return true
}

// requesterOf is what the window of re-issued requests keys a request's
// client by (reissue.go): its caller's key when it has one, so that a
// caller whose token was refreshed finds its request again and another
// caller never does, whatever id it sends; else a hash of the
// Authorization header (a static token, or none).
func requesterOf(r *http.Request) authHash {
	if c := identity.From(r.Context()); c != nil {
		return sha256.Sum256([]byte("caller\x00" + c.Key()))
	}
	return sha256.Sum256([]byte(r.Header.Get("Authorization")))
}
