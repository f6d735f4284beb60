package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
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

// secretsConfig is a stdio fixture server whose callers' secret TOKEN
// goes in $FIXTURE_TOKEN, at most two callers' processes at once.
func secretsConfig(t *testing.T) string {
	return fmt.Sprintf(`servers:
  fx:
    command: %s
    args: [-whoami]
    trust: true
    health_check: {min_backoff: 50ms, max_backoff: 200ms}
    auth:
      kind: user_secrets
      secrets:
        TOKEN: {env: FIXTURE_TOKEN}
      max_connections: 2
virtual_servers:
  - name: mine
    tools: ["fx/whoami"]
`, testservers.Fixture(t))
}

// Per-user secrets end to end, through the real binary: two callers (API
// keys) set their own secret with toolmux secrets set and call the same
// tool, each reaching the server in a process of their own with their own
// secret; a caller without one gets auth_required naming the command, in
// both protocol eras; a third caller's process beyond max_connections
// closes the one unused longest; the records name the credential kind;
// no secret is anywhere in the data directory or on stderr in the clear.
func TestServeUserSecrets(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	keys := map[string]string{}
	for _, n := range []string{"ann", "bob", "carol"} {
		keys[n] = addKey(t, home, n)
	}
	vaultKey := vault.GenerateKey()
	env := []string{"TOOLMUX_VAULT_KEY=" + vaultKey}
	dir := workspace(t, secretsConfig(t))
	p := startServeEnv(t, binary, dir, home, env)
	secrets := func(who, stdin string, args ...string) result {
		t.Helper()
		e := append(os.Environ(), "XDG_DATA_HOME="+home, "TOOLMUX_URL=http://"+p.addr, "TOOLMUX_TOKEN="+keys[who])
		return execToolmux(t, dir, stdin, append(e, env...), append([]string{"secrets"}, args...)...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var sessionAt func(who, version, path string) *mcp.ClientSession
	session := func(who, version string) *mcp.ClientSession {
		t.Helper()
		return sessionAt(who, version, "/mcp")
	}
	sessionAt = func(who, version, path string) *mcp.ClientSession {
		t.Helper()
		client := mcp.NewClient(&mcp.Implementation{Name: "secrets-test"}, nil)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.url(path), HTTPClient: bearer(keys[who])},
			&mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatalf("%s (%s): %v", who, version, err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	whoami := func(cs *mcp.ClientSession) (testservers.Whoami, *mcp.CallToolResult) {
		t.Helper()
		out, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__whoami", Arguments: map[string]any{"env": "FIXTURE_TOKEN"}})
		if err != nil {
			t.Fatal(err)
		}
		var w testservers.Whoami
		if !out.IsError {
			if err := json.Unmarshal([]byte(out.Content[0].(*mcp.TextContent).Text), &w); err != nil {
				t.Fatal(err)
			}
		}
		return w, out
	}

	if r := secrets("ann", "", "list"); r.code != 0 || !strings.Contains(r.stdout, "no: toolmux secrets set fx TOKEN") {
		t.Errorf("list before: %d %q %s", r.code, r.stdout, r.stderr)
	}
	for _, who := range []string{"ann", "bob"} {
		if r := secrets(who, who+"-s3cret-value\n", "set", "fx", "TOKEN"); r.code != 0 {
			t.Fatalf("%s: secrets set: %d %s", who, r.code, r.stderr)
		}
	}
	if r := secrets("ann", "x", "set", "fx", "OTHER"); r.code != 1 || !strings.Contains(r.stderr, "takes no secret") {
		t.Errorf("a secret the server does not take: %d %s", r.code, r.stderr)
	}
	if r := secrets("ann", "", "list"); r.code != 0 || !strings.Contains(r.stdout, "fx      TOKEN") || strings.Contains(r.stdout, "no:") ||
		strings.Contains(r.stdout, "s3cret") {
		t.Errorf("list after: %d %q %s", r.code, r.stdout, r.stderr)
	}

	// Started with no secret set, the server's tools are listed over a
	// caller's connection once one has one (the next recovery).
	ann, bob := session("ann", legacyProtocol), session("bob", "2026-07-28")
	if !testservers.Eventually(30*time.Second, func() bool {
		ts, err := ann.ListTools(ctx, nil)
		return err == nil && slicesHas(ts.Tools, "fx__whoami")
	}) {
		t.Fatalf("fx's tools never listed\n%s", p.stderr.String())
	}
	a, out := whoami(ann)
	if out.IsError {
		t.Fatalf("ann: %+v", out.Content[0])
	}
	b, out := whoami(bob)
	if out.IsError {
		t.Fatalf("bob: %+v", out.Content[0])
	}
	if a.Env != testservers.WhoamiSum("ann-s3cret-value") || b.Env != testservers.WhoamiSum("bob-s3cret-value") || a.PID == b.PID {
		t.Errorf("ann saw %+v, bob %+v", a, b)
	}

	// Carol has set nothing: told what to do, in both eras, on /mcp and
	// a virtual server (whose tool is named whoami there).
	for _, version := range []string{legacyProtocol, "2026-07-28"} {
		_, out := whoami(session("carol", version))
		out2, err := sessionAt("carol", version, "/virtual/mine/mcp").CallTool(ctx, &mcp.CallToolParams{Name: "fx__whoami", Arguments: map[string]any{"env": "FIXTURE_TOKEN"}})
		if err != nil || !out2.IsError || !strings.Contains(out2.Content[0].(*mcp.TextContent).Text, "toolmux secrets set fx TOKEN") {
			t.Errorf("carol on the virtual server (%s): %v %+v", version, err, out2)
		}
		text := ""
		if len(out.Content) > 0 {
			text = out.Content[0].(*mcp.TextContent).Text
		}
		if !out.IsError || !strings.Contains(text, "auth_required") || !strings.Contains(text, "toolmux secrets set fx TOKEN") {
			t.Errorf("carol (%s): %v %q", version, out.IsError, text)
		}
	}

	// No passthrough route: it would reach the server with the
	// configuration's credential, not the caller's.
	if code, _ := postRPC(t, p.url("/servers/fx/mcp"), keys["ann"]); code != http.StatusNotFound {
		t.Errorf("/servers/fx/mcp: %d", code)
	}

	// Carol's secret makes a third process, one more than max_connections:
	// ann's, unused longest, is stopped.
	if r := secrets("carol", "carol-s3cret-value", "set", "fx", "TOKEN"); r.code != 0 {
		t.Fatalf("carol: secrets set: %d %s", r.code, r.stderr)
	}
	c, out := whoami(session("carol", legacyProtocol))
	if out.IsError || c.Env != testservers.WhoamiSum("carol-s3cret-value") {
		t.Fatalf("carol after setting: %+v %+v", c, out.Content)
	}
	if !testservers.Eventually(10*time.Second, func() bool { return syscall.Kill(a.PID, 0) != nil }) {
		t.Errorf("ann's process %d still runs beside bob's and carol's", a.PID)
	}
	if syscall.Kill(b.PID, 0) != nil {
		t.Errorf("bob's process %d is gone", b.PID)
	}
	// Deleted, carol's secret no longer reaches the server.
	if r := secrets("carol", "", "delete", "fx", "TOKEN"); r.code != 0 {
		t.Fatalf("carol: secrets delete: %d %s", r.code, r.stderr)
	}
	if _, out := whoami(session("carol", legacyProtocol)); !out.IsError {
		t.Errorf("carol's call after delete: %+v", out.Content)
	}

	if err := p.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(); err != nil {
		t.Fatalf("serve: %v\n%s", err, p.stderr.String())
	}
	// The records say which credential each call used, never which.
	credential := false
	eachFile(t, home, func(path, text string) {
		if strings.Contains(text, "s3cret") {
			t.Errorf("%s holds a secret in the clear", path)
		}
		credential = credential || strings.Contains(text, `"credential":"user-secret"`)
	})
	if !credential {
		t.Error("no record names the credential kind user-secret")
	}
	if strings.Contains(p.stderr.String(), "s3cret") {
		t.Errorf("serve wrote a secret on stderr:\n%s", p.stderr.String())
	}
	// The vault's files open with serve's key only.
	open := func(text string) ([]byte, error) {
		k, err := vault.ParseKey(text)
		if err != nil {
			t.Fatal(err)
		}
		ring, err := vault.NewKeyring(k)
		if err != nil {
			t.Fatal(err)
		}
		v := vault.New(vault.NewFileStore(vault.Dir(filepath.Join(home, "toolmux"))), ring, vault.Options{})
		return v.Secret(context.Background(), "key:bob", "fx", "TOKEN")
	}
	if b, err := open(vaultKey); err != nil || string(b) != "bob-s3cret-value" {
		t.Errorf("bob's secret with serve's key: %v", err)
	}
	if _, err := open(vault.GenerateKey()); vault.KindOf(err) != vault.KindWrongKey {
		t.Errorf("bob's secret with another key: %v", err)
	}
}

// eachFile calls f with the path and the content of every file under dir.
func eachFile(t *testing.T, dir string, f func(path, text string)) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f(path, string(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func slicesHas(ts []*mcp.Tool, name string) bool {
	for _, t := range ts {
		if t.Name == name {
			return true
		}
	}
	return false
}

// The page's Secrets tab sets and deletes the caller's own secret: the
// call then reaches the server with it, and the value is never on the
// page again.
func TestBrowserSecrets(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	key := addKey(t, home, "ann")
	p := startServeEnv(t, binary, workspace(t, secretsConfig(t)), home, []string{"TOOLMUX_VAULT_KEY=" + vault.GenerateKey()})
	b := newUIBrowser(t)
	b.do(chromedp.Navigate(p.url("/#secrets")))
	b.visible(`#token-dialog[open] #token-input`)
	b.do(chromedp.SendKeys(chromedp.CSS(`#token-input`), key), chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)))
	row := `#secrets tr[data-server="fx"][data-name="TOKEN"]`
	b.do(chromedp.Navigate(p.url("/#secrets")))
	b.visible(row + `[data-set="no"] input.secret-value`)
	b.shot("secrets-unset")
	const value = "ann-page-s3cret"
	b.fill(row+` input.secret-value`, value)
	b.do(chromedp.Click(chromedp.CSS(row + ` form button[type="submit"]`)))
	b.visible(row + `[data-set="yes"]`)
	b.shot("secrets-set")
	if uiEval[bool](b, `document.documentElement.outerHTML.includes(`+fmt.Sprintf("%q", value)+`) || [...document.querySelectorAll('input')].some((i) => i.value !== '' && i.id !== 'token-input')`) {
		t.Error("the value is still on the page")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "secrets-page-test"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.url("/mcp"), HTTPClient: bearer(key)},
		&mcp.ClientSessionOptions{ProtocolVersion: legacyProtocol})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	var w testservers.Whoami
	if !testservers.Eventually(30*time.Second, func() bool {
		out, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__whoami", Arguments: map[string]any{"env": "FIXTURE_TOKEN"}})
		return err == nil && !out.IsError && json.Unmarshal([]byte(out.Content[0].(*mcp.TextContent).Text), &w) == nil
	}) || w.Env != testservers.WhoamiSum(value) {
		t.Fatalf("the call after setting the secret on the page: %+v", w)
	}
	b.do(chromedp.Click(chromedp.CSS(row + ` button.delete`)))
	b.visible(row + `[data-set="no"]`)
	if out, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__whoami", Arguments: map[string]any{"env": "FIXTURE_TOKEN"}}); err != nil || !out.IsError {
		t.Errorf("the call after deleting it on the page: %v %+v", err, out)
	}
}

// toolmux secrets refuses what it cannot send, before sending anything:
// no value on stdin, a URL that is not one; a serve it cannot reach, or
// one that wants a credential, is exit 1 saying so.
func TestSecretsCommandErrors(t *testing.T) {
	t.Parallel()
	env := func(extra ...string) []string {
		return append(append(os.Environ(), "XDG_DATA_HOME="+t.TempDir()), extra...)
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name  string
		stdin string
		env   []string
		args  []string
		code  int
		says  string
	}{
		{"no value", "", env(), []string{"set", "fx", "TOKEN"}, 2, "no value on stdin"},
		{"a line end only", "\n", env(), []string{"set", "fx", "TOKEN"}, 2, "no value on stdin"},
		{"bad url", "v", env(), []string{"set", "fx", "TOKEN", "--url", "ftp://x"}, 2, `--url: "ftp://x" is not an http:// or https:// URL`},
		{"args", "v", env(), []string{"set", "fx"}, 2, "accepts 2 arg(s)"},
		{"unreachable", "", env("TOOLMUX_URL=http://127.0.0.1:" + fmt.Sprint(testservers.FreePort(t))), []string{"list"}, 1, "reaching toolmux serve at"},
	} {
		r := execToolmux(t, dir, c.stdin, c.env, append([]string{"secrets"}, c.args...)...)
		if r.code != c.code || !strings.Contains(r.stderr, c.says) {
			t.Errorf("%s: exit %d, stderr %q", c.name, r.code, r.stderr)
		}
	}
	// A serve with keys, asked without one.
	home := t.TempDir()
	addKey(t, home, "ann")
	p := startServeEnv(t, binary, workspace(t, secretsConfig(t)), home, []string{"TOOLMUX_VAULT_KEY=" + vault.GenerateKey()})
	r := execToolmux(t, dir, "v", env("TOOLMUX_URL=http://"+p.addr), "secrets", "set", "fx", "TOKEN")
	if r.code != 1 || !strings.Contains(r.stderr, "set TOOLMUX_TOKEN to your API key or access token") || strings.Contains(r.stderr, "set\n") {
		t.Errorf("without a key: exit %d, stderr %q", r.code, r.stderr)
	}
}
