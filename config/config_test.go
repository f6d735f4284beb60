package config_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/config"
)

// envOf returns a lookup over m only, so tests never depend on the
// environment they happen to run in.
func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

var testEnv = map[string]string{
	"HOME":           "/home/u",
	"EVERYTHING_KEY": "secret",
	"REMOTE_TOKEN":   "tok",
	"EMPTY":          "",
	"SERPER_API_KEY": "serper-key",
}

// load writes content to name in a fresh directory and loads it.
func load(t *testing.T, name, content string) (*config.Config, string, error) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadWith(path, config.Options{LookupEnv: envOf(testEnv)})
	return cfg, dir, err
}

func mustLoad(t *testing.T, name, content string) (*config.Config, string) {
	t.Helper()
	cfg, dir, err := load(t, name, content)
	if err != nil {
		t.Fatalf("unexpected error:\n%v", err)
	}
	return cfg, dir
}

const fullExample = `workspace: .
data_dir: ~/.local/share/toolmux   # ~ expands to $HOME
builtin: {enabled: true}
connect_timeout: 15s
timeout: 20m
allow: ["*"]
deny: ["filesystem/write_*", "*/delete_*"]
retry: {max_attempts: 3, initial_backoff: 200ms, max_backoff: 5s, tools: ["search_*"]}
circuit_breaker: {failures: 5, cooldown: 30s}
health_check: {ping_after: 20s, ping_timeout: 5s, max_backoff: 1m}
servers:
  everything:
    command: npx
    args: ["-y", "@modelcontextprotocol/server-everything"]
    env: {API_KEY: "${EVERYTHING_KEY}"}
    cwd: /tmp
    allow: ["echo", "get-*"]
    deny: ["get-env"]
    timeout: 30s
    tool_timeouts: {trigger-long-running-operation: 2m}
    connect_timeout: 20s
    retry: {max_attempts: 2}
    circuit_breaker: {failures: 3}
    health_check: {ping_interval: 1m}
    disabled: false
  remote:
    url: https://example.com/mcp
    transport: http          # or sse; also accept ` + "`type`" + ` as a synonym
    headers: {X-Team: core}
    bearer_token: ${REMOTE_TOKEN}
`

func TestFullExample(t *testing.T) {
	cfg, dir := mustLoad(t, "toolmux.yaml", fullExample)
	want := &config.Config{
		Path:           filepath.Join(dir, "toolmux.yaml"),
		Workspace:      dir,
		DataDir:        "/home/u/.local/share/toolmux",
		Builtin:        config.Builtin{Enabled: true},
		ConnectTimeout: 15 * time.Second,
		Timeout:        20 * time.Minute,
		Allow:          []string{"*"},
		Deny:           []string{"filesystem/write_*", "*/delete_*"},
		Retry:          config.Retry{MaxAttempts: 3, InitialBackoff: 200 * time.Millisecond, MaxBackoff: 5 * time.Second, Tools: []string{"search_*"}},
		CircuitBreaker: config.Breaker{Failures: 5, Cooldown: 30 * time.Second},
		HealthCheck:    config.HealthCheck{Enabled: true, PingAfter: 20 * time.Second, PingTimeout: 5 * time.Second, MinBackoff: 250 * time.Millisecond, MaxBackoff: time.Minute},
		TaskLog: config.TaskLog{Enabled: true, Durability: config.DurabilityProcess,
			Retention: config.Retention{MaxAge: config.DefaultRetentionMaxAge, MaxBytes: config.DefaultRetentionMaxBytes}},
		Agent: config.DefaultAgent("main"),
		Servers: []config.Server{
			{
				Name:           "everything",
				Transport:      "stdio",
				Command:        "npx",
				Args:           []string{"-y", "@modelcontextprotocol/server-everything"},
				Env:            map[string]string{"API_KEY": "secret"},
				Cwd:            "/tmp",
				Allow:          []string{"echo", "get-*"},
				Deny:           []string{"get-env"},
				Timeout:        30 * time.Second,
				ToolTimeouts:   map[string]time.Duration{"trigger-long-running-operation": 2 * time.Minute},
				ConnectTimeout: 20 * time.Second,
				Retry:          &config.Retry{MaxAttempts: 2, InitialBackoff: 200 * time.Millisecond, MaxBackoff: 5 * time.Second, Tools: []string{"search_*"}},
				CircuitBreaker: &config.Breaker{Failures: 3, Cooldown: 30 * time.Second},
				HealthCheck: &config.HealthCheck{Enabled: true, PingAfter: 20 * time.Second, PingTimeout: 5 * time.Second, PingInterval: time.Minute,
					MinBackoff: 250 * time.Millisecond, MaxBackoff: time.Minute},
				Line: 12,
			},
			{
				Name:        "remote",
				Transport:   "http",
				URL:         "https://example.com/mcp",
				Headers:     map[string]string{"X-Team": "core"},
				BearerToken: "tok",
				Line:        26,
			},
		},
	}
	checkConfig(t, cfg, want)
}

func checkConfig(t *testing.T, got, want *config.Config) {
	t.Helper()
	if reflect.DeepEqual(got, want) {
		return
	}
	gs, ws := got.Servers, want.Servers
	g, w := *got, *want
	g.Servers, w.Servers = nil, nil
	if !reflect.DeepEqual(g, w) {
		t.Errorf("config:\n got %+v\nwant %+v", g, w)
	}
	if len(gs) != len(ws) {
		t.Fatalf("got %d servers, want %d:\n got %+v\nwant %+v", len(gs), len(ws), gs, ws)
	}
	for i := range gs {
		if !reflect.DeepEqual(gs[i], ws[i]) {
			t.Errorf("server %d:\n got %+v\nwant %+v", i, gs[i], ws[i])
			if gs[i].Retry != nil && ws[i].Retry != nil {
				t.Errorf("retry: got %+v want %+v", *gs[i].Retry, *ws[i].Retry)
			}
			if gs[i].CircuitBreaker != nil && ws[i].CircuitBreaker != nil {
				t.Errorf("breaker: got %+v want %+v", *gs[i].CircuitBreaker, *ws[i].CircuitBreaker)
			}
		}
	}
}

func TestDefaults(t *testing.T) {
	def := config.Default()
	if def.Path != "" || def.Workspace != "." || def.DataDir != "" || !def.Builtin.Enabled ||
		def.ConnectTimeout != 15*time.Second || def.Timeout != 20*time.Minute ||
		def.Allow != nil || def.Deny != nil || def.Servers != nil ||
		!reflect.DeepEqual(def.Retry, config.Retry{MaxAttempts: 3, InitialBackoff: 200 * time.Millisecond, MaxBackoff: 5 * time.Second}) ||
		!reflect.DeepEqual(def.CircuitBreaker, config.Breaker{Failures: 5, Cooldown: 30 * time.Second}) {
		t.Fatalf("Default() = %+v", def)
	}

	for _, content := range []string{"", "# nothing yet\n", "servers:\n", "servers: {}\n", "---\n"} {
		cfg, dir := mustLoad(t, "toolmux.yaml", content)
		want := config.Default()
		want.Path = filepath.Join(dir, "toolmux.yaml")
		want.Workspace = dir
		// Only the empty mapping says there is no server on purpose
		// (TestNoServers).
		want.NoServers = content == "servers: {}\n"
		checkConfig(t, cfg, want)
	}

	// A minimal server gets no per-server overrides: zero values mean
	// "inherit", nil policies mean "use the global one".
	cfg, _ := mustLoad(t, "toolmux.yaml", "servers:\n  a:\n    command: a-server\n")
	want := config.Server{Name: "a", Transport: "stdio", Command: "a-server", Line: 2}
	if !reflect.DeepEqual(cfg.Servers, []config.Server{want}) {
		t.Fatalf("got %+v", cfg.Servers)
	}
}

func TestValues(t *testing.T) {
	cfg, dir := mustLoad(t, "toolmux.yaml", `
workspace: ./project
data_dir: state
builtin: {enabled: false}
retry:
  initial_backoff: 1s
  max_backoff: 1m
  tools: ["search_*", "a/fetch_*", "other/x", "*/read_*"]
circuit_breaker: {cooldown: 1m}
servers:
  a:
    command: ${BIN:-/usr/bin/a}
    args: ["--key=${EVERYTHING_KEY}", "$$HOME", "${EMPTY:-fallback}", "${EMPTY-kept}", "cost: $5", 8080, true]
    env: {PORT: 3000, DEBUG: true, LITERAL: "$${NOT_EXPANDED}"}
    cwd: sub/dir
    retry: {max_attempts: 1}
    circuit_breaker: {}
  sse:
    url: http://localhost:8080/sse
  sse2:
    type: sse
    url: http://localhost:8080/events
  streamable:
    url: http://localhost:8080/mcp
    transport: streamable-http
  off:
    command: x
    env: {TOKEN: "${UNSET_BECAUSE_DISABLED}"}
    disabled: true
`)
	if cfg.Workspace != filepath.Join(dir, "project") || cfg.DataDir != filepath.Join(dir, "state") || cfg.Builtin.Enabled {
		t.Errorf("paths/builtin: %+v", cfg)
	}
	wantRetry := config.Retry{MaxAttempts: 3, InitialBackoff: time.Second, MaxBackoff: time.Minute,
		Tools: []string{"search_*", "a/fetch_*", "other/x", "*/read_*"}}
	if !reflect.DeepEqual(cfg.Retry, wantRetry) || cfg.CircuitBreaker != (config.Breaker{Failures: 5, Cooldown: time.Minute}) {
		t.Errorf("global policy: %+v %+v", cfg.Retry, cfg.CircuitBreaker)
	}
	a := cfg.Servers[0]
	wantA := config.Server{
		Name: "a", Transport: "stdio", Command: "/usr/bin/a",
		Args: []string{"--key=secret", "$HOME", "fallback", "", "cost: $5", "8080", "true"},
		Env:  map[string]string{"PORT": "3000", "DEBUG": "true", "LITERAL": "${NOT_EXPANDED}"},
		Cwd:  filepath.Join(dir, "sub/dir"),
		// A server's retry block without tools keeps the global tools that
		// can apply to it, as bare globs.
		Retry:          &config.Retry{MaxAttempts: 1, InitialBackoff: time.Second, MaxBackoff: time.Minute, Tools: []string{"search_*", "fetch_*", "read_*"}},
		CircuitBreaker: &config.Breaker{Failures: 5, Cooldown: time.Minute},
		Line:           11,
	}
	if !reflect.DeepEqual(a, wantA) {
		t.Errorf("server a:\n got %+v\nwant %+v\nretry %+v", a, wantA, *a.Retry)
	}
	var transports []string
	for _, s := range cfg.Servers[1:] {
		transports = append(transports, s.Name+"="+s.Transport)
	}
	if got := strings.Join(transports, " "); got != "sse=sse sse2=sse streamable=http off=stdio" {
		t.Errorf("transports: %s", got)
	}
	if off := cfg.Servers[4]; !off.Disabled || off.Env["TOKEN"] != "" {
		t.Errorf("disabled server: %+v", off)
	}
}

func TestClientFormats(t *testing.T) {
	for _, tc := range []struct {
		name, file, content string
		workspace           func(dir string) string
		want                []config.Server
	}{
		{
			name: "claude desktop",
			file: "claude_desktop_config.json",
			content: `{
  "mcpServers": {
    "filesystem": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"]
    },
    "github": {
      "command": "docker",
      "args": ["run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"],
      "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_x"}
    }
  }
}`,
			want: []config.Server{
				{Name: "filesystem", Transport: "stdio", Command: "npx", Args: []string{"-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"}, Line: 3},
				{Name: "github", Transport: "stdio", Command: "docker", Args: []string{"run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"},
					Env: map[string]string{"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_x"}, Line: 7},
			},
		},
		{
			name: "cursor",
			file: "mcp.json",
			content: `{
	"mcpServers": {
		"remote": {
			"url": "https://mcp.example.com/mcp",
			"type": "http",
			"headers": {"Authorization": "Bearer ${REMOTE_TOKEN}"}
		},
		"legacy": {"url": "https://mcp.example.com/sse"},
		"events": {"url": "https://mcp.example.com/events", "type": "sse"},
		"local": {"type": "stdio", "command": "uvx", "args": ["mcp-server-time"], "description": "clock", "autoApprove": ["now"]}
	}
}`,
			want: []config.Server{
				{Name: "remote", Transport: "http", URL: "https://mcp.example.com/mcp", Headers: map[string]string{"Authorization": "Bearer tok"}, Line: 3},
				{Name: "legacy", Transport: "sse", URL: "https://mcp.example.com/sse", Line: 8},
				{Name: "events", Transport: "sse", URL: "https://mcp.example.com/events", Line: 9},
				{Name: "local", Transport: "stdio", Command: "uvx", Args: []string{"mcp-server-time"}, Line: 10},
			},
		},
		{
			name: "gemini cli",
			file: "settings.json",
			content: `{
  // Gemini CLI allows comments in settings.json.
  "theme": "GitHub",
  "selectedAuthType": "oauth-personal",
  "mcpServers": {
    "http": {
      "httpUrl": "https://api.example.com/mcp\/",
      "headers": {"X-Api-Key": "k"},
      "timeout": 30000,
      "includeTools": ["search", "get[1]"],
      "excludeTools": ["search"],
      "trust": true
    },
    "py": {
      "command": "python",
      "args": ["-m", "my_server"],
      "cwd": "./server",
      "env": {"PATH_EXTRA": "$HOME/bin"},
      "timeout": 1500,
      "oauth": {"enabled": false},
      "enabled": false
    }
  },
  "telemetry": {"enabled": false}
}`,
			want: []config.Server{
				{Name: "http", Transport: "http", URL: "https://api.example.com/mcp/", Headers: map[string]string{"X-Api-Key": "k"},
					Timeout: 30 * time.Second, Allow: []string{"search", `get\[1\]`}, Deny: []string{"search"}, Trust: true, Line: 6},
				{Name: "py", Transport: "stdio", Command: "python", Args: []string{"-m", "my_server"}, Cwd: "<dir>/server",
					Env: map[string]string{"PATH_EXTRA": "$HOME/bin"}, Timeout: 1500 * time.Millisecond, Disabled: true, Line: 14},
			},
		},
		{
			name:      "mcpServers in toolmux.yaml",
			file:      "toolmux.yaml",
			workspace: func(dir string) string { return dir },
			content: `timeout: 1m
servers:
  a: {command: a}
mcpServers:
  b: {command: b, timeout: 2000}
  c: {httpUrl: "http://localhost:1/mcp"}
`,
			want: []config.Server{
				{Name: "a", Transport: "stdio", Command: "a", Line: 3},
				{Name: "b", Transport: "stdio", Command: "b", Timeout: 2 * time.Second, Line: 5},
				{Name: "c", Transport: "http", URL: "http://localhost:1/mcp", Line: 6},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, dir := mustLoad(t, tc.file, tc.content)
			for i := range tc.want {
				tc.want[i].Cwd = strings.Replace(tc.want[i].Cwd, "<dir>", dir, 1)
			}
			want := config.Default()
			want.Path = filepath.Join(dir, tc.file)
			if tc.workspace != nil {
				want.Workspace = tc.workspace(dir)
			}
			if tc.file == "toolmux.yaml" {
				want.Timeout = time.Minute
			}
			want.Servers = tc.want
			checkConfig(t, cfg, want)
		})
	}
}

// Parse, unlike Load, leaves relative paths relative to the name's
// directory, which is how callers that already hold the bytes use it.
func TestParse(t *testing.T) {
	cfg, err := config.ParseWith("conf/toolmux.yaml", []byte("workspace: w\nservers:\n  a: {command: a, cwd: ~/x}\n"),
		config.Options{LookupEnv: envOf(testEnv)})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Path != "conf/toolmux.yaml" || cfg.Workspace != "conf/w" || cfg.Servers[0].Cwd != "/home/u/x" {
		t.Fatalf("got %+v", cfg)
	}
	cfg, err = config.ParseWith("toolmux.yaml", []byte("workspace: w\n"), config.Options{LookupEnv: envOf(nil), Dir: "/base"})
	if err != nil || cfg.Workspace != "/base/w" {
		t.Fatalf("got %+v, %v", cfg, err)
	}
}

// Only an empty mapping says a file has no server on purpose (NoServers):
// an empty file, comments, servers: with nothing under it or null, and a
// file cut before its servers say nothing, as a file read while it was
// being written would not.
func TestNoServers(t *testing.T) {
	for _, c := range []struct {
		name, text string
		want       bool
	}{
		{"servers: {}", "servers: {}\n", true},
		{"mcpServers: {}", "mcpServers: {}\n", true},
		{"JSON mcpServers {}", `{"mcpServers": {}}`, true},
		{"an empty mapping and a null one", "servers:\nmcpServers: {}\n", true},
		{"empty file", "", false},
		{"comments only", "# servers come later\n", false},
		{"servers: alone", "servers:\n", false},
		{"servers: null", "servers: null\n", false},
		{"servers: ~", "servers: ~\n", false},
		{"no servers key", "deny: [x/y]\n", false},
		{"a cut file", "pipeline:\n  truncate:\n    max_chars: 5", false},
		{"a server", "servers: {a: {command: a}}\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.ParseWith("toolmux.yaml", []byte(c.text), config.Options{LookupEnv: envOf(nil), Dir: "/base"})
			if err != nil {
				t.Fatal(err)
			}
			if cfg.NoServers != c.want {
				t.Errorf("NoServers = %v, want %v", cfg.NoServers, c.want)
			}
		})
	}
}

func TestFind(t *testing.T) {
	dir := t.TempDir()
	if p, err := config.Find("", dir); err != nil || p != "" {
		t.Fatalf("empty dir: got %q, %v", p, err)
	}
	if _, err := config.Find("missing.yaml", dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("explicit missing file: got %v", err)
	}
	if _, err := config.Find(dir, ""); err == nil {
		t.Fatal("explicit directory: no error")
	}
	local := filepath.Join(dir, "toolmux.yaml")
	if err := os.WriteFile(local, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if p, err := config.Find("", dir); err != nil || p != local {
		t.Fatalf("local file: got %q, %v", p, err)
	}
	other := filepath.Join(dir, "other.json")
	if err := os.WriteFile(other, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if p, err := config.Find("other.json", dir); err != nil || p != other {
		t.Fatalf("explicit relative: got %q, %v", p, err)
	}
	if p, err := config.Find(other, "/elsewhere"); err != nil || p != other {
		t.Fatalf("explicit absolute: got %q, %v", p, err)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := config.Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("got %v", err)
	}
}

// Anchors and merge keys let servers share settings; keys written in a
// server win over merged ones.
func TestYAMLAnchors(t *testing.T) {
	cfg, _ := mustLoad(t, "toolmux.yaml", `
servers:
  base: &base
    command: node
    args: &args [server.js]
    env: {MODE: prod}
  variant:
    <<: *base
    env: {MODE: dev}
    args: *args
    disabled: true
`)
	if len(cfg.Servers) != 2 {
		t.Fatalf("got %+v", cfg.Servers)
	}
	v := cfg.Servers[1]
	if v.Command != "node" || !reflect.DeepEqual(v.Args, []string{"server.js"}) || v.Env["MODE"] != "dev" || !v.Disabled {
		t.Fatalf("variant: %+v", v)
	}
}

// A server's passthrough section overrides the global one key by key,
// wherever the global one is in the file; servers without one use it.
func TestPassthrough(t *testing.T) {
	cfg, _ := mustLoad(t, "toolmux.yaml", `servers:
  a:
    command: a
    passthrough: {idle_timeout: 1m}
  b:
    command: b
  c:
    url: http://localhost:1/mcp
    passthrough: {max_sessions: 2, idle_timeout: 30s, park_timeout: 10s}
passthrough:
  max_sessions: 4
  max_parked: 3
`)
	if !reflect.DeepEqual(cfg.Passthrough, config.Passthrough{MaxSessions: 4, MaxParked: 3}) {
		t.Errorf("global: %+v", cfg.Passthrough)
	}
	want := []*config.Passthrough{{MaxSessions: 4, IdleTimeout: time.Minute, MaxParked: 3}, nil,
		{MaxSessions: 2, IdleTimeout: 30 * time.Second, MaxParked: 3, ParkTimeout: 10 * time.Second}}
	for i, s := range cfg.Servers {
		if !reflect.DeepEqual(s.Passthrough, want[i]) {
			t.Errorf("%s: %+v, want %+v", s.Name, s.Passthrough, want[i])
		}
	}
	if def := config.Default(); !reflect.DeepEqual(def.Passthrough, config.Passthrough{}) {
		t.Errorf("default: %+v (zero means the gateway's defaults)", def.Passthrough)
	}
}

// The reference in the package documentation must itself be a valid file,
// or it would teach users mistakes.
func TestDocReference(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	_, ref, _ := strings.Cut(string(src), "# toolmux.yaml reference")
	ref, _, _ = strings.Cut(ref, "# Tool patterns")
	var yaml strings.Builder
	for _, line := range strings.Split(ref, "\n") {
		if body, ok := strings.CutPrefix(line, "//\t"); ok {
			yaml.WriteString(body + "\n")
		}
	}
	cfg, err := config.ParseWith("doc.go", []byte(yaml.String()), config.Options{LookupEnv: envOf(testEnv), Dir: "/work"})
	if err != nil {
		t.Fatalf("reference does not parse:\n%v\n%s", err, yaml.String())
	}
	if len(cfg.Servers) != 3 || cfg.DataDir != "/home/u/.local/share/toolmux" ||
		cfg.Servers[2].Transport != config.Command || cfg.Servers[2].Cwd != "/work" ||
		cfg.Builtin.Web.Search != (config.BuiltinSearch{Provider: config.Serper, URL: "https://google.serper.dev", Key: "serper-key"}) ||
		cfg.Builtin.MemoryDir != "/home/u/facts" {
		t.Fatalf("got %+v", cfg)
	}
}
