package main_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/internal/testservers"
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

// The curl recipe of docs/gateway.md works as written against a real
// `toolmux serve`: a session opened, tools listed, a tool called, the
// session ended; and a request without the session is told to open one.
func TestGatewayCurlDocExample(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		testservers.Missing(t, "curl is not on PATH (apt-get install curl): %v", err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "gateway.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?ms)^```sh mcp-curl.sh\n(.*?)^```$").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/gateway.md has no mcp-curl.sh")
	}
	dir := workspace(t, "") // notes.txt: alpha, beta, gamma
	script := filepath.Join(t.TempDir(), "mcp-curl.sh")
	if err := os.WriteFile(script, m[1], 0o755); err != nil {
		t.Fatal(err)
	}
	p := startServeProc(t, dir, "")
	out, err := exec.Command("sh", script, p.url("/mcp")).Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	sid, _ := strings.CutPrefix(lines[0], "session: ")
	type answer struct {
		ID     float64
		Result struct {
			Tools   []struct{ Name string }
			Content []struct{ Text string }
		}
	}
	answers := map[float64]answer{}
	for _, l := range lines[1:] {
		if l = strings.TrimSpace(l); l == "" {
			continue // the notification's empty answer
		}
		var a answer
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			t.Fatalf("answer %q: %v", l, err)
		}
		answers[a.ID] = a
	}
	var listed []string
	for _, tl := range answers[2].Result.Tools {
		listed = append(listed, tl.Name)
	}
	if sid == "" || !slices.Contains(listed, "builtin__read_file") {
		t.Fatalf("session %q, tools %v\n%s", sid, listed, out)
	}
	if c := answers[3].Result.Content; len(c) != 1 || c[0].Text != "alpha\nbeta\ngamma" {
		t.Errorf("the call: %+v\n%s", answers[3], out)
	}
	// The session was ended; a request without one is told to open one.
	for _, header := range []string{"Mcp-Session-Id: " + sid, ""} {
		args := []string{"-sS", "-w", "\n%{http_code}", p.url("/mcp"), "-H", "Content-Type: application/json",
			"-H", "Accept: application/json, text/event-stream", "-d", `{"jsonrpc":"2.0","id":4,"method":"tools/list"}`}
		if header != "" {
			args = append(args, "-H", header)
		}
		b, err := exec.Command("curl", args...).Output()
		if err != nil {
			t.Fatal(err)
		}
		body, status, _ := strings.Cut(string(b), "\n")
		var e struct{ Error struct{ Code int } }
		_ = json.Unmarshal([]byte(body), &e)
		if header != "" && (status != "404" || e.Error.Code != -32001) || header == "" && (status != "400" || e.Error.Code != -32600) {
			t.Errorf("tools/list with %q: %s %s", header, status, body)
		}
	}
}
