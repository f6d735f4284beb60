package gateway

import (
	"context"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/policy"
)

// What each caller sees (docs/identity.md "Governance per caller"). The
// gateway's views register every tool of a route on one go-sdk server,
// shared by all the route's clients, so what a caller may see is applied
// to each request as it is answered: tools/list is filtered, and a
// tools/call (direct, through call_tool, or as a task) of a tool the
// caller may not see is answered as the call of a tool that does not
// exist. A virtual server or passthrough route limited to groups is, for
// anyone else, a route that does not exist (404).
//
// The caller of a request is the one MuxAuth verified for its HTTP
// request (identity.From of that request's context). The go-sdk hands its
// handlers a context of the session, not of the POST the message came in
// (a session's context may hold the first request's values, its
// initializer's caller), so the gateway finds the POST by the header
// clients.serveHTTP sets (postHeader) and takes the caller from there.

// callerOf returns the caller of the MCP request whose transport extra
// is extra, handled with ctx: the caller of the HTTP POST it came in,
// else ctx's (the gateway's own paths, which run in the POST's context;
// stdio, which has no caller). A request that came over HTTP whose POST
// is no longer served, behind authentication, is nobody's: it sees
// nothing (unknownCaller), rather than whatever the context holds.
func (s *clients) callerOf(ctx context.Context, extra *mcp.RequestExtra) *identity.Caller {
	if extra == nil || extra.Header == nil {
		return identity.From(ctx)
	}
	if post := s.post(extra.Header.Get(postHeader)); post != nil {
		return identity.From(post)
	}
	if s.authOn.Load() {
		return unknownCaller
	}
	return identity.From(ctx)
}

// unknownCaller is the caller of a request whose caller cannot be told:
// in no group, it sees no tool that visibility limits and no route
// limited to groups.
var unknownCaller = &identity.Caller{Name: "(unknown)", Subject: "(unknown)"}

// post returns the context of the HTTP POST named id (postHeader), nil
// when none is being served.
func (s *clients) post(id string) context.Context {
	if id == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.posts[id]
}

// cachePrivate is the cache scope of a list only its caller may be
// served from a cache (a 2026-07-28 result's cacheScope, as HTTP's
// Cache-Control: private): one filtered for its caller, or of a route
// limited to groups.
const cachePrivate = "private"

// visibility is what each caller may see now (Options.Visibility).
func (g *Gateway) visibility() *policy.Visibility {
	if g.visible == nil {
		return nil
	}
	return g.visible()
}

// toolScope is what c may see of the tools.
func (g *Gateway) toolScope(c *identity.Caller) policy.Scope { return g.visibility().For(c) }

// mayUse reports whether c may use a route limited to groups (nil or
// empty: everyone): members of one of them and of the admin groups, and
// every request where callers are not known.
func (g *Gateway) mayUse(c *identity.Caller, groups []string) bool {
	return len(groups) == 0 || c == nil || c.InAny(g.admins) || c.InAny(groups)
}

// visibleRoutes returns the names of the routes c may use, of those
// with their groups in groups.
func visibleRoutes[T any](g *Gateway, c *identity.Caller, routes map[string]T, groups func(T) []string) []string {
	var out []string
	for name, r := range routes {
		if g.mayUse(c, groups(r)) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
