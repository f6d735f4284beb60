package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// In the default mode a shell call needs approval; a run that cannot ask
// (stdin is not a terminal) refuses it and says how to allow it, --yes
// approves it, plan mode refuses file edits outright.
func TestCallApproval(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "")
	r := toolmux(t, dir, "", "call", "builtin", "shell", `{"command": "echo hi > made.txt"}`)
	if r.code != 1 || !strings.Contains(r.stderr, "approval_unavailable") || !strings.Contains(r.stderr, "--yes") ||
		!strings.Contains(r.stderr, "builtin/shell") {
		t.Fatalf("non-interactive shell call: exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "made.txt")); !os.IsNotExist(err) {
		t.Fatal("the refused command ran")
	}

	r = toolmux(t, dir, "", "call", "--yes", "builtin", "shell", `{"command": "echo hi > made.txt; echo done"}`)
	if r.code != 0 || !strings.Contains(r.stdout, "done") {
		t.Fatalf("--yes: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "made.txt")); err != nil || string(b) != "hi\n" {
		t.Fatalf("the approved command did not run: %q %v", b, err)
	}

	r = toolmux(t, dir, "", "call", "--approval-mode", "plan", "--json", "builtin", "write_file", `{"path": "plan.txt", "content": "x"}`)
	var rec struct {
		Error struct{ Kind, Message string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil {
		t.Fatalf("--json output: %v\n%s", err, r.stdout)
	}
	if r.code != 1 || rec.Error.Kind != "policy_violation" || !strings.Contains(rec.Error.Message, "plan mode") {
		t.Fatalf("plan mode write: exit %d, %+v", r.code, rec.Error)
	}
	if _, err := os.Stat(filepath.Join(dir, "plan.txt")); !os.IsNotExist(err) {
		t.Fatal("plan mode wrote a file")
	}

	// Reads need nobody's approval in any mode.
	r = toolmux(t, dir, "", "call", "--approval-mode", "plan", "builtin", "read_file", `{"path": "notes.txt"}`)
	if r.code != 0 || !strings.Contains(r.stdout, "beta") {
		t.Fatalf("plan mode read: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}

	r = toolmux(t, dir, "", "call", "--approval-mode", "sometimes", "builtin", "read_file", `{"path": "notes.txt"}`)
	if r.code != 2 || !strings.Contains(r.stderr, "--approval-mode") {
		t.Fatalf("bad mode: exit %d, %q", r.code, r.stderr)
	}
}

// A policy rule in the configuration allows a narrow shell command without
// asking, and only that one.
func TestCallPolicyRuleFromConfig(t *testing.T) {
	t.Parallel()
	dir := workspace(t, `policy:
  rules:
    - name: echo is harmless
      tools: [builtin/shell]
      args: {command: '^echo [a-z ]+$'}
      action: allow
`)
	r := toolmux(t, dir, "", "call", "builtin", "shell", `{"command": "echo allowed"}`)
	if r.code != 0 || !strings.Contains(r.stdout, "allowed") {
		t.Fatalf("allowed command: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	r = toolmux(t, dir, "", "call", "builtin", "shell", `{"command": "echo allowed; touch x"}`)
	if r.code != 1 || !strings.Contains(r.stderr, "approval_unavailable") {
		t.Fatalf("other command: exit %d, %q", r.code, r.stderr)
	}
}

// `tools` says which tools need approval in the mode in force.
func TestToolsShowsApproval(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "")
	approval := func(args ...string) map[string]string {
		t.Helper()
		r := toolmux(t, dir, "", append([]string{"tools", "--json"}, args...)...)
		if r.code != 0 {
			t.Fatalf("tools: exit %d, %s", r.code, r.stderr)
		}
		var entries []struct{ Name, Approval string }
		if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, e := range entries {
			out[e.Name] = e.Approval
		}
		return out
	}
	def := approval()
	if def["builtin__read_file"] != "allow" || def["builtin__shell"] != "ask" || def["builtin__write_file"] != "ask" {
		t.Errorf("default mode: %v", def)
	}
	if ae := approval("--approval-mode", "auto_edit"); ae["builtin__write_file"] != "allow" || ae["builtin__edit"] != "allow" || ae["builtin__shell"] != "ask" {
		t.Errorf("auto_edit mode: %v", ae)
	}
	if plan := approval("--approval-mode", "plan"); plan["builtin__shell"] != "deny" || plan["builtin__grep"] != "allow" {
		t.Errorf("plan mode: %v", plan)
	}
	if yolo := approval("--approval-mode", "yolo"); yolo["builtin__shell"] != "allow" {
		t.Errorf("yolo mode: %v", yolo)
	}
	r := toolmux(t, dir, "", "tools")
	if !strings.Contains(r.stdout, "APPROVAL") || !strings.Contains(r.stdout, "approval mode default") {
		t.Errorf("table: %s", r.stdout)
	}
}
