package gateway

import (
	"crypto/subtle"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
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

// RequireToken wraps h so that requests must carry "Authorization: Bearer
// token". An empty token lets every request through.
func RequireToken(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(strings.TrimSpace(r.Header.Get("Authorization")))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="toolmux"`)
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Mux returns the gateway's HTTP routes: the aggregated MCP endpoint at
// /mcp and a passthrough endpoint at /servers/{name}/mcp for each of
// Options.Passthrough, behind the token when one is set, every route behind
// the checks of sec.
func (g *Gateway) Mux(token string, sec Security) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/mcp", RequireToken(token, g.streamable(true)))
	mux.Handle("/servers/{name}/mcp", RequireToken(token, http.HandlerFunc(g.servePassthrough)))
	if g.api != nil {
		mux.Handle("/api/", RequireToken(token, g.api))
	}
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		var b strings.Builder
		b.WriteString("toolmux gateway\n\nMCP endpoint (streamable HTTP): /mcp\n")
		if g.api != nil {
			b.WriteString("HTTP API: /api/ (docs/api.md)\n")
		}
		for _, name := range g.PassthroughNames() {
			fmt.Fprintf(&b, "Passthrough to %s: /servers/%s/mcp\n", name, url.PathEscape(name))
		}
		_, _ = w.Write([]byte(b.String()))
	})
	return Protect(sec, mux)
}

// PassthroughNames returns the names of the servers with a passthrough
// route, sorted.
func (g *Gateway) PassthroughNames() []string {
	return slices.Sorted(maps.Keys(g.routes))
}

func (g *Gateway) servePassthrough(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	rt, ok := g.routes[name]
	if !ok {
		msg := fmt.Sprintf("toolmux: no passthrough route for server %q", name)
		if names := g.PassthroughNames(); len(names) > 0 {
			msg += "; configured MCP servers: " + strings.Join(names, ", ")
		}
		msg += " (built-in tools and command servers are served on /mcp only)"
		http.Error(w, msg, http.StatusNotFound)
		return
	}
	rt.handler.ServeHTTP(w, r)
}
