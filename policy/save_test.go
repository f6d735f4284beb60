package policy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/policy"
)

// SaveRule checks the rule before config.SaveRule edits the file (whose
// own tests are in package config), and saves it so that the file's
// policy decides as the rule does.
func TestSaveRule(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolmux.yaml")
	if err := os.WriteFile(path, []byte("timeout: 1m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := policy.Rule{Name: "bad", Tools: []string{"a/["}, Action: policy.Allow}
	if err := policy.SaveRule(path, bad); err == nil || !strings.Contains(err.Error(), "not saving an invalid rule") {
		t.Errorf("got %v", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "timeout: 1m\n" {
		t.Errorf("the file changed:\n%s", got)
	}
	r := policy.Rule{Name: "always allow builtin/shell", Tools: []string{"builtin/shell"}, Action: policy.Allow,
		Modes: []policy.Mode{policy.ModeDefault}}
	if err := policy.SaveRule(path, r); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	e, err := policy.FromConfig(cfg.Policy)
	if err != nil {
		t.Fatal(err)
	}
	if d := e.Decide(shell, call(shell, nil)); d.Action != policy.Allow || d.Rule != r.Name {
		t.Errorf("%+v", d)
	}
	if rules := policy.RulesFromConfig(cfg.Policy); len(rules) != 1 || policy.ConfigRule(rules[0]).Name != r.Name {
		t.Errorf("rules %+v", rules)
	}
}
