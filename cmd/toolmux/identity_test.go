package main_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/internal/testservers"
)

// toolmux serve as an OAuth resource server of a real identity provider,
// ORY Hydra: its access tokens on every route, refused with the challenge
// an MCP client follows, its keys rotated, its opaque tokens introspected
// and revoked (docs/identity.md).

// gwResource is the gateway's resource (auth.resource): the audience its
// tokens name, whatever address the test's gateway has.
const gwResource = "https://gw.test"

const hydraSecret = "client-secret-0123456789"

// authConfig is a configuration of the fixture server, a virtual server
// of it, and auth: trusting h, its opaque tokens introspected at its
// admin API (which asks no client credentials; the identity package's
// tests hold the gateway's to a proxy that does).
func authConfig(t *testing.T, h *testservers.HydraServer, extra string) string {
	return fmt.Sprintf(`servers:
  fx:
    command: %s
    trust: true
virtual_servers:
  - name: v
    tools: ["fx/*"]
auth:
  resource: %s
  issuers:
    - issuer: %s
      introspection:
        url: %s/admin/oauth2/introspect
        client_id: toolmux
        client_secret_env: TOOLMUX_TEST_INTROSPECTION_SECRET
  claims: {groups: ext.groups}
  scopes: [mcp]
%s`, testservers.Fixture(t), gwResource, h.Issuer, h.Admin, extra)
}

const introspectionEnv = "TOOLMUX_TEST_INTROSPECTION_SECRET=not-checked-by-hydra"

// answer is what a request to a route got.
type answer struct {
	status    int
	challenge string // WWW-Authenticate
	body      string
}

// ask makes the request a client of route makes: an MCP ping, a GET of
// the API or the metrics, the event stream (whose body is not waited
// for), with token as its bearer credential ("" for none).
func ask(t *testing.T, base, route, token string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	method, body, accept := http.MethodGet, io.Reader(nil), "application/json"
	switch {
	case strings.HasSuffix(route, "/mcp"):
		method, body, accept = http.MethodPost, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`), "application/json, text/event-stream"
	case route == "/api/events":
		accept = "text/event-stream"
	}
	req, err := http.NewRequestWithContext(ctx, method, base+route, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", accept)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, challenge: resp.Header.Get("WWW-Authenticate")}
	if route != "/api/events" || resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		a.body = string(b)
	}
	return a
}

// authRefused reports whether a is a refusal of a credential on route: 401,
// the challenge naming the route's protected resource metadata (and the
// RFC 6750 error, unless the credential was missing), a JSON-RPC error on
// an MCP route.
func authRefused(a answer, route string, missing bool) bool {
	meta := `resource_metadata="` + gwResource + "/.well-known/oauth-protected-resource" + route + `"`
	if a.status != http.StatusUnauthorized || !strings.HasPrefix(a.challenge, `Bearer realm="toolmux", `+meta) {
		return false
	}
	if missing == strings.Contains(a.challenge, `error="invalid_token"`) {
		return false
	}
	if strings.HasSuffix(route, "/mcp") {
		var msg struct {
			JSONRPC string `json:"jsonrpc"`
			Error   *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal([]byte(a.body), &msg) != nil || msg.JSONRPC != "2.0" || msg.Error == nil || msg.Error.Message == "" {
			return false
		}
	}
	return true
}

// authRoutes are the routes serve has behind its credential.
var authRoutes = []string{"/mcp", "/servers/fx/mcp", "/virtual/v/mcp", "/api/tools", "/api/events", "/metrics", "/"}

// tamper changes a JWT's subject, keeping its signature.
func tamper(t *testing.T, token string) string {
	parts := strings.Split(token, ".")
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims map[string]any
	_ = json.Unmarshal(b, &claims)
	claims["sub"] = "admin"
	b, _ = json.Marshal(claims)
	return parts[0] + "." + base64.RawURLEncoding.EncodeToString(b) + "." + parts[2]
}

// bearerClient is an HTTP client sending token on every request.
func bearerClient(token string) *http.Client {
	return &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+token)
		return http.DefaultTransport.RoundTrip(r)
	})}
}

// Every route refuses a request without a credential, with an expired
// token, one for another resource, one of another issuer, one tampered
// with, and a revoked opaque token once the cache's age has passed: 401,
// the challenge naming the route's metadata, a JSON-RPC error on an MCP
// route. It serves a good JWT, a good opaque token (introspected) and
// --token alike, to curl-like requests and the go-sdk's client in both
// protocol eras; a key rotated in at Hydra is picked up; the metadata
// names Hydra; no token reaches serve's output.
func TestServeAuthHydra(t *testing.T) {
	t.Parallel()
	h, other := testservers.StartHydra(t), testservers.StartHydra(t)
	h.CreateClient(t, testservers.HydraClient{ID: "agent", Secret: hydraSecret, Audience: []string{gwResource, "https://other.test"}, Scope: "mcp",
		Claims: map[string]any{"groups": []string{"eng"}}})
	h.CreateClient(t, testservers.HydraClient{ID: "short", Secret: hydraSecret, Audience: []string{gwResource}, Scope: "mcp", Lifespan: time.Second})
	h.CreateClient(t, testservers.HydraClient{ID: "robot", Secret: hydraSecret, Audience: []string{gwResource}, Scope: "mcp", Opaque: true})
	h.CreateClient(t, testservers.HydraClient{ID: "reader", Secret: hydraSecret, Audience: []string{gwResource}, Scope: "read"})
	other.CreateClient(t, testservers.HydraClient{ID: "agent", Secret: hydraSecret, Audience: []string{gwResource}, Scope: "mcp"})
	// A second of skew, a second of cache, a second between fetches of
	// the keys: what expiry, revocation and rotation wait for.
	dir := workspace(t, authConfig(t, h, "  clock_skew: 1s\n  token_cache: {max_age: 1s}\n  jwks_refetch_interval: 1s\n"))
	const static = "static-token-0123456789abcdef"
	p := startServeEnv(t, binary, dir, "", []string{introspectionEnv}, "--metrics", "--token", static)
	base := "http://" + p.addr

	good := h.Token(t, "agent", hydraSecret, gwResource, "mcp")
	opaque := h.Token(t, "robot", hydraSecret, gwResource, "mcp")
	bad := map[string]string{
		"another resource's": h.Token(t, "agent", hydraSecret, "https://other.test", "mcp"),
		"another issuer's":   other.Token(t, "agent", hydraSecret, gwResource, "mcp"),
		"tampered":           tamper(t, good),
		"an unknown opaque":  "ory_at_made-up.token",
	}
	for _, route := range authRoutes {
		if a := ask(t, base, route, ""); !authRefused(a, route, true) {
			t.Errorf("%s without a credential: %+v", route, a)
		}
		for what, tok := range bad {
			if a := ask(t, base, route, tok); !authRefused(a, route, false) {
				t.Errorf("%s with %s token: %+v", route, what, a)
			}
		}
		for what, tok := range map[string]string{"a JWT": good, "an opaque token": opaque, "--token": static} {
			if a := ask(t, base, route, tok); a.status == http.StatusUnauthorized || a.status == http.StatusForbidden || a.challenge != "" {
				t.Errorf("%s with %s: %+v", route, what, a)
			}
		}
	}
	// Asked with resource= (RFC 8707), as MCP clients ask: Hydra 2.3.0
	// does not implement it, and its token names no audience, which the
	// gateway refuses (docs/identity.md says so).
	noAud := h.TokenForm(t, "agent", hydraSecret, url.Values{"resource": {gwResource}, "scope": {"mcp"}})
	if a := ask(t, base, "/mcp", noAud); !authRefused(a, "/mcp", false) || !strings.Contains(a.challenge, "no audience") {
		t.Errorf("a token asked with resource=: %+v", a)
	}
	// A token without the scope the gateway requires: 403.
	reader := h.Token(t, "reader", hydraSecret, gwResource, "read")
	if a := ask(t, base, "/mcp", reader); a.status != http.StatusForbidden || !strings.Contains(a.challenge, `error="insufficient_scope", `) || !strings.Contains(a.challenge, `scope="mcp"`) {
		t.Errorf("without the scope: %+v", a)
	}

	// The go-sdk's client with a bearer token, on each MCP route, and in
	// the 2026-07-28 era on /mcp.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct{ route, version string }{{"/mcp", legacyProtocol}, {"/servers/fx/mcp", legacyProtocol}, {"/virtual/v/mcp", legacyProtocol}, {"/mcp", ""}} {
		var opts *mcp.ClientSessionOptions
		if c.version != "" {
			opts = &mcp.ClientSessionOptions{ProtocolVersion: c.version}
		}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + c.route, HTTPClient: bearerClient(good)}, opts)
		if err != nil {
			t.Fatalf("%s %s: %v", c.route, c.version, err)
		}
		name := "fx__echo"
		if c.route == "/servers/fx/mcp" {
			name = "echo"
		}
		out, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{"message": "hi"}})
		if err != nil || out.IsError {
			t.Errorf("%s %s: %v %+v", c.route, c.version, err, out)
		}
		cs.Close()
	}
	// Without a token, the client's connect fails on the 401.
	if _, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp"},
		&mcp.ClientSessionOptions{ProtocolVersion: legacyProtocol}); err == nil {
		t.Error("a client without a token connected")
	}

	// The metadata, public, names Hydra.
	var md struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
		Scopes               []string `json:"scopes_supported"`
	}
	resp, err := http.Get(base + "/.well-known/oauth-protected-resource/mcp")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&md)
	resp.Body.Close()
	if err != nil || md.Resource != gwResource+"/mcp" || len(md.AuthorizationServers) != 1 || md.AuthorizationServers[0] != h.Issuer || strings.Join(md.Scopes, " ") != "mcp" {
		t.Errorf("metadata: %v %+v", err, md)
	}

	t.Run("expired", func(t *testing.T) {
		short := h.Token(t, "short", hydraSecret, gwResource, "mcp")
		// It lives a second, and a second of skew is allowed.
		if !testservers.Eventually(20*time.Second, func() bool { return ask(t, base, "/mcp", short).status == http.StatusUnauthorized }) {
			t.Fatal("a token a second old is still served")
		}
		for _, route := range authRoutes {
			if a := ask(t, base, route, short); !authRefused(a, route, false) || !strings.Contains(a.challenge, "expired") {
				t.Errorf("%s with an expired token: %+v", route, a)
			}
		}
	})

	t.Run("rotation", func(t *testing.T) {
		kid := h.RotateKeys(t)
		rotated := h.Token(t, "agent", hydraSecret, gwResource, "mcp")
		if !strings.Contains(string(mustDecode(t, strings.Split(rotated, ".")[0])), kid) {
			t.Fatalf("hydra did not sign with the new key %s", kid)
		}
		// At most a second after the last fetch of the keys, the new
		// one is fetched.
		if !testservers.Eventually(20*time.Second, func() bool { return ask(t, base, "/mcp", rotated).status == http.StatusOK }) {
			t.Fatalf("a token of the rotated key is refused: %+v", ask(t, base, "/mcp", rotated))
		}
		for _, route := range authRoutes {
			if a := ask(t, base, route, rotated); a.status == http.StatusUnauthorized {
				t.Errorf("%s with a token of the rotated key: %+v", route, a)
			}
		}
	})

	t.Run("revoked", func(t *testing.T) {
		h.Revoke(t, "robot", hydraSecret, opaque)
		// Refused once the answer kept (a second) is past.
		if !testservers.Eventually(20*time.Second, func() bool { return ask(t, base, "/mcp", opaque).status == http.StatusUnauthorized }) {
			t.Fatal("a revoked token is still served")
		}
		for _, route := range authRoutes {
			if a := ask(t, base, route, opaque); !authRefused(a, route, false) {
				t.Errorf("%s with a revoked token: %+v", route, a)
			}
		}
	})

	for what, tok := range map[string]string{"JWT": good, "opaque": opaque, "--token": static} {
		if strings.Contains(p.stderr.String(), tok) {
			t.Errorf("serve's output holds the %s token", what)
		}
	}
}

func mustDecode(t *testing.T, s string) []byte {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// With issuers to trust, serve listens beyond loopback without --token,
// and every request there needs a token; the page of serve --stdio
// --addr and of run --serve is behind the same; a client secret whose
// variable is not set stops serve at start, naming it.
func TestServeAuthPagesHydra(t *testing.T) {
	t.Parallel()
	h := testservers.StartHydra(t)
	h.CreateClient(t, testservers.HydraClient{ID: "agent", Secret: hydraSecret, Audience: []string{gwResource}, Scope: "mcp"})
	good := h.Token(t, "agent", hydraSecret, gwResource, "mcp")
	dir := workspace(t, authConfig(t, h, ""))

	t.Run("beyond loopback", func(t *testing.T) {
		port := testservers.FreePort(t)
		sp := &serveProc{addr: fmt.Sprintf("127.0.0.1:%d", port)}
		cmd := exec.Command(binary, "serve", "--addr", fmt.Sprintf("0.0.0.0:%d", port))
		cmd.Dir = dir
		cmd.Env = append(modelFreeEnv(), "XDG_DATA_HOME="+t.TempDir(), introspectionEnv)
		var errb testservers.SyncBuffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		if !testservers.Eventually(30*time.Second, func() bool { return strings.Contains(errb.String(), "serving") }) {
			t.Fatalf("serve did not start: %s", errb.String())
		}
		if a := ask(t, "http://"+sp.addr, "/api/tools", ""); !authRefused(a, "/api/tools", true) {
			t.Errorf("without a credential: %+v", a)
		}
		if a := ask(t, "http://"+sp.addr, "/api/tools", good); a.status != http.StatusOK {
			t.Errorf("with a token: %+v", a)
		}
	})

	t.Run("stdio page", func(t *testing.T) {
		cmd := exec.Command(binary, "serve", "--stdio", "--addr", "127.0.0.1:0")
		cmd.Dir = dir
		cmd.Env = append(modelFreeEnv(), "XDG_DATA_HOME="+t.TempDir(), introspectionEnv)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var errb testservers.SyncBuffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { stdin.Close(); _ = cmd.Wait() }()
		page := regexp.MustCompile(`web page \(approvals, live calls\) at (http://[^/\s]+)/`)
		var m []string
		if !testservers.Eventually(30*time.Second, func() bool { m = page.FindStringSubmatch(errb.String()); return m != nil }) {
			t.Fatalf("no page: %s", errb.String())
		}
		for _, route := range []string{"/api/tools", "/api/events"} {
			if a := ask(t, m[1], route, ""); !authRefused(a, route, true) {
				t.Errorf("%s without a credential: %+v", route, a)
			}
			if a := ask(t, m[1], route, good); a.status != http.StatusOK {
				t.Errorf("%s with a token: %+v", route, a)
			}
		}
	})

	t.Run("run page", func(t *testing.T) {
		m := llmtest.OpenAI(t, llmtest.Replies(llmtest.Reply{Content: "done"}))
		rp := startRun(t, dir, []string{introspectionEnv}, "run", "--serve", "127.0.0.1:0", "--model", "scripted", "--base-url", m.BaseURL(), "Say done")
		rp.waitStderr(t, "watch the run at http://")
		match := regexp.MustCompile(`watch the run at (http://[^/\s]+)/`).FindStringSubmatch(rp.stderr.String())
		if a := ask(t, match[1], "/api/info", ""); !authRefused(a, "/api/info", true) {
			t.Errorf("without a credential: %+v", a)
		}
		if a := ask(t, match[1], "/api/info", good); a.status != http.StatusOK {
			t.Errorf("with a token: %+v", a)
		}
	})

	t.Run("secret unset", func(t *testing.T) {
		r := toolmux(t, dir, "", "serve", "--addr", "127.0.0.1:0")
		if r.code != 2 || !strings.Contains(r.stderr, "TOOLMUX_TEST_INTROSPECTION_SECRET is not set") {
			t.Errorf("exit %d: %s", r.code, r.stderr)
		}
	})
}

// The walk-through of docs/identity.md works as written, against Hydra:
// its client registered as its curl says, its toolmux.yaml (the issuer's
// address made the test's Hydra's), a request refused with the challenge
// it shows, and served with the token the agent gets.
func TestIdentityDocWalkthrough(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "identity.md"))
	if err != nil {
		t.Fatal(err)
	}
	yamlBlock := regexp.MustCompile("(?ms)^```yaml toolmux.yaml\n(.*?)^```$").FindSubmatch(doc)
	clientJSON := regexp.MustCompile(`(?s)/admin/clients -H 'Content-Type: application/json' -d '(\{.*?\})'`).FindSubmatch(doc)
	challenge := regexp.MustCompile(`# Www-Authenticate: (.*)`).FindSubmatch(doc)
	if yamlBlock == nil || clientJSON == nil || challenge == nil {
		t.Fatal("the walk-through's toolmux.yaml, client or challenge not found")
	}
	var client struct {
		ID       string   `json:"client_id"`
		Secret   string   `json:"client_secret"`
		Scope    string   `json:"scope"`
		Audience []string `json:"audience"`
	}
	if err := json.Unmarshal(clientJSON[1], &client); err != nil {
		t.Fatal(err)
	}
	h := testservers.StartHydra(t)
	h.CreateClient(t, testservers.HydraClient{ID: client.ID, Secret: client.Secret, Scope: client.Scope, Audience: client.Audience})
	dir := workspace(t, strings.ReplaceAll(string(yamlBlock[1]), "http://127.0.0.1:4444", h.Issuer))
	p := startServeProc(t, dir, "")
	if !strings.Contains(p.stderr.String(), "accepting access tokens of "+h.Issuer) {
		t.Errorf("serve did not say it accepts Hydra's tokens:\n%s", p.stderr.String())
	}
	// The resource of the file (port 8931) is the gateway's, whatever
	// port this one has: the challenge names it.
	a := ask(t, "http://"+p.addr, "/api/tools", "")
	if a.status != http.StatusUnauthorized || a.challenge != string(challenge[1]) {
		t.Errorf("without a token: %d %q, the doc says %q", a.status, a.challenge, challenge[1])
	}
	tok := h.Token(t, client.ID, client.Secret, client.Audience[0], client.Scope)
	if a := ask(t, "http://"+p.addr, "/api/tools", tok); a.status != http.StatusOK {
		t.Errorf("with the agent's token: %+v", a)
	}
}

// An MCP client that speaks OAuth, the Go SDK's, follows the challenge:
// the route's protected resource metadata (checked against the URL it
// asked, RFC 9728) names Hydra, and Hydra's metadata is found from it.
func TestServeAuthDiscoveryHydra(t *testing.T) {
	t.Parallel()
	h := testservers.StartHydra(t)
	// No resource: the gateway's is its address, as the client reaches it.
	cfg := fmt.Sprintf("auth:\n  issuers:\n    - issuer: %s\n  scopes: [mcp]\n", h.Issuer)
	p := startServeProc(t, workspace(t, cfg), "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := ask(t, "http://"+p.addr, "/mcp", "")
	challenges, err := oauthex.ParseWWWAuthenticate([]string{a.challenge})
	if err != nil || len(challenges) != 1 || challenges[0].Params["resource_metadata"] == "" {
		t.Fatalf("challenge %q: %v %+v", a.challenge, err, challenges)
	}
	prm, err := oauthex.GetProtectedResourceMetadata(ctx, challenges[0].Params["resource_metadata"], p.url("/mcp"), http.DefaultClient)
	if err != nil || prm == nil || len(prm.AuthorizationServers) != 1 || prm.AuthorizationServers[0] != h.Issuer || !slices.Equal(prm.ScopesSupported, []string{"mcp"}) {
		t.Fatalf("protected resource metadata: %v %+v", err, prm)
	}
	asm, err := auth.GetAuthServerMetadata(ctx, prm.AuthorizationServers[0], http.DefaultClient)
	if err != nil || asm == nil || asm.Issuer != h.Issuer || asm.TokenEndpoint != h.Issuer+"/oauth2/token" {
		t.Fatalf("Hydra's metadata: %v %+v", err, asm)
	}
}
