package hooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmux/toolmux/hooks"
	"github.com/toolmux/toolmux/internal/procgroup"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

// script is the path of a test script.
func script(t testing.TB, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var shellTool = tool.Tool{Server: "builtin", Name: "shell"}

func shellCall(command string) tool.Call {
	return tool.Call{ID: "c1", Task: "task1", Server: "builtin", Tool: "shell", Arguments: map[string]any{"command": command}}
}

func pre(matcher string, cmds ...hooks.Command) []hooks.Matcher {
	return []hooks.Matcher{{Matcher: matcher, Hooks: cmds}}
}

func newHooks(t *testing.T, o hooks.Options) *hooks.Hooks {
	t.Helper()
	h, err := hooks.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// gate is a policy gate in mode with approver (nil: nobody to ask).
func gate(t *testing.T, mode policy.Mode, approver policy.Approver) *policy.Gate {
	t.Helper()
	e, err := policy.New(mode, nil)
	if err != nil {
		t.Fatal(err)
	}
	return policy.NewGate(e, policy.WithApprover(approver))
}

func errKind(err error) tool.Kind {
	if te, ok := errors.AsType[*tool.Error](err); ok {
		return te.Kind
	}
	return ""
}

// Claude Code's documented example: a PreToolUse hook reading the call on
// stdin denies a command holding "rm -rf"; the call is refused as a
// policy violation naming the hook and its reason, even in yolo mode;
// another command is admitted.
func TestPreToolUseDeny(t *testing.T) {
	h := newHooks(t, hooks.Options{PreToolUse: pre("builtin__shell", hooks.Command{Command: script(t, "block-rm.sh")})})
	g := h.Gate(gate(t, policy.ModeYolo, nil))
	_, _, err := g.AdmitArguments(context.Background(), shellTool, shellCall("rm -rf /tmp/x"), nil)
	if errKind(err) != tool.KindPolicyViolation || !strings.Contains(err.Error(), "Destructive command blocked by hook") ||
		!strings.Contains(err.Error(), "block-rm.sh") {
		t.Fatalf("rm -rf: %v", err)
	}
	if _, args, err := g.AdmitArguments(context.Background(), shellTool, shellCall("ls"), nil); err != nil || args != nil {
		t.Fatalf("ls: %v %v", args, err)
	}
	// The matcher is an exact name: another tool is not the hook's.
	other := tool.Call{Server: "builtin", Tool: "shellx", Arguments: map[string]any{"command": "rm -rf /"}}
	if _, _, err := g.AdmitArguments(context.Background(), tool.Tool{Server: "builtin", Name: "shellx"}, other, nil); err != nil {
		t.Fatalf("another tool: %v", err)
	}
}

// A hook's updatedInput is what the call is admitted with; its "allow"
// skips the question the default mode would ask (there is nobody to ask
// here: without the hook the call is refused as approval_unavailable).
func TestPreToolUseUpdatedInputAndAllow(t *testing.T) {
	pg := gate(t, policy.ModeDefault, nil)
	if err := pg.Admit(context.Background(), shellTool, shellCall("ls"), nil); errKind(err) != tool.KindApprovalUnavailable {
		t.Fatalf("without the hook: %v", err)
	}
	h := newHooks(t, hooks.Options{PreToolUse: pre("*", hooks.Command{Command: script(t, "rewrite.sh")})})
	_, args, err := h.Gate(pg).AdmitArguments(context.Background(), shellTool, shellCall("ls"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if args["command"] != "echo dry run: ls" {
		t.Fatalf("arguments: %v", args)
	}
}

// A hook's "ask" puts a call the policy allows to the approver, with the
// hook's reason as the question; a "decline" refuses it.
func TestPreToolUseAsk(t *testing.T) {
	var asked []string
	approver := policy.ApproverFunc(func(_ context.Context, req policy.Request) (policy.Answer, error) {
		asked = append(asked, req.Decision.Message)
		return policy.Decline, nil
	})
	cmd := `echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"sure?"}}'`
	h := newHooks(t, hooks.Options{PreToolUse: pre("", hooks.Command{Command: cmd})})
	var waiting []string
	_, _, err := h.Gate(gate(t, policy.ModeYolo, approver)).AdmitArguments(context.Background(), shellTool, shellCall("ls"),
		func(m string) { waiting = append(waiting, m) })
	if errKind(err) != tool.KindApprovalDenied || len(asked) != 1 || asked[0] != "sure?" || len(waiting) != 1 {
		t.Fatalf("ask: %v, asked %q, waiting %q", err, asked, waiting)
	}
}

// Exit code 2 blocks, stderr the reason, before and after the call.
func TestExitCode2Blocks(t *testing.T) {
	cmd := hooks.Command{Command: `cat >/dev/null; echo "no shell today" >&2; exit 2`}
	h := newHooks(t, hooks.Options{PreToolUse: pre("", cmd), PostToolUse: pre("", cmd)})
	_, _, err := h.Gate(gate(t, policy.ModeYolo, nil)).AdmitArguments(context.Background(), shellTool, shellCall("ls"), nil)
	if errKind(err) != tool.KindPolicyViolation || !strings.Contains(err.Error(), "no shell today") {
		t.Fatalf("pre: %v", err)
	}
	rec := call(t, h, context.Background(), shellCall("ls"))
	if rec.Error == nil || rec.Error.Kind != tool.KindPolicyViolation || !strings.Contains(rec.Error.Message, "no shell today") || rec.Result != nil {
		t.Fatalf("post: %+v", rec)
	}
}

// call runs a call through the hooks' middleware over a handler that
// answers "ok".
func call(t *testing.T, h *hooks.Hooks, ctx context.Context, c tool.Call) *tool.Record {
	t.Helper()
	next := pipeline.HandlerFunc(func(_ context.Context, c tool.Call) *tool.Record {
		return &tool.Record{Server: c.Server, Tool: c.Tool, Arguments: c.Arguments,
			Result: &tool.Result{Content: []tool.Content{{Type: tool.ContentText, Text: "ok"}}}}
	})
	return h.Middleware()(next).Call(ctx, c)
}

// A PostToolUse hook's additionalContext is an instruction the model sees
// after the result; it reads the result as tool_response.
func TestPostToolUseContext(t *testing.T) {
	dir := t.TempDir()
	saved := filepath.Join(dir, "in.json")
	h := newHooks(t, hooks.Options{PostToolUse: pre("builtin__.*",
		hooks.Command{Command: "tee " + saved + " | " + script(t, "context.sh")})})
	rec := call(t, h, context.Background(), shellCall("ls"))
	if rec.Error != nil || len(rec.Instructions) != 1 || rec.Instructions[0] != "Checked by the hook: builtin__shell" {
		t.Fatalf("record: %+v", rec)
	}
	if got := pipeline.FormatText(rec); !strings.Contains(got, "Checked by the hook") {
		t.Fatalf("what the model sees: %q", got)
	}
	var in map[string]any
	b, _ := os.ReadFile(saved)
	if err := json.Unmarshal(b, &in); err != nil {
		t.Fatal(err)
	}
	resp, _ := in["tool_response"].(map[string]any)
	if in["hook_event_name"] != "PostToolUse" || in["session_id"] != "task1" || in["tool_use_id"] != "c1" ||
		in["cwd"] == "" || resp == nil || fmt.Sprint(resp["content"]) != "[map[text:ok type:text]]" {
		t.Fatalf("the hook's input: %s", b)
	}
}

// A hook that outlives its timeout is killed with its whole process
// group; by default the call goes on with a note naming it, with
// on_error block it is refused.
func TestHookTimeout(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pgid")
	// The shell is the group's leader; its child sleeps in the group.
	cmd := hooks.Command{Command: fmt.Sprintf(`echo $$ > %s; sleep 300 & wait`, pidFile), Timeout: 200 * time.Millisecond}
	for _, onError := range []hooks.OnError{hooks.Continue, hooks.Block} {
		h := newHooks(t, hooks.Options{PreToolUse: pre("", cmd), OnError: onError})
		ctx, _, err := h.Gate(gate(t, policy.ModeYolo, nil)).AdmitArguments(context.Background(), shellTool, shellCall("ls"), nil)
		b, rerr := os.ReadFile(pidFile)
		pgid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if rerr != nil || pgid <= 0 {
			t.Fatalf("the hook did not start: %v", rerr)
		}
		// Killed is not yet gone: wait, boundedly, for the kernel.
		if !testservers.Eventually(10*time.Second, func() bool { return !procgroup.AliveIgnoringZombies(pgid) }) {
			t.Errorf("%s: the hook's group %d is still alive", onError, pgid)
		}
		switch onError {
		case hooks.Continue:
			if err != nil {
				t.Fatalf("continue: %v", err)
			}
			rec := call(t, newHooks(t, hooks.Options{}), ctx, shellCall("ls"))
			if len(rec.Notes) != 1 || !strings.Contains(rec.Notes[0].Message, "timeout") && !strings.Contains(rec.Notes[0].Message, "killed after") {
				t.Fatalf("continue: notes %+v", rec.Notes)
			}
		case hooks.Block:
			if errKind(err) != tool.KindPolicyViolation || hooks.KindOf(err) != hooks.KindTimeout {
				t.Fatalf("block: %v", err)
			}
		}
	}
}

// The bound on a hook's output: as much as it allows is read, one byte
// more is a failure of kind output_too_large (refused with on_error
// block).
func TestHookOutputBound(t *testing.T) {
	const limit = 1000
	// The answer padded with spaces to exactly n bytes.
	answer := `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"big"}}`
	for _, n := range []int{limit, limit + 1} {
		cmd := hooks.Command{Command: fmt.Sprintf(`cat >/dev/null; printf '%%s%%*s' '%s' %d ''`, answer, n-len(answer))}
		h := newHooks(t, hooks.Options{PreToolUse: pre("", cmd), MaxOutputBytes: limit, OnError: hooks.Block})
		_, _, err := h.Gate(gate(t, policy.ModeYolo, nil)).AdmitArguments(context.Background(), shellTool, shellCall("ls"), nil)
		switch {
		case n == limit && (err == nil || !strings.Contains(err.Error(), "denied the call: big")):
			t.Fatalf("%d bytes: %v", n, err)
		case n > limit && hooks.KindOf(err) != hooks.KindOutputTooLarge:
			t.Fatalf("%d bytes: %v", n, err)
		}
	}
}

// guardrailServer answers every question with answer, and keeps the
// requests' bodies and Authorization headers.
type guardrailServer struct {
	mu     sync.Mutex
	bodies []map[string]any
	auth   []string
}

func (g *guardrailServer) start(t *testing.T, answer string) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		g.mu.Lock()
		g.bodies = append(g.bodies, m)
		g.auth = append(g.auth, r.Header.Get("Authorization"))
		g.mu.Unlock()
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(s.Close)
	return s
}

// A guardrail that denies refuses the call, naming it; it got the hook's
// input and the configured header, nothing else of the caller's.
func TestGuardrailDenies(t *testing.T) {
	var gs guardrailServer
	s := gs.start(t, `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"not on fridays"}}`)
	h := newHooks(t, hooks.Options{Guardrails: []hooks.Guardrail{{Name: "acme", URL: s.URL, Events: []string{hooks.PreToolUse},
		Headers: map[string]string{"Authorization": "Bearer guard-token"}}}})
	_, _, err := h.Gate(gate(t, policy.ModeYolo, nil)).AdmitArguments(context.Background(), shellTool, shellCall("ls"), nil)
	if errKind(err) != tool.KindPolicyViolation || !strings.Contains(err.Error(), "guardrail acme denied the call: not on fridays") {
		t.Fatalf("deny: %v", err)
	}
	if strings.Contains(err.Error(), "guard-token") {
		t.Fatalf("the header in the error: %v", err)
	}
	if len(gs.bodies) != 1 || gs.bodies[0]["tool_name"] != "builtin__shell" || gs.bodies[0]["hook_event_name"] != "PreToolUse" ||
		gs.auth[0] != "Bearer guard-token" {
		t.Fatalf("request: %v %v", gs.bodies, gs.auth)
	}
}

// A guardrail that is down lets the call go on with a note when open,
// refuses it naming the guardrail when closed; one that takes too long
// is a timeout; a post guardrail down and closed replaces the result.
func TestGuardrailDown(t *testing.T) {
	s := httptest.NewServer(http.NotFoundHandler())
	down := s.URL
	s.Close()
	for _, fail := range []hooks.Fail{hooks.FailOpen, hooks.FailClosed} {
		h := newHooks(t, hooks.Options{Guardrails: []hooks.Guardrail{{Name: "acme", URL: down, Fail: fail}}})
		ctx, _, err := h.Gate(gate(t, policy.ModeYolo, nil)).AdmitArguments(context.Background(), shellTool, shellCall("ls"), nil)
		rec := call(t, h, ctx, shellCall("ls"))
		switch fail {
		case hooks.FailOpen:
			if err != nil || rec.Error != nil || len(rec.Notes) != 2 || !strings.Contains(rec.Notes[0].Message, "guardrail acme (PreToolUse): cannot be reached") {
				t.Fatalf("open: %v %+v", err, rec)
			}
		case hooks.FailClosed:
			if errKind(err) != tool.KindPolicyViolation || hooks.KindOf(err) != hooks.KindUnavailable || !strings.Contains(err.Error(), "guardrail acme") {
				t.Fatalf("closed: %v", err)
			}
			if rec.Error == nil || hooks.KindOf(rec.Error) != hooks.KindUnavailable || !strings.Contains(rec.Error.Message, "guardrail acme (PostToolUse)") {
				t.Fatalf("closed, post: %+v", rec)
			}
		}
	}
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(release)
	h := newHooks(t, hooks.Options{Guardrails: []hooks.Guardrail{{Name: "slow", URL: slow.URL, Fail: hooks.FailClosed, Timeout: 100 * time.Millisecond}}})
	_, _, err := h.Gate(gate(t, policy.ModeYolo, nil)).AdmitArguments(context.Background(), shellTool, shellCall("ls"), nil)
	if hooks.KindOf(err) != hooks.KindTimeout {
		t.Fatalf("slow: %v", err)
	}
}

// A guardrail's answer is bounded: one byte more than max_response_bytes
// fails it.
func TestGuardrailResponseBound(t *testing.T) {
	answer := `{"decision":"block","reason":"r"}`
	for _, limit := range []int{len(answer), len(answer) - 1} {
		var gs guardrailServer
		s := gs.start(t, answer)
		h := newHooks(t, hooks.Options{Guardrails: []hooks.Guardrail{{Name: "g", URL: s.URL, Events: []string{hooks.PostToolUse},
			MaxResponseBytes: limit, Fail: hooks.FailOpen}}})
		rec := call(t, h, context.Background(), shellCall("ls"))
		if limit == len(answer) && (rec.Error == nil || !strings.Contains(rec.Error.Message, "guardrail g blocked the result: r")) {
			t.Fatalf("limit %d: %+v", limit, rec)
		}
		if limit < len(answer) && (rec.Error != nil || len(rec.Notes) != 1 || !strings.Contains(rec.Notes[0].Message, "more than")) {
			t.Fatalf("limit %d: %+v", limit, rec)
		}
	}
}

// Bad options are errors naming what is wrong.
func TestNewErrors(t *testing.T) {
	for _, o := range []hooks.Options{
		{PreToolUse: pre("(", hooks.Command{Command: "true"})},
		{PostToolUse: pre("", hooks.Command{Command: " "})},
		{OnError: "maybe"},
		{Guardrails: []hooks.Guardrail{{Name: "g", URL: "http://x", Fail: "ajar"}}},
		{Guardrails: []hooks.Guardrail{{Name: "g", URL: "http://x", Events: []string{"Stop"}}}},
	} {
		if _, err := hooks.New(o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

// The worked example of docs/hooks.md is the script the tests run
// (TestPreToolUseDeny, cmd/toolmux's TestCallHooks).
func TestDocumentedExample(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "hooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```sh\n")
	block, _, ok2 := strings.Cut(rest, "```")
	want, err := os.ReadFile(script(t, "block-rm.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if !ok || !ok2 || block != string(want) {
		t.Fatalf("docs/hooks.md's example is not testdata/block-rm.sh:\n%s", block)
	}
}

// A PreToolUse hook's additionalContext and systemMessage reach the
// record of the call it admitted: an instruction for the model, a note.
func TestPreToolUseContext(t *testing.T) {
	cmd := `echo '{"systemMessage":"looked at it","hookSpecificOutput":{"hookEventName":"PreToolUse","additionalContext":"mind the quota"}}'`
	h := newHooks(t, hooks.Options{PreToolUse: pre("", hooks.Command{Command: cmd})})
	ctx, args, err := h.Gate(gate(t, policy.ModeYolo, nil)).AdmitArguments(context.Background(), shellTool, shellCall("ls"), nil)
	if err != nil || args != nil {
		t.Fatal(args, err)
	}
	rec := call(t, h, ctx, shellCall("ls"))
	if len(rec.Instructions) != 1 || rec.Instructions[0] != "mind the quota" || len(rec.Notes) != 1 || !strings.HasSuffix(rec.Notes[0].Message, ": looked at it") {
		t.Fatalf("record: %+v", rec)
	}
}

// Every way a hook can fail is typed, and none takes the call down with
// it unless told to: with on_error continue the call goes on with a note,
// with block it is refused with the hook's error in the chain.
func TestHookFailures(t *testing.T) {
	for _, c := range []struct {
		command string
		kind    hooks.Kind
	}{
		{"cat >/dev/null; echo oops >&2; exit 1", hooks.KindExit},
		{"kill -9 $$", hooks.KindExit},
		{"echo '{not json'", hooks.KindBadOutput},
		{`echo '{"hookSpecificOutput":{"permissionDecision":"maybe"}}'`, hooks.KindBadOutput},
		{"/nonexistent/hook", hooks.KindExit}, // sh starts, and exits 127
	} {
		h := newHooks(t, hooks.Options{PreToolUse: pre("", hooks.Command{Command: c.command})})
		ctx, _, err := h.Gate(gate(t, policy.ModeYolo, nil)).AdmitArguments(context.Background(), shellTool, shellCall("ls"), nil)
		if err != nil {
			t.Fatalf("%s, continue: %v", c.command, err)
		}
		rec := call(t, h, ctx, shellCall("ls"))
		if rec.Error != nil || len(rec.Notes) != 1 || !strings.Contains(rec.Notes[0].Message, "the call went on") {
			t.Fatalf("%s, continue: %+v", c.command, rec)
		}
		h = newHooks(t, hooks.Options{PreToolUse: pre("", hooks.Command{Command: c.command}), OnError: hooks.Block})
		_, _, err = h.Gate(gate(t, policy.ModeYolo, nil)).AdmitArguments(context.Background(), shellTool, shellCall("ls"), nil)
		if errKind(err) != tool.KindPolicyViolation || hooks.KindOf(err) != c.kind {
			t.Fatalf("%s, block: %v (kind %q)", c.command, err, hooks.KindOf(err))
		}
	}
}

// A PostToolUse hook's updatedToolOutput (or updatedMCPToolOutput)
// replaces the result: a string, content parts, or an MCP result whose
// isError makes the call a failure.
func TestPostToolUseUpdatedOutput(t *testing.T) {
	for _, c := range []struct {
		out, text string
		failed    bool
	}{
		{`{"updatedToolOutput":"redacted"}`, "redacted", false},
		{`{"updatedMCPToolOutput":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}`, "a\nb", false},
		{`{"updatedToolOutput":{"content":[{"type":"text","text":"nope"}],"isError":true}}`, "nope", true},
	} {
		cmd := fmt.Sprintf(`echo '{"hookSpecificOutput":%s}'`, strings.Replace(c.out, "{", `{"hookEventName":"PostToolUse",`, 1))
		h := newHooks(t, hooks.Options{PostToolUse: pre("", hooks.Command{Command: cmd})})
		rec := call(t, h, context.Background(), shellCall("ls"))
		if rec.Result == nil || rec.Result.Text() != c.text || (rec.Error != nil) != c.failed || len(rec.Notes) != 1 {
			t.Fatalf("%s: %+v %+v", c.out, rec.Result, rec.Error)
		}
		if c.failed && rec.Error.Kind != tool.KindToolError {
			t.Fatalf("%s: %+v", c.out, rec.Error)
		}
	}
}

// The input's permission_mode is the caller's approval mode in Claude
// Code's words, before and after the call.
func TestPermissionMode(t *testing.T) {
	dir := t.TempDir()
	save := func(name string) hooks.Command {
		return hooks.Command{Command: "cat > " + filepath.Join(dir, name)}
	}
	for mode, want := range map[policy.Mode]string{policy.ModeYolo: "bypassPermissions", policy.ModeAutoEdit: "acceptEdits", policy.ModePlan: "plan"} {
		h := newHooks(t, hooks.Options{PreToolUse: pre("", save("pre.json")), PostToolUse: pre("", save("post.json"))})
		// A read-only tool, which every mode admits.
		ro := true
		def := tool.Tool{Server: "builtin", Name: "shell", Annotations: tool.Annotations{ReadOnly: &ro}}
		ctx, _, err := h.Gate(gate(t, mode, nil)).AdmitArguments(context.Background(), def, shellCall("ls"), nil)
		if err != nil {
			t.Fatal(err)
		}
		call(t, h, ctx, shellCall("ls"))
		for _, f := range []string{"pre.json", "post.json"} {
			b, err := os.ReadFile(filepath.Join(dir, f))
			var in struct {
				Mode string `json:"permission_mode"`
			}
			if err != nil || json.Unmarshal(b, &in) != nil || in.Mode != want {
				t.Errorf("%s, %s: %s %v", mode, f, b, err)
			}
		}
	}
}

// Where the policy asks too, a hook's ask is its own question, put every
// time: an "always" answer remembered by the policy does not answer it.
func TestPreToolUseAskOverAlways(t *testing.T) {
	var asked []string
	approver := policy.ApproverFunc(func(_ context.Context, req policy.Request) (policy.Answer, error) {
		asked = append(asked, req.Decision.Message)
		return policy.AlwaysTool, nil
	})
	cmd := `echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"sure?"}}'`
	h := newHooks(t, hooks.Options{PreToolUse: pre("", hooks.Command{Command: cmd})})
	g := h.Gate(gate(t, policy.ModeDefault, approver))
	for range 2 {
		if _, _, err := g.AdmitArguments(context.Background(), shellTool, shellCall("ls"), nil); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(asked) != "[sure? sure?]" {
		t.Fatalf("asked %q", asked)
	}
}
