package mcpsource_test

import "net/http"

type httpRequest = http.Request

// requireHeader fails requests that lack the configured headers, proving
// they reach the server.
func requireHeader(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Team") != "core" || r.Header.Get("Authorization") != "Bearer sekret" {
			http.Error(w, "missing headers", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

type httpHandler = http.Handler
