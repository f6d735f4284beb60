package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
)

// personLatency is how long the fake client's user takes to read an
// approval question and decline it: past the gateway's threshold for a
// decline nobody can have read (250ms, gateway/approve.go), and within any
// person's reading time.
const personLatency = 600 * time.Millisecond

// headlessConfig serves the fixture as fx, with no rule of the user's:
// fx/append (no annotations) asks in the default mode, and trusting fx
// would allow it. A virtual server serves it too.
func headlessConfig(t *testing.T) string {
	return fmt.Sprintf(`servers:
  fx:
    command: %s
virtual_servers:
  - name: appends
    tools: ["fx/append"]
`, testservers.Fixture(t))
}

// headlessClient is an agent CLI's MCP client as toolmux meets it: it
// declares elicitation, and answers every approval question with action,
// after a delay (none: at once, as Claude Code's -p mode answers cancel
// and Codex's exec decline, showing nobody anything).
type headlessClient struct {
	cs    *mcp.ClientSession
	tool  string // the name fx/append has on the client's route
	reply atomic.Pointer[mcp.ElicitResult]
	delay atomic.Int64
	asked atomic.Int32
}

func connectHeadless(t *testing.T, ctx context.Context, transport mcp.Transport, version, tool string) *headlessClient {
	t.Helper()
	h := &headlessClient{tool: tool}
	h.answer("cancel", 0)
	client := mcp.NewClient(&mcp.Implementation{Name: "headless-" + version, Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			h.asked.Add(1)
			if d := time.Duration(h.delay.Load()); d > 0 {
				// The user reads the question.
				select {
				case <-time.After(d):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			r := *h.reply.Load()
			return &r, nil
		},
	})
	cs, err := client.Connect(ctx, transport, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("%s: %v", version, err)
	}
	t.Cleanup(func() { cs.Close() })
	h.cs = cs
	return h
}

// answer sets how the client answers the next questions: with action
// (no content), after delay.
func (h *headlessClient) answer(action string, delay time.Duration) {
	h.reply.Store(&mcp.ElicitResult{Action: action})
	h.delay.Store(int64(delay))
}

// appendLine calls fx/append of line into file and returns the result.
func (h *headlessClient) appendLine(t *testing.T, ctx context.Context, file, line string) *mcp.CallToolResult {
	t.Helper()
	res, err := h.cs.CallTool(ctx, &mcp.CallToolParams{Name: h.tool, Arguments: map[string]any{"path": file, "line": line}})
	if err != nil {
		t.Fatalf("%s: %v", h.tool, err)
	}
	return res
}

// refused checks that res refuses the call with kind, its message holding
// every one of want, and that the call did not run (file not written).
func refused(t *testing.T, res *mcp.CallToolResult, file, kind string, want ...string) {
	t.Helper()
	text := testservers.ResultText(res)
	if !res.IsError || res.Meta["toolmux/error_kind"] != kind {
		t.Errorf("kind %v, want %s: %s", res.Meta["toolmux/error_kind"], kind, text)
	}
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("the refusal does not say %q: %s", w, text)
		}
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("the refused call ran (%v)", err)
	}
}

// howToAllow is what a refusal nobody could answer says, for fx/append.
var howToAllow = []string{"no one can be asked", "--yes", "--approval-mode", "action: allow", "`trust: true` on server fx"}

// Agent CLIs run headless answer toolmux's approval questions without
// showing them to anyone: "cancel" (claude -p) or "decline" at once
// (codex exec). On every HTTP route, in both protocol eras, such an
// answer is not "the user denied": with nobody on the page, the call is
// refused as approval_unavailable with how to allow it (trust: true
// included); with a page attached, the question waits there and the
// page's answer runs the call. A decline that took a person's time is
// the user's.
func TestServeHeadlessClientAnswers(t *testing.T) {
	t.Parallel()
	dir := workspace(t, headlessConfig(t))
	p := startServeProc(t, dir, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	type routeClient struct {
		route, version string
		h              *headlessClient
	}
	var clients []routeClient
	for _, route := range []struct{ path, tool string }{
		{"/mcp", "fx__append"}, {"/servers/fx/mcp", "append"}, {"/virtual/appends/mcp", "fx__append"},
	} {
		for _, version := range []string{legacyProtocol, "2026-07-28"} {
			h := connectHeadless(t, ctx, &mcp.StreamableClientTransport{Endpoint: p.url(route.path)}, version, route.tool)
			clients = append(clients, routeClient{route.path, version, h})
		}
	}
	n := 0
	file := func() string {
		n++
		return filepath.Join(dir, fmt.Sprintf("out-%d.txt", n))
	}

	// Nobody on the page. The refusal is the one docs/gateway.md shows,
	// but for the client's name and the page's address.
	doc, err := os.ReadFile("../../docs/gateway.md")
	if err != nil {
		t.Fatal(err)
	}
	example := docLine(t, doc, "fx/append needs approval")
	example = strings.ReplaceAll(example, `"claude-code"`, `"headless-`+legacyProtocol+`"`)
	example = strings.ReplaceAll(example, "http://127.0.0.1:8931/", p.url("/"))
	f := file()
	refused(t, clients[0].h.appendLine(t, ctx, f, "x"), f, "approval_unavailable", example)
	// What docs/gateway.md says Claude Code's Elicitation hook prints
	// answers toolmux's question: the call runs.
	var hook struct {
		HookSpecificOutput struct {
			HookEventName string         `json:"hookEventName"`
			Action        string         `json:"action"`
			Content       map[string]any `json:"content"`
		} `json:"hookSpecificOutput"`
	}
	if err := json.Unmarshal([]byte(docLine(t, doc, `{"hookSpecificOutput":`)), &hook); err != nil || hook.HookSpecificOutput.HookEventName != "Elicitation" {
		t.Fatalf("the hook's output in docs/gateway.md: %v %+v", err, hook)
	}
	for _, c := range clients {
		c.h.reply.Store(&mcp.ElicitResult{Action: hook.HookSpecificOutput.Action, Content: hook.HookSpecificOutput.Content})
		f := file()
		if res := c.h.appendLine(t, ctx, f, "hook"); res.IsError {
			t.Errorf("%s %s: answered as the hook does: %s", c.route, c.version, testservers.ResultText(res))
		}
		if b, err := os.ReadFile(f); err != nil || string(b) != "hook\n" {
			t.Errorf("%s %s: the call the hook approved did not run: %q %v", c.route, c.version, b, err)
		}
	}
	for _, c := range clients {
		t.Run("nobody/"+c.route+"/"+c.version, func(t *testing.T) {
			c.h.answer("cancel", 0)
			f := file()
			refused(t, c.h.appendLine(t, ctx, f, "x"), f, "approval_unavailable",
				append([]string{"answered cancel", "open it first"}, howToAllow...)...)
			c.h.answer("decline", personLatency)
			f = file()
			refused(t, c.h.appendLine(t, ctx, f, "x"), f, "approval_denied", "the user denied the call to fx/append")
			if c.version != legacyProtocol {
				// A 2026-07-28 client answers with a retry: not timed,
				// so any decline is the user's (docs/gateway.md).
				return
			}
			c.h.answer("decline", 0)
			f = file()
			refused(t, c.h.appendLine(t, ctx, f, "x"), f, "approval_unavailable",
				append([]string{"declined", "too soon for anyone to have read the question"}, howToAllow...)...)
		})
	}

	// A page attached: a question the client could not show waits on the
	// page, and the page's answer runs the call.
	p.attach(t)
	for _, c := range clients {
		t.Run("page/"+c.route+"/"+c.version, func(t *testing.T) {
			for _, action := range []string{"cancel", "decline"} {
				if action == "decline" && c.version != legacyProtocol {
					break
				}
				c.h.answer(action, 0)
				pageAnswers(t, ctx, p, c.h, file())
			}
			// A person's decline in the client is final: the page is
			// not asked.
			c.h.answer("decline", personLatency)
			f := file()
			refused(t, c.h.appendLine(t, ctx, f, "x"), f, "approval_denied", "the user denied")
			var pending []struct{ ID string }
			p.getJSON(t, "/api/approvals", &pending)
			if len(pending) != 0 {
				t.Errorf("a declined call waits on the page: %+v", pending)
			}
		})
	}
}

// docLine returns the line of doc that starts with prefix, spaces
// before it trimmed.
func docLine(t *testing.T, doc []byte, prefix string) string {
	t.Helper()
	for _, line := range strings.Split(string(doc), "\n") {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, prefix) {
			return line
		}
	}
	t.Fatalf("no line starting %q in docs/gateway.md", prefix)
	return ""
}

// pageAnswers makes h's call of fx/append into f, which h cannot show
// its user: the question waits on p's page, which approves it once, and
// the call runs.
func pageAnswers(t *testing.T, ctx context.Context, p *serveProc, h *headlessClient, f string) {
	t.Helper()
	type outcome struct {
		res *mcp.CallToolResult
		err error
	}
	results := make(chan outcome, 1)
	// Whatever happens, the call ends with the test.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		res, err := h.cs.CallTool(ctx, &mcp.CallToolParams{Name: h.tool, Arguments: map[string]any{"path": f, "line": "approved"}})
		results <- outcome{res, err}
	}()
	var pending []struct{ ID, Server, Tool string }
	if !testservers.Eventually(30*time.Second, func() bool {
		p.getJSON(t, "/api/approvals", &pending)
		return len(pending) == 1
	}) {
		t.Fatalf("the page holds %d questions, want 1", len(pending))
	}
	if pending[0].Server != "fx" || pending[0].Tool != "append" {
		t.Errorf("the page was asked about %+v", pending[0])
	}
	p.decide(t, pending[0].ID, "once")
	if o := <-results; o.err != nil || o.res.IsError {
		t.Fatalf("the call approved on the page: %v %+v", o.err, o.res)
	}
	if b, err := os.ReadFile(f); err != nil || string(b) != "approved\n" {
		t.Errorf("the approved call did not run: %q %v", b, err)
	}
}

// serve --stdio, with no page: a client that answers cancel, or declines
// at once, is refused as approval_unavailable with how to allow the call
// and where a page could have answered; a person's decline is the
// user's.
func TestServeStdioHeadlessClientAnswers(t *testing.T) {
	t.Parallel()
	for _, version := range []string{legacyProtocol, "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			t.Parallel()
			dir := workspace(t, headlessConfig(t))
			cmd, stderr := stdioServe(t, dir)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			h := connectHeadless(t, ctx, &mcp.CommandTransport{Command: cmd}, version, "fx__append")
			f := filepath.Join(dir, "cancel.txt")
			refused(t, h.appendLine(t, ctx, f, "x"), f, "approval_unavailable",
				append([]string{"answered cancel", "serve --stdio --addr"}, howToAllow...)...)
			if version == legacyProtocol {
				h.answer("decline", 0)
				f = filepath.Join(dir, "instant.txt")
				refused(t, h.appendLine(t, ctx, f, "x"), f, "approval_unavailable",
					append([]string{"too soon for anyone to have read the question"}, howToAllow...)...)
			}
			h.answer("decline", personLatency)
			f = filepath.Join(dir, "person.txt")
			refused(t, h.appendLine(t, ctx, f, "x"), f, "approval_denied", "the user denied the call to fx/append")
			if n := h.asked.Load(); version == legacyProtocol && n != 3 || version != legacyProtocol && n != 2 {
				t.Errorf("the client was asked %d times", n)
			}
			if t.Failed() {
				t.Log(stderr.String())
			}
		})
	}
}
