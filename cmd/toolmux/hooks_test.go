package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/procgroup"
	"github.com/toolmux/toolmux/internal/testservers"
)

// hookScript is the path of one of the hooks package's example scripts.
func hookScript(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "hooks", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Claude Code's documented hooks, unchanged, through toolmux call: the
// rm -rf of builtin__shell denied by a script found in the workspace by
// $CLAUDE_PROJECT_DIR (policy_violation naming the hook and
// its reason, nothing run), an argument rewrite (updatedInput, with
// "allow": no approval asked in the default mode), a command that exits 2
// blocking with its stderr, a rewrite validated like any arguments.
func TestCallHooks(t *testing.T) {
	t.Parallel()
	dir := workspace(t, fmt.Sprintf(`hooks:
  max_output_bytes: 2KiB
  PreToolUse:
    - matcher: builtin__shell
      hooks: [{type: command, command: '"$CLAUDE_PROJECT_DIR"/.claude/hooks/block-rm.sh'}]
    - matcher: builtin__shell
      hooks: [{type: command, command: %q}]
    - matcher: builtin__write_file
      hooks: [{type: command, command: "cat >/dev/null; echo 'no writes here' >&2; exit 2"}]
    - matcher: builtin__glob
      hooks: [{type: command, command: 'echo $$ > hook.pgid; sleep 300 & wait', timeout: 1}]
      # more than max_output_bytes: a failure, and the call goes on
    - matcher: builtin__glob
      hooks: [{type: command, command: 'head -c 2049 /dev/zero'}]
    - matcher: builtin__read_file
      hooks: [{type: command, command: "echo '{\"hookSpecificOutput\":{\"hookEventName\":\"PreToolUse\",\"updatedInput\":{\"offset\":1}}}'"}]
`, hookScript(t, "rewrite.sh")))
	// Where Claude Code's project keeps it, found as Claude Code's hooks
	// find theirs.
	script, err := os.ReadFile(hookScript(t, "block-rm.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, ".claude", "hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".claude", "hooks", "block-rm.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(dir, "victim")
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	r := toolmux(t, dir, "", "call", "--json", "builtin", "shell", `{"command": "rm -rf victim"}`)
	var rec struct {
		Arguments map[string]any `json:"arguments"`
		Error     *struct{ Kind, Message string }
		Notes     []struct{ Layer, Message string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil {
		t.Fatalf("--json: %v\n%s\n%s", err, r.stdout, r.stderr)
	}
	if r.code != 1 || rec.Error == nil || rec.Error.Kind != "policy_violation" || !strings.Contains(rec.Error.Message, "Destructive command blocked by hook") {
		t.Fatalf("rm -rf: exit %d, %+v", r.code, rec)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("the denied command ran: %v", err)
	}

	r = toolmux(t, dir, "", "call", "--json", "builtin", "shell", `{"command": "touch made"}`)
	rec.Error, rec.Notes = nil, nil
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil {
		t.Fatalf("--json: %v\n%s\n%s", err, r.stdout, r.stderr)
	}
	if r.code != 0 || rec.Error != nil || rec.Arguments["command"] != "echo dry run: touch made" || !strings.Contains(r.stdout, "dry run: touch made") {
		t.Fatalf("rewrite: exit %d, %+v\n%s", r.code, rec, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "made")); !os.IsNotExist(err) {
		t.Fatal("the rewritten command ran as it was")
	}
	if len(rec.Notes) == 0 || !strings.Contains(rec.Notes[len(rec.Notes)-1].Message, "rewrote the arguments") {
		t.Errorf("no note of the rewrite: %+v", rec.Notes)
	}

	r = toolmux(t, dir, "", "call", "--yes", "builtin", "write_file", `{"path": "w.txt", "content": "x"}`)
	if r.code != 1 || !strings.Contains(r.stderr+r.stdout, "no writes here") || !strings.Contains(r.stderr+r.stdout, "policy_violation") {
		t.Fatalf("exit 2: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "w.txt")); !os.IsNotExist(err) {
		t.Fatal("the blocked write happened")
	}

	// A hook that outlives its timeout is killed with its group, and one
	// that prints more than the bound fails; by default the call goes on,
	// its record noting both.
	r = toolmux(t, dir, "", "call", "--json", "builtin", "glob", `{"pattern": "*.txt"}`)
	rec.Error, rec.Notes = nil, nil
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil {
		t.Fatalf("--json: %v\n%s\n%s", err, r.stdout, r.stderr)
	}
	notes := fmt.Sprint(rec.Notes)
	if r.code != 0 || rec.Error != nil || !strings.Contains(notes, "killed after 1s") || !strings.Contains(notes, "wrote more than 2048 bytes") {
		t.Fatalf("glob: exit %d, %+v", r.code, rec)
	}
	b, err := os.ReadFile(filepath.Join(dir, "hook.pgid"))
	pgid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pgid <= 0 {
		t.Fatalf("the hook's group: %q %v", b, err)
	}
	if !testservers.Eventually(10*time.Second, func() bool { return !procgroup.AliveIgnoringZombies(pgid) }) {
		t.Errorf("the timed-out hook's group %d is alive", pgid)
	}

	// Rewritten arguments are validated as any: without its path,
	// read_file is refused as invalid_tool_params.
	r = toolmux(t, dir, "", "call", "--json", "builtin", "read_file", `{"path": "notes.txt"}`)
	rec.Error = nil
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil {
		t.Fatalf("--json: %v\n%s\n%s", err, r.stdout, r.stderr)
	}
	if r.code != 1 || rec.Error == nil || rec.Error.Kind != "invalid_tool_params" || rec.Arguments["path"] != nil {
		t.Fatalf("rewritten without a path: exit %d, %+v", r.code, rec)
	}
}

// Through toolmux serve, on /mcp in both protocol eras, on the
// passthrough route of a server and over serve --stdio: a PostToolUse hook's additionalContext is
// in the result the client gets; a guardrail that denies refuses the call
// with a tool error naming it (having received the configured header from
// the environment, not the client's credential); a closed guardrail that
// is down refuses, an open one lets the call go on.
func TestServeHooksAndGuardrails(t *testing.T) {
	t.Parallel()
	gotAuth, gotBody := make(chan string, 64), make(chan string, 64)
	guard := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotAuth <- r.Header.Get("Authorization")
		gotBody <- string(b)
		if strings.Contains(string(b), "forbidden") {
			_, _ = io.WriteString(w, `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"forbidden word"}}`)
		}
	}))
	defer guard.Close()
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()
	cfg := fmt.Sprintf(`servers:
  fx:
    command: %s
policy: {mode: yolo}
hooks:
  PostToolUse:
    - matcher: "*"
      hooks: [{type: command, command: %q, timeout: 30}]
guardrails:
  - {name: acme, url: %q, events: [PreToolUse], matcher: "fx__echo", headers: {Authorization: "Bearer ${GUARD_TOKEN}"}}
  - {name: open-down, url: %q, matcher: builtin__read_file, fail: open}
  - {name: closed-down, url: %q, matcher: "fx__(span|list_directory)|builtin__list_directory", fail: closed}
`, testservers.Fixture(t), hookScript(t, "context.sh"), guard.URL, downURL, downURL)
	dir := workspace(t, cfg)
	p := startServeEnv(t, binary, dir, "", []string{"GUARD_TOKEN=guard-secret"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stdio, _ := stdioServe(t, dir)
	stdio.Env = append(stdio.Env, "GUARD_TOKEN=guard-secret")
	for _, c := range []struct {
		name, version, route, prefix string
	}{
		{"old", legacyProtocol, "/mcp", "fx__"},
		{"modern", "2026-07-28", "/mcp", "fx__"},
		{"passthrough", legacyProtocol, "/servers/fx/mcp", ""},
		{"stdio", legacyProtocol, "", "fx__"},
	} {
		var transport mcp.Transport = &mcp.StreamableClientTransport{Endpoint: p.url(c.route)}
		if c.route == "" {
			transport = &mcp.CommandTransport{Command: stdio}
		}
		ec := connectEra(t, ctx, c.name, c.version, transport)
		callTool := func(name string, args map[string]any) *mcp.CallToolResult {
			t.Helper()
			res, err := ec.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			return res
		}
		res := callTool(c.prefix+"echo", map[string]any{"message": "hello"})
		if text := testservers.ResultText(res); res.IsError || !strings.Contains(text, "Echo: hello") || !strings.Contains(text, "Checked by the hook: fx__echo") {
			t.Fatalf("%s: allowed call: %s", c.name, text)
		}
		if a := <-gotAuth; a != "Bearer guard-secret" {
			t.Errorf("%s: the guardrail's header: %q", c.name, a)
		}
		if b := <-gotBody; !strings.Contains(b, `"tool_name":"fx__echo"`) || !strings.Contains(b, `"hook_event_name":"PreToolUse"`) {
			t.Errorf("%s: the guardrail's input: %s", c.name, b)
		}
		res = callTool(c.prefix+"echo", map[string]any{"message": "forbidden"})
		<-gotAuth
		<-gotBody
		if text := testservers.ResultText(res); !res.IsError || !strings.Contains(text, "guardrail acme denied the call: forbidden word") {
			t.Fatalf("%s: denied call: %+v %s", c.name, res.Meta, text)
		}
		if c.prefix == "" {
			continue // the builtin tools are not the fx route's
		}
		res = callTool("builtin__read_file", map[string]any{"path": "notes.txt"})
		if res.IsError || !strings.Contains(testservers.ResultText(res), "beta") {
			t.Fatalf("%s: open guardrail down: %s", c.name, testservers.ResultText(res))
		}
		res = callTool("builtin__list_directory", map[string]any{"path": "."})
		if !res.IsError || res.Meta["toolmux/error_kind"] != "policy_violation" || !strings.Contains(testservers.ResultText(res), "guardrail closed-down") {
			t.Fatalf("%s: closed guardrail down: %+v %s", c.name, res.Meta, testservers.ResultText(res))
		}
	}
	if strings.Contains(p.stderr.String(), "guard-secret") {
		t.Errorf("the guardrail's token in the log:\n%s", p.stderr.String())
	}
}
