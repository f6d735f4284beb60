package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/identity"
)

// The routes of the gateway as the OAuth client of its upstreams are
// served without a bearer credential (a browser comes back to the
// callback with none), and the callback is told the caller of the
// browser's page session, when it has a live one.
func TestUpstreamRoutes(t *testing.T) {
	alice := &identity.Caller{Subject: "alice", Name: "Alice", Method: identity.MethodSession, Issuer: "https://idp.test"}
	p := &provider{callers: map[string]*identity.Caller{"alice-code": alice}}
	sessions := identity.NewSessions(identity.SessionOptions{MaxAge: time.Hour})
	g := builtinGateway(t, t.TempDir(), gateway.Options{API: whoAPI})
	key := identity.NewKeySecret()
	auth := gateway.Auth{Page: gateway.NewPageLogin(p, sessions, 0),
		Verifier: identity.NewKeys(identity.Key{Name: "ci", Hash: identity.HashKey(key)}),
		Upstream: &gateway.UpstreamRoutes{
			CallbackPath: "/oauth/callback",
			Callback: func(session func(*http.Request) string) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = w.Write([]byte("session=" + session(r)))
				})
			},
			MetadataPath: "/oauth/client-metadata.json",
			Metadata:     http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"client_id":"x"}`)) }),
		}}
	ps := &pageServer{Server: httptest.NewServer(g.MuxAuth(auth, gateway.Security{Loopback: true})), login: auth.Page, key: key}
	defer ps.Close()

	if ex := ps.do(t, http.MethodGet, "/oauth/callback?state=s&code=c", nil, nil); ex.status != http.StatusOK || ex.body != "session=" {
		t.Errorf("the callback without a session: %d %q", ex.status, ex.body)
	}
	if ex := ps.do(t, http.MethodGet, "/oauth/client-metadata.json", nil, nil); ex.status != http.StatusOK || ex.body != `{"client_id":"x"}` {
		t.Errorf("the metadata document: %d %q", ex.status, ex.body)
	}
	_, cb := ps.logIn(t, "alice-code")
	var cookies []*http.Cookie
	for _, c := range cb.cookies {
		cookies = append(cookies, c)
	}
	if ex := ps.do(t, http.MethodGet, "/oauth/callback?state=s&code=c", cookies, nil); ex.body != "session="+alice.Key() {
		t.Errorf("the callback in alice's session: %d %q", ex.status, ex.body)
	}
	// A session that ended is no caller's.
	for _, c := range cookies {
		c.Value = "forged"
	}
	if ex := ps.do(t, http.MethodGet, "/oauth/callback?state=s&code=c", cookies, nil); ex.status != http.StatusOK || ex.body != "session=" {
		t.Errorf("the callback with a forged session: %d %q", ex.status, ex.body)
	}
	// The other routes still want a credential.
	if ex := ps.do(t, http.MethodGet, "/api/x", nil, nil); ex.status != http.StatusUnauthorized {
		t.Errorf("/api/ without a credential: %d", ex.status)
	}
}
