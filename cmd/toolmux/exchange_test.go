package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
)

// startExchange starts the identity provider that serves token exchange
// (callers by name, each with NAME-pw; toolmux allowed to exchange with
// secret) and the upstream "who" that trusts its tokens.
func startExchange(t *testing.T, secret string, callers ...string) (*testservers.WhoAmI, *testservers.ExchangeIdP) {
	t.Helper()
	who := testservers.NewWhoAmI(t)
	cs := map[string]string{}
	for _, c := range callers {
		cs[c] = c + "-pw"
	}
	idp := testservers.StartExchangeIdP(t, testservers.ExchangeIdPOptions{
		Audience:   gwResource,
		Callers:    cs,
		Exchangers: map[string]string{"toolmux": secret},
		Targets:    []string{who.Audience},
	})
	who.Start(t, idp.Issuer)
	return who, idp
}

// exchangeServer is the entry of the server who, reached by token
// exchange at idp (under servers:; toolmux's secret in
// $TOOLMUX_TEST_EXCHANGE_SECRET).
func exchangeServer(who *testservers.WhoAmI, idp *testservers.ExchangeIdP) string {
	return fmt.Sprintf(`  who:
    url: %s
    trust: true
    auth:
      kind: token_exchange
      issuer: %s
      client_id: toolmux
      client_secret_env: TOOLMUX_TEST_EXCHANGE_SECRET
      resource: %s
`, who.URL, idp.Issuer, who.Audience)
}

// exchangeAuth is the auth section of a gateway taking idp's tokens.
func exchangeAuth(idp *testservers.ExchangeIdP) string {
	return fmt.Sprintf("auth:\n  resource: %s\n  issuers:\n    - issuer: %s\n", gwResource, idp.Issuer)
}

// Callers who authenticate with an identity provider's tokens reach a
// server that trusts the same provider each as themselves: toolmux
// exchanges each caller's token for one whose audience is the server
// (RFC 8693), with nothing set per user. The server never sees a
// caller's own token (it would refuse it: its audience is the gateway),
// a caller with an API key is told why it cannot, and the records say
// which kind of credential was used, never which.
func TestServeTokenExchange(t *testing.T) {
	t.Parallel()
	who, idp := startExchange(t, "exchange-s3cret", "alice", "bob")
	home := t.TempDir()
	carol := addKey(t, home, "carol")
	cfg := "servers:\n" + exchangeServer(who, idp) + `virtual_servers:
  - name: v
    tools: ["who/*"]
` + exchangeAuth(idp)
	p := startServeEnv(t, binary, workspace(t, cfg), home, []string{"TOOLMUX_TEST_EXCHANGE_SECRET=exchange-s3cret"})
	tokens := map[string]string{"alice": idp.Token(t, "alice"), "bob": idp.Token(t, "bob"), "carol": carol}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	session := func(who, version, path string) *mcp.ClientSession {
		t.Helper()
		client := mcp.NewClient(&mcp.Implementation{Name: "exchange-test"}, nil)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.url(path), HTTPClient: bearer(tokens[who])},
			&mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatalf("%s (%s): %v", who, version, err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	type whoami struct {
		Sub string   `json:"sub"`
		Aud []string `json:"aud"`
	}
	call := func(cs *mcp.ClientSession, name string) (whoami, string) {
		t.Helper()
		out, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{}})
		if err != nil {
			t.Fatal(err)
		}
		text := ""
		if len(out.Content) > 0 {
			text = out.Content[0].(*mcp.TextContent).Text
		}
		var w whoami
		if out.IsError {
			return w, text
		}
		if err := json.Unmarshal([]byte(text), &w); err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		return w, ""
	}

	// Nothing can list the server before a caller with a token asks:
	// alice's first listing lists it over her own connection.
	alice := session("alice", legacyProtocol, "/mcp")
	ts, err := alice.ListTools(ctx, nil)
	if err != nil || !slicesHas(ts.Tools, "who__whoami") {
		t.Fatalf("alice's listing: %v %+v\n%s", err, ts, p.stderr.String())
	}
	for _, c := range []struct {
		who, version, path, tool string
	}{
		{"alice", legacyProtocol, "/mcp", "who__whoami"},
		{"bob", "2026-07-28", "/mcp", "who__whoami"},
		{"bob", legacyProtocol, "/virtual/v/mcp", "who__whoami"},
		{"alice", "2026-07-28", "/virtual/v/mcp", "who__whoami"},
	} {
		cs := alice
		if c.who != "alice" || c.path != "/mcp" {
			cs = session(c.who, c.version, c.path)
		}
		w, failed := call(cs, c.tool)
		if failed != "" || w.Sub != c.who || !slices.Contains(w.Aud, who.Audience) {
			t.Errorf("%s on %s (%s): %+v %s", c.who, c.path, c.version, w, failed)
		}
	}
	// One exchange per caller's token, kept for their later calls; no
	// caller's own token reached the server.
	if s := idp.Stats(t); s.TokenExchange != 2 {
		t.Errorf("token exchanges at the provider: %d, want 2 (one per caller)", s.TokenExchange)
	}
	if n := who.Refused(); n != 0 {
		t.Errorf("the server refused %d requests for their token", n)
	}

	// Carol's API key is no token the provider would exchange.
	for _, version := range []string{legacyProtocol, "2026-07-28"} {
		_, failed := call(session("carol", version, "/mcp"), "who__whoami")
		if !strings.Contains(failed, "auth_required") || !strings.Contains(failed, "token exchange") {
			t.Errorf("carol (%s): %q", version, failed)
		}
	}

	if err := p.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(); err != nil {
		t.Fatalf("serve: %v\n%s", err, p.stderr.String())
	}
	credential := false
	secrets := []string{tokens["alice"], tokens["bob"], "exchange-s3cret"}
	err = filepath.WalkDir(home, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, s := range secrets {
			if strings.Contains(string(b), s) {
				t.Errorf("%s holds a credential", path)
			}
		}
		credential = credential || strings.Contains(string(b), `"credential":"token-exchange"`)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !credential {
		t.Error("no record names the credential kind token-exchange")
	}
	for _, s := range secrets {
		if strings.Contains(p.stderr.String(), s) {
			t.Errorf("serve wrote a credential on stderr")
		}
	}
}
