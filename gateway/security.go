package gateway

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// DefaultMaxRequestBytes bounds one request body: large enough for a tool
// call carrying a whole file to write (the built-in write_file takes up to
// 10 MiB), small enough that a client cannot make the gateway buffer
// without end.
const DefaultMaxRequestBytes int64 = 16 << 20

// Security is what Protect checks before a request reaches a route.
type Security struct {
	// Loopback says the gateway listens on loopback only. Then the Host
	// header must name a loopback host (localhost, 127.0.0.1, [::1]) or one
	// of AllowedHosts: a web page on another site cannot reach the gateway
	// by pointing a name it controls at 127.0.0.1 (DNS rebinding).
	Loopback bool
	// AllowedHosts are further host names (without port) the Host header
	// may carry; on a non-loopback address an empty list accepts any host
	// (the bearer token guards it).
	AllowedHosts []string
	// AllowedOrigins are origins ("https://app.example.com") whose pages
	// may call the gateway from a browser. A request with an Origin header
	// is refused unless the origin is the gateway's own (same scheme-less
	// host and port as the Host header) or listed here. Clients that are
	// not browsers send no Origin and are not affected. Answers to a
	// listed origin carry CORS headers naming it, and its preflights are
	// answered (204), so that its pages can read them.
	AllowedOrigins []string
	// MaxRequestBytes bounds a request body; 0 means
	// DefaultMaxRequestBytes, negative means no bound.
	MaxRequestBytes int64
}

// Protect wraps h with the checks of s: Host, Origin, body size. A refused
// request gets 403 (421 for a wrong Host) with a sentence saying why, in
// the error shape of its route (refuseRoute).
func Protect(s Security, h http.Handler) http.Handler {
	limit := s.MaxRequestBytes
	if limit == 0 {
		limit = DefaultMaxRequestBytes
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := hostOnly(r.Host)
		if !s.hostAllowed(host) {
			refuseRoute(w, r, http.StatusMisdirectedRequest, "misdirected",
				"toolmux: requests must be addressed to localhost (Host "+quoteHeader(r.Host)+" refused; see --allowed-host)")
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" {
			if !s.originAllowed(origin, r.Host) {
				refuseRoute(w, r, http.StatusForbidden, "forbidden",
					"toolmux: cross-origin request from "+quoteHeader(origin)+" refused (see --allowed-origin)")
				return
			}
			if s.listed(origin) && corsHeaders(w, r, origin) {
				return // a preflight, answered
			}
		}
		if limit > 0 && r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, limit)
			r = r.WithContext(context.WithValue(r.Context(), bodyLimitKey{}, limit))
		}
		h.ServeHTTP(w, r)
	})
}

// refuseRoute answers a request refused before its route was found, in
// the error shape of the route it was sent to: a JSON-RPC error (id null:
// the body is not read) on an MCP route, the API's error object of kind
// (docs/api.md) on every other, the page's included.
func refuseRoute(w http.ResponseWriter, r *http.Request, status int, kind, msg string) {
	if mcpPath(r.URL.Path) {
		writeRPCError(w, status, nil, codeServerError, msg)
		return
	}
	writeAPIError(w, status, kind, msg, "")
}

// mcpPath reports whether path is one of the MCP routes: /mcp,
// /servers/NAME/mcp, /virtual/NAME/mcp.
func mcpPath(path string) bool {
	if path == "/mcp" {
		return true
	}
	for _, prefix := range []string{"/servers/", "/virtual/"} {
		if rest, ok := strings.CutPrefix(path, prefix); ok {
			name, ok := strings.CutSuffix(rest, "/mcp")
			return ok && name != "" && !strings.Contains(name, "/")
		}
	}
	return false
}

type bodyLimitKey struct{}

// bodyLimit is the bound Protect put on the body of the request of ctx; 0
// when none.
func bodyLimit(ctx context.Context) int64 {
	n, _ := ctx.Value(bodyLimitKey{}).(int64)
	return n
}

func (s Security) hostAllowed(host string) bool {
	if slices.ContainsFunc(s.AllowedHosts, func(h string) bool { return strings.EqualFold(h, host) }) {
		return true
	}
	if !s.Loopback {
		return len(s.AllowedHosts) == 0
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// listed reports whether AllowedOrigins names origin (or is "*").
func (s Security) listed(origin string) bool {
	return slices.Contains(s.AllowedOrigins, "*") || slices.Contains(s.AllowedOrigins, strings.TrimSuffix(origin, "/"))
}

// The headers a page of an allowed origin may send and read: MCP's, the
// API's, trace context.
const (
	corsAllowHeaders  = "Authorization, Content-Type, Accept, Last-Event-ID, Mcp-Session-Id, Mcp-Protocol-Version, Mcp-Method, Mcp-Name, traceparent, tracestate, baggage"
	corsExposeHeaders = "Mcp-Session-Id, Mcp-Protocol-Version, WWW-Authenticate, Retry-After"
)

// corsHeaders lets a page of origin, an origin --allowed-origin lists,
// call the gateway from a browser: the answer names that origin (never
// "*", and no other), and a preflight (OPTIONS with
// Access-Control-Request-Method) is answered here, before the token,
// which browsers do not send with it. It reports whether it answered.
func corsHeaders(w http.ResponseWriter, r *http.Request, origin string) bool {
	h := w.Header()
	h.Add("Vary", "Origin")
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
	if r.Method != http.MethodOptions || r.Header.Get("Access-Control-Request-Method") == "" {
		return false
	}
	h.Add("Vary", "Access-Control-Request-Method, Access-Control-Request-Headers")
	h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS")
	h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
	return true
}

func (s Security) originAllowed(origin, requestHost string) bool {
	if s.listed(origin) {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	// The gateway's own pages (the web UI) come from the address the
	// request was sent to.
	return strings.EqualFold(u.Host, requestHost)
}

// hostOnly strips the port from a Host header value, and the brackets of
// an IPv6 literal.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.Trim(hostport, "[]")
}

// quoteHeader quotes a header value for an error message, bounded, since
// it comes from the client.
func quoteHeader(v string) string {
	if len(v) > 100 {
		v = v[:100] + "…"
	}
	return `"` + strings.ReplaceAll(v, `"`, `\"`) + `"`
}
