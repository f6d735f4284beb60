package config_test

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/config"
)

func boolp(b bool) *bool { return &b }

func TestPolicySection(t *testing.T) {
	cfg, _ := mustLoad(t, "toolmux.yaml", `policy:
  mode: auto_edit
  persist: true
  rules:
    - name: no force push
      tools: [builtin/shell, "*/git_*"]
      server: "*"
      args:
        command: '\bgit\s+push\b.*--force'
        n: 5
      read_only: false
      destructive: true
      modes: [default, yolo]
      action: deny
      priority: -10
      message: "Never force-push (${EVERYTHING_KEY})."
    - {tools: [a], action: ask}
    - action: allow
      server: "git*"
      args: {path: "^$$HOME/"}
`)
	want := config.Policy{
		Mode:    "auto_edit",
		Persist: true,
		Rules: []config.PolicyRule{
			{
				Name: "no force push", Tools: []string{"builtin/shell", "*/git_*"}, Server: "*",
				Args:     map[string]string{"command": `\bgit\s+push\b.*--force`, "n": "5"},
				ReadOnly: boolp(false), Destructive: boolp(true), Modes: []string{"default", "yolo"},
				Action: "deny", Priority: -10, Message: "Never force-push (secret).", Line: 5,
			},
			{Tools: []string{"a"}, Action: "ask", Line: 17},
			{Action: "allow", Server: "git*", Args: map[string]string{"path": "^$HOME/"}, Line: 18},
		},
	}
	if !reflect.DeepEqual(cfg.Policy, want) {
		t.Errorf("got  %+v\nwant %+v", cfg.Policy, want)
	}
	// The rest of the configuration is untouched by the section.
	rest := *cfg
	rest.Policy = config.Policy{}
	def := config.Default()
	def.Path, def.Workspace = rest.Path, rest.Workspace
	checkConfig(t, &rest, def)
}

func TestPolicyDefaults(t *testing.T) {
	for _, content := range []string{"", "timeout: 1m\n", "policy:\n", "policy: {}\n", "policy: {rules: []}\n", "policy:\n  rules:\n"} {
		cfg, _ := mustLoad(t, "toolmux.yaml", content)
		if !reflect.DeepEqual(cfg.Policy, config.Policy{}) {
			t.Errorf("%q: got %#v, want the zero Policy", content, cfg.Policy)
		}
	}
	if !reflect.DeepEqual(config.Default().Policy, config.Policy{}) {
		t.Errorf("Default().Policy = %#v", config.Default().Policy)
	}
	// A toolmux.yaml that also uses mcpServers, and a JSON file with a
	// policy, are toolmux configurations.
	for _, tc := range []struct{ file, content string }{
		{"toolmux.yaml", "mcpServers:\n  a: {command: a}\npolicy: {mode: plan}\n"},
		{"toolmux.json", `{"mcpServers": {"a": {"command": "a"}}, "policy": {"mode": "plan"}}`},
	} {
		cfg, dir := mustLoad(t, tc.file, tc.content)
		if cfg.Policy.Mode != "plan" || len(cfg.Servers) != 1 || cfg.Workspace != dir {
			t.Errorf("%s: got %+v", tc.file, cfg)
		}
	}
}

func TestPolicyErrors(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		want          []wantErr
	}{
		{
			name:    "unknown keys",
			content: "policy:\n  mod: plan\n  rule: []\n  persist: yes\n",
			want: []wantErr{
				{2, 3, "policy.mod", "unknown key (expected one of: mode, persist, rules); did you mean mode?"},
				{3, 3, "policy.rule", "did you mean rules?"},
				{4, 12, "policy.persist", `expected true or false, got "yes"`},
			},
		},
		{
			name:    "unknown top-level key",
			content: "polcy: {}\n",
			want:    []wantErr{{1, 1, "polcy", "did you mean policy?"}},
		},
		{
			name:    "mode",
			content: "policy:\n  mode: yollo\n",
			want:    []wantErr{{2, 9, "policy.mode", `unknown mode "yollo" (expected plan, default, auto_edit or yolo); did you mean yolo?`}},
		},
		{
			name:    "section and rules of the wrong shape",
			content: "policy:\n  rules: {a: b}\n",
			want:    []wantErr{{2, 10, "policy.rules", "expected a list, got a mapping"}},
		},
		{
			name: "rule keys and values",
			content: `policy:
  rules:
    - {tool: [a], action: allow}
    - ~
    - [a]
    - {tools: [], action: deny}
    - {tools: ["a/[", "/x", ""], action: deny}
    - {tools: ~, action: deny}
    - {server: "a/b", action: deny}
    - {server: "[", action: deny}
    - {server: "", action: deny}
    - {args: {command: "("}, action: deny}
    - {args: {command: ""}, action: deny}
    - {args: {}, action: deny}
    - {args: [x], action: deny}
    - {read_only: 1, destructive: "true", action: deny}
    - {modes: [plan, autoedit], action: deny}
    - {modes: [], action: deny}
    - {action: permit}
    - {action: Allow}
    - {name: x}
    - {priority: 1.5, action: deny}
    - {priority: 2000000, action: deny}
    - {name: "", message: [a], action: deny}
`,
			want: []wantErr{
				{3, 8, "policy.rules[0].tool", "unknown key (expected one of: name, tools, server, args, read_only, destructive, callers, groups, modes, action, priority, message); did you mean tools?"},
				{4, 7, "policy.rules[1]", "expected a mapping, got null"},
				{5, 7, "policy.rules[2]", "expected a mapping, got a list"},
				{6, 15, "policy.rules[3].tools", "must not be empty"},
				{7, 16, "policy.rules[4].tools[0]", `"a/[" is not a valid glob`},
				{7, 23, "policy.rules[4].tools[1]", `"/x": expected "server/tool" or a bare tool name`},
				{7, 29, "policy.rules[4].tools[2]", "empty pattern"},
				{8, 15, "policy.rules[5].tools", "expected a list of tool patterns, got null (leave tools out to match any tool)"},
				{9, 16, "policy.rules[6].server", `"a/b": a server name never contains "/"`},
				{10, 16, "policy.rules[7].server", `"[" is not a valid glob`},
				{11, 16, "policy.rules[8].server", "must not be empty"},
				{12, 24, "policy.rules[9].args.command", `"(" is not a valid regular expression: missing closing )`},
				{13, 24, "policy.rules[10].args.command", `must not be empty (use ".*" to match any value of a present argument)`},
				{14, 14, "policy.rules[11].args", "expected a mapping of argument names to regular expressions (leave args out for no condition)"},
				{15, 14, "policy.rules[12].args", "expected a mapping, got a list"},
				{16, 19, "policy.rules[13].read_only", "expected true or false, got 1"},
				{16, 35, "policy.rules[13].destructive", `expected true or false, got "true"`},
				{17, 22, "policy.rules[14].modes[1]", `unknown mode "autoedit" (expected plan, default, auto_edit or yolo); did you mean auto_edit?`},
				{18, 15, "policy.rules[15].modes", "must not be empty"},
				{19, 16, "policy.rules[16].action", `unknown action "permit" (expected allow, deny or ask)`},
				{20, 16, "policy.rules[17].action", `unknown action "Allow" (expected allow, deny or ask); did you mean allow?`},
				{21, 7, "policy.rules[18]", "missing action (allow, deny or ask)"},
				{22, 18, "policy.rules[19].priority", "expected an integer, got 1.5"},
				{23, 18, "policy.rules[20].priority", "must be between -1000000 and 1000000, got 2000000"},
				{24, 14, "policy.rules[21].name", "must not be empty"},
				{24, 27, "policy.rules[21].message", "expected a string, got a list"},
			},
		},
		{
			name:    "variables",
			content: "policy:\n  mode: ${UNSET}\n  rules:\n    - {tools: [\"${UNSET}/x\"], action: deny, message: \"${9}\"}\n",
			want: []wantErr{
				{2, 9, "policy.mode", "environment variable UNSET is not set"},
				{4, 16, "policy.rules[0].tools[0]", "environment variable UNSET is not set"},
				{4, 54, "policy.rules[0].message", `invalid variable name "9"`},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) { checkErrors(t, "toolmux.yaml", tc.content, tc.want) })
	}
}

// docs/config.md's policy example is a valid section.
func TestPolicyDocExample(t *testing.T) {
	data, err := os.ReadFile("../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	var example string
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(data), -1) {
		if strings.HasPrefix(m[1], "policy:") {
			example = m[1]
		}
	}
	if example == "" {
		t.Fatal("docs/config.md has no yaml block starting with policy:")
	}
	cfg, err := config.ParseWith("config.md", []byte(example), config.Options{LookupEnv: envOf(testEnv), Dir: "/work"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Policy.Mode == "" || len(cfg.Policy.Rules) == 0 {
		t.Errorf("got %+v", cfg.Policy)
	}
}
