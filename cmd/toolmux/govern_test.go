package main_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
)

// governConfig gives the admin group (the --token caller's) a mode of its
// own, names the token's caller (default) in rules, grants the dev group
// one tool and limits a virtual server to ops.
const governConfig = `groups:
  admin: {approval_mode: yolo}
  dev: {tools: [builtin/read_file]}
policy:
  rules:
    - {name: no rm for default, callers: [default], tools: [builtin/shell], args: {command: '^rm '}, action: deny, message: "default may not remove files"}
    - {name: ask default before editing, groups: [admin], tools: [builtin/edit], modes: [yolo], action: ask}
virtual_servers:
  - {name: ops, tools: ["builtin/*"], groups: [ops]}
`

// toolmux serve decides for the caller of each request: with --token, the
// token's caller (default, in group admin) gets its group's approval
// mode (yolo: a write runs without asking), the rules that name it (its
// rm is denied, its edit asked on the page, which shows it asked), the
// virtual servers of the admin group, every tool. The same file served
// without a token (no caller) behaves as before identity: the policy's
// mode asks, rules that name callers decide nothing, every route serves.
func TestServeGovernancePerCaller(t *testing.T) {
	t.Parallel()
	const token = "governance-test-token-0123456789"
	call := func(t *testing.T, p *serveProc, tok, name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		hc := http.DefaultClient
		if tok != "" {
			hc = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				r = r.Clone(r.Context())
				r.Header.Set("Authorization", "Bearer "+tok)
				return http.DefaultTransport.RoundTrip(r)
			})}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "governed"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: p.url("/mcp"), HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: legacyProtocol})
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	get := func(t *testing.T, p *serveProc, tok, path string) (int, string) {
		t.Helper()
		return authed(t, http.MethodGet, p.url(path), tok, "")
	}
	ping := func(t *testing.T, p *serveProc, tok, route string) int {
		t.Helper()
		code, _ := authed(t, http.MethodPost, p.url(route), tok, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
		return code
	}

	t.Run("with a token", func(t *testing.T) {
		t.Parallel()
		dir := workspace(t, governConfig)
		p := startServeProc(t, dir, "", "--token", token)
		if res := call(t, p, token, "builtin__write_file", map[string]any{"path": "a.txt", "content": "x"}); res.IsError {
			t.Fatalf("the admin group's yolo: %+v", res)
		}
		if _, err := os.Stat(filepath.Join(dir, "a.txt")); err != nil {
			t.Errorf("the write did not happen: %v", err)
		}
		res := call(t, p, token, "builtin__shell", map[string]any{"command": "rm notes.txt"})
		if !res.IsError || res.Meta["toolmux/error_kind"] != "policy_violation" || !strings.Contains(testservers.ResultText(res), "default may not remove files") {
			t.Errorf("default's rm: %+v", res)
		}
		if code := ping(t, p, token, "/virtual/ops/mcp"); code != http.StatusOK {
			t.Errorf("the admin on ops' virtual server: %d", code)
		}
		if _, tools := get(t, p, token, "/api/tools"); !strings.Contains(tools, `"builtin__shell"`) {
			t.Errorf("the admin does not see every tool: %s", tools)
		}
		// An edit asks; the page (the admin's) shows who asked and
		// answers as the admin.
		attachAs(t, p, token)
		done := make(chan *mcp.CallToolResult, 1)
		go func() {
			done <- call(t, p, token, "builtin__edit", map[string]any{"path": "notes.txt", "old_string": "beta", "new_string": "BETA"})
		}()
		var pending string
		if !testservers.Eventually(30*time.Second, func() bool {
			_, pending = get(t, p, token, "/api/approvals")
			return strings.Contains(pending, `"caller": "default"`)
		}) {
			t.Fatalf("no question of default's: %s\n%s", pending, p.stderr.String())
		}
		id := between(pending, `"id": "`, `"`)
		if code, body := authed(t, http.MethodPost, p.url("/api/approvals/"+id), token, `{"decision": "once"}`); code != http.StatusNoContent {
			t.Fatalf("the admin answers: %d %s", code, body)
		}
		if res := <-done; res.IsError {
			t.Fatalf("the approved edit: %+v", res)
		}
		if !testservers.Eventually(10*time.Second, func() bool {
			return strings.Contains(p.stderr.String(), "builtin/edit of default waits for approval") &&
				strings.Contains(p.stderr.String(), "answered once by default")
		}) {
			t.Errorf("the console does not say who asked and who answered:\n%s", p.stderr.String())
		}
	})

	t.Run("without a token", func(t *testing.T) {
		t.Parallel()
		p := startServeProc(t, workspace(t, governConfig), "")
		if res := call(t, p, "", "builtin__write_file", map[string]any{"path": "a.txt", "content": "x"}); res.Meta["toolmux/error_kind"] != "approval_unavailable" {
			t.Errorf("a write without a caller: %+v", res)
		}
		if res := call(t, p, "", "builtin__shell", map[string]any{"command": "rm notes.txt"}); res.Meta["toolmux/error_kind"] != "approval_unavailable" {
			t.Errorf("rm without a caller: %+v", res)
		}
		if code := ping(t, p, "", "/virtual/ops/mcp"); code != http.StatusOK {
			t.Errorf("ops' virtual server without a caller: %d", code)
		}
	})
}

// attachAs opens the page's event stream with token, as an approver.
func attachAs(t *testing.T, p *serveProc, token string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url("/api/events?approver=1"), nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
	})
	if !testservers.Eventually(10*time.Second, func() bool {
		_, info := authed(t, http.MethodGet, p.url("/api/info"), token, "")
		return strings.Contains(info, `"approvers": 1`)
	}) {
		t.Fatal("the approver never counted")
	}
}

// authed makes a request with token's credential ("" for none) and a
// JSON body (a POST's, as MCP routes take them), and returns the status
// and the body of the answer.
func authed(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// between returns the text of s after the first from, up to the next to.
func between(s, from, to string) string {
	_, rest, _ := strings.Cut(s, from)
	out, _, _ := strings.Cut(rest, to)
	return out
}
