//go:build !toolmux_codemode

package main_test

import (
	"strings"
	"testing"

	"github.com/toolmux/toolmux/internal/llmtest"
)

// In a build without code mode's engine, toolmux run --code-mode is a
// usage error saying how to build it, before the model is asked; with
// agent.code_mode in the configuration, the agent offers the tools as
// without it.
func TestRunCodeModeNotBuiltIn(t *testing.T) {
	t.Parallel()
	m := llmtest.OpenAI(t, llmtest.Replies(llmtest.Reply{Content: "done"}))
	dir := workspace(t, fleetConfig(t, m)+"agent: {code_mode: only}\n")
	r := runToolmux(t, dir, nil, "run", "--code-mode", "do it")
	if r.code != 2 || !strings.Contains(r.stderr, "no JavaScript engine") || !strings.Contains(r.stderr, "toolmux_codemode") {
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
