package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

var alwaysShell = config.PolicyRule{Name: "always allow builtin/shell", Tools: []string{"builtin/shell"}, Action: "allow"}

// shell is a tool the policy asks about by default.
var shell = tool.Tool{Server: "builtin", Name: "shell"}

func call(t tool.Tool, args map[string]any) tool.Call {
	return tool.Call{Server: t.Server, Tool: t.Name, Arguments: args}
}

const shellLine = "{name: always allow builtin/shell, tools: [builtin/shell], action: allow}"

// loadEngine loads the file as toolmux does and builds its policy.
func loadEngine(t *testing.T, path string) *policy.Engine {
	t.Helper()
	cfg, err := config.LoadWith(path, config.Options{LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatalf("the saved file does not load:\n%v", err)
	}
	e, err := policy.FromConfig(cfg.Policy)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func putFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestSaveRuleSplices(t *testing.T) {
	for _, tc := range []struct {
		name, before, after string
	}{
		{
			name: "no policy section",
			before: `# toolmux configuration
workspace: .

servers:
    everything:
        command: npx   # four-space indentation, kept
        args: ["-y", "@modelcontextprotocol/server-everything"]

# the end
`,
			after: `# toolmux configuration
workspace: .

servers:
    everything:
        command: npx   # four-space indentation, kept
        args: ["-y", "@modelcontextprotocol/server-everything"]

# the end
policy:
  rules:
    - ` + shellLine + `
`,
		},
		{
			name:   "no final newline",
			before: "timeout: 1m",
			after:  "timeout: 1m\npolicy:\n  rules:\n    - " + shellLine + "\n",
		},
		{
			name: "policy without rules, before another section",
			before: `policy:
    mode: auto_edit   # edits without asking
    persist: true

# servers follow
servers:
  a: {command: a}
`,
			after: `policy:
    mode: auto_edit   # edits without asking
    persist: true
    rules:
      - ` + shellLine + `

# servers follow
servers:
  a: {command: a}
`,
		},
		{
			name: "rules with block items, then more policy keys",
			before: `policy:
  rules:
    - name: no deletes
      tools: ["*/delete_*"]
      action: deny
    # a comment about the next rule
    - {tools: [git/*], action: ask}
    # trailing comment of the list
  mode: default
servers: {}
`,
			after: `policy:
  rules:
    - name: no deletes
      tools: ["*/delete_*"]
      action: deny
    # a comment about the next rule
    - {tools: [git/*], action: ask}
    # trailing comment of the list
    - ` + shellLine + `
  mode: default
servers: {}
`,
		},
		{
			name: "rules last in the file, not indented",
			before: `policy:
  rules:
  - {tools: [a], action: deny}
`,
			after: `policy:
  rules:
  - {tools: [a], action: deny}
  - ` + shellLine + `
`,
		},
		{
			name:   "CRLF line endings",
			before: "timeout: 1m\r\npolicy:\r\n  rules:\r\n    - {tools: [a], action: deny}\r\nservers: {}\r\n",
			after:  "timeout: 1m\r\npolicy:\r\n  rules:\r\n    - {tools: [a], action: deny}\r\n    - " + shellLine + "\r\nservers: {}\r\n",
		},
		{
			name:   "empty file",
			before: "",
			after:  "policy:\n  rules:\n    - " + shellLine + "\n",
		},
		{
			name:   "only comments",
			before: "# nothing yet\n",
			after:  "# nothing yet\npolicy:\n  rules:\n    - " + shellLine + "\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := putFile(t, t.TempDir(), "toolmux.yaml", tc.before)
			if d := loadEngine(t, path).Decide(shell, call(shell, nil)); d.Action == policy.Allow {
				t.Fatalf("allowed before: %+v", d)
			}
			if err := config.SaveRule(path, alwaysShell); err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(path)
			if string(got) != tc.after {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.after)
			}
			if d := loadEngine(t, path).Decide(shell, call(shell, nil)); d.Action != policy.Allow || d.Rule != "always allow builtin/shell" {
				t.Errorf("after: %+v", d)
			}
			// Saving it again changes nothing.
			if err := config.SaveRule(path, alwaysShell); err != nil {
				t.Fatal(err)
			}
			if again, _ := os.ReadFile(path); string(again) != string(got) {
				t.Errorf("saved twice:\n%s", again)
			}
		})
	}
}

// Layouts the rule cannot be spliced into are rewritten, keeping every
// value.
func TestSaveRuleRewrites(t *testing.T) {
	for _, tc := range []struct{ name, before string }{
		{"flow rules", "policy: {rules: [{tools: [a], action: deny}]}\ntimeout: 1m\n"},
		{"empty flow rules", "policy:\n  rules: []\n  mode: auto_edit\n"},
		{"null policy", "policy:\ntimeout: 1m # keep\n"},
		{"null rules", "policy:\n  rules:\n  persist: false\n"},
		{"flow root", "{timeout: 1m, policy: {mode: yolo}}\n"},
		{"anchors", "servers:\n  a: &b {command: x}\n  c:\n    <<: *b\n    args: [y]\npolicy: {mode: auto_edit}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := putFile(t, t.TempDir(), "toolmux.yaml", tc.before)
			before := loadEngine(t, path)
			if err := config.SaveRule(path, alwaysShell); err != nil {
				t.Fatal(err)
			}
			after := loadEngine(t, path)
			if d := after.Decide(shell, call(shell, nil)); d.Action != policy.Allow || d.Rule != "always allow builtin/shell" {
				t.Errorf("after: %+v", d)
			}
			if before.Mode() != after.Mode() || len(after.Rules()) != len(before.Rules())+1 {
				t.Errorf("the rest changed: mode %s→%s, %d→%d rules", before.Mode(), after.Mode(), len(before.Rules()), len(after.Rules()))
			}
			got, _ := os.ReadFile(path)
			if strings.Contains(tc.before, "# keep") && !strings.Contains(string(got), "# keep") {
				t.Errorf("comment lost:\n%s", got)
			}
		})
	}
	// The anchors survive the rewrite.
	path := putFile(t, t.TempDir(), "toolmux.yaml", "servers:\n  a: &b {command: x}\n  c: {<<: *b, args: [y]}\npolicy: {mode: auto_edit}\n")
	if err := config.SaveRule(path, alwaysShell); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); !strings.Contains(string(got), "*b") {
		t.Errorf("alias lost:\n%s", got)
	}
}

func TestSaveRuleFiles(t *testing.T) {
	t.Run("missing file is created", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "toolmux.yaml")
		if err := config.SaveRule(path, alwaysShell); err != nil {
			t.Fatal(err)
		}
		if d := loadEngine(t, path).Decide(shell, call(shell, nil)); d.Action != policy.Allow {
			t.Errorf("%+v", d)
		}
	})
	t.Run("permissions kept, no temporary files left", func(t *testing.T) {
		dir := t.TempDir()
		path := putFile(t, dir, "toolmux.yaml", "timeout: 1m\n")
		if err := os.Chmod(path, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := config.SaveRule(path, alwaysShell); err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Stat(path)
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("mode %v", fi.Mode())
		}
		entries, _ := os.ReadDir(dir)
		if len(entries) != 1 {
			t.Errorf("files left: %v", entries)
		}
	})
	t.Run("symbolic link followed", func(t *testing.T) {
		if runtime.GOOS == "windows" {
			t.Skip("symlinks")
		}
		dir := t.TempDir()
		target := putFile(t, dir, "real.yaml", "timeout: 1m\n")
		link := filepath.Join(dir, "toolmux.yaml")
		if err := os.Symlink("real.yaml", link); err != nil {
			t.Fatal(err)
		}
		if err := config.SaveRule(link, alwaysShell); err != nil {
			t.Fatal(err)
		}
		if fi, _ := os.Lstat(link); fi.Mode()&os.ModeSymlink == 0 {
			t.Error("the link was replaced by a file")
		}
		if d := loadEngine(t, target).Decide(shell, call(shell, nil)); d.Action != policy.Allow {
			t.Errorf("%+v", d)
		}
	})
	for _, tc := range []struct{ name, file, content, msg string }{
		{"JSON", "settings.json", `{"mcpServers": {}}`, "is a JSON file; add the rule by hand, in a toolmux.yaml: policy: {rules: [" + shellLine + "]}"},
		// Load reads JSON content as JSON whatever the name (a YAML flow
		// mapping that is not JSON is YAML, and is edited: "flow root").
		{"JSON content", "toolmux.yaml", `{"mcpServers": {}}`, "is a JSON file"},
		{"invalid YAML", "toolmux.yaml", "servers: [\n", "not valid YAML, so not edited"},
		{"not a mapping", "toolmux.yaml", "- a\n- b\n", "the file is not a mapping of settings"},
		{"policy not a mapping", "toolmux.yaml", "policy: [a]\n", "policy is not a mapping"},
		{"rules not a list", "toolmux.yaml", "policy: {rules: {a: b}}\n", "policy.rules is not a list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := putFile(t, t.TempDir(), tc.file, tc.content)
			err := config.SaveRule(path, alwaysShell)
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("got %v, want %q", err, tc.msg)
			}
			if got, _ := os.ReadFile(path); string(got) != tc.content {
				t.Errorf("the file changed:\n%s", got)
			}
		})
	}
}

// Every field of a rule survives the file, "$" and glob escapes included.
func TestSaveRuleRoundTrip(t *testing.T) {
	r := policy.Rule{
		Name:        "the $HOME rule: \"quoted\", {braces}",
		Tools:       []string{`my-server/price\$`, "*/x*"},
		Server:      "my-*",
		Args:        map[string]string{"path": `^\$HOME/.*$`, "n": `^[0-9]+$`},
		ReadOnly:    tool.Bool(false),
		Destructive: tool.Bool(true),
		Modes:       []policy.Mode{policy.ModeDefault, policy.ModeYolo},
		Action:      policy.Deny,
		Priority:    -3,
		Message:     "costs ${money}; #not a comment",
	}
	path := putFile(t, t.TempDir(), "toolmux.yaml", "policy:\n  rules:\n    - {tools: [x], action: ask}\n")
	if err := config.SaveRule(path, policy.ConfigRule(r)); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadWith(path, config.Options{LookupEnv: func(k string) (string, bool) { return "EXPANDED", true }})
	if err != nil {
		t.Fatal(err)
	}
	rules := policy.RulesFromConfig(cfg.Policy)
	if len(rules) != 2 {
		t.Fatalf("rules: %+v", rules)
	}
	if !reflect.DeepEqual(rules[1], r) {
		t.Errorf("got  %+v\nwant %+v", rules[1], r)
	}
	priced := tool.Tool{Server: "my-server", Name: "price$"}
	e := loadEngine(t, path)
	if d := e.Decide(priced, call(priced, map[string]any{"path": "$HOME/a", "n": 12.0})); d.Action != policy.Deny || d.Rule != r.Name {
		t.Errorf("%+v", d)
	}
}

// Rules saved at once from several goroutines are all kept.
func TestSaveRuleConcurrent(t *testing.T) {
	path := putFile(t, t.TempDir(), "toolmux.yaml", "timeout: 1m\n")
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			r := config.PolicyRule{Tools: []string{fmt.Sprintf("s/t%d", i)}, Action: "allow"}
			if err := config.SaveRule(path, r); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	e := loadEngine(t, path)
	for i := range 10 {
		tl := tool.Tool{Server: "s", Name: fmt.Sprintf("t%d", i)}
		if d := e.Decide(tl, call(tl, nil)); d.Action != policy.Allow {
			t.Errorf("t%d: %+v", i, d)
		}
	}
}
