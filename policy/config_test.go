package policy_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

func TestFromConfig(t *testing.T) {
	cfg, err := config.ParseWith("toolmux.yaml", []byte(`policy:
  mode: auto_edit
  rules:
    - {name: no deletes, tools: ["*/delete_*"], action: deny, message: "Archive instead."}
    - {tools: [builtin/shell], args: {command: '^make( \w+)?$'}, action: allow, priority: 2}
    - {server: github, read_only: false, destructive: false, modes: [auto_edit], action: ask}
`), config.Options{LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	e, err := policy.FromConfig(cfg.Policy)
	if err != nil {
		t.Fatal(err)
	}
	if e.Mode() != policy.ModeAutoEdit {
		t.Errorf("mode %s", e.Mode())
	}
	for _, tc := range []struct {
		tool tool.Tool
		args map[string]any
		want policy.Decision
	}{
		{ghDelete, nil, policy.Decision{Action: policy.Deny, Rule: "no deletes", Message: "Archive instead."}},
		{shell, map[string]any{"command": "make test"}, policy.Decision{Action: policy.Allow, Rule: "rule 2"}},
		{shell, map[string]any{"command": "make; rm x"}, policy.Decision{Action: policy.Ask, Rule: "auto_edit mode: everything else"}},
		{ghCreate, nil, policy.Decision{Action: policy.Ask, Rule: "rule 3"}},
		{writeFile, nil, policy.Decision{Action: policy.Allow, Rule: "auto_edit mode: file edits"}},
	} {
		if got := e.Decide(tc.tool, call(tc.tool, tc.args)); got != tc.want {
			t.Errorf("%s/%s %v: got %+v, want %+v", tc.tool.Server, tc.tool.Name, tc.args, got, tc.want)
		}
	}

	// The zero section is the default mode without rules.
	e, err = policy.FromConfig(config.Policy{})
	if err != nil || e.Mode() != policy.ModeDefault || len(e.Rules()) != len(policy.DefaultRules(policy.ModeDefault)) {
		t.Errorf("zero section: %v, %v", e, err)
	}
	// A section built by hand is still checked, and errors point at the file.
	_, err = policy.FromConfig(config.Policy{Rules: []config.PolicyRule{{Action: "allow"}, {Action: "maybe", Line: 12}}})
	var re *policy.RuleError
	if !errors.As(err, &re) || !strings.HasPrefix(err.Error(), "policy.rules[1] (line 12): policy rule 2: action: unknown action") {
		t.Errorf("got %v", err)
	}
	if _, err := policy.FromConfig(config.Policy{Mode: "fast"}); err == nil {
		t.Error("bad mode accepted")
	}
}

// The modes and actions config accepts are exactly policy's, read from
// config's own messages since config cannot import policy.
func TestConfigInStep(t *testing.T) {
	expected := func(content string) []string {
		t.Helper()
		_, err := config.ParseWith("toolmux.yaml", []byte(content), config.Options{})
		var ce *config.Error
		if !errors.As(err, &ce) {
			t.Fatalf("%q: %v", content, err)
		}
		_, list, ok := strings.Cut(ce.Msg, "(expected ")
		if !ok {
			t.Fatalf("no list in %q", ce.Msg)
		}
		list, _, _ = strings.Cut(list, ")")
		list = strings.ReplaceAll(list, " or ", ", ")
		return strings.Split(list, ", ")
	}
	var modes []string
	for _, m := range policy.Modes() {
		modes = append(modes, string(m))
	}
	if got := expected("policy: {mode: fast}"); !slices.Equal(got, modes) {
		t.Errorf("config modes %v, policy modes %v", got, modes)
	}
	if got := expected("policy: {rules: [{modes: [fast], action: allow}]}"); !slices.Equal(got, modes) {
		t.Errorf("config rule modes %v, policy modes %v", got, modes)
	}
	actions := []string{string(policy.Allow), string(policy.Deny), string(policy.Ask)}
	if got := expected("policy: {rules: [{action: permit}]}"); !slices.Equal(got, actions) {
		t.Errorf("config actions %v, policy actions %v", got, actions)
	}
}

// trust: true allows a server's calls without asking, after the user's
// rules, and not in plan mode.
func TestTrustedServers(t *testing.T) {
	cfg, err := config.Parse("t.yaml", []byte(`servers:
  fx: {command: fixture, trust: true}
  other: {command: fixture}
policy:
  rules:
    - {tools: [fx/danger], action: ask}
`))
	if err != nil {
		t.Fatal(err)
	}
	e, err := policy.ForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	decide := func(e *policy.Engine, server, name string) policy.Action {
		return e.Decide(tool.Tool{Server: server, Name: name}, tool.Call{Server: server, Tool: name}).Action
	}
	if a := decide(e, "fx", "write"); a != policy.Allow {
		t.Errorf("trusted server: %s", a)
	}
	if a := decide(e, "fx", "danger"); a != policy.Ask {
		t.Errorf("a user rule loses to trust: %s", a)
	}
	if a := decide(e, "other", "write"); a != policy.Ask {
		t.Errorf("untrusted server: %s", a)
	}
	plan, err := e.WithMode(policy.ModePlan)
	if err != nil {
		t.Fatal(err)
	}
	if a := decide(plan, "fx", "write"); a != policy.Deny {
		t.Errorf("trust opened plan mode: %s", a)
	}
}
