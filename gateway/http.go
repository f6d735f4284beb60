package gateway

import (
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/webui"
)

// IsLoopback reports whether addr (host:port) listens on loopback only.
// An empty host means every interface, which is not loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// bearerToken reads the credentials of an Authorization header of the
// Bearer scheme (RFC 6750 section 2.1, the scheme matched without regard
// to case, RFC 7235 section 2.1): the token after the scheme and one or
// more spaces, without the whitespace around the whole value. ok is
// false for another scheme, or no token.
func bearerToken(header string) (token string, ok bool) {
	const scheme = "Bearer"
	header = strings.TrimSpace(header)
	if len(header) <= len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) || header[len(scheme)] != ' ' {
		return "", false
	}
	token = strings.TrimLeft(header[len(scheme):], " ")
	return token, token != ""
}

// Mux returns the gateway's HTTP routes behind one static bearer token
// (none: every request goes through): MuxAuth with TokenAuth(token).
func (g *Gateway) Mux(token string, sec Security) http.Handler {
	return g.MuxAuth(TokenAuth(token), sec)
}

// MuxAuth returns the gateway's HTTP routes: the aggregated MCP endpoint
// at /mcp, a passthrough endpoint at /servers/{name}/mcp for each of
// Options.Passthrough and one at /virtual/{name}/mcp for each of
// Options.Virtual, each request's caller verified by auth (auth.go),
// every route behind the checks of sec. With authorization servers, the
// protected resource metadata is served at
// /.well-known/oauth-protected-resource, of the gateway and of each route
// below it, without a credential (it is how a client learns where to get
// one).
//
// When the gateway serves the API, / is also the web page (docs/ui.md)
// for a browser (a request whose Accept names text/html), with its files
// under /ui/. The page and its files are served without a credential:
// they hold no data, and the page sends one with every request it makes
// to the API. Any other client gets the plain-text index of the endpoints
// at /, behind the credential like the rest (it names the servers).
//
// With a login for the page (Auth.Page), /auth/login, /auth/callback and
// /auth/logout log its users in and out (page.go), and the API and the
// index take the session's cookie instead of a credential.
func (g *Gateway) MuxAuth(auth Auth, sec Security) http.Handler {
	auth.log = g.log
	if auth.on() {
		g.clients.authOn.Store(true)
	}
	mux := http.NewServeMux()
	mcp := func(h http.Handler) http.Handler { return auth.authenticate(mcpRoute, h) }
	api := func(h http.Handler) http.Handler { return auth.authenticate(apiRoute, h) }
	page := func(h http.Handler) http.Handler { return auth.authenticate(pageRoute, h) }
	if auth.Page != nil {
		// The page's login (page.go): its cookies Secure beyond loopback,
		// and behind an https resource, whatever the request.
		auth.page = &pageAuth{PageLogin: auth.Page, auth: auth, log: g.log,
			secure: !sec.Loopback || strings.HasPrefix(auth.Resource, "https://")}
		mux.Handle("/auth/", auth.page.handler())
	}
	if u := auth.Upstream; u != nil {
		mux.Handle(u.CallbackPath, u.Callback(auth.sessionKey))
		if u.Metadata != nil {
			mux.Handle(u.MetadataPath, u.Metadata)
		}
	}
	mux.Handle("/mcp", mcp(g.streamable(true)))
	mux.Handle("/servers/{name}/mcp", mcp(http.HandlerFunc(g.servePassthrough)))
	mux.Handle("/virtual/{name}/mcp", mcp(http.HandlerFunc(g.serveVirtual)))
	if g.metrics != nil {
		mux.Handle("/metrics", api(g.metrics))
	}
	if md := auth.metadata(); md != nil {
		mux.Handle(metadataPath, md)
		mux.Handle(metadataPath+"/", md)
	}
	// Any other path is no route: the API's error object, not the
	// mux's plain text.
	mux.HandleFunc("/", serveNoRoute)
	index := page(http.HandlerFunc(g.serveIndex))
	if g.api == nil {
		// Without the API the page would have nothing to show.
		mux.Handle("/{$}", index)
		return Protect(sec, mux)
	}
	mux.Handle("/api/", page(g.api))
	files := webui.Handler()
	mux.Handle("/ui/", files)
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		// The answer depends on Accept: caches must not give one client
		// the other's.
		w.Header().Add("Vary", "Accept")
		if webui.WantsPage(r) {
			files.ServeHTTP(w, r)
			return
		}
		index.ServeHTTP(w, r)
	})
	return Protect(sec, mux)
}

// serveNoRoute answers a request for a path the gateway has no route
// of.
func serveNoRoute(w http.ResponseWriter, r *http.Request) {
	writeAPIError(w, http.StatusNotFound, "not_found", fmt.Sprintf(
		"toolmux: no route %s %s (the MCP endpoint is /mcp; GET / lists every route)", r.Method, quoteHeader(r.URL.Path)), "")
}

// serveIndex answers the plain-text index of the endpoints: for curl, and
// for the web page, which shows it. It lists the routes the caller may
// use.
func (g *Gateway) serveIndex(w http.ResponseWriter, r *http.Request) {
	c := identity.From(r.Context())
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	var b strings.Builder
	b.WriteString("toolmux gateway\n\nMCP endpoint (streamable HTTP): /mcp\n")
	if g.api != nil {
		b.WriteString("HTTP API: /api/ (docs/api.md)\nEvent stream (SSE): /api/events\nWeb page: / (in a browser)\n")
	}
	if g.metrics != nil {
		b.WriteString("Metrics (Prometheus): /metrics (docs/operations.md)\n")
	}
	for _, rs := range g.PassthroughSessions() {
		if !g.mayUse(c, g.routes[rs.Server].groups) {
			continue
		}
		fmt.Fprintf(&b, "Passthrough to %s: /servers/%s/mcp (%d of %d sessions open, %d refused)\n",
			rs.Server, url.PathEscape(rs.Server), rs.Open, rs.Max, rs.Refused)
	}
	for _, name := range visibleRoutes(g, c, g.virtual, func(v *view) []string { return v.groups }) {
		fmt.Fprintf(&b, "Virtual server %s: /virtual/%s/mcp\n", name, url.PathEscape(name))
	}
	_, _ = w.Write([]byte(b.String()))
}

// PassthroughNames returns the names of the servers with a passthrough
// route, sorted.
func (g *Gateway) PassthroughNames() []string {
	return slices.Sorted(maps.Keys(g.routes))
}

// servePassthrough serves /servers/{name}/mcp. A route the caller may
// not use is answered as one that does not exist, and the names the
// answer lists are those it may use.
func (g *Gateway) servePassthrough(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	c := identity.From(r.Context())
	rt, ok := g.routes[name]
	if !ok || !g.mayUse(c, rt.groups) {
		msg := fmt.Sprintf("toolmux: no passthrough route for server %q", name)
		if names := visibleRoutes(g, c, g.routes, func(r *route) []string { return r.groups }); len(names) > 0 {
			msg += "; configured MCP servers: " + strings.Join(names, ", ")
		}
		msg += " (built-in tools and command servers are served on /mcp only)"
		writeRPCError(w, http.StatusNotFound, nil, codeServerError, msg)
		return
	}
	rt.serveHTTP(w, r)
}
