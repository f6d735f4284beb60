package main_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
)

// rate_limits in toolmux.yaml limits a real serve's callers: with
// --token, the caller default (group admin) gets one call a minute from
// the admin group's budget, the next is refused with the JSON-RPC error
// of code -32032, the metrics count both under the caller's name, and a
// reload that lifts the limit lets the next call through at once.
func TestServeRateLimits(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token-of-the-test"
	cfg := fixtureConfig(t) + "rate_limits:\n  groups:\n    admin: {calls_per_minute: 1}\n"
	dir := workspace(t, cfg)
	p := startServeProc(t, dir, "", "--metrics", "--token", token)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: p.url("/mcp"), HTTPClient: &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer "+token)
			return http.DefaultTransport.RoundTrip(r)
		})}}, &mcp.ClientSessionOptions{ProtocolVersion: legacyProtocol})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func() error {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__echo", Arguments: map[string]any{"message": "hi"}})
		if err == nil && res.IsError {
			return fmt.Errorf("the tool failed: %+v", res.Content)
		}
		return err
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}
	err = call()
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != -32032 || !strings.Contains(rpcErr.Message, `group "admin"`) ||
		!strings.Contains(string(rpcErr.Data), `"group":"admin"`) {
		t.Fatalf("the call over the budget: %v", err)
	}
	fams := scrape(t, p, token)
	wantSample(t, fams, "toolmux_caller_calls_total", map[string]string{"caller": "default"}, 1)
	wantSample(t, fams, "toolmux_rate_limited_total", map[string]string{"caller": "default", "group": "admin", "limit": "calls_per_minute"}, 1)

	writeFile(t, filepath.Join(dir, "toolmux.yaml"), fixtureConfig(t))
	mark := len(p.stderr.String())
	if err := p.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if !testservers.Eventually(30*time.Second, func() bool { return strings.Contains(p.stderr.String()[mark:], "reloaded") }) {
		t.Fatalf("no reload:\n%s", p.stderr.String())
	}
	if err := call(); err != nil {
		t.Errorf("after the reload lifted the limit: %v", err)
	}
}
