package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The example of docs/discovery.md works as written: the two scripts and
// the toolmux.yaml beside them, used from another directory. Its tools
// need approval; --yes gives it.
func TestDiscoveryDocExample(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "discovery.md"))
	if err != nil {
		t.Fatal(err)
	}
	conf := t.TempDir()
	files := map[string]bool{}
	for _, m := range regexp.MustCompile("(?ms)^```(?:sh|yaml) ([A-Za-z0-9_.-]+)\n(.*?)^```$").FindAllSubmatch(doc, -1) {
		if err := os.WriteFile(filepath.Join(conf, string(m[1])), m[2], 0o755); err != nil {
			t.Fatal(err)
		}
		files[string(m[1])] = true
	}
	if !files["discover.sh"] || !files["call.sh"] || !files["toolmux.yaml"] {
		t.Fatalf("examples found: %v", files)
	}
	elsewhere := workspace(t, "")
	cfg := filepath.Join(conf, "toolmux.yaml")

	r := toolmux(t, elsewhere, "", "tools", "--json", "--config", cfg)
	var entries []struct{ Name, Approval, State string }
	if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil || r.code != 0 {
		t.Fatalf("tools: exit %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	approval := map[string]string{}
	for _, e := range entries {
		approval[e.Name] = e.Approval
	}
	if approval["discovered__greet"] != "ask" || approval["discovered__disk_free"] != "ask" {
		t.Errorf("the example's tools and their approval: %v", approval)
	}

	r = toolmux(t, elsewhere, "", "call", "discovered", "greet", `{"name": "Ada"}`, "--config", cfg)
	if r.code != 1 || !strings.Contains(r.stderr, "approval_unavailable") {
		t.Errorf("without --yes: exit %d %s", r.code, r.stderr)
	}
	r = toolmux(t, elsewhere, "", "call", "discovered", "greet", `{"name": "Ada"}`, "--yes", "--config", cfg)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "Hello, Ada!" {
		t.Errorf("with --yes: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	// With trust: true, as the comment says, no approval is needed.
	b, _ := os.ReadFile(cfg)
	trusted := strings.Replace(string(b), "# trust: true", "trust: true", 1)
	if trusted == string(b) {
		t.Fatal("the example has no trust: true to uncomment")
	}
	if err := os.WriteFile(cfg, []byte(trusted), 0o644); err != nil {
		t.Fatal(err)
	}
	r = toolmux(t, elsewhere, "", "call", "discovered__greet", `{"name": "Ada"}`, "--config", cfg)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "Hello, Ada!" {
		t.Errorf("trusted: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
}
