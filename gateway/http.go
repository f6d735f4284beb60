package gateway

import (
	"crypto/subtle"
	"net"
	"net/http"
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

// Mux returns the gateway's HTTP routes: the MCP endpoint at /mcp, behind
// the token when one is set, every route behind the checks of sec.
func (g *Gateway) Mux(token string, sec Security) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/mcp", RequireToken(token, g.streamable(true)))
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("toolmux gateway\n\nMCP endpoint (streamable HTTP): /mcp\n"))
	})
	return Protect(sec, mux)
}
