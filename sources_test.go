package toolmux_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/builtin"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/tool"
)

// loadConfig writes a configuration file into dir and loads it, with an
// environment of env only.
func loadConfig(t *testing.T, dir, name, content string, env map[string]string) *config.Config {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadWith(path, config.Options{LookupEnv: func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func fromConfig(t *testing.T, cfg *config.Config) *manager.Manager {
	t.Helper()
	m, err := toolmux.NewManager(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func catalog(t *testing.T, m *manager.Manager) *tool.Catalog {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cat, err := m.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

func writeScript(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
}

// commandScripts writes a discovery script declaring the tool "echo" and a
// call script that prints $API_KEY, its number of arguments, the last one
// (the tool's name) and its stdin.
func commandScripts(t *testing.T, dir string) {
	t.Helper()
	writeScript(t, filepath.Join(dir, "discover.sh"), `cat <<'EOF'
[{"name": "echo", "description": "Echoes its arguments.",
  "parameters": {"type": "OBJECT", "properties": {"text": {"type": "STRING"}}}}]
EOF
`)
	writeScript(t, filepath.Join(dir, "call.sh"), `for tool; do :; done
printf '%s %s %s ' "$API_KEY" "$#" "$tool"
cat
`)
}

// A command server of toolmux.yaml: its relative programs are found in the
// config file's directory, its env reaches them, and the manager lists and
// calls its tool.
func TestNewManagerCommandServer(t *testing.T) {
	dir := t.TempDir()
	commandScripts(t, dir)
	cfg := loadConfig(t, dir, "toolmux.yaml", `
builtin: {enabled: false}
servers:
  discovered:
    discover: ["./discover.sh"]
    call: ["./call.sh", "fixed"]
    env: {API_KEY: "${KEY}"}
    connect_timeout: 10s
    timeout: 1m
  off:
    discover: ["${UNSET}"]
    call: ["${UNSET}"]
    disabled: true
`, map[string]string{"KEY": "k1"})
	m := fromConfig(t, cfg)

	cat := catalog(t, m)
	if _, ok := cat.Lookup("discovered__echo"); !ok || cat.Len() != 1 {
		t.Fatalf("tools: %v", cat.Tools())
	}
	h, _ := cat.Server("discovered")
	if h.Transport != config.Command || h.State != tool.StateReady {
		t.Errorf("health: %+v", h)
	}
	if h, _ := cat.Server("off"); h.State != tool.StateDisabled {
		t.Errorf("disabled server: %+v", h)
	}

	rec := do(m, "discovered", "echo", map[string]any{"text": "hi"})
	if err := rec.Err(); err != nil {
		t.Fatal(err)
	}
	if got, want := rec.Result.Text(), "k1 2 echo {\"text\":\"hi\"}\n"; got != want {
		t.Errorf("result %q, want %q", got, want)
	}
}

// Gemini CLI's toolDiscoveryCommand and toolCallCommand run through sh,
// and the tool's name still arrives as the call command's last argument.
func TestNewManagerGeminiDiscoveryCommands(t *testing.T) {
	dir := t.TempDir()
	commandScripts(t, dir)
	disc, _ := json.Marshal(filepath.Join(dir, "discover.sh"))
	call, _ := json.Marshal(filepath.Join(dir, "call.sh") + " 'two words'")
	cfg := loadConfig(t, dir, "settings.json", `{
  "theme": "GitHub",
  "toolDiscoveryCommand": `+string(disc)+`,
  "toolCallCommand": `+string(call)+`
}`, nil)
	cfg.Builtin.Enabled = false
	m := fromConfig(t, cfg)

	if cat := catalog(t, m); cat.Len() != 1 {
		t.Fatalf("tools: %v", cat.Tools())
	}
	rec := do(m, config.DiscoveredServer, "echo", map[string]any{"text": "hi"})
	if err := rec.Err(); err != nil {
		t.Fatal(err)
	}
	// Two arguments: the quoted one of the line, and the tool's name.
	if got, want := rec.Result.Text(), " 2 echo {\"text\":\"hi\"}\n"; !strings.HasSuffix(got, want) {
		t.Errorf("result %q, want it to end with %q", got, want)
	}
}

// A discovery command that hangs is stopped by cmdsource at the server's
// connect_timeout, before the manager's own bound (connect_timeout, kill
// grace and listing margin) would cut it off: the error is cmdsource's,
// which quotes what the command wrote, not the manager's "did not list".
func TestNewManagerCommandDiscoveryTimeout(t *testing.T) {
	dir := t.TempDir()
	writeScript(t, filepath.Join(dir, "slow.sh"), "echo starting >&2\nexec sleep 30\n")
	cfg := loadConfig(t, dir, "toolmux.yaml", `
builtin: {enabled: false}
servers:
  slow: {discover: [./slow.sh], call: [./slow.sh], connect_timeout: 200ms}
`, nil)
	m := fromConfig(t, cfg)
	h, _ := catalog(t, m).Server("slow")
	if h.State != tool.StateFailed {
		t.Fatalf("health: %+v", h)
	}
	if strings.Contains(h.Error, "did not list its tools") || !strings.Contains(h.Error+h.Detail, "starting") {
		t.Errorf("the error is not the discovery command's own: %q / %q", h.Error, h.Detail)
	}
}

// builtin.web.search makes web_search, backed here by a local server
// speaking SearXNG's JSON; the web backends made for the built-in tools
// are closed with the manager, leaving no connection open.
func TestNewManagerWebSearch(t *testing.T) {
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/search":
			if r.URL.Query().Get("format") != "json" || r.Header.Get("Authorization") != "Bearer s3cret" {
				http.Error(w, "bad request", http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"results": []any{
				map[string]any{"title": "Forty-two", "url": "https://example.org/42", "content": "the answer to " + r.URL.Query().Get("q")}}})
		case "/page":
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte("plain page"))
		default:
			http.NotFound(w, r)
		}
	}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch s {
		case http.StateNew:
			open[c] = true
		case http.StateClosed, http.StateHijacked:
			delete(open, c)
		}
	}
	srv.Start()
	defer srv.Close()

	dir := t.TempDir()
	cfg := loadConfig(t, dir, "toolmux.yaml", `
builtin:
  web:
    timeout: 10s
    max_bytes: 1MiB
    search:
      provider: searxng
      url: ${SEARXNG_URL}
      key: s3cret
`, map[string]string{"SEARXNG_URL": srv.URL})
	m, err := toolmux.NewManager(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	cat := catalog(t, m)
	if _, ok := cat.Lookup("builtin__web_search"); !ok {
		t.Fatalf("no builtin__web_search in %v", cat.Tools())
	}
	rec := do(m, builtin.ServerName, builtin.WebSearch, map[string]any{"query": "everything"})
	if err := rec.Err(); err != nil {
		t.Fatal(err)
	}
	if txt := rec.Result.Text(); !strings.Contains(txt, "Forty-two") || !strings.Contains(txt, "the answer to everything") {
		t.Errorf("web_search: %q", txt)
	}
	rec = do(m, builtin.ServerName, builtin.WebFetch, map[string]any{"url": srv.URL + "/page"})
	if err := rec.Err(); err != nil || !strings.Contains(rec.Result.Text(), "plain page") {
		t.Fatalf("web_fetch: %v %v", rec.Result, err)
	}

	m.Close()
	openConns := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(open)
	}
	if !testservers.Eventually(10*time.Second, func() bool { return openConns() == 0 }) {
		t.Fatalf("%d connections still open after Close", openConns())
	}
}

// memory_dir keeps facts on disk; without it, a data directory gives
// DataDir/memory, and long shell outputs are spilled under DataDir too.
func TestNewManagerMemoryAndSpill(t *testing.T) {
	dir := t.TempDir()
	cfg := loadConfig(t, dir, "toolmux.yaml", "builtin: {memory_dir: facts}\n", nil)
	m := fromConfig(t, cfg)
	save := func(m *manager.Manager, fact string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rec := m.Call(ctx, tool.Call{Server: builtin.ServerName, Tool: builtin.Memory, Task: "t1",
			Arguments: map[string]any{"action": "save", "fact": fact}})
		if err := rec.Err(); err != nil {
			t.Fatal(err)
		}
	}
	save(m, "the port is 8080")
	if !dirHolds(t, filepath.Join(dir, "facts"), "the port is 8080") {
		t.Errorf("the fact is not in %s", filepath.Join(dir, "facts"))
	}

	data := t.TempDir()
	cfg = loadConfig(t, dir, "toolmux.yaml", "builtin: {shell: {max_output_bytes: 100}}\n", nil)
	cfg.DataDir = data
	m = fromConfig(t, cfg)
	save(m, "the answer is 42")
	if !dirHolds(t, filepath.Join(data, "memory"), "the answer is 42") {
		t.Errorf("the fact is not in %s", filepath.Join(data, "memory"))
	}
	rec := do(m, builtin.ServerName, builtin.Shell, map[string]any{"command": "seq 1 1000"})
	if err := rec.Err(); err != nil {
		t.Fatal(err)
	}
	if !dirHolds(t, filepath.Join(data, "spill", "shell"), "\n999\n1000\n") {
		t.Errorf("the whole output is not in %s: %s", filepath.Join(data, "spill", "shell"), rec.Result.Text())
	}
}

// dirHolds reports whether a file in dir contains s.
func dirHolds(t *testing.T, dir, s string) bool {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Log(err)
		return false
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil && strings.Contains(string(b), s) {
			return true
		}
	}
	return false
}

// A shell limit longer than the call timeout governs shell calls: the
// built-in server's tool timeout for shell follows it.
func TestNewManagerShellTimeout(t *testing.T) {
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	cfg.Timeout = time.Second
	cfg.Builtin.Shell = config.BuiltinShell{Timeout: 3 * time.Second}
	m := fromConfig(t, cfg)
	rec := do(m, builtin.ServerName, builtin.Shell, map[string]any{"command": "sleep 1.5; echo done"})
	if err := rec.Err(); err != nil || !strings.Contains(rec.Result.Text(), "done") {
		t.Fatalf("shell: %v %v", rec.Result, err)
	}
	// Other tools keep the call timeout.
	cfg.Builtin.Shell = config.BuiltinShell{}
	m = fromConfig(t, cfg)
	if rec := do(m, builtin.ServerName, builtin.Shell, map[string]any{"command": "sleep 1.5; echo done"}); kind(rec) != tool.KindTimeout {
		t.Fatalf("without a shell limit: %v", rec.Err())
	}
}

// When FromConfig fails after making sources (here because a server takes
// the built-in tools' name), it closes them, web backends included.
func TestNewManagerFailureClosesSources(t *testing.T) {
	dir := t.TempDir()
	commandScripts(t, dir)
	cfg := loadConfig(t, dir, "toolmux.yaml", `
builtin:
  web:
    deny_private: true
    search: {provider: serper, key: k}
servers:
  builtin: {discover: [./discover.sh], call: [./call.sh]}
`, nil)
	m, err := toolmux.NewManager(cfg, nil)
	if err == nil {
		m.Close()
		t.Fatal("no error for a server named builtin")
	}
	if !strings.Contains(err.Error(), `two sources named "builtin"`) {
		t.Fatalf("error: %v", err)
	}
}

// health_check reaches the MCP source: the global block for servers that
// set none, a server's own block (completed from the global one) else.
func TestMCPSourceConfigHealthCheck(t *testing.T) {
	cfg := loadConfig(t, t.TempDir(), "toolmux.yaml", `
health_check: {ping_after: 5s, max_backoff: 10s}
servers:
  plain: {command: a}
  own: {command: b, health_check: {ping_timeout: 2s, ping_interval: 1m, min_backoff: 1s}}
  off: {url: "http://127.0.0.1:1/mcp", health_check: {enabled: false}}
`, nil)
	byName := map[string]config.Server{}
	for _, sc := range cfg.Servers {
		byName[sc.Name] = sc
	}
	for _, tc := range []struct {
		server   string
		want     mcpsource.HealthCheck
		min, max time.Duration
	}{
		{"plain", mcpsource.HealthCheck{PingAfter: 5 * time.Second, PingTimeout: config.DefaultPingTimeout}, config.DefaultMinBackoff, 10 * time.Second},
		{"own", mcpsource.HealthCheck{PingAfter: 5 * time.Second, PingTimeout: 2 * time.Second, Interval: time.Minute}, time.Second, 10 * time.Second},
		{"off", mcpsource.HealthCheck{Disabled: true, PingAfter: 5 * time.Second, PingTimeout: config.DefaultPingTimeout}, config.DefaultMinBackoff, 10 * time.Second},
	} {
		sc := toolmux.MCPSourceConfig(cfg, byName[tc.server], nil)
		if sc.HealthCheck != tc.want || sc.MinBackoff != tc.min || sc.MaxBackoff != tc.max {
			t.Errorf("%s: health check %+v, backoff %s..%s; want %+v, %s..%s", tc.server, sc.HealthCheck, sc.MinBackoff, sc.MaxBackoff, tc.want, tc.min, tc.max)
		}
	}
}

func do(m *manager.Manager, server, name string, args map[string]any) *tool.Record {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return m.Call(ctx, tool.Call{Server: server, Tool: name, Arguments: args})
}

func kind(r *tool.Record) tool.Kind { return tool.KindOf(r.Err()) }
