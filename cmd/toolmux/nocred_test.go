package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/vault"
)

// eventTap reads a serve's event stream (/api/events) into memory until
// stopped: every byte it was sent, and the terminal tool_state events
// counted by caller, server and state, for a test to wait on.
type eventTap struct {
	raw    testservers.SyncBuffer
	mu     sync.Mutex
	counts map[string]int // "caller/server/state"
	stop   context.CancelFunc
	done   chan struct{}
}

// tapEvents opens p's event stream with key's bearer (an admin's: every
// caller's events) and reads it until stopped.
func tapEvents(t *testing.T, p *serveProc, key string) *eventTap {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tap := &eventTap{counts: map[string]int{}, stop: cancel, done: make(chan struct{})}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url("/api/events"), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("GET /api/events: %s", resp.Status)
	}
	go func() {
		defer close(tap.done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(io.TeeReader(resp.Body, &tap.raw))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var e struct {
				Event string
				Data  struct{ Caller, Server, State string }
			}
			if json.Unmarshal([]byte(data), &e) == nil && e.Event == "tool_state" && (e.Data.State == "success" || e.Data.State == "error") {
				tap.mu.Lock()
				tap.counts[e.Data.Caller+"/"+e.Data.Server+"/"+e.Data.State]++
				tap.mu.Unlock()
			}
		}
	}()
	t.Cleanup(tap.close)
	return tap
}

// close ends the stream and waits for its reader.
func (tap *eventTap) close() {
	tap.stop()
	<-tap.done
}

// seen returns the counts so far.
func (tap *eventTap) seen() map[string]int {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	return maps.Clone(tap.counts)
}

// reached says whether the stream has had at least the counts of want.
func (tap *eventTap) reached(want map[string]int) bool {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	for k, n := range want {
		if tap.counts[k] < n {
			return false
		}
	}
	return true
}

// No credential of any kind a caller reaches an upstream server with is
// in anything toolmux writes or sends but to that server: through the
// real binary, with debug logging on stderr (-v), spans exported by
// OTLP, the event stream read during the calls, /metrics and the API
// read after them, and the data directory (task log, journal, vault,
// keys) read once serve has stopped. Every kind that runs without a
// browser is there: per-user secrets of a stdio server (an environment
// variable) and of an HTTP server (two headers), and token exchange;
// two callers of each reach their server as themselves, and callers
// without a credential are answered auth_required (with the page's
// link). The credentials looked for: each secret, each API key, each
// caller's IdP token, each exchanged token the server was sent,
// toolmux's client secret at the IdP, and the vault's key. (Per-user
// OAuth, which needs Hydra and a browser, is held to the same in
// TestServeUserOAuth.)
func TestServeNoCredentialAnywhere(t *testing.T) {
	t.Parallel()
	const exchangeSecret = "nocred-exchange-client-secret-51d7"
	who, idp := startExchange(t, exchangeSecret, "alice", "dave")
	web := testservers.StartFixtureHTTP(t, "-whoami")
	recv := startOTLPReceiver(t)

	home := t.TempDir()
	keys := map[string]string{}
	for _, n := range []string{"ann", "bob", "carol"} {
		keys[n] = addKey(t, home, n)
	}
	ops := addKey(t, home, "ops", "--group", "admin")
	vaultKey := vault.GenerateKey()
	cfg := fmt.Sprintf(`servers:
  fx:
    command: %s
    args: [-whoami]
    trust: true
    health_check: {min_backoff: 50ms, max_backoff: 200ms}
    auth:
      kind: user_secrets
      secrets:
        TOKEN: {env: FIXTURE_TOKEN}
  web:
    url: %s
    trust: true
    health_check: {min_backoff: 50ms, max_backoff: 200ms}
    auth:
      kind: user_secrets
      secrets:
        TOKEN: {header: Authorization, format: "Bearer {value}"}
        KEY: {header: X-Api-Key}
`+exchangeServer(who, idp)+`virtual_servers:
  - name: v
    tools: ["fx/*", "web/*", "who/*"]
`+exchangeAuth(idp), testservers.Fixture(t), web)
	dir := workspace(t, cfg)
	env := append([]string{"TOOLMUX_VAULT_KEY=" + vaultKey, "TOOLMUX_TEST_EXCHANGE_SECRET=" + exchangeSecret}, recv.env()...)
	p := startServeEnv(t, binary, dir, home, env, "-v", "--metrics")
	tap := tapEvents(t, p, ops)
	tokens := map[string]string{"alice": idp.Token(t, "alice"), "dave": idp.Token(t, "dave")}
	for n, k := range keys {
		tokens[n] = k
	}

	// What must be nowhere, by what it is.
	secret := func(who, server, name string) string { return fmt.Sprintf("nocred-%s-%s-%s-9c41e", who, server, name) }
	forbidden := map[string]string{
		"toolmux's client secret at the IdP": exchangeSecret,
		"the vault's key":                    vaultKey,
		"ops's API key":                      ops,
	}
	for n, tok := range tokens {
		forbidden[n+"'s credential"] = tok
	}
	for _, n := range []string{"ann", "bob"} {
		for _, s := range []struct{ server, name string }{{"fx", "TOKEN"}, {"web", "TOKEN"}, {"web", "KEY"}} {
			v := secret(n, s.server, s.name)
			forbidden[fmt.Sprintf("%s's secret %s of %s", n, s.name, s.server)] = v
			r := execToolmux(t, dir, v+"\n", append(os.Environ(), "XDG_DATA_HOME="+home, "TOOLMUX_URL=http://"+p.addr, "TOOLMUX_TOKEN="+keys[n]),
				"secrets", "set", s.server, s.name)
			if r.code != 0 {
				t.Fatalf("%s: secrets set %s %s: %d %s", n, s.server, s.name, r.code, r.stderr)
			}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// want counts the terminal states the calls below must have put on
	// the event stream, by caller/server/state.
	want := map[string]int{}
	call := func(cs *mcp.ClientSession, caller, tool string, args map[string]any) (string, bool) {
		t.Helper()
		out, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %s: %v", caller, tool, err)
		}
		text := testservers.ResultText(out)
		state := "success"
		if out.IsError {
			state = "error"
		}
		want[caller+"/"+strings.Split(tool, "__")[0]+"/"+state]++
		return text, out.IsError
	}
	sessions := map[string]*mcp.ClientSession{}
	for _, c := range []struct{ who, version string }{{"ann", legacyProtocol}, {"bob", "2026-07-28"}, {"alice", legacyProtocol}, {"dave", "2026-07-28"}} {
		sessions[c.who] = sessionOf(t, ctx, p, tokens[c.who], c.version, "/mcp")
	}
	// The servers of secrets are listed over a caller's connection once one
	// has them (the next recovery); who over the first IdP caller's.
	for _, tool := range []string{"fx__whoami", "web__whoami"} {
		if !testservers.Eventually(30*time.Second, func() bool {
			ts, err := sessions["ann"].ListTools(ctx, nil)
			return err == nil && slicesHas(ts.Tools, tool)
		}) {
			t.Fatalf("%s never listed\n%s", tool, p.stderr.String())
		}
	}
	if ts, err := sessions["alice"].ListTools(ctx, nil); err != nil || !slicesHas(ts.Tools, "who__whoami") {
		t.Fatalf("alice's listing: %v", err)
	}

	// Each caller reaches each server with their own credential.
	for _, n := range []string{"ann", "bob"} {
		for _, c := range []struct {
			tool, arg, name, secret, format string
		}{
			{"fx__whoami", "env", "FIXTURE_TOKEN", "TOKEN", "%s"},
			{"web__whoami", "header", "Authorization", "TOKEN", "Bearer %s"},
			{"web__whoami", "header", "X-Api-Key", "KEY", "%s"},
		} {
			text, failed := call(sessions[n], n, c.tool, map[string]any{c.arg: c.name})
			var w testservers.Whoami
			if !failed {
				_ = json.Unmarshal([]byte(text), &w)
			}
			server := strings.Split(c.tool, "__")[0]
			if got := w.Env + w.Header; failed || got != testservers.WhoamiSum(fmt.Sprintf(c.format, secret(n, server, c.secret))) {
				t.Errorf("%s: %s %s: %q", n, c.tool, c.name, text)
			}
		}
	}
	// Ann's process crashes in a call: what is said of it holds no
	// secret, and her next call starts her process again with hers.
	if text, failed := call(sessions["ann"], "ann", "fx__crash", map[string]any{}); !failed {
		t.Errorf("ann: fx__crash: %q", text)
	}
	if !testservers.Eventually(30*time.Second, func() bool {
		text, failed := call(sessions["ann"], "ann", "fx__whoami", map[string]any{"env": "FIXTURE_TOKEN"})
		var w testservers.Whoami
		return !failed && json.Unmarshal([]byte(text), &w) == nil && w.Env == testservers.WhoamiSum(secret("ann", "fx", "TOKEN"))
	}) {
		t.Error("ann's process never answered again with her secret")
	}
	for _, n := range []string{"alice", "dave"} {
		text, failed := call(sessions[n], n, "who__whoami", map[string]any{})
		if failed || !strings.Contains(text, `"sub":"`+n+`"`) {
			t.Errorf("%s: who__whoami: %q", n, text)
		}
	}
	// Callers without the credential a server needs, in both eras, on
	// /mcp and a virtual server: carol has no secret and no IdP token;
	// alice and dave no secret.
	for _, c := range []struct{ who, version, path string }{
		{"carol", legacyProtocol, "/mcp"}, {"carol", "2026-07-28", "/virtual/v/mcp"},
		{"alice", "2026-07-28", "/virtual/v/mcp"}, {"dave", legacyProtocol, "/mcp"},
	} {
		cs := sessionOf(t, ctx, p, tokens[c.who], c.version, c.path)
		tools := []string{"fx__whoami", "web__whoami"}
		if c.who == "carol" {
			tools = append(tools, "who__whoami")
		}
		for _, tool := range tools {
			args := map[string]any{"env": "FIXTURE_TOKEN"}
			if tool == "who__whoami" {
				args = map[string]any{}
			}
			// The secrets' errors send the caller to the page (its URL
			// added for the client only).
			text, failed := call(cs, c.who, tool, args)
			if !failed || !strings.Contains(text, "auth_required") || (tool != "who__whoami") != strings.Contains(text, p.url("/#secrets")) {
				t.Errorf("%s on %s (%s): %s: %q", c.who, c.path, c.version, tool, text)
			}
		}
	}

	// Every call is in spans, and on the event stream.
	for _, name := range []string{"execute_tool whoami", "tools/call fx__whoami", "tools/call web__whoami", "tools/call who__whoami"} {
		recv.span(t, name, nil)
	}
	captured := stopAndCapture(t, p, tap, recv, want, ops, "/api/servers", "/api/secrets")
	if !slices.ContainsFunc(strings.Split(captured["GET /metrics"], "\n"), func(l string) bool {
		return strings.HasPrefix(l, "toolmux_calls_total{") && strings.Contains(l, `server="who"`)
	}) {
		t.Errorf("/metrics counts no call of who:\n%s", captured["GET /metrics"])
	}
	// -v logs at debug level; what it logs of the callers' connections
	// is there.
	if !strings.Contains(captured["serve's stderr"], `msg="caller's connection closed" server=who`) {
		t.Errorf("serve -v logged no caller's connection:\n%s", captured["serve's stderr"])
	}
	// Not a credential, but sent to the client only (docs/identity.md):
	// kept nowhere.
	forbidden["the link to the page's Secrets tab"] = p.url("/#secrets")
	// The exchanged tokens are known once the server has had them.
	exchanged := who.Tokens()
	if len(exchanged) < 2 {
		t.Errorf("who was sent %d tokens, want one per IdP caller at least", len(exchanged))
	}
	for i, tok := range exchanged {
		forbidden[fmt.Sprintf("exchanged token %d", i)] = tok
	}
	kinds := map[string]bool{}
	files := captured.files(t, home, dir)
	for _, text := range files {
		for _, k := range []string{"user-secret", "token-exchange"} {
			kinds[k] = kinds[k] || strings.Contains(text, `"credential":"`+k+`"`)
		}
	}
	if !kinds["user-secret"] || !kinds["token-exchange"] {
		t.Errorf("the records name the credential kinds %v, want user-secret and token-exchange", kinds)
	}
	captured.nowhere(t, forbidden)
}

// capture is what a serve process gave away, but to its upstream
// servers, by where it was read: to look for credentials in.
type capture map[string]string

// stopAndCapture waits for the terminal states want on the event stream
// tap reads, reads what serve p answers (live, with key's bearer, and
// paths), stops p and reads what it wrote and exported (after).
func stopAndCapture(t *testing.T, p *serveProc, tap *eventTap, recv *otlpReceiver, want map[string]int, key string, paths ...string) capture {
	t.Helper()
	if !testservers.Eventually(30*time.Second, func() bool { return tap.reached(want) }) {
		t.Fatalf("the event stream has %v, want at least %v", tap.seen(), want)
	}
	c := capture{}
	c.live(t, p, tap, key, paths...)
	if err := p.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(); err != nil {
		t.Fatalf("serve: %v\n%s", err, p.stderr.String())
	}
	c.after(t, p, recv)
	return c
}

// live reads, with key's bearer (an admin's), the event stream tap has
// read (closing it), /metrics, the task list and the further API paths
// of serve p, still running.
func (c capture) live(t *testing.T, p *serveProc, tap *eventTap, key string, paths ...string) {
	t.Helper()
	tap.close()
	c["the event stream"] = tap.raw.String()
	if !strings.Contains(c["the event stream"], `"event":"tool_state"`) {
		t.Errorf("the event stream had no call:\n%s", c["the event stream"])
	}
	for _, path := range append([]string{"/metrics", "/api/tasks?limit=1000", "/api/info"}, paths...) {
		req, err := http.NewRequest(http.MethodGet, p.url(path), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := bearer(key).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s %v", path, resp.Status, err)
		}
		c["GET "+path] = string(b)
	}
	if !strings.Contains(c["GET /metrics"], "toolmux_calls_total{") {
		t.Errorf("/metrics counts no call:\n%s", c["GET /metrics"])
	}
}

// after reads, once serve p has stopped (its spans flushed), its stderr
// and every OTLP export recv was sent.
func (c capture) after(t *testing.T, p *serveProc, recv *otlpReceiver) {
	t.Helper()
	c["serve's stderr"] = p.stderr.String()
	bodies := recv.bodies()
	if len(bodies) == 0 {
		t.Error("serve exported no span")
	}
	for i, b := range bodies {
		// Protobuf, uncompressed (the receiver decodes it as it is): a
		// string in a span is there byte for byte.
		c[fmt.Sprintf("OTLP export %d", i)] = string(b)
	}
}

// files reads every file under dirs, and returns them by path.
func (c capture) files(t *testing.T, dirs ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range dirs {
		eachFile(t, d, func(path, text string) {
			c[path], out[path] = text, text
		})
	}
	return out
}

// nowhere fails the test for each of forbidden (what it is, by what it
// is called) found in anything captured.
func (c capture) nowhere(t *testing.T, forbidden map[string]string) {
	t.Helper()
	for where, text := range c {
		for what, s := range forbidden {
			if s == "" {
				t.Fatalf("%s is empty: nothing to look for", what)
			}
			if strings.Contains(text, s) {
				t.Errorf("%s holds %s", where, what)
			}
		}
	}
	t.Logf("looked for %d credentials in %d captures", len(forbidden), len(c))
}
