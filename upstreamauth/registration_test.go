package upstreamauth_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/toolmux/toolmux/upstreamauth"
)

// cimdUpstream is an upstream whose authorization server says it supports
// Client ID Metadata Documents: its metadata, at the upstream's origin,
// names the rig's Hydra's endpoints (Hydra itself does not support them;
// the test looks at the choice of client, not at a login).
func cimdUpstream(t *testing.T, r *rig) string {
	t.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	mux.Handle("/.well-known/oauth-protected-resource/mcp", auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource: srv.URL + "/mcp", AuthorizationServers: []string{srv.URL}}))
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": srv.URL,
			"authorization_endpoint": r.h.Issuer + "/oauth2/auth", "token_endpoint": r.h.Issuer + "/oauth2/token",
			"registration_endpoint": r.h.Issuer + "/oauth2/register", "jwks_uri": r.h.Issuer + "/.well-known/jwks.json",
			"response_types_supported": []string{"code"}, "code_challenge_methods_supported": []string{"S256"},
			"client_id_metadata_document_supported": true})
	})
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("WWW-Authenticate", fmt.Sprintf("Bearer resource_metadata=%q", srv.URL+"/.well-known/oauth-protected-resource/mcp"))
		http.Error(w, "a token is needed", http.StatusUnauthorized)
	})
	return srv.URL + "/mcp"
}

// TestRegistrationOrder: a configured client first, then the Client ID
// Metadata Document where the server supports it and the gateway serves
// one, else dynamic registration.
func TestRegistrationOrder(t *testing.T) {
	r := newRig(t)
	up := cimdUpstream(t, r)
	ctx := t.Context()
	const doc = "https://gateway.example/oauth/client.json"
	clientID := func(c *upstreamauth.Client) string {
		t.Helper()
		u, err := c.Authorize(ctx, "key:ann", "up")
		if err != nil {
			t.Fatal(err)
		}
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		q := pu.Query()
		if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("resource") != up || q.Get("state") == "" {
			t.Fatalf("the authorization URL lacks PKCE, the resource or the state: %s", u)
		}
		return q.Get("client_id")
	}

	c := r.client(t, upstreamauth.Options{ClientMetadataURL: doc}, nil,
		upstreamauth.Upstream{Name: "up", URL: up, ClientID: "configured"})
	if id := clientID(c); id != "configured" {
		t.Fatalf("client_id %q, want the configured client", id)
	}
	c = r.client(t, upstreamauth.Options{ClientMetadataURL: doc}, nil, upstreamauth.Upstream{Name: "up", URL: up})
	if id := clientID(c); id != doc {
		t.Fatalf("client_id %q, want the metadata document's URL", id)
	}
	if regs, _ := r.counts.get(); regs != 0 {
		t.Fatalf("%d registrations with a configured client or a metadata document", regs)
	}
	c = r.client(t, upstreamauth.Options{}, nil, upstreamauth.Upstream{Name: "up", URL: up})
	id := clientID(c)
	reg, found, err := upstreamauth.VaultRegistrations(r.vault).Registration(ctx, "up")
	if err != nil || !found || id != reg.ClientID || id == doc {
		t.Fatalf("client_id %q, want the one registered (%v %v %v)", id, reg, found, err)
	}
	if regs, _ := r.counts.get(); regs != 1 {
		t.Fatalf("%d registrations, want 1", regs)
	}
	// Set again as it is: nothing changes, the same authorization is
	// waiting; Set with a configured client (a reload): that client.
	first, err := c.Authorize(ctx, "key:ann", "up")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Set(upstreamauth.Upstream{Name: "up", URL: up}); err != nil {
		t.Fatal(err)
	}
	if again, err := c.Authorize(ctx, "key:ann", "up"); err != nil || again != first {
		t.Fatalf("after Set of the same upstream: %v, another URL: %v", err, again != first)
	}
	if err := c.Set(upstreamauth.Upstream{Name: "up", URL: up, ClientID: "reloaded"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(upstreamauth.Upstream{Name: "up", URL: "ftp://x"}); err == nil {
		t.Fatal("Set took an ftp URL")
	}
	// Ann's authorization waits with the client it was started with;
	// Bob's, new, is of the client set.
	bob, err := c.Authorize(ctx, "key:bob", "up")
	if err != nil {
		t.Fatal(err)
	}
	if pu, err := url.Parse(bob); err != nil || pu.Query().Get("client_id") != "reloaded" {
		t.Fatalf("an authorization after Set: %s %v, want client_id reloaded", bob, err)
	}

	// The document the gateway serves at its URL.
	c = r.client(t, upstreamauth.Options{ClientMetadataURL: doc, ClientName: "team gateway"}, nil)
	rec := httptest.NewRecorder()
	c.MetadataDocument().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/oauth/client.json", nil))
	var got struct {
		ClientID     string   `json:"client_id"`
		ClientName   string   `json:"client_name"`
		RedirectURIs []string `json:"redirect_uris"`
		GrantTypes   []string `json:"grant_types"`
		AuthMethod   string   `json:"token_endpoint_auth_method"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != http.StatusOK ||
		got.ClientID != doc || got.ClientName != "team gateway" || len(got.RedirectURIs) != 1 || got.RedirectURIs[0] != r.callback || got.AuthMethod != "none" {
		t.Fatalf("the metadata document: %d %s", rec.Code, rec.Body)
	}
}

// TestDiscoveryFails: an upstream without protected resource metadata,
// or whose metadata names no authorization server, is a discovery error
// naming it, not a request to authorize.
func TestDiscoveryFails(t *testing.T) {
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	mux.Handle("/.well-known/oauth-protected-resource/empty", auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{Resource: srv.URL + "/empty"}))
	for _, path := range []string{"/none", "/empty"} {
		c, err := upstreamauth.New(newVault(t), upstreamauth.VaultRegistrations(newVault(t)), upstreamauth.Options{RedirectURL: "http://127.0.0.1:1/oauth/callback"})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Add(upstreamauth.Upstream{Name: "up", URL: srv.URL + path}); err != nil {
			t.Fatal(err)
		}
		_, err = c.Token(t.Context(), "key:ann", "up")
		if upstreamauth.KindOf(err) != upstreamauth.KindDiscovery {
			t.Fatalf("%s: %v", path, err)
		}
	}
}
