package config_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/toolmux/toolmux/config"
)

func TestCommandServers(t *testing.T) {
	cfg, dir := mustLoad(t, "toolmux.yaml", `
servers:
  discovered:
    discover: ["./tools.sh", "discover"]
    call: ["./tools.sh", "call"]
    env: {API_KEY: "${EVERYTHING_KEY}"}
    connect_timeout: 30s
    timeout: 10m
  typed:
    transport: command
    discover: [python3, tools.py, --list, 8080]
    call: [python3, "${HOME}/tools.py"]
    cwd: sub
    tool_timeouts: {slow: 1h}
  off:
    discover: ["${NOPE}"]
    call: ["${NOPE}", x]
    disabled: true
`)
	want := []config.Server{
		{
			Name: "discovered", Transport: config.Command,
			Discover: []string{"./tools.sh", "discover"}, Call: []string{"./tools.sh", "call"},
			Env: map[string]string{"API_KEY": "secret"},
			// Relative programs are relative to cwd, which defaults to the
			// file's directory for command servers.
			Cwd:            dir,
			ConnectTimeout: 30 * time.Second, Timeout: 10 * time.Minute,
			Line: 3,
		},
		{
			Name: "typed", Transport: config.Command,
			Discover: []string{"python3", "tools.py", "--list", "8080"}, Call: []string{"python3", "/home/u/tools.py"},
			Cwd:          filepath.Join(dir, "sub"),
			ToolTimeouts: map[string]time.Duration{"slow": time.Hour},
			Line:         9,
		},
		{
			Name: "off", Transport: config.Command,
			Discover: []string{""}, Call: []string{"", "x"},
			Cwd: dir, Disabled: true, Line: 15,
		},
	}
	w := config.Default()
	w.Path, w.Workspace, w.Servers = filepath.Join(dir, "toolmux.yaml"), dir, want
	checkConfig(t, cfg, w)
}

func TestCommandServerErrors(t *testing.T) {
	for _, tc := range []struct {
		name, file, content string
		want                []wantErr
	}{
		{
			name: "discover and call go together",
			content: `servers:
  a:
    discover: [./tools.sh, discover]
  b:
    call: [./tools.sh, call]
`,
			want: []wantErr{
				{3, 5, "servers.a.discover", "needs call too (the command that runs the tools discover lists)"},
				{5, 5, "servers.b.call", "needs discover too (the command that lists the tools call runs)"},
			},
		},
		{
			name: "one kind of server",
			content: `servers:
  a:
    command: a
    discover: [d]
    call: [c]
  b:
    url: http://h/mcp
    call: [c]
  c:
    command: c
    url: http://h/mcp
    discover: [d]
    call: [c]
`,
			want: []wantErr{
				{4, 5, "servers.a.discover", "a server has either command (stdio) or discover and call (tools found by a command), not both"},
				{8, 5, "servers.b.call", "a server has either url (sse/http) or discover and call (tools found by a command), not both"},
				{11, 5, "servers.c.url", "a server has either command (stdio) or url (sse/http), not both"},
			},
		},
		{
			name: "transport and kind disagree",
			content: `servers:
  a: {transport: command, command: a}
  b: {transport: command, url: "http://h/mcp"}
  c: {transport: stdio, discover: [d], call: [c]}
  d: {type: http, discover: [d], call: [c]}
  e: {transport: commands, discover: [d], call: [c]}
`,
			want: []wantErr{
				{2, 18, "servers.a.transport", "transport command needs discover and call, but this server has command"},
				{3, 18, "servers.b.transport", "transport command needs discover and call, but this server has url"},
				{4, 18, "servers.c.transport", "transport stdio needs command, but this server has discover"},
				{5, 13, "servers.d.type", "type http needs url, but this server has discover"},
				{6, 18, "servers.e.transport", `unknown transport "commands" (expected one of: stdio, sse, http, streamable-http, command)`},
			},
		},
		{
			name: "settings of other kinds of server",
			content: `servers:
  a:
    discover: [d]
    call: [c]
    args: [x]
    headers: {X-Team: core}
    bearer_token: t
  b:
    discover: [d]
    call: [c]
    args: []
    headers: {}
`,
			want: []wantErr{
				{5, 5, "servers.a.args", "applies only to stdio servers, but this server has discover (put the arguments in the discover list)"},
				{6, 5, "servers.a.headers", "applies only to sse and http servers, but this server has discover"},
				{7, 5, "servers.a.bearer_token", "applies only to sse and http servers, but this server has discover"},
			},
		},
		{
			name: "bad argument vectors",
			content: `servers:
  a:
    discover: "./tools.sh discover"
    call: []
  b:
    discover:
    call: ["", x]
  c:
    discover: [[d]]
    call: ["c\0"]
  d:
    discover: ["${NOPE}"]
    call: {c: 1}
`,
			want: []wantErr{
				{3, 15, "servers.a.discover", `expected a list of the program and its arguments, such as ["./tools.sh", "discover"], got "./tools.sh discover" (it runs without a shell; for a shell line write ["sh", "-c", "LINE"])`},
				{4, 11, "servers.a.call", `must not be empty (expected the program and its arguments, such as ["./tools.sh", "call"])`},
				{6, 14, "servers.b.discover", "must not be empty"},
				{7, 12, "servers.b.call[0]", "the program must not be empty"},
				{9, 16, "servers.c.discover[0]", "expected a string, got a list"},
				{10, 12, "servers.c.call[0]", "must not contain a NUL byte"},
				{12, 16, "servers.d.discover[0]", "environment variable NOPE is not set"},
				{13, 11, "servers.d.call", "expected a list, got a mapping"},
			},
		},
		{
			name:    "command servers are toolmux's own",
			content: "mcpServers:\n  a: {discover: [d], call: [c], type: command}\n",
			want: []wantErr{
				{2, 3, "mcpServers.a", "needs command (to start a stdio server) or url (to reach an sse or http server)"},
				{2, 7, "mcpServers.a.discover", "unknown key (expected one of: command, args, env, cwd, url, httpUrl, type,"},
				{2, 22, "mcpServers.a.call", "unknown key"},
				{2, 39, "mcpServers.a.type", `unknown transport "command" (expected one of: stdio, sse, http, streamable-http)`},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := tc.file
			if file == "" {
				file = "toolmux.yaml"
			}
			checkErrors(t, file, tc.content, tc.want)
		})
	}
}

// Gemini CLI's settings.json declares command-discovered tools with two
// top-level strings; they become the server "discovered", run by sh.
func TestGeminiDiscoveryCommands(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		want          []config.Server
	}{
		{
			name: "with mcpServers",
			content: `{
  "theme": "GitHub",
  "mcpServers": {"a": {"command": "a"}},
  // Gemini CLI keeps them at the top level.
  "toolDiscoveryCommand": "python3 tools.py --list",
  "toolCallCommand": "./bin/call"
}`,
			want: []config.Server{
				{Name: "a", Transport: config.Stdio, Command: "a", Line: 3},
				{Name: config.DiscoveredServer, Transport: config.Command,
					Discover: []string{"sh", "-c", "python3 tools.py --list"},
					Call:     []string{"sh", "-c", `./bin/call "$@"`, "sh"},
					Line:     5},
			},
		},
		{
			// The shell expands the lines' variables; toolmux leaves them
			// alone, so shell syntax such as ${1} survives.
			name:    "alone, with shell syntax",
			content: `{"toolCallCommand": "tools call --user \"${USER}\"", "toolDiscoveryCommand": "tools list | jq -c '.[]' ${1}"}`,
			want: []config.Server{
				{Name: config.DiscoveredServer, Transport: config.Command,
					Discover: []string{"sh", "-c", "tools list | jq -c '.[]' ${1}"},
					Call:     []string{"sh", "-c", `tools call --user "${USER}" "$@"`, "sh"},
					Line:     1},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, dir := mustLoad(t, "settings.json", tc.content)
			want := config.Default()
			want.Path = filepath.Join(dir, "settings.json")
			want.Servers = tc.want
			checkConfig(t, cfg, want)
		})
	}
}

func TestGeminiDiscoveryCommandErrors(t *testing.T) {
	for _, tc := range []struct {
		name, file, content string
		want                []wantErr
	}{
		{
			name:    "discovery without call",
			file:    "settings.json",
			content: `{"mcpServers": {}, "toolDiscoveryCommand": "tools list"}`,
			want:    []wantErr{{1, 20, "toolDiscoveryCommand", "needs toolCallCommand too (the command that runs the tools it lists)"}},
		},
		{
			name:    "call without discovery",
			file:    "settings.json",
			content: `{"toolCallCommand": "tools call"}`,
			want:    []wantErr{{1, 2, "toolCallCommand", "needs toolDiscoveryCommand too (the command that lists the tools it runs)"}},
		},
		{
			name:    "not strings",
			file:    "settings.json",
			content: "{\n  \"toolDiscoveryCommand\": [\"tools\", \"list\"],\n  \"toolCallCommand\": \"  \"\n}",
			want: []wantErr{
				{2, 27, "toolDiscoveryCommand", "expected a string, got a list"},
				{3, 22, "toolCallCommand", "must not be empty"},
			},
		},
		{
			name: "name taken",
			file: "settings.json",
			content: `{
  "mcpServers": {"discovered": {"command": "x"}},
  "toolDiscoveryCommand": "tools list",
  "toolCallCommand": "tools call"
}`,
			want: []wantErr{{3, 3, "toolDiscoveryCommand", `makes a server named "discovered", but mcpServers already has one (line 2)`}},
		},
		{
			name:    "YAML is strict",
			content: "mcpServers: {}\ntoolDiscoveryCommand: tools list\ntoolCallCommand: tools call\n",
			want: []wantErr{
				{2, 1, "toolDiscoveryCommand", "unknown key (expected one of: workspace, "},
				{3, 1, "toolCallCommand", "unknown key"},
			},
		},
		{
			name:    "a toolmux file in JSON is strict",
			file:    "toolmux.json",
			content: `{"timeout": "1m", "toolDiscoveryCommand": "tools list", "toolCallCommand": "tools call"}`,
			want: []wantErr{
				{1, 19, "toolDiscoveryCommand", "unknown key"},
				{1, 57, "toolCallCommand", "unknown key"},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := tc.file
			if file == "" {
				file = "toolmux.yaml"
			}
			checkErrors(t, file, tc.content, tc.want)
		})
	}
}
