package config_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/toolmux/toolmux/config"
)

// The hooks object of Claude Code's settings, pasted as it is (JSON is
// YAML), is read; toolmux's bounds sit beside the events.
func TestHooks(t *testing.T) {
	cfg, err := config.ParseWith("toolmux.yaml", []byte(`hooks: {"PreToolUse": [{"matcher": "builtin__shell", "hooks": [{"type": "command", "command": "$HOME/deny.sh ${X}", "timeout": 5}]}],
        "PostToolUse": [{"matcher": "", "hooks": [{"type": "command", "command": "ctx.sh"}]}],
        "max_timeout": "2m", "max_output_bytes": "64KiB", "on_error": "block"}
guardrails:
  - name: acme
    url: https://guard.example.com/check
    events: [PreToolUse]
    matcher: "builtin__.*"
    timeout: 3s
    max_response_bytes: 16KiB
    fail: closed
    headers: {Authorization: "Bearer ${GUARD_TOKEN}"}
`), config.Options{Dir: "/work", LookupEnv: func(k string) (string, bool) {
		if k == "GUARD_TOKEN" {
			return "tok", true
		}
		return "", false
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := config.Hooks{
		// The command is the shell's to expand, as Claude Code's.
		PreToolUse:  []config.HookMatcher{{Matcher: "builtin__shell", Hooks: []config.HookCommand{{Command: "$HOME/deny.sh ${X}", Timeout: 5 * time.Second}}}},
		PostToolUse: []config.HookMatcher{{Matcher: "", Hooks: []config.HookCommand{{Command: "ctx.sh"}}}},
		MaxTimeout:  2 * time.Minute, MaxOutputBytes: 64 << 10, OnError: "block",
	}
	if !reflect.DeepEqual(cfg.Hooks, want) {
		t.Errorf("hooks: %+v", cfg.Hooks)
	}
	wantG := []config.Guardrail{{Name: "acme", URL: "https://guard.example.com/check", Events: []string{"PreToolUse"}, Matcher: "builtin__.*",
		Timeout: 3 * time.Second, MaxResponseBytes: 16 << 10, Fail: "closed", Headers: map[string]string{"Authorization": "Bearer tok"}}}
	if !reflect.DeepEqual(cfg.Guardrails, wantG) {
		t.Errorf("guardrails: %+v", cfg.Guardrails)
	}
}

func TestHooksErrors(t *testing.T) {
	checkErrors(t, "toolmux.yaml", `hooks:
  PreToolUse:
    - matcher: "("
      hooks: [{type: prompt, command: x, timeout: 86401}]
    - matcher: x
      hooks: [{command: x, async: true}]
  Stop: []
  on_error: maybe
guardrails:
  - {name: g, url: "ftp://x", fail: ajar, events: [Stop]}
  - {name: g, url: "http://x"}
  - {name: h}
`, []wantErr{
		{3, 16, "hooks.PreToolUse[0].matcher", `"(" is not a regular expression: error parsing regexp: missing closing ): ` + "`(`"},
		{4, 22, "hooks.PreToolUse[0].hooks[0].type", `unknown hook type "prompt" (expected command)`},
		{4, 51, "hooks.PreToolUse[0].hooks[0].timeout", "must be between 1 and 86400, got 86401"},
		{6, 15, "hooks.PreToolUse[1].hooks[0]", "needs type: command"},
		{6, 28, "hooks.PreToolUse[1].hooks[0].async", "unknown key (expected one of: type, command, timeout)"},
		{7, 3, "hooks.Stop", "unknown key (expected one of: PreToolUse, PostToolUse, max_timeout, max_output_bytes, on_error)"},
		{8, 13, "hooks.on_error", `unknown on_error "maybe" (expected continue or block)`},
		{10, 20, "guardrails[0].url", `"ftp://x" is not an http(s) URL such as https://idp.example.com`},
		{10, 37, "guardrails[0].fail", `unknown fail "ajar" (expected open or closed)`},
		{10, 52, "guardrails[0].events[0]", `unknown event "Stop" (expected PreToolUse or PostToolUse)`},
		{11, 12, "guardrails[1].name", `"g" is the name of another guardrail`},
		{12, 5, "guardrails[2]", "needs a name and a url"},
	})
}
