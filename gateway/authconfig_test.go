package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/toolmux/toolmux/builtin"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/manager"
)

// The gateway's Auth made from the auth: section, and what it says of a
// credential that could not be checked (identity's verifiers are tested
// against a real provider; here, the tokens stub of auth_test.go).

// AuthFromConfig: the auth section's issuers are the authorization
// servers the metadata names; an issuer's audiences are accepted in its
// own tokens only; the resource configured is the one tokens must name,
// whatever Host the request has.
func TestAuthFromConfig(t *testing.T) {
	m := builtinManager(t)
	g := gateway.New(m, gateway.Options{})
	defer g.Close()
	auth := gateway.AuthFromConfig(config.Auth{
		Resource: "https://gw.example.com",
		Issuers:  []config.Issuer{{Issuer: "https://a.example", Audiences: []string{"toolmux"}}, {Issuer: "https://b.example"}},
		Scopes:   []string{"mcp"},
	}, tokens{
		"a-own":      {Subject: "u", Method: identity.MethodJWT, Issuer: "https://a.example", Audience: []string{"toolmux"}, Scopes: []string{"mcp"}},
		"b-a's":      {Subject: "u", Method: identity.MethodJWT, Issuer: "https://b.example", Audience: []string{"toolmux"}, Scopes: []string{"mcp"}},
		"b-resource": {Subject: "u", Method: identity.MethodJWT, Issuer: "https://b.example", Audience: []string{"https://gw.example.com/"}, Scopes: []string{"mcp"}},
	})
	srv := httptest.NewServer(g.MuxAuth(auth, gateway.Security{Loopback: true}))
	defer srv.Close()
	for token, want := range map[string]int{"a-own": 200, "b-a's": 401, "b-resource": 200} {
		if code, body := postAuth(t, srv.URL+"/mcp", token); code != want {
			t.Errorf("%s: %d %s", token, code, body)
		}
	}
	resp, err := http.Get(srv.URL + "/.well-known/oauth-protected-resource")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var md struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&md); err != nil || md.Resource != "https://gw.example.com" ||
		strings.Join(md.AuthorizationServers, " ") != "https://a.example https://b.example" {
		t.Errorf("metadata: %v %+v", err, md)
	}
}

// unavailableVerifier cannot reach its issuer.
type unavailableVerifier struct{}

func (unavailableVerifier) Verify(context.Context, string) (*identity.Caller, error) {
	return nil, &identity.Error{Kind: identity.KindUnavailable, Message: "the token cannot be checked now",
		Err: errors.New(`Post "http://10.0.0.5:4445/admin/oauth2/introspect": dial tcp: connection refused`)}
}

// A credential that could not be checked gets 503 and Retry-After; why
// (the issuer's address, the network's error) goes to the gateway's log,
// not to whoever sent the request.
func TestAuthUnavailableKeepsItsCause(t *testing.T) {
	m := builtinManager(t)
	var logged strings.Builder
	var mu sync.Mutex
	g := gateway.New(m, gateway.Options{API: http.NotFoundHandler(), Logger: slog.New(slog.NewTextHandler(writerFunc(func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logged.Write(b)
	}), nil))})
	defer g.Close()
	srv := httptest.NewServer(g.MuxAuth(gateway.Auth{Verifier: unavailableVerifier{}}, gateway.Security{Loopback: true}))
	defer srv.Close()
	for _, route := range []string{"/mcp", "/api/tools"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+route, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		req.Header.Set("Authorization", "Bearer some-opaque-token")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
			strings.Contains(string(body), "10.0.0.5") || strings.Contains(resp.Header.Get("WWW-Authenticate"), "10.0.0.5") || !strings.Contains(string(body), "cannot be checked now") {
			t.Errorf("%s: %d %q %s", route, resp.StatusCode, resp.Header, body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logged.String(), "10.0.0.5:4445") || strings.Contains(logged.String(), "some-opaque-token") {
		t.Errorf("the log: %s", logged.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// builtinManager is a manager of the built-in tools on a directory of the
// test's own, closed when the test ends.
func builtinManager(t *testing.T) *manager.Manager {
	t.Helper()
	src, err := builtin.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}
