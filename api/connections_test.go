package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/api"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/upstreamauth"
	"github.com/toolmux/toolmux/vault"
	"github.com/toolmux/toolmux/vault/vaulttest"
)

// authorizer stands in for the gateway's OAuth client: it answers each
// owner a URL of their own, and revokes by deleting the token.
type authorizer struct {
	v       *vault.Vault
	pending int // answered with KindTooManyPending beyond this many
	asked   int
}

func (a *authorizer) Authorize(_ context.Context, owner, server string) (string, error) {
	a.asked++
	if a.asked > a.pending {
		return "", &upstreamauth.Error{Kind: upstreamauth.KindTooManyPending, Server: server, Message: "too many"}
	}
	return "https://as.example/authorize?for=" + owner, nil
}

func (a *authorizer) Revoke(ctx context.Context, owner, server string) error {
	err := a.v.Delete(ctx, owner, vault.TokenName(server))
	if vault.IsNotFound(err) {
		return nil
	}
	return err
}

// Each caller lists, starts and revokes their own connections, and only
// their own; a token is never shown.
func TestConnections(t *testing.T) {
	v := vault.New(vault.NewFileStore(t.TempDir()), vaulttest.Ring(t, vaulttest.NewKey(t)), vault.Options{})
	var changed []string
	h := api.New(api.Options{Connections: &api.Connections{Vault: v, Client: &authorizer{v: v, pending: 2},
		Servers: func() []string { return []string{"jira", "wiki"} },
		Changed: func(owner, server string) { changed = append(changed, owner+" "+server) }}})
	ann := &identity.Caller{Subject: "key:ann", Name: "ann", Method: identity.MethodKey}
	bob := &identity.Caller{Subject: "key:bob", Name: "bob", Method: identity.MethodKey}
	do := func(c *identity.Caller, method, path string) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest(method, path, nil)
		if c != nil {
			req = req.WithContext(identity.With(req.Context(), c))
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	list := func(c *identity.Caller) map[string]api.ConnectionInfo {
		t.Helper()
		rec := do(c, "GET", "/api/connections")
		var out struct{ Connections []api.ConnectionInfo }
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || rec.Code != 200 {
			t.Fatalf("%d %v %s", rec.Code, err, rec.Body)
		}
		m := map[string]api.ConnectionInfo{}
		for _, ci := range out.Connections {
			m[ci.Server] = ci
		}
		return m
	}
	if l := list(ann); len(l) != 2 || l["jira"].Connected || l["wiki"].Connected {
		t.Errorf("before: %+v", l)
	}
	expiry := time.Now().Add(time.Hour).Truncate(time.Second)
	if err := v.PutToken(context.Background(), "key:ann", "jira", vault.OAuthToken{AccessToken: "at-s3cret", RefreshToken: "rt-s3cret", Expiry: expiry}); err != nil {
		t.Fatal(err)
	}
	rec := do(ann, "GET", "/api/connections")
	if strings.Contains(rec.Body.String(), "s3cret") {
		t.Errorf("the list shows a token: %s", rec.Body)
	}
	if c := list(ann)["jira"]; !c.Connected || !c.Refreshable || !c.Expires.Equal(expiry) || c.Updated.IsZero() {
		t.Errorf("ann's jira: %+v", c)
	}
	if list(bob)["jira"].Connected {
		t.Error("bob sees ann's connection")
	}
	// Connect: each caller's own URL.
	rec = do(bob, "POST", "/api/connections/jira")
	var got struct{ Server, URL string }
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 || got.URL != "https://as.example/authorize?for=key:bob" || got.Server != "jira" {
		t.Errorf("bob's connect: %d %s", rec.Code, rec.Body)
	}
	// Bob disconnecting jira takes nothing of ann's.
	if rec := do(bob, "DELETE", "/api/connections/jira"); rec.Code != http.StatusNoContent {
		t.Errorf("bob's disconnect: %d %s", rec.Code, rec.Body)
	}
	if !list(ann)["jira"].Connected {
		t.Error("bob's disconnection took ann's connection")
	}
	if rec := do(ann, "DELETE", "/api/connections/jira"); rec.Code != http.StatusNoContent || list(ann)["jira"].Connected {
		t.Errorf("ann's disconnect: %d %s", rec.Code, rec.Body)
	}
	if strings.Join(changed, ",") != "key:bob jira,key:ann jira" {
		t.Errorf("told of changes: %v", changed)
	}
	for _, c := range []struct {
		c      *identity.Caller
		method string
		path   string
		code   int
		says   string
	}{
		{ann, "POST", "/api/connections/jira", http.StatusOK, "as.example"},
		// The bound of authorizations waiting: one more is refused.
		{ann, "POST", "/api/connections/jira", http.StatusServiceUnavailable, "too_many_pending"},
		{ann, "POST", "/api/connections/nope", http.StatusNotFound, "takes no user's authorization"},
		{ann, "DELETE", "/api/connections/nope", http.StatusNotFound, "takes no user's authorization"},
		{nil, "GET", "/api/connections", http.StatusForbidden, "no caller"},
	} {
		rec := do(c.c, c.method, c.path)
		if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.says) {
			t.Errorf("%s %s: %d %s", c.method, c.path, rec.Code, rec.Body)
		}
	}
	// A gateway without per-user OAuth.
	rec = httptest.NewRecorder()
	api.New(api.Options{}).ServeHTTP(rec, httptest.NewRequest("GET", "/api/connections", nil).WithContext(identity.With(context.Background(), ann)))
	if rec.Code != http.StatusNotFound {
		t.Errorf("without connections: %d %s", rec.Code, rec.Body)
	}
}
