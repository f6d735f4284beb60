package main_test

import (
	"strings"
	"testing"

	"github.com/toolmux/toolmux/internal/llmtest"
)

// Without code mode's engine program, toolmux run --code-mode is a usage
// error saying where it looked, before the model is asked; with
// agent.code_mode in the configuration, the agent offers the tools as
// without it.
func TestRunCodeModeWithoutEngine(t *testing.T) {
	t.Parallel()
	m := llmtest.OpenAI(t, llmtest.Replies(llmtest.Reply{Content: "done"}))
	dir := workspace(t, fleetConfig(t, m)+"agent: {code_mode: only}\ncode_mode: {engine: missing-engine}\n")
	r := runToolmux(t, dir, nil, "run", "--code-mode", "do it")
	if r.code != 2 || !strings.Contains(r.stderr, "code mode's engine") || !strings.Contains(r.stderr, "missing-engine") {
		t.Errorf("--code-mode: exit %d\n%s", r.code, r.stderr)
	}
	if n := len(m.Requests()); n != 0 {
		t.Fatalf("the model was asked %d times", n)
	}
	r = runToolmux(t, dir, nil, "run", "do it")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "done" {
		t.Fatalf("agent.code_mode: exit %d\n%s", r.code, r.stderr)
	}
	if tools := m.Requests()[0].Tools; len(tools) < 2 || strings.Contains(strings.Join(tools, " "), "run_code") {
		t.Errorf("offered %v", tools)
	}
}
