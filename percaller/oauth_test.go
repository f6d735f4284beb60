package percaller_test

import (
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/percaller"
	"github.com/toolmux/toolmux/tool"
	"github.com/toolmux/toolmux/upstreamauth"
	"github.com/toolmux/toolmux/vault"
)

// TestOAuth: a caller without a token is asked to authorize, with the
// authorization URL beside the message and not in it; once authorized
// (at a real Hydra), each caller reaches the OAuth-protected server as
// themselves; a token revoked while the connection is open asks again.
func TestOAuth(t *testing.T) {
	h := testservers.StartHydra(t)
	fx := testservers.StartOAuthMCP(t, h)
	v := newVault(t)
	var cb http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { cb.ServeHTTP(w, r) }))
	defer srv.Close()
	callback := srv.URL + "/oauth/callback"
	c, err := upstreamauth.New(v, upstreamauth.VaultRegistrations(v), upstreamauth.Options{RedirectURL: callback,
		HTTPClient: &http.Client{Transport: http.DefaultTransport, Timeout: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	cb = c.Callback(nil)
	// Named as in docs/identity.md's walk-through, which shows its error.
	sc := config.Server{Name: "tracker", URL: fx.URL, Auth: &config.ServerAuth{Kind: config.AuthOAuth}}
	cred, err := percaller.OAuthFromConfig(sc, c, v, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	s := percaller.New(mcpsource.Config{Name: "tracker", Transport: mcpsource.StreamableHTTP, URL: fx.URL, ConnectTimeout: 10 * time.Second}, cred, percaller.Options{})
	defer s.Close()
	if s.Credential() != tool.CredentialUserOAuth {
		t.Errorf("the record's credential: %q", s.Credential())
	}
	ctx := t.Context()
	// asked returns the authorization URL of an auth_required error.
	asked := func(err error) string {
		t.Helper()
		te, ok := err.(*tool.Error)
		if !ok || te.Kind != tool.KindAuthRequired || te.URL == "" || !strings.HasPrefix(te.URL, h.Issuer) {
			t.Fatalf("want auth_required with the authorization URL, got %#v", err)
		}
		if strings.Contains(te.Error(), te.URL) || strings.Contains(te.Error(), "state=") || !strings.Contains(te.Message, "Connections") {
			t.Fatalf("the message holds the URL, or does not say where to go: %s", te.Error())
		}
		return te.URL
	}
	for _, who := range []string{"ann", "bob"} {
		_, err := s.Call(as(who), "whoami", nil)
		u := asked(err)
		if who == "ann" {
			documented(t, err)
		}
		jar, _ := cookiejar.New(nil)
		resp, err := http.Get(h.LogIn(t, jar, u, who, callback).String())
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("the callback: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	for _, who := range []string{"ann", "bob"} {
		res, err := s.Call(as(who), "whoami", nil)
		if err != nil || res.Text() != who {
			t.Fatalf("%s reached the server as %v: %v", who, res, err)
		}
	}
	holders, err := cred.Holders(ctx)
	slices.Sort(holders)
	if err != nil || !slices.Equal(holders, []string{identity.KeySubject("ann"), identity.KeySubject("bob")}) {
		t.Errorf("holders: %v %v", holders, err)
	}
	// Ann disconnects (the grant revoked at Hydra, the token deleted)
	// while her connection is open: her next call is asked again, Bob's
	// goes on.
	if err := c.Revoke(ctx, identity.KeySubject("ann"), "tracker"); err != nil {
		t.Fatal(err)
	}
	if s.Connections() != 2 {
		t.Fatalf("%d connections open, want ann's and bob's", s.Connections())
	}
	_, err = s.Call(as("ann"), "whoami", nil)
	u := asked(err)
	if res, err := s.Call(as("bob"), "whoami", nil); err != nil || res.Text() != "bob" {
		t.Fatalf("bob after ann's disconnection: %v %v", res, err)
	}
	// Authorized again, Ann's calls go through.
	jar, _ := cookiejar.New(nil)
	resp, err := http.Get(h.LogIn(t, jar, u, "ann", callback).String())
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the callback: %v %v", resp, err)
	}
	resp.Body.Close()
	if res, err := s.Call(as("ann"), "whoami", nil); err != nil || res.Text() != "ann" {
		t.Fatalf("ann authorized again: %v %v", res, err)
	}
}

// Without the gateway's OAuth client (no callback route to complete an
// authorization on), a call is refused saying what is missing.
func TestOAuthWithoutClient(t *testing.T) {
	sc := config.Server{Name: "fx", URL: "https://fx.example.com/mcp", Auth: &config.ServerAuth{Kind: config.AuthOAuth, ClientID: "id", ClientSecretEnv: "FX_SECRET"}}
	cred, err := percaller.OAuthFromConfig(sc, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cred.Connect(context.Background(), "key:ann", mcpsource.Config{Name: "fx"})
	if tool.KindOf(err) != tool.KindExecutionFailed || !strings.Contains(err.Error(), "callback route") {
		t.Errorf("without a client: %v", err)
	}
	// A client secret configured and not set is said at once.
	v := newVault(t)
	c, err := upstreamauth.New(v, upstreamauth.VaultRegistrations(v), upstreamauth.Options{RedirectURL: "http://127.0.0.1:1/oauth/callback"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := percaller.OAuthFromConfig(sc, c, v, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "FX_SECRET") {
		t.Errorf("an unset client secret: %v", err)
	}
}

// On a vault without its key (a fleet's worker not given it), a call is
// refused saying the vault is locked and what to configure.
func TestOAuthVaultLocked(t *testing.T) {
	v := vault.New(vault.NewFileStore(t.TempDir()), nil, vault.Options{})
	c, err := upstreamauth.New(v, upstreamauth.VaultRegistrations(v), upstreamauth.Options{Elsewhere: "connect on the gateway"})
	if err != nil {
		t.Fatal(err)
	}
	sc := config.Server{Name: "fx", URL: "https://fx.example.com/mcp", Auth: &config.ServerAuth{Kind: config.AuthOAuth}}
	cred, err := percaller.OAuthFromConfig(sc, c, v, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cred.Connect(context.Background(), "key:ann", mcpsource.Config{Name: "fx"})
	if tool.KindOf(err) != tool.KindExecutionFailed || !strings.Contains(err.Error(), "the vault is locked") || !strings.Contains(err.Error(), "vault.key_file") {
		t.Errorf("on a locked vault: %v", err)
	}
}

// documented checks that docs/identity.md shows err as it is.
func documented(t *testing.T, err error) {
	t.Helper()
	doc, rerr := os.ReadFile("../docs/identity.md")
	if rerr != nil {
		t.Fatal(rerr)
	}
	if !strings.Contains(string(doc), "\n"+err.Error()+"\n") {
		t.Errorf("docs/identity.md does not show the error as it is:\n%s", err.Error())
	}
}
