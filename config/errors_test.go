package config_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/config"
)

// wantErr is one expected *config.Error: its position, key path, and a
// fragment of its message.
type wantErr struct {
	line, col int
	key, msg  string
}

// allErrors unwraps the join Parse returns.
func allErrors(t *testing.T, err error) []*config.Error {
	t.Helper()
	var list []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	} else {
		list = []error{err}
	}
	var out []*config.Error
	for _, e := range list {
		var ce *config.Error
		if !errors.As(e, &ce) {
			t.Fatalf("error %v (%T) is not a *config.Error", e, e)
		}
		out = append(out, ce)
	}
	return out
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name, file, content string
		want                []wantErr
	}{
		{
			name: "unknown key with suggestion",
			content: `servers:
  everything:
    comand: npx
`,
			want: []wantErr{
				{2, 3, "servers.everything", "needs command (to start a stdio server), url (to reach an sse or http server), or discover and call (to run tools found by a command)"},
				{3, 5, "servers.everything.comand", "unknown key (expected one of: command, args, env, cwd, url, transport, type, headers, bearer_token, discover, call, allow, deny, timeout, tool_timeouts, connect_timeout, retry, circuit_breaker, health_check, passthrough, auth, disabled, trust); did you mean command?"},
			},
		},
		{
			name:    "passthrough: no sessions",
			content: "passthrough:\n  max_sessions: 0\n",
			want:    []wantErr{{2, 17, "passthrough.max_sessions", "must be between 1 and 10000, got 0"}},
		},
		{
			name:    "max_parked out of range",
			content: "passthrough:\n  max_parked: 0\n",
			want:    []wantErr{{2, 15, "passthrough.max_parked", "must be between 1 and 100000, got 0"}},
		},
		{
			name:    "passthrough: a bare idle timeout",
			content: "servers:\n  a:\n    command: a\n    passthrough: {idle_timeout: 300}\n",
			want:    []wantErr{{4, 33, "servers.a.passthrough.idle_timeout", `"300" is not a duration`}},
		},
		{
			name:    "passthrough: misspelt key",
			content: "passthrough: {max_session: 3}\n",
			want:    []wantErr{{1, 15, "passthrough.max_session", "did you mean max_sessions?"}},
		},
		{
			name:    "passthrough: a command server has no route",
			content: "servers:\n  d:\n    discover: [d]\n    call: [c]\n    passthrough: {max_sessions: 2}\n",
			want:    []wantErr{{5, 5, "servers.d.passthrough", "applies only to stdio, sse and http servers"}},
		},
		{
			name:    "unknown key without suggestion",
			content: "servers:\n  a:\n    command: a\n    frobnicate: true\n",
			want:    []wantErr{{4, 5, "servers.a.frobnicate", "unknown key (expected one of: command, "}},
		},
		{
			name:    "unknown top-level key, transposed letters",
			content: "timeuot: 5s\n",
			want:    []wantErr{{1, 1, "timeuot", "did you mean timeout?"}},
		},
		{
			name:    "unknown top-level key, wrong case",
			content: "Servers: {}\n",
			want:    []wantErr{{1, 1, "Servers", "did you mean servers?"}},
		},
		{
			name: "bare integer duration",
			content: `servers:
  remote:
    url: https://example.com/mcp
    headers: {X-Team: core}
    timeout: 30
`,
			want: []wantErr{{5, 14, "servers.remote.timeout", `"30" is not a duration (use a unit, e.g. "30s")`}},
		},
		{
			name:    "quoted integer duration",
			content: "timeout: \"30\"\n",
			want:    []wantErr{{1, 10, "timeout", `"30" is not a duration (use a unit, e.g. "30s")`}},
		},
		{
			name:    "bad durations",
			content: "timeout: fast\nconnect_timeout: 0s\nretry: {max_backoff: -1s}\ncircuit_breaker: {cooldown: [1s]}\n",
			want: []wantErr{
				{1, 10, "timeout", `"fast" is not a duration (expected e.g. "30s", "2m" or "1h30m")`},
				{2, 18, "connect_timeout", `must be positive, got "0s"`},
				{3, 22, "retry.max_backoff", `must be positive, got "-1s"`},
				{4, 29, "circuit_breaker.cooldown", `expected a duration such as "30s", got a list`},
			},
		},
		{
			name:    "backoffs out of order",
			content: "retry: {initial_backoff: 10s}\nservers:\n  a: {command: a, retry: {max_backoff: 1s}}\n",
			want: []wantErr{
				{1, 8, "retry", "initial_backoff (10s) is longer than max_backoff (5s)"},
				{3, 26, "servers.a.retry", "initial_backoff (10s) is longer than max_backoff (1s)"},
			},
		},
		{
			name: "health checks",
			content: "health_check: {ping_after: 0s, min_backoff: 1m, pings: 3}\nservers:\n" +
				"  a: {command: a, health_check: {enabled: maybe, max_backoff: 1s}}\n" +
				"  b: {discover: [b], call: [b], health_check: {max_backoff: 2m, ping_timeout: 1s}}\n",
			want: []wantErr{
				{1, 15, "health_check", "min_backoff (1m0s) is longer than max_backoff (30s)"},
				{1, 28, "health_check.ping_after", `must be positive, got "0s"`},
				{1, 49, "health_check.pings", "unknown key (expected one of: enabled, ping_after, ping_timeout, ping_interval, min_backoff, max_backoff)"},
				{3, 33, "servers.a.health_check", "min_backoff (1m0s) is longer than max_backoff (1s)"},
				{3, 43, "servers.a.health_check.enabled", "expected true or false"},
				{4, 65, "servers.b.health_check.ping_timeout", "applies only to MCP servers (stdio, sse, http), but this server has discover"},
			},
		},
		{
			name:    "bad numbers",
			content: "retry: {max_attempts: 0}\ncircuit_breaker: {failures: three}\nservers:\n  a: {command: a, retry: {max_attempts: 2.5}}\n",
			want: []wantErr{
				{1, 23, "retry.max_attempts", "must be between 1 and 1000, got 0"},
				{2, 29, "circuit_breaker.failures", `expected an integer, got "three"`},
				{4, 41, "servers.a.retry.max_attempts", "expected an integer, got 2.5"},
			},
		},
		{
			name: "bad globs",
			content: `allow: ["ok/*", "files/[write"]
deny: ["/x", "x/", ""]
retry: {tools: ["a/\\"]}
servers:
  a:
    command: a
    deny: ["[z-"]
`,
			want: []wantErr{
				{1, 17, "allow[1]", `"files/[write" is not a valid glob: syntax error in pattern`},
				{2, 8, "deny[0]", `"/x": expected "server/tool" or a bare tool name`},
				{2, 14, "deny[1]", `"x/": expected "server/tool" or a bare tool name`},
				{2, 20, "deny[2]", "empty pattern"},
				{3, 17, "retry.tools[0]", `"a/\\" is not a valid glob`},
				{7, 12, "servers.a.deny[0]", `"[z-" is not a valid glob`},
			},
		},
		{
			name: "duplicate server names",
			content: `servers:
  a: {command: a}
mcpServers:
  b: {command: b}
  a: {command: c}
`,
			want: []wantErr{{5, 3, "mcpServers.a", "duplicate server name (first defined at line 2)"}},
		},
		{
			name:    "duplicate keys",
			content: "servers:\n  a:\n    command: a\n    command: b\n  a: {command: c}\n",
			want: []wantErr{
				{4, 5, "servers.a.command", "duplicate key (first at line 3)"},
				{5, 3, "servers.a", "duplicate key (first at line 2)"},
			},
		},
		{
			name:    "command and url",
			content: "servers:\n  both:\n    command: x\n    url: http://localhost/mcp\n",
			want:    []wantErr{{4, 5, "servers.both.url", "a server has either command (stdio) or url (sse/http), not both"}},
		},
		{
			name:    "neither command nor url",
			content: "servers:\n  empty: {}\n  null:\n  env-only: {env: {A: b}}\n",
			want: []wantErr{
				{2, 3, "servers.empty", "needs command (to start a stdio server), url (to reach an sse or http server), or discover and call"},
				{3, 8, "servers.null", "expected a mapping with command or url, got null"},
				{4, 3, "servers.env-only", "needs command"},
			},
		},
		{
			name: "unset environment variables",
			content: `data_dir: ${DATA}
servers:
  everything:
    command: npx
    env: {API_KEY: "${NOPE}", OTHER: "${EVERYTHING_KEY}"}
    args: ["${A}${B}", "${9LIVES}", "${UNTERMINATED"]
`,
			want: []wantErr{
				{1, 11, "data_dir", "environment variable DATA is not set (use ${DATA:-default} to give a default)"},
				{5, 20, "servers.everything.env.API_KEY", "environment variable NOPE is not set"},
				{6, 12, "servers.everything.args[0]", "environment variable A is not set"},
				{6, 12, "servers.everything.args[0]", "environment variable B is not set"},
				{6, 24, "servers.everything.args[1]", `invalid variable name "9LIVES"`},
				{6, 37, "servers.everything.args[2]", `unterminated "${" (write "$$" for a literal "$")`},
			},
		},
		{
			name: "wrong types",
			content: `servers:
  a:
    command: [npx]
    args: -y
    env: [A=b]
    disabled: "yes"
    tool_timeouts: [x]
  b:
    url: {href: "http://x"}
    headers: "X-Team: core"
allow: "*"
builtin: true
`,
			want: []wantErr{
				{3, 14, "servers.a.command", "expected a string, got a list"},
				{4, 11, "servers.a.args", `expected a list, got "-y"`},
				{5, 10, "servers.a.env", "expected a mapping, got a list"},
				{6, 15, "servers.a.disabled", `expected true or false, got "yes"`},
				{7, 20, "servers.a.tool_timeouts", "expected a mapping, got a list"},
				{9, 10, "servers.b.url", "expected a string, got a mapping"},
				{10, 14, "servers.b.headers", `expected a mapping, got "X-Team: core"`},
				{11, 8, "allow", `expected a list, got "*"`},
				{12, 10, "builtin", "expected a mapping, got true"},
			},
		},
		{
			name:    "servers is a list",
			content: "servers:\n  - name: a\n    command: a\n",
			want:    []wantErr{{2, 3, "servers", "expected a mapping, got a list"}},
		},
		{
			name:    "top level is not a mapping",
			content: "- servers\n",
			want:    []wantErr{{1, 1, "", "expected a mapping of toolmux settings or an mcpServers object, got a list"}},
		},
		{
			name: "transport problems",
			content: `servers:
  a: {url: "http://h/mcp", transport: websocket}
  b: {url: "http://h/mcp", transport: stdio}
  c: {command: c, type: sse}
  d: {url: "http://h/mcp", transport: http, type: http}
  e: {url: "ftp://h/mcp"}
  f: {url: "/relative"}
`,
			want: []wantErr{
				{2, 39, "servers.a.transport", `unknown transport "websocket" (expected one of: stdio, sse, http, streamable-http, command)`},
				{3, 39, "servers.b.transport", "transport stdio needs command, but this server has url"},
				{4, 25, "servers.c.type", "type sse needs url, but this server has command"},
				{5, 45, "servers.d.type", "use either transport or type, not both"},
				{6, 12, "servers.e.url", `"ftp://h/mcp" is not an http:// or https:// URL`},
				{7, 12, "servers.f.url", `"/relative" is not an http:// or https:// URL`},
			},
		},
		{
			name: "settings for the other transport",
			content: `servers:
  a:
    url: http://h/mcp
    args: [x]
    env: {}
  b:
    command: b
    bearer_token: t
    headers: {"bad header": x}
`,
			want: []wantErr{
				{4, 5, "servers.a.args", "applies only to stdio servers, but this server has url"},
				{8, 5, "servers.b.bearer_token", "applies only to sse and http servers, but this server has command"},
				{9, 15, "servers.b.headers.bad header", `"bad header" is not a valid HTTP header name`},
			},
		},
		{
			name:    "bad server names",
			content: "servers:\n  a/b: {command: x}\n  \"\": {command: y}\n",
			want: []wantErr{
				{2, 3, "servers.a/b", `a server name must not contain "/"`},
				{3, 3, "servers.", "a server name must not be empty"},
			},
		},
		{
			name:    "unknown keys in nested blocks",
			content: "builtin: {enable: false}\nretry: {attempts: 2}\ncircuit_breaker: {failure: 2}\n",
			want: []wantErr{
				{1, 11, "builtin.enable", "unknown key (expected one of: enabled, max_read_bytes, max_write_bytes, shell, memory_dir, web); did you mean enabled?"},
				{2, 9, "retry.attempts", "unknown key (expected one of: max_attempts, initial_backoff, max_backoff, tools)"},
				{3, 19, "circuit_breaker.failure", "did you mean failures?"},
			},
		},
		{
			name:    "YAML is strict even with only mcpServers",
			content: "theme: dark\nmcpServers:\n  a: {command: a}\n",
			want:    []wantErr{{1, 1, "theme", "unknown key (expected one of: workspace, "}},
		},
		{
			name:    "YAML syntax error, bad indentation",
			content: "timeout: 1m\nservers:\n  x:\n    command: a\n   args: b\n",
			want:    []wantErr{{5, 0, "", "YAML syntax error: did not find expected key"}},
		},
		{
			name:    "YAML syntax error on the first line",
			content: "servers: a: b\n",
			want:    []wantErr{{1, 0, "", "YAML syntax error: mapping values are not allowed in this context"}},
		},
		{
			name:    "YAML syntax error, unclosed flow",
			content: "timeout: 1m\nallow: [a, b\ndeny: []\n",
			want:    []wantErr{{2, 0, "", "YAML syntax error: did not find expected ',' or ']'"}},
		},
		{
			name:    "tab indentation",
			content: "servers:\n\ta: {command: a}\n",
			want:    []wantErr{{2, 0, "", "YAML syntax error: found character that cannot start any token"}},
		},
		{
			name:    "two YAML documents",
			content: "timeout: 1m\n---\ntimeout: 2m\n",
			want:    []wantErr{{3, 1, "", "a second YAML document"}},
		},
		{
			name: "JSON syntax error",
			file: "settings.json",
			content: `{
  "mcpServers": {
    "a": {"command": "x",}
  }
}`,
			want: []wantErr{{3, 26, "", "JSON syntax error: invalid character '}' looking for beginning of object key string"}},
		},
		{
			name:    "JSON syntax error, truncated",
			file:    "mcp.json",
			content: "{\n  \"mcpServers\": {\n",
			want:    []wantErr{{3, 1, "", "JSON syntax error: unexpected end of JSON input"}},
		},
		{
			name:    "JSON-looking file with a YAML name",
			content: "{\"servers\": {\"a\": {\"command\": \"x\"}}\n\n",
			want:    []wantErr{{3, 1, "", "JSON syntax error: unexpected end of JSON input"}},
		},
		{
			name: "Gemini timeout not in milliseconds",
			file: "settings.json",
			content: `{
  "mcpServers": {
    "search": {
      "command": "search-server", "timeout": "fast",
      "includeTools": "search"
    },
    "b": {"url": "http://h/mcp", "timeout": 1.5},
    "c": {"url": "http://h/mcp", "timeout": -1}
  }
}`,
			want: []wantErr{
				{4, 46, "mcpServers.search.timeout", `expected milliseconds as an integer, got "fast"`},
				{5, 23, "mcpServers.search.includeTools", `expected a list, got "search"`},
				{7, 45, "mcpServers.b.timeout", "expected milliseconds as an integer, got 1.5"},
				{8, 45, "mcpServers.c.timeout", "must be a positive number of milliseconds, got -1"},
			},
		},
		{
			name: "unknown key in a client file",
			file: "settings.json",
			content: `{"mcpServers": {
  "a": {"command": "x", "autoAprove": [], "transport": "stdio", "bearer_token": "x"}
}}`,
			want: []wantErr{
				{2, 25, "mcpServers.a.autoAprove", "unknown key (expected one of: command, args, env, cwd, url, httpUrl, type, headers, timeout, includeTools, excludeTools, disabled, enabled, trust); did you mean autoApprove?"},
				{2, 43, "mcpServers.a.transport", "unknown key"},
				{2, 65, "mcpServers.a.bearer_token", "unknown key"},
			},
		},
		{
			name:    "url and httpUrl",
			file:    "settings.json",
			content: `{"mcpServers": {"a": {"url": "http://h/sse", "httpUrl": "http://h/mcp"}, "b": {"httpUrl": "http://h/mcp", "type": "sse"}}}`,
			want: []wantErr{
				{1, 46, "mcpServers.a.httpUrl", "use either url or httpUrl, not both"},
				{1, 115, "mcpServers.b.type", "httpUrl is streamable HTTP, but type says sse"},
			},
		},
		{
			name:    "JSON file without mcpServers is strict",
			file:    "settings.json",
			content: `{"theme": "dark", "mcpservers": {}}`,
			want: []wantErr{
				{1, 2, "theme", "unknown key"},
				{1, 19, "mcpservers", "did you mean mcpServers?"},
			},
		},
		{
			name:    "merge loop",
			content: "servers:\n  a: &a\n    <<: *a\n    command: x\n",
			want:    []wantErr{{3, 9, "servers.a.<<", "merge refers back to a mapping that contains it"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := tc.file
			if file == "" {
				file = "toolmux.yaml"
			}
			cfg, dir, err := load(t, file, tc.content)
			if err == nil {
				t.Fatalf("no error; got %+v", cfg)
			}
			if cfg != nil {
				t.Errorf("got a config along with the error")
			}
			var first *config.Error
			if !errors.As(err, &first) {
				t.Fatalf("errors.As found no *config.Error in %v", err)
			}
			got := allErrors(t, err)
			path := filepath.Join(dir, file)
			var report strings.Builder
			for _, e := range got {
				fmt.Fprintf(&report, "\n\t%d:%d %q %q", e.Line, e.Column, e.Key, e.Msg)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d errors, want %d:%s", len(got), len(tc.want), report.String())
			}
			for i, w := range tc.want {
				e := got[i]
				if e.File != path || e.Line != w.line || e.Column != w.col || e.Key != w.key || !strings.Contains(e.Msg, w.msg) {
					t.Errorf("error %d:\n got %s:%d:%d %q %q\nwant %s:%d:%d %q containing %q", i,
						e.File, e.Line, e.Column, e.Key, e.Msg, path, w.line, w.col, w.key, w.msg)
				}
			}
			// The joined message lists every error, one per line, each
			// starting with the file.
			if lines := strings.Split(err.Error(), "\n"); len(lines) != len(got) || !strings.HasPrefix(lines[0], path+":") {
				t.Errorf("message:\n%s", err)
			}
		})
	}
}

func TestErrorString(t *testing.T) {
	for _, tc := range []struct {
		e    config.Error
		want string
	}{
		{config.Error{File: "toolmux.yaml", Line: 7, Column: 5, Key: "servers.everything.comand", Msg: "unknown key"},
			"toolmux.yaml:7:5: servers.everything.comand: unknown key"},
		{config.Error{File: "toolmux.yaml", Line: 3, Msg: "YAML syntax error: x"}, "toolmux.yaml:3: YAML syntax error: x"},
		{config.Error{File: "a.json", Msg: "m"}, "a.json: m"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

// The exact messages the reference promises, end to end.
func TestErrorMessages(t *testing.T) {
	_, err := config.ParseWith("settings.json", []byte(`{
  "mcpServers": {
    "search": {
      "url": "http://localhost:1/sse",
      "timeout": "fast"
    }
  }
}`), config.Options{LookupEnv: envOf(nil)})
	if want := `settings.json:5:18: mcpServers.search.timeout: expected milliseconds as an integer, got "fast"`; err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
	_, err = config.ParseWith("toolmux.yaml", []byte("servers:\n  everything:\n    comand: npx\n    command: npx\n"), config.Options{LookupEnv: envOf(nil)})
	if want := "toolmux.yaml:3:5: servers.everything.comand: unknown key (expected one of: command, args, env, cwd, url, transport, type, headers, bearer_token, discover, call, allow, deny, timeout, tool_timeouts, connect_timeout, retry, circuit_breaker, health_check, passthrough, auth, disabled, trust); did you mean command?"; err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
}
