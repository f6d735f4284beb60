package config_test

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/config"
)

// The settings of callers' groups, and the keys that limit rules, virtual
// servers and passthrough routes to groups.
func TestGroups(t *testing.T) {
	cfg, _ := mustLoad(t, "toolmux.yaml", `groups:
  dev:
    approval_mode: auto_edit
    tools: ["github/*", "read_*"]
  ops: {approval_mode: default}
  guests: {tools: []}
  "ci bots": {}
policy:
  rules:
    - {callers: [alice, "key:ci-*"], groups: [dev], tools: [builtin/shell], action: allow}
virtual_servers:
  - {name: support, tools: ["github/*"], groups: [support, ops]}
passthrough:
  groups: [ops]
servers:
  gh: {url: "http://localhost:1/mcp"}
  fs:
    command: fs
    passthrough: {groups: [dev]}
`)
	want := map[string]config.Group{
		"dev":     {ApprovalMode: "auto_edit", Tools: []string{"github/*", "read_*"}, Line: 2},
		"ops":     {ApprovalMode: "default", Line: 5},
		"guests":  {Tools: []string{}, Line: 6},
		"ci bots": {Line: 7},
	}
	if !reflect.DeepEqual(cfg.Groups, want) {
		t.Errorf("groups: %+v\nwant %+v", cfg.Groups, want)
	}
	if r := cfg.Policy.Rules[0]; !reflect.DeepEqual(r.Callers, []string{"alice", "key:ci-*"}) || !reflect.DeepEqual(r.Groups, []string{"dev"}) {
		t.Errorf("rule: %+v", r)
	}
	if g := cfg.VirtualServers[0].Groups; !reflect.DeepEqual(g, []string{"support", "ops"}) {
		t.Errorf("virtual server groups: %v", g)
	}
	// A server's passthrough section completes the global one: its own
	// groups replace the global ones, which the others inherit.
	if g := cfg.Passthrough.Groups; !reflect.DeepEqual(g, []string{"ops"}) {
		t.Errorf("passthrough groups: %v", g)
	}
	for _, s := range cfg.Servers {
		if s.Name == "fs" && (s.Passthrough == nil || !reflect.DeepEqual(s.Passthrough.Groups, []string{"dev"})) {
			t.Errorf("fs's passthrough: %+v", s.Passthrough)
		}
	}
	// Without the section, nothing is set.
	cfg, _ = mustLoad(t, "toolmux.yaml", "workspace: .\n")
	if cfg.Groups != nil {
		t.Errorf("no groups section: %+v", cfg.Groups)
	}
}

func TestGroupsErrors(t *testing.T) {
	checkErrors(t, "toolmux.yaml", `groups:
  dev:
    approval_mode: autoedit
    tool: [a]
  ops: {tools: ["a/["]}
  " x": {}
  qa: {tools: ~}
  n: ~
policy:
  rules:
    - {callers: ["[", ""], groups: [], action: allow}
    - {groups: ["", "a\tb"], action: deny}
virtual_servers:
  - {name: v, tools: [a/b], groups: []}
passthrough: {groups: [""]}
`, []wantErr{
		{3, 20, "groups.dev.approval_mode", `unknown approval mode "autoedit" (expected plan, default, auto_edit or yolo); did you mean auto_edit?`},
		{4, 5, "groups.dev.tool", "unknown key (expected one of: approval_mode, tools); did you mean tools?"},
		{5, 17, "groups.ops.tools[0]", `"a/[" is not a valid glob`},
		{6, 3, `groups. x`, `group name " x" has space around it; groups are compared exactly`},
		{7, 15, "groups.qa.tools", "expected a list of tool patterns, got null (write [] for none; leave tools out to grant none)"},
		{8, 6, "groups.n", "expected a mapping, got null"},
		{11, 18, "policy.rules[0].callers[0]", `"[" is not a valid glob: syntax error in pattern`},
		{11, 23, "policy.rules[0].callers[1]", "a caller pattern must not be empty"},
		{11, 36, "policy.rules[0].groups", "must not be empty"},
		{12, 17, "policy.rules[1].groups[0]", "must not be empty"},
		{12, 21, "policy.rules[1].groups[1]", `group name "a\tb" holds a control character`},
		{14, 37, "virtual_servers[0].groups", "must not be empty"},
		{15, 24, "passthrough.groups[0]", "must not be empty"},
	})
}

// One group more than the section may hold is refused.
func TestGroupsBound(t *testing.T) {
	var b strings.Builder
	b.WriteString("groups:\n")
	for i := range 1001 {
		b.WriteString("  g" + strconv.Itoa(i) + ": {}\n")
	}
	checkErrors(t, "toolmux.yaml", b.String(), []wantErr{{2, 3, "groups", "at most 1000 groups"}})
	b.Reset()
	b.WriteString("groups:\n")
	for i := range 1000 {
		b.WriteString("  g" + strconv.Itoa(i) + ": {}\n")
	}
	if cfg, _ := mustLoad(t, "toolmux.yaml", b.String()); len(cfg.Groups) != 1000 {
		t.Errorf("1000 groups: %d", len(cfg.Groups))
	}
}
