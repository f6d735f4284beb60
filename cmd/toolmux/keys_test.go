package main_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
)

// keysCmd runs `toolmux keys ARGS` with its data under dataHome.
func keysCmd(t *testing.T, dataHome string, args ...string) result {
	t.Helper()
	return execToolmux(t, t.TempDir(), "", append(os.Environ(), "XDG_DATA_HOME="+dataHome), append([]string{"keys"}, args...)...)
}

// addKey makes a key with `toolmux keys add` and returns it: the one line
// of stdout.
func addKey(t *testing.T, dataHome, name string, args ...string) string {
	t.Helper()
	r := keysCmd(t, dataHome, append([]string{"add", name}, args...)...)
	key := strings.TrimSuffix(r.stdout, "\n")
	if r.code != 0 || !strings.HasPrefix(key, "tmx_") || strings.Contains(key, "\n") {
		t.Fatalf("keys add %s: exit %d, stdout %q, stderr %s", name, r.code, r.stdout, r.stderr)
	}
	return key
}

// bearer is an HTTP client that sends key with every request.
func bearer(key string) *http.Client {
	return &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+key)
		return http.DefaultTransport.RoundTrip(r)
	})}
}

// status is the status of a GET of path on p with key ("" for none).
func status(t *testing.T, p *serveProc, path, key string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, p.url(path), nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

type callerInfo struct {
	Name   string   `json:"name"`
	Groups []string `json:"groups"`
	Method string   `json:"method"`
}

// callerOf is /api/info's caller for key.
func callerOf(t *testing.T, p *serveProc, key string) *callerInfo {
	t.Helper()
	resp, err := bearer(key).Get(p.url("/api/info"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/api/info: %s", resp.Status)
	}
	var in struct{ Caller *callerInfo }
	if err := json.NewDecoder(resp.Body).Decode(&in); err != nil {
		t.Fatal(err)
	}
	return in.Caller
}

// The key commands: add prints the key alone on stdout (and says on
// stderr it is shown only now), list shows neither key nor hash, an
// existing name is refused without --replace, an unknown one is refused
// with the nearest, a bad name is a usage error; the store is its owner's
// only and holds no key, and one that is not so is refused naming it.
func TestKeysCommands(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	r := keysCmd(t, home, "add", "ci", "--group", "dev", "--group", "ops,dev")
	key := strings.TrimSuffix(r.stdout, "\n")
	if r.code != 0 || !strings.HasPrefix(key, "tmx_") || strings.Count(r.stdout, "\n") != 1 ||
		!strings.Contains(r.stderr, "shown only now") || strings.Contains(r.stderr, key) {
		t.Fatalf("add: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	bot := addKey(t, home, "nightly-bot")
	path := filepath.Join(home, "toolmux", "keys.json")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the store's mode: %v %v", fi, err)
	}
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), key) || strings.Contains(string(b), bot) || strings.Contains(string(b), strings.TrimPrefix(key, "tmx_")) {
		t.Fatalf("the store holds a key:\n%s", b)
	}

	r = keysCmd(t, home, "list")
	if r.code != 0 || !strings.Contains(r.stdout, "NAME") || !regexpMatch(`(?m)^ci\s+dev,ops\s+\d{4}-`, r.stdout) ||
		!regexpMatch(`(?m)^nightly-bot\s+-\s`, r.stdout) || strings.Contains(r.stdout, "tmx_") {
		t.Errorf("list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = keysCmd(t, home, "list", "--json")
	var listed []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || r.code != 0 || len(listed) != 2 {
		t.Fatalf("list --json: %v %s", err, r.stdout)
	}
	for _, k := range listed {
		if len(k) != 3 || k["name"] == nil || k["groups"] == nil || k["created"] == nil {
			t.Errorf("list --json: %v", k)
		}
	}
	if strings.Contains(r.stdout, "sha256") || strings.Contains(r.stdout, "tmx_") {
		t.Errorf("list --json shows a key or a hash: %s", r.stdout)
	}
	// The example of docs/identity.md has the fields sent, no other.
	var doc []map[string]any
	docExample(t, "<!-- output: toolmux keys list --json -->", &doc)
	if len(doc) == 0 || !sameKeys(doc[0], listed[0]) {
		t.Errorf("docs/identity.md shows %v, keys list --json says %v", doc, listed[0])
	}

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"add", "ci"}, 1, `there is already an API key named "ci"`},
		{[]string{"add", "ci"}, 1, "--replace"},
		{[]string{"revoke", "cj"}, 1, `no API key named "cj" (did you mean "ci"?)`},
		{[]string{"revoke", "nightly"}, 1, `(did you mean "nightly-bot"?)`},
		{[]string{"add", "a b"}, 2, `key name "a b"`},
		{[]string{"add", strings.Repeat("k", 65)}, 2, "want 1 to 64"},
		{[]string{"add", "ok", "--group", "a b"}, 2, `--group: group name "a b"`},
		{[]string{"add"}, 2, "Usage: toolmux keys add NAME"},
		{[]string{"revoke"}, 2, "Usage: toolmux keys revoke NAME"},
		{[]string{"ad", "x"}, 2, `unknown command "ad"`},
	} {
		r := keysCmd(t, home, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
			t.Errorf("keys %v: exit %d, stdout %q, stderr %s", c.args, r.code, r.stdout, r.stderr)
		}
	}
	// --replace: a new key, the old one no longer in the store.
	key2 := addKey(t, home, "ci", "--replace")
	if key2 == key {
		t.Fatal("replaced by itself")
	}
	if b, _ := os.ReadFile(path); strings.Contains(string(b), fmt.Sprintf("%x", sha256Of(key))) {
		t.Error("the replaced key's hash is still in the store")
	}
	r = keysCmd(t, home, "revoke", "ci")
	if r.code != 0 || !strings.Contains(r.stderr, "revoked") {
		t.Errorf("revoke: exit %d %s", r.code, r.stderr)
	}
	if r := keysCmd(t, home, "list", "--json"); strings.Contains(r.stdout, `"ci"`) {
		t.Errorf("revoked, still listed: %s", r.stdout)
	}

	// A store others may read, or not a store: refused, naming it.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"list"}, {"add", "x"}, {"revoke", "nightly-bot"}} {
		if r := keysCmd(t, home, args...); r.code != 1 || !strings.Contains(r.stderr, path) || !strings.Contains(r.stderr, "chmod 600") {
			t.Errorf("keys %v, a store others may read: exit %d %s", args, r.code, r.stderr)
		}
	}
	if err := os.WriteFile(path, []byte(`{"version": 1, "keys": [{"name": "ci"`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := keysCmd(t, home, "list"); r.code != 1 || !strings.Contains(r.stderr, path) || !strings.Contains(r.stderr, "not a key store") {
		t.Errorf("a corrupt store: exit %d %s", r.code, r.stderr)
	}
}

// Two `toolmux keys add` at once keep both keys.
func TestKeysAddAtOnce(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	const n = 4
	cmds := make([]*exec.Cmd, n)
	for i := range cmds {
		cmds[i] = exec.Command(binary, "keys", "add", fmt.Sprint("k", i))
		cmds[i].Env = append(os.Environ(), "XDG_DATA_HOME="+home)
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	r := keysCmd(t, home, "list", "--json")
	var listed []struct{ Name string }
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || len(listed) != n {
		t.Fatalf("%d keys kept of %d: %v %s", len(listed), n, err, r.stdout)
	}
}

// keysConfig serves the fixture, its passthrough route, and a virtual
// server.
func keysConfig(t *testing.T) string {
	return fmt.Sprintf(`servers:
  fx:
    command: %s
    trust: true
virtual_servers:
  - name: echoes
    tools: ["fx/echo"]
`, testservers.Fixture(t))
}

// A key made by `toolmux keys add` works on every route of a real serve,
// in both protocol eras, as its own caller; the --token still works, as
// the caller default in group admin; no credential, a key of another
// store, a revoked key are refused with 401 on every route.
func TestServeWithAPIKeys(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	key := addKey(t, home, "ci", "--group", "dev")
	// A stored key named as the token's caller.
	dflt := addKey(t, home, "default", "--group", "dev")
	const token = "a-token-of-serve-0123456789"
	p := startServeProc(t, workspace(t, keysConfig(t)), home, "--metrics", "--token", token)
	if !strings.Contains(p.stderr.String(), "2 API keys in "+filepath.Join(home, "toolmux", "keys.json")+": every request must carry one (or the token)") ||
		!strings.Contains(p.stderr.String(), "warning: the API key named default and --token are one caller") {
		t.Errorf("serve does not say it has keys, or one named default:\n%s", p.stderr.String())
	}
	other := addKey(t, t.TempDir(), "ci", "--group", "dev") // another store's
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	routes := []struct{ path, tool string }{{"/mcp", "fx__echo"}, {"/servers/fx/mcp", "echo"}, {"/virtual/echoes/mcp", "fx__echo"}}
	for _, rt := range routes {
		for _, version := range []string{legacyProtocol, "2026-07-28"} {
			client := mcp.NewClient(&mcp.Implementation{Name: "keys-test"}, nil)
			cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.url(rt.path), HTTPClient: bearer(key)},
				&mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatalf("%s (%s) with the key: %v", rt.path, version, err)
			}
			out, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: rt.tool, Arguments: map[string]any{"message": "hi"}})
			if err != nil || out.IsError {
				t.Errorf("%s (%s): %v %+v", rt.path, version, err, out)
			}
			cs.Close()
		}
		for _, cred := range []string{"", other, "tmx_nothing", token + "x"} {
			if code, _ := postRPC(t, p.url(rt.path), cred); code != http.StatusUnauthorized {
				t.Errorf("%s with %.8q…: %d", rt.path, cred, code)
			}
		}
	}
	for _, path := range []string{"/api/tools", "/api/info", "/metrics", "/"} {
		if code := status(t, p, path, key); code != http.StatusOK {
			t.Errorf("%s with the key: %d", path, code)
		}
		for _, cred := range []string{"", other} {
			if code := status(t, p, path, cred); code != http.StatusUnauthorized {
				t.Errorf("%s with %.8q…: %d", path, cred, code)
			}
		}
	}
	// The event stream: open with the key (its first line read), refused
	// without.
	if code := status(t, p, "/api/events", other); code != http.StatusUnauthorized {
		t.Errorf("/api/events with another store's key: %d", code)
	}
	sctx, stop := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(sctx, http.MethodGet, p.url("/api/events"), nil)
	resp, err := bearer(key).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Errorf("/api/events with the key: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	} else if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Errorf("/api/events: %v", err)
	}
	stop()
	resp.Body.Close()

	if c := callerOf(t, p, key); c == nil || c.Name != "ci" || !slices.Equal(c.Groups, []string{"dev"}) || c.Method != "key" {
		t.Errorf("the key's caller: %+v", c)
	}
	// The example of docs/identity.md: the caller's fields as sent.
	var doc, real struct{ Caller map[string]any }
	docExample(t, "<!-- response: GET /api/info with the key ci -->", &doc)
	resp, err = bearer(key).Get(p.url("/api/info"))
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&real)
	resp.Body.Close()
	if err != nil || !sameKeys(doc.Caller, real.Caller) || doc.Caller["name"] != real.Caller["name"] || doc.Caller["method"] != real.Caller["method"] {
		t.Errorf("docs/identity.md shows the caller %v, /api/info says %v (%v)", doc.Caller, real.Caller, err)
	}
	if c := callerOf(t, p, token); c == nil || c.Name != "default" || !slices.Equal(c.Groups, []string{"admin"}) {
		t.Errorf("the token's caller: %+v", c)
	}
	if c := callerOf(t, p, dflt); c == nil || c.Name != "default" || !slices.Equal(c.Groups, []string{"dev"}) {
		t.Errorf("the key default's caller: %+v", c)
	}
	if strings.Contains(p.stderr.String(), key) || strings.Contains(p.stderr.String(), token) {
		t.Error("serve wrote a credential on stderr")
	}
}

// postRPC posts a ping to an MCP route with cred ("" for none).
func postRPC(t *testing.T, url, cred string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if cred != "" {
		req.Header.Set("Authorization", "Bearer "+cred)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Error *struct{ Message string }
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	msg := ""
	if body.Error != nil {
		msg = body.Error.Message
	}
	return resp.StatusCode, msg
}

// A running serve follows the store without a restart: started without
// keys or token it asks for no credential; the first key added turns
// authentication on (said on stderr), within the bound; a key revoked is
// refused within the bound (a second: the store is looked at on a
// request at most once a second), a session of its holder included; and
// authentication stays on with every key revoked.
func TestServeFollowsTheKeyStore(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	p := startServeProc(t, workspace(t, keysConfig(t)), home)
	if code := status(t, p, "/api/tools", ""); code != http.StatusOK {
		t.Fatalf("no keys, no token: %d", code)
	}
	key := addKey(t, home, "ci")
	if !testservers.Eventually(30*time.Second, func() bool { return status(t, p, "/api/tools", "") == http.StatusUnauthorized }) {
		t.Fatalf("a key added, no credential still served:\n%s", p.stderr.String())
	}
	// Said before the first refusal is answered; read from serve's stderr
	// pipe by a goroutine of the test, which may not have read it yet.
	if !testservers.Eventually(10*time.Second, func() bool {
		return strings.Contains(p.stderr.String(), "every request must carry one from now on")
	}) {
		t.Errorf("serve did not say it now asks for a key:\n%s", p.stderr.String())
	}
	if c := callerOf(t, p, key); c == nil || c.Name != "ci" || c.Groups == nil {
		t.Fatalf("the key's caller: %+v", c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "keys-test"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: p.url("/mcp"), HTTPClient: bearer(key)}, &mcp.ClientSessionOptions{ProtocolVersion: legacyProtocol})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	second := addKey(t, home, "second")
	if !testservers.Eventually(30*time.Second, func() bool { return status(t, p, "/api/tools", second) == http.StatusOK }) {
		t.Fatal("a key added while serving is not known")
	}

	if r := keysCmd(t, home, "revoke", "ci"); r.code != 0 {
		t.Fatalf("revoke: %s", r.stderr)
	}
	if !testservers.Eventually(30*time.Second, func() bool { return status(t, p, "/api/tools", key) == http.StatusUnauthorized }) {
		t.Fatal("a revoked key still served")
	}
	if code, msg := postRPC(t, p.url("/mcp"), key); code != http.StatusUnauthorized || !strings.Contains(msg, "not one of this gateway's") {
		t.Errorf("/mcp with the revoked key: %d %q", code, msg)
	}
	if _, err := cs.ListTools(ctx, nil); err == nil {
		t.Error("the revoked key's session still served")
	}
	if code := status(t, p, "/api/tools", second); code != http.StatusOK {
		t.Errorf("the other key, after a revocation: %d", code)
	}
	if !strings.Contains(p.stderr.String(), "API keys changed: 1 key in") {
		t.Errorf("serve did not say the keys changed:\n%s", p.stderr.String())
	}
	// Every key revoked: still asked for.
	if r := keysCmd(t, home, "revoke", "second"); r.code != 0 {
		t.Fatalf("revoke: %s", r.stderr)
	}
	if !testservers.Eventually(30*time.Second, func() bool { return status(t, p, "/api/tools", second) == http.StatusUnauthorized }) {
		t.Fatal("the last key revoked still served")
	}
	if code := status(t, p, "/api/tools", ""); code != http.StatusUnauthorized {
		t.Errorf("every key revoked, no credential: %d", code)
	}
}

// With a key, serve may listen beyond loopback without --token, and asks
// for it there; without one it refuses to; a store that cannot be used
// stops it at start, naming the file.
func TestServeKeysBeyondLoopback(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	r := execToolmux(t, t.TempDir(), "", append(os.Environ(), "XDG_DATA_HOME="+home), "serve", "--addr", "0.0.0.0:0")
	if r.code != 2 || !strings.Contains(r.stderr, "toolmux keys add") {
		t.Errorf("beyond loopback without a key: exit %d %s", r.code, r.stderr)
	}
	key := addKey(t, home, "ci")
	port := testservers.FreePort(t)
	p := startServeProc(t, workspace(t, ""), home, "--addr", fmt.Sprintf("0.0.0.0:%d", port))
	p.addr = fmt.Sprintf("127.0.0.1:%d", port)
	if code := status(t, p, "/api/tools", ""); code != http.StatusUnauthorized {
		t.Errorf("beyond loopback, no credential: %d", code)
	}
	if code := status(t, p, "/api/tools", key); code != http.StatusOK {
		t.Errorf("beyond loopback, the key: %d", code)
	}

	path := filepath.Join(home, "toolmux", "keys.json")
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	r = execToolmux(t, t.TempDir(), "", append(os.Environ(), "XDG_DATA_HOME="+home), "serve", "--addr", "127.0.0.1:0")
	if r.code != 1 || !strings.Contains(r.stderr, path) || !strings.Contains(r.stderr, "chmod 600") {
		t.Errorf("a store others may read: exit %d %s", r.code, r.stderr)
	}
	if err := os.WriteFile(path, []byte("not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	r = execToolmux(t, t.TempDir(), "", append(os.Environ(), "XDG_DATA_HOME="+home), "serve", "--addr", "127.0.0.1:0")
	if r.code != 1 || !strings.Contains(r.stderr, path) || !strings.Contains(r.stderr, "not a key store") {
		t.Errorf("a corrupt store: exit %d %s", r.code, r.stderr)
	}
}

func regexpMatch(pattern, s string) bool { return regexp.MustCompile(pattern).MatchString(s) }

func sha256Of(s string) [sha256.Size]byte { return sha256.Sum256([]byte(s)) }

// docExample decodes the JSON block that follows marker in
// docs/identity.md.
func docExample(t *testing.T, marker string, v any) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "identity.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), marker+"\n```json\n")
	block, _, ok2 := strings.Cut(after, "```")
	if !ok || !ok2 {
		t.Fatalf("docs/identity.md has no example after %s", marker)
	}
	if err := json.Unmarshal([]byte(block), v); err != nil {
		t.Fatalf("the example after %s: %v", marker, err)
	}
}

// sameKeys says whether a and b have the same keys.
func sameKeys(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}
