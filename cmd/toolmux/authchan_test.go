package main_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/vault"
)

// A caller without a server's secret is sent to the page's Secrets tab
// through the channel its client has, through the real binary: a
// 2025-11-25 client that declared URL-mode elicitation is asked on the
// call's stream, and the call goes on once the user has set the secret
// (toolmux secrets set, which tells the gateway); a 2026-07-28 client
// gets input_required and its retry runs the call; a client without URL
// elicitation gets the error whose text names the page. The URL is
// nowhere in the data directory.
func TestServeCredentialChannel(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	keys := map[string]string{"erin": addKey(t, home, "erin"), "dave": addKey(t, home, "dave")}
	env := []string{"TOOLMUX_VAULT_KEY=" + vault.GenerateKey()}
	dir := workspace(t, secretsConfig(t))
	p := startServeEnv(t, binary, dir, home, env)
	page := "http://" + p.addr + "/#secrets"
	secrets := func(who, stdin string, args ...string) {
		t.Helper()
		e := append(os.Environ(), "XDG_DATA_HOME="+home, "TOOLMUX_URL=http://"+p.addr, "TOOLMUX_TOKEN="+keys[who])
		if r := execToolmux(t, dir, stdin, append(e, env...), append([]string{"secrets"}, args...)...); r.code != 0 {
			t.Fatalf("%s: secrets %v: %d %s", who, args, r.code, r.stderr)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Erin's secret lists the server's tools (over her connection).
	secrets("erin", "erin-value", "set", "fx", "TOKEN")

	var mu sync.Mutex
	var asked []string
	var completed int
	// dave's user, at the URL, sets the secret (on the page, or as here
	// with the command), then the client answers accept.
	userClient := func(url bool) *mcp.ClientOptions {
		caps := &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}}
		if url {
			caps.URL = &mcp.URLElicitationCapabilities{}
		}
		return &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{Elicitation: caps},
			ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				mu.Lock()
				asked = append(asked, r.Params.Mode+" "+r.Params.URL)
				mu.Unlock()
				if r.Params.Mode != "url" {
					return &mcp.ElicitResult{Action: "decline"}, nil
				}
				secrets("dave", "dave-value", "set", "fx", "TOKEN")
				return &mcp.ElicitResult{Action: "accept"}, nil
			},
			ElicitationCompleteHandler: func(context.Context, *mcp.ElicitationCompleteNotificationRequest) {
				mu.Lock()
				completed++
				mu.Unlock()
			}}
	}
	connect := func(version string, opts *mcp.ClientOptions) *mcp.ClientSession {
		t.Helper()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "channel-test"}, opts).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: p.url("/mcp"), HTTPClient: bearer(keys["dave"])}, &mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	call := func(cs *mcp.ClientSession) (string, *mcp.CallToolResult) {
		t.Helper()
		out, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__whoami", Arguments: map[string]any{"env": "FIXTURE_TOKEN"}})
		if err != nil {
			t.Fatal(err)
		}
		text := testservers.ResultText(out)
		if out.IsError {
			return text, out
		}
		var w testservers.Whoami
		if err := json.Unmarshal([]byte(text), &w); err != nil {
			t.Fatal(err)
		}
		return w.Env, out
	}
	first := connect(legacyProtocol, userClient(true))
	if !testservers.Eventually(30*time.Second, func() bool {
		ts, err := first.ListTools(ctx, nil)
		return err == nil && slicesHas(ts.Tools, "fx__whoami")
	}) {
		t.Fatalf("fx's tools never listed\n%s", p.stderr.String())
	}

	for _, version := range []string{legacyProtocol, "2026-07-28"} {
		mu.Lock()
		asked = nil
		mu.Unlock()
		cs := first
		if version != legacyProtocol {
			cs = connect(version, userClient(true))
		}
		got, out := call(cs)
		if out.IsError || got != testservers.WhoamiSum("dave-value") {
			t.Fatalf("%s: after the secret was set: %q", version, got)
		}
		mu.Lock()
		if len(asked) != 1 || asked[0] != "url "+page {
			t.Errorf("%s: asked %q, want the URL %s once", version, asked, page)
		}
		mu.Unlock()
		secrets("dave", "", "delete", "fx", "TOKEN")
	}
	if !testservers.Eventually(10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return completed == 1 }) {
		t.Error("the 2025-11-25 client was not told the elicitation completed")
	}

	// Without URL elicitation: the error, whose text names the page.
	for _, version := range []string{legacyProtocol, "2026-07-28"} {
		text, out := call(connect(version, nil))
		if !out.IsError || out.Meta["toolmux/error_kind"] != "auth_required" || !strings.Contains(text, "open "+page) ||
			!strings.Contains(text, "toolmux secrets set fx TOKEN") {
			t.Errorf("%s: %q", version, text)
		}
	}

	if err := p.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(); err != nil {
		t.Fatalf("serve: %v\n%s", err, p.stderr.String())
	}
	// The records and events of the calls that lacked the secret are
	// kept, without where the user was sent.
	authRequired := false
	eachFile(t, home, func(path, text string) {
		if strings.Contains(text, "#secrets") {
			t.Errorf("%s holds the URL the user was sent to", path)
		}
		authRequired = authRequired || strings.Contains(text, `"auth_required"`)
	})
	if !authRequired {
		t.Error("no record of a call that lacked the secret")
	}
}
