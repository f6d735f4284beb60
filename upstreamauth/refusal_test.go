package upstreamauth_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/toolmux/toolmux/upstreamauth"
	"github.com/toolmux/toolmux/vault"
)

// An authorization server whose refusal to refresh quotes what it was
// sent (the refresh token, the gateway's client secret) in its
// error_description: the error says the code and the description without
// them, since it goes to the task log and the event stream.
func TestRefusalQuotingCredentials(t *testing.T) {
	const refresh, secret = "refresh-token-of-ann-3b7d", "gateway-client-secret-e1c0"
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	mux.Handle("/.well-known/oauth-protected-resource/mcp", auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource: srv.URL + "/mcp", AuthorizationServers: []string{srv.URL}}))
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": srv.URL,
			"authorization_endpoint": srv.URL + "/auth", "token_endpoint": srv.URL + "/token",
			"response_types_supported": []string{"code"}, "code_challenge_methods_supported": []string{"S256"}})
	})
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("WWW-Authenticate", fmt.Sprintf("Bearer resource_metadata=%q", srv.URL+"/.well-known/oauth-protected-resource/mcp"))
		http.Error(w, "a token is needed", http.StatusUnauthorized)
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		_, sent, _ := r.BasicAuth()
		if sent == "" {
			sent = r.PostFormValue("client_secret")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "invalid_request",
			"error_description": fmt.Sprintf("refresh_token %q code %q code_verifier %q malformed; client secret %s accepted",
				r.PostFormValue("refresh_token"), r.PostFormValue("code"), r.PostFormValue("code_verifier"), sent)})
	})
	v := newVault(t)
	c, err := upstreamauth.New(v, upstreamauth.VaultRegistrations(v), upstreamauth.Options{RedirectURL: "http://127.0.0.1:1/oauth/callback"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Add(upstreamauth.Upstream{Name: "up", URL: srv.URL + "/mcp", ClientID: "gateway", ClientSecret: secret}); err != nil {
		t.Fatal(err)
	}
	if err := v.PutToken(t.Context(), "key:ann", "up", vault.OAuthToken{AccessToken: "stale", TokenType: "Bearer", RefreshToken: refresh,
		Expiry: time.Now().Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Token(t.Context(), "key:ann", "up")
	if upstreamauth.KindOf(err) != upstreamauth.KindExchange || !strings.Contains(err.Error(), "invalid_request") || !strings.Contains(err.Error(), "malformed") {
		t.Fatalf("%v, want a refused refresh saying the server's code and description", err)
	}
	if strings.Contains(err.Error(), refresh) || strings.Contains(err.Error(), secret) {
		t.Errorf("the refresh's error shows a credential: %v", err)
	}

	// The same of the code's exchange (the code, the PKCE verifier, the
	// secret), and of a callback saying the authorization was refused
	// (its state).
	link, err := c.Authorize(t.Context(), "key:bob", "up")
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	state := u.Query().Get("state")
	const code = "authorization-code-of-bob-77a2"
	_, _, err = c.Complete(t.Context(), url.Values{"state": {state}, "code": {code}}, "")
	if upstreamauth.KindOf(err) != upstreamauth.KindExchange || !strings.Contains(err.Error(), "malformed") || !strings.Contains(err.Error(), "code_verifier \"[credential]\"") {
		t.Fatalf("%v, want a refused code saying the server's description, its verifier replaced", err)
	}
	if strings.Contains(err.Error(), code) || strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), state) {
		t.Errorf("the code's error shows a credential: %v", err)
	}
	if link, err = c.Authorize(t.Context(), "key:bob", "up"); err != nil {
		t.Fatal(err)
	}
	if u, err = url.Parse(link); err != nil {
		t.Fatal(err)
	}
	state = u.Query().Get("state")
	_, _, err = c.Complete(t.Context(), url.Values{"state": {state}, "error": {"access_denied"}, "error_description": {"state " + state + " denied"}}, "")
	if upstreamauth.KindOf(err) != upstreamauth.KindDenied || !strings.Contains(err.Error(), "denied") || strings.Contains(err.Error(), state) {
		t.Errorf("the refused authorization's error: %v", err)
	}
}
