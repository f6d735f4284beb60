package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/vault"
)

// oauthConfig is the OAuth-protected fixture fx, which each user
// authorizes toolmux to call on their behalf.
func oauthConfig(fx *testservers.OAuthMCP) string {
	return fmt.Sprintf(`servers:
  fx:
    url: %s
    trust: true
    health_check: {min_backoff: 50ms, max_backoff: 200ms}
    auth: {kind: oauth}
virtual_servers:
  - name: mine
    tools: ["fx/whoami"]
`, fx.URL)
}

// authRequired is how a tool error of kind auth_required reads in a tool
// result (not the kind quoted in another's message).
const authRequired = "failed (auth_required)"

// connection is what GET /api/connections says of one server.
type connection struct {
	Server      string    `json:"server"`
	Connected   bool      `json:"connected"`
	Updated     time.Time `json:"updated"`
	Expires     time.Time `json:"expires"`
	Refreshable bool      `json:"refreshable"`
}

// apiAs sends method path with key's bearer and decodes the answer into
// v (nil: none), returning its status.
func apiAs(t *testing.T, p *serveProc, key, method, path string, v any) int {
	t.Helper()
	req, err := http.NewRequest(method, p.url(path), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := bearer(key).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if v != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return resp.StatusCode
}

// dataVault opens the vault of the data directory under home with key.
func dataVault(t *testing.T, home, key string) *vault.Vault {
	t.Helper()
	k, err := vault.ParseKey(key)
	if err != nil {
		t.Fatal(err)
	}
	ring, err := vault.NewKeyring(k)
	if err != nil {
		t.Fatal(err)
	}
	return vault.New(vault.NewFileStore(vault.Dir(filepath.Join(home, "toolmux"))), ring, vault.Options{})
}

// nowhere fails the test for each of secrets (what it is, by what it
// is called) found in a file under home or in the stopped serve's
// stderr; it returns whether some file holds a record naming the
// credential kind user-oauth.
func nowhere(t *testing.T, p *serveProc, home string, secrets map[string]string) (credential bool) {
	t.Helper()
	err := filepath.WalkDir(home, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for what, s := range secrets {
			if strings.Contains(string(b), s) {
				t.Errorf("%s holds %s", path, what)
			}
		}
		credential = credential || strings.Contains(string(b), `"credential":"user-oauth"`)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for what, s := range secrets {
		if strings.Contains(p.stderr.String(), s) {
			t.Errorf("serve wrote %s on stderr", what)
		}
	}
	return credential
}

// sessionOf opens a session of protocol version on path with key's
// bearer, closed when the test ends.
func sessionOf(t *testing.T, ctx context.Context, p *serveProc, key, version, path string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "oauth-test"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.url(path), HTTPClient: bearer(key)},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("a session on %s (%s): %v", path, version, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// whoamiSession opens a session of key on /mcp and calls fx__whoami over
// it until it answers (fx's tools are listed once a first user has
// connected), returning the session and what it answered.
func whoamiSession(t *testing.T, ctx context.Context, p *serveProc, key string) (*mcp.ClientSession, string) {
	t.Helper()
	cs := sessionOf(t, ctx, p, key, legacyProtocol, "/mcp")
	var said string
	if !testservers.Eventually(30*time.Second, func() bool {
		out, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__whoami"})
		if err == nil && len(out.Content) == 1 {
			said = out.Content[0].(*mcp.TextContent).Text
		}
		return err == nil && !out.IsError
	}) {
		t.Fatalf("fx__whoami never answered: %q", said)
	}
	return cs, said
}

// authorizeInBrowser opens the authorization URL u in a browser of its
// own (another person's), logs in at Hydra as user, and waits for the
// gateway's callback page; it returns the callback's URL (its code and
// state, which must be nowhere after).
func authorizeInBrowser(t *testing.T, u, user string) *url.URL {
	t.Helper()
	b := newUIBrowser(t)
	b.do(chromedp.Navigate(u))
	b.visible(`#username`)
	b.do(chromedp.SendKeys(chromedp.CSS(`#username`), user), chromedp.Click(chromedp.CSS(`#sign-in`)))
	b.visible(`#connected`)
	if said := b.text(`#connected`); !strings.Contains(said, "connected to fx") || !strings.Contains(said, "return to your client") {
		t.Fatalf("the callback page said %q", said)
	}
	loc := uiEval[string](b, `location.href`)
	back, err := url.Parse(loc)
	if err != nil || back.Query().Get("code") == "" || back.Query().Get("state") == "" {
		t.Fatalf("the callback's URL %q: %v", loc, err)
	}
	return back
}

// Per-user OAuth end to end, through the real binary, a real Hydra and
// an OAuth-protected MCP server, nothing configured per user: two callers
// (API keys) each authorize toolmux in a browser as themselves and reach
// the server as themselves; one without an authorization is answered
// auth_required, whose URL the API gives; a disconnection revokes and
// asks again; no token, code or state anywhere in the data directory or
// on stderr; the records name the credential kind.
func TestServeUserOAuth(t *testing.T) {
	t.Parallel()
	h := testservers.StartHydra(t)
	fx := testservers.StartOAuthMCP(t, h)
	home := t.TempDir()
	keys := map[string]string{}
	for _, n := range []string{"ann", "bob"} {
		keys[n] = addKey(t, home, n)
	}
	ops := addKey(t, home, "ops", "--group", "admin") // reads the event stream and /metrics
	vaultKey := vault.GenerateKey()
	// Spans exported, logs at debug level, the event stream read during
	// the calls and /metrics after them: no token in any (TestServeNoCredentialAnywhere).
	recv := startOTLPReceiver(t)
	p := startServeEnv(t, binary, workspace(t, oauthConfig(fx)), home, append([]string{"TOOLMUX_VAULT_KEY=" + vaultKey}, recv.env()...), "-v", "--metrics")
	tap := tapEvents(t, p, ops)
	if !strings.Contains(p.stderr.String(), "http://"+p.addr+"/oauth/callback") {
		t.Errorf("serve did not say where browsers come back to:\n%s", p.stderr.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sessionAt := func(who, version, path string) *mcp.ClientSession {
		t.Helper()
		return sessionOf(t, ctx, p, keys[who], version, path)
	}
	session := func(who, version string) *mcp.ClientSession {
		t.Helper()
		return sessionAt(who, version, "/mcp")
	}
	whoami := func(cs *mcp.ClientSession) (string, bool) {
		t.Helper()
		out, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__whoami"})
		if err != nil {
			t.Fatal(err)
		}
		return out.Content[0].(*mcp.TextContent).Text, out.IsError
	}
	connections := func(who string) map[string]connection {
		t.Helper()
		var in struct{ Connections []connection }
		if code := apiAs(t, p, keys[who], http.MethodGet, "/api/connections", &in); code != http.StatusOK {
			t.Fatalf("GET /api/connections as %s: %d", who, code)
		}
		out := map[string]connection{}
		for _, c := range in.Connections {
			out[c.Server] = c
		}
		return out
	}
	connect := func(who string) string {
		t.Helper()
		var in struct{ URL string }
		if code := apiAs(t, p, keys[who], http.MethodPost, "/api/connections/fx", &in); code != http.StatusOK || !strings.HasPrefix(in.URL, h.Issuer) {
			t.Fatalf("POST /api/connections/fx as %s: %d %q", who, code, in.URL)
		}
		return in.URL
	}
	if c := connections("ann"); len(c) != 1 || c["fx"].Connected {
		t.Fatalf("ann's connections before: %+v", c)
	}
	if code := apiAs(t, p, keys["ann"], http.MethodPost, "/api/connections/nope", nil); code != http.StatusNotFound {
		t.Errorf("POST /api/connections/nope: %d", code)
	}

	// Ann connects on the API (the page's Connect): then fx's tools are
	// listed over her connection.
	var backs []*url.URL
	backs = append(backs, authorizeInBrowser(t, connect("ann"), "ann"))
	if c := connections("ann")["fx"]; !c.Connected || c.Updated.IsZero() || c.Expires.IsZero() {
		t.Errorf("ann's connection after: %+v", c)
	}
	if connections("bob")["fx"].Connected {
		t.Error("bob sees ann's connection as his")
	}
	ann, bob := session("ann", legacyProtocol), session("bob", "2026-07-28")
	if !testservers.Eventually(30*time.Second, func() bool {
		ts, err := bob.ListTools(ctx, nil)
		return err == nil && slicesHas(ts.Tools, "fx__whoami")
	}) {
		t.Fatalf("fx's tools never listed\n%s", p.stderr.String())
	}
	// Bob has not authorized: auth_required, saying where to go without
	// the URL (records keep messages), in both eras, on /mcp and a
	// virtual server; the URL is the API's to give him.
	for _, cs := range []*mcp.ClientSession{bob, session("bob", legacyProtocol), sessionAt("bob", legacyProtocol, "/virtual/mine/mcp"),
		sessionAt("bob", "2026-07-28", "/virtual/mine/mcp")} {
		text, isErr := whoami(cs)
		if !isErr || !strings.Contains(text, authRequired) || !strings.Contains(text, "Connections") || strings.Contains(text, "state=") {
			t.Fatalf("bob before authorizing: %v %q", isErr, text)
		}
	}
	backs = append(backs, authorizeInBrowser(t, connect("bob"), "bob"))
	for who, cs := range map[string]*mcp.ClientSession{"ann": ann, "bob": bob} {
		if text, isErr := whoami(cs); isErr || text != who {
			t.Errorf("%s reached fx as %q (error %v)", who, text, isErr)
		}
	}

	// Bob's token, to look for it after (his disconnection deletes it).
	bobTok, err := dataVault(t, home, vaultKey).Token(ctx, "key:bob", "fx")
	if err != nil || bobTok.AccessToken == "" {
		t.Fatalf("bob's token in the vault: %v", err)
	}
	// Bob disconnects: revoked, asked again; Ann's goes on, and she
	// never sees his.
	if code := apiAs(t, p, keys["bob"], http.MethodDelete, "/api/connections/fx", nil); code != http.StatusNoContent {
		t.Fatalf("DELETE /api/connections/fx: %d", code)
	}
	if connections("bob")["fx"].Connected || !connections("ann")["fx"].Connected {
		t.Errorf("after bob's disconnection: bob %+v, ann %+v", connections("bob"), connections("ann"))
	}
	if text, isErr := whoami(bob); !isErr || !strings.Contains(text, authRequired) {
		t.Errorf("bob after disconnecting: %v %q", isErr, text)
	}
	if text, isErr := whoami(ann); isErr || text != "ann" {
		t.Errorf("ann after bob's disconnection: %v %q", isErr, text)
	}
	// Ann's tokens, to look for them after.
	tok, err := dataVault(t, home, vaultKey).Token(ctx, "key:ann", "fx")
	if err != nil || tok.AccessToken == "" {
		t.Fatalf("ann's token in the vault: %v", err)
	}
	// Every call above is on the event stream: ann's two, bob's four
	// refused, one answered and one refused again.
	captured := stopAndCapture(t, p, tap, recv, map[string]int{"ann/fx/success": 2, "bob/fx/error": 5, "bob/fx/success": 1}, ops)
	secrets := map[string]string{"ann's access token": tok.AccessToken}
	if tok.RefreshToken != "" {
		secrets["ann's refresh token"] = tok.RefreshToken
	}
	for i, b := range backs {
		secrets[fmt.Sprintf("code %d", i)] = b.Query().Get("code")
		secrets[fmt.Sprintf("state %d", i)] = b.Query().Get("state")
	}
	if !nowhere(t, p, home, secrets) {
		t.Error("no record names the credential kind user-oauth")
	}
	secrets["ann's API key"], secrets["bob's API key"], secrets["ops's API key"] = keys["ann"], keys["bob"], ops
	secrets["bob's access token"] = bobTok.AccessToken
	if bobTok.RefreshToken != "" {
		secrets["bob's refresh token"] = bobTok.RefreshToken
	}
	captured.nowhere(t, secrets)
}

// The page's Connections tab connects the caller to an OAuth server
// (Connect: the authorization server's page, then the callback) and
// disconnects them: the calls reach the server as the caller, then are
// asked again.
func TestBrowserConnections(t *testing.T) {
	t.Parallel()
	h := testservers.StartHydra(t)
	fx := testservers.StartOAuthMCP(t, h)
	home := t.TempDir()
	key := addKey(t, home, "ann")
	p := startServeEnv(t, binary, workspace(t, oauthConfig(fx)), home, []string{"TOOLMUX_VAULT_KEY=" + vault.GenerateKey()})
	b := newUIBrowser(t)
	b.do(chromedp.Navigate(p.url("/#connections")))
	b.visible(`#token-dialog[open] #token-input`)
	b.do(chromedp.SendKeys(chromedp.CSS(`#token-input`), key), chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)))
	row := `#connections tr[data-server="fx"]`
	b.do(chromedp.Navigate(p.url("/#connections")))
	b.visible(row + `[data-connected="no"] button.connect`)
	b.shot("connections-none")
	b.do(chromedp.Click(chromedp.CSS(row + ` button.connect`)))
	b.visible(`#username`)
	b.do(chromedp.SendKeys(chromedp.CSS(`#username`), "ann"), chromedp.Click(chromedp.CSS(`#sign-in`)))
	b.visible(`#connected`)
	b.do(chromedp.Navigate(p.url("/#connections")))
	b.visible(row + `[data-connected="yes"] button.delete`)
	b.shot("connections-connected")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, said := whoamiSession(t, ctx, p, key)
	if said != "ann" {
		t.Fatalf("the call after connecting on the page: %q", said)
	}
	b.do(chromedp.Click(chromedp.CSS(row + ` button.delete`)))
	b.visible(row + `[data-connected="no"]`)
	out, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__whoami"})
	if err != nil || !out.IsError || !strings.Contains(out.Content[0].(*mcp.TextContent).Text, authRequired) {
		t.Errorf("the call after disconnecting on the page: %v %+v", err, out)
	}
}

// registeredConfig configures the OAuth-protected fixture fx with the
// client an operator registered for toolmux (registerGateway), its secret
// in $FX_CLIENT_SECRET, and a leeway of an hour: every token of the code
// grant is refreshed at its first use.
func registeredConfig(fx *testservers.OAuthMCP) string {
	return fmt.Sprintf(`servers:
  fx:
    url: %s
    trust: true
    health_check: {min_backoff: 50ms, max_backoff: 200ms}
    auth:
      kind: oauth
      client_id: gateway
      client_secret_env: FX_CLIENT_SECRET
      scopes: [offline_access]
upstream_oauth:
  leeway: 1h
`, fx.URL)
}

// registerGateway registers the client "gateway" of secret at Hydra for
// the serve p, and returns p's callback: a code's token lives a minute
// (within registeredConfig's leeway, so its first use refreshes it), a
// refreshed one two hours.
func registerGateway(t *testing.T, h *testservers.HydraServer, fx *testservers.OAuthMCP, p *serveProc, secret string) string {
	t.Helper()
	callback := "http://" + p.addr + "/oauth/callback"
	h.CreateClient(t, testservers.HydraClient{ID: "gateway", Secret: secret, GrantTypes: []string{"authorization_code", "refresh_token"},
		RedirectURIs: []string{callback}, Audience: []string{fx.URL}, Scope: "offline_access"})
	h.SetLifespans(t, "gateway", time.Minute, 2*time.Hour)
	return callback
}

// connectOnAPI connects fx for the caller of key on p's API (the page's
// Connect), logging in at Hydra as user without a browser, and returns
// the authorization URL and the callback's URL, which it followed.
func connectOnAPI(t *testing.T, h *testservers.HydraServer, p *serveProc, key, user, callback string) (string, *url.URL) {
	t.Helper()
	var in struct{ URL string }
	if code := apiAs(t, p, key, http.MethodPost, "/api/connections/fx", &in); code != http.StatusOK {
		t.Fatalf("POST /api/connections/fx: %d", code)
	}
	jar, _ := cookiejar.New(nil)
	back := h.LogIn(t, jar, in.URL, user, callback)
	resp, err := http.Get(back.String())
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the callback: %v %v", resp, err)
	}
	resp.Body.Close()
	return in.URL, back
}

// A client an operator registered for toolmux (client_id, the secret from
// client_secret_env) is the one used, and a token about to expire
// (within upstream_oauth.leeway) is refreshed before the call goes: the
// call reaches the server as its user with the new token. The client
// secret is nowhere in the data directory or on stderr.
func TestServeUserOAuthRefresh(t *testing.T) {
	t.Parallel()
	h := testservers.StartHydra(t)
	fx := testservers.StartOAuthMCP(t, h)
	home := t.TempDir()
	key := addKey(t, home, "ann")
	vaultKey := vault.GenerateKey()
	const secret = "gateway-s3cret-0123456789"
	p := startServeEnv(t, binary, workspace(t, registeredConfig(fx)), home, []string{"TOOLMUX_VAULT_KEY=" + vaultKey, "FX_CLIENT_SECRET=" + secret})
	callback := registerGateway(t, h, fx, p, secret)
	authURL, back := connectOnAPI(t, h, p, key, "ann", callback)
	if u, err := url.Parse(authURL); err != nil || u.Query().Get("client_id") != "gateway" {
		t.Fatalf("the authorization URL is not of the configured client: %s", authURL)
	}
	v := dataVault(t, home, vaultKey)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first, err := v.Token(ctx, "key:ann", "fx")
	if err != nil || first.RefreshToken == "" {
		t.Fatalf("ann's first token: refresh token %v, %v", first.RefreshToken != "", err)
	}

	cs, said := whoamiSession(t, ctx, p, key)
	if said != "ann" {
		t.Fatalf("ann's call: %q", said)
	}
	now, err := v.Token(ctx, "key:ann", "fx")
	if err != nil || now.AccessToken == first.AccessToken || !now.Expiry.After(first.Expiry.Add(time.Hour)) {
		t.Fatalf("the token was not refreshed: same %v, expiry %v then %v, %v", now.AccessToken == first.AccessToken, first.Expiry, now.Expiry, err)
	}
	// The grant revoked at the authorization server, behind toolmux's back:
	// the server refuses the token, its refresh is refused, and ann's
	// next call over her open connection is asked again.
	h.Revoke(t, "gateway", secret, now.RefreshToken)
	out, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__whoami"})
	if err != nil || !out.IsError || !strings.Contains(out.Content[0].(*mcp.TextContent).Text, authRequired) {
		t.Fatalf("ann's call after the grant was revoked: %v %+v", err, out)
	}
	if _, err := v.Token(ctx, "key:ann", "fx"); !vault.IsNotFound(err) {
		t.Errorf("the revoked token is still kept: %v", err)
	}
	if err := p.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(); err != nil {
		t.Fatalf("serve: %v\n%s", err, p.stderr.String())
	}
	nowhere(t, p, home, map[string]string{"the client secret": secret, "the first access token": first.AccessToken,
		"the refresh token": now.RefreshToken, "the code": back.Query().Get("code")})
}
