package main_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/vault"
)

// A caller not yet connected to an OAuth server is sent to authorize
// through the channel its client has, through the real binary: the
// authorization URL in a URL-mode elicitation (2025-11-25) or an
// input_required question (2026-07-28); the user logs in at Hydra there,
// the callback completes, and the call goes on, reaching the server as
// that user. The URL's state is nowhere in the data directory, the log,
// the spans, the event stream or /metrics.
func TestServeOAuthChannel(t *testing.T) {
	t.Parallel()
	h := testservers.StartHydra(t)
	fx := testservers.StartOAuthMCP(t, h)
	home := t.TempDir()
	keys := map[string]string{}
	for _, n := range []string{"ann", "bob", "carol"} {
		keys[n] = addKey(t, home, n)
	}
	ops := addKey(t, home, "ops", "--group", "admin") // reads the event stream and /metrics
	// Spans exported, logs at debug level, the event stream read during
	// the calls and /metrics after them: no state in any
	// (TestServeNoCredentialAnywhere).
	recv := startOTLPReceiver(t)
	p := startServeEnv(t, binary, workspace(t, oauthConfig(fx)), home, append([]string{"TOOLMUX_VAULT_KEY=" + vault.GenerateKey()}, recv.env()...),
		"-v", "--metrics")
	tap := tapEvents(t, p, ops)
	callback := "http://" + p.addr + "/oauth/callback"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// login logs user in at the authorization URL u and completes the
	// callback, as the user's browser would.
	login := func(u, user string) {
		t.Helper()
		jar, _ := cookiejar.New(nil)
		resp, err := http.Get(h.LogIn(t, jar, u, user, callback).String())
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s's callback: %v %v", user, resp, err)
		}
		resp.Body.Close()
	}
	// Ann connects on the API: fx's tools are listed over her connection.
	var in struct{ URL string }
	if code := apiAs(t, p, keys["ann"], http.MethodPost, "/api/connections/fx", &in); code != http.StatusOK {
		t.Fatalf("POST /api/connections/fx: %d", code)
	}
	login(in.URL, "ann")
	if _, said := whoamiSession(t, ctx, p, keys["ann"]); said != "ann" {
		t.Fatalf("ann: %q", said)
	}

	var mu sync.Mutex
	var urls []string
	for who, version := range map[string]string{"bob": legacyProtocol, "carol": "2026-07-28"} {
		opts := &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{
			Form: &mcp.FormElicitationCapabilities{}, URL: &mcp.URLElicitationCapabilities{}}},
			ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				if r.Params.Mode != "url" || !strings.HasPrefix(r.Params.URL, h.Issuer) {
					return &mcp.ElicitResult{Action: "decline"}, nil
				}
				mu.Lock()
				urls = append(urls, r.Params.URL)
				mu.Unlock()
				login(r.Params.URL, who)
				return &mcp.ElicitResult{Action: "accept"}, nil
			}}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "oauth-channel-test"}, opts).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: p.url("/mcp"), HTTPClient: bearer(keys[who])}, &mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		out, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__whoami"})
		if err != nil || out.IsError || testservers.ResultText(out) != who {
			t.Fatalf("%s (%s): %v %q", who, version, err, testservers.ResultText(out))
		}
	}
	captured := stopAndCapture(t, p, tap, recv, map[string]int{"ann/fx/success": 1, "bob/fx/success": 1, "carol/fx/success": 1}, ops)
	mu.Lock()
	defer mu.Unlock()
	if len(urls) != 2 {
		t.Fatalf("asked to open %d URLs, want one for each of bob and carol", len(urls))
	}
	secrets := map[string]string{}
	for i, u := range urls {
		pu, err := url.Parse(u)
		if err != nil || pu.Query().Get("state") == "" {
			t.Fatalf("an authorization URL without a state: %q", u)
		}
		secrets[fmt.Sprintf("the state of authorization URL %d", i)] = pu.Query().Get("state")
	}
	nowhere(t, p, home, secrets)
	for _, n := range []string{"ann", "bob", "carol"} {
		secrets[n+"'s API key"] = keys[n]
	}
	secrets["ops's API key"] = ops
	captured.nowhere(t, secrets)
}
