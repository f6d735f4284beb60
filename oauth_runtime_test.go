package toolmux_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/tool"
	"github.com/toolmux/toolmux/upstreamauth"
	"github.com/toolmux/toolmux/vault"
	"github.com/toolmux/toolmux/vault/vaulttest"
)

// A runtime given an OAuth client makes a server of auth kind oauth a
// per-caller one whose calls go with the caller's token (discovery at
// its URL first: a call that could not have one names none), its client secret read with Getenv (one not set refused,
// naming it), OAuthServers names them, and a server a reload adds is one
// too.
func TestRuntimeOAuthServers(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "toolmux.yaml")
	// Nothing listens there: discovery fails, after the credential is
	// known to be OAuth.
	body := func(servers ...string) string {
		s := "builtin:\n  enabled: false\nservers:\n"
		for _, n := range servers {
			s += fmt.Sprintf("  %s:\n    url: http://127.0.0.1:1/%s/mcp\n    trust: true\n    auth: {kind: oauth, client_id: gw, client_secret_env: GW_SECRET}\n", n, n)
		}
		return s
	}
	ctx := context.Background()
	v := vault.New(vault.NewFileStore(filepath.Join(dir, "vault")), vaulttest.Ring(t, vaulttest.NewKey(t)), vault.Options{})
	c, err := upstreamauth.New(v, upstreamauth.VaultRegistrations(v), upstreamauth.Options{RedirectURL: "http://127.0.0.1:8931/oauth/callback"})
	if err != nil {
		t.Fatal(err)
	}
	o := toolmux.Options{NoTaskLog: true, NoAgents: true, Vault: v, UpstreamOAuth: c, Getenv: func(string) string { return "" }}
	if _, err := toolmux.Open(ctx, writeConfig(t, path, body("fx")), o); err == nil || !strings.Contains(err.Error(), "GW_SECRET") {
		t.Fatalf("a client secret not set: %v", err)
	}
	o.Getenv = func(k string) string {
		if k == "GW_SECRET" {
			return "gw-secret"
		}
		return ""
	}
	rt, err := toolmux.Open(ctx, writeConfig(t, path, body("fx")), o)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	if got := rt.OAuthServers(); !slices.Equal(got, []string{"fx"}) {
		t.Errorf("OAuthServers: %v", got)
	}
	ann := identity.With(ctx, &identity.Caller{Subject: "key:ann", Name: "ann", Method: identity.MethodKey})
	if _, err := rt.Reload(ctx, writeConfig(t, path, body("fx", "fy")), 0); err != nil {
		t.Fatal(err)
	}
	if got := rt.OAuthServers(); !slices.Equal(got, []string{"fx", "fy"}) {
		t.Errorf("OAuthServers after the reload: %v", got)
	}
	for _, srv := range []string{"fx", "fy"} {
		rec := rt.Scheduler.Call(ann, tool.Call{Server: srv, Tool: "whoami"})
		if rec.Credential != "" || tool.KindOf(rec.Err()) != tool.KindExecutionFailed || !strings.Contains(rec.Err().Error(), "(discovery)") ||
			!strings.Contains(rec.Err().Error(), "/"+srv+"/mcp") {
			t.Errorf("%s: credential %q, error %v", srv, rec.Credential, rec.Err())
		}
	}
}
