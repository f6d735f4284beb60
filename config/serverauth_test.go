package config_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/toolmux/toolmux/config"
)

func TestServerAuth(t *testing.T) {
	cfg, err := config.ParseWith("toolmux.yaml", []byte(`servers:
  jira:
    command: jira-mcp
    auth:
      kind: user_secrets
      secrets:
        JIRA_TOKEN: {env: JIRA_API_TOKEN}
        JIRA_USER: {env: JIRA_USER}
      max_connections: 4
      idle_timeout: 2m
  github:
    url: https://api.example.com/mcp
    auth:
      kind: user_secrets
      secrets:
        token: {header: Authorization, format: "Bearer {value}"}
        org: {header: X-Org}
  plain:
    command: plain-mcp
`), config.Options{Dir: "/work"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*config.ServerAuth{
		"jira": {Kind: config.AuthUserSecrets, Secrets: []config.UserSecret{
			{Name: "JIRA_TOKEN", Env: "JIRA_API_TOKEN"}, {Name: "JIRA_USER", Env: "JIRA_USER"}},
			MaxConnections: 4, IdleTimeout: 2 * time.Minute, Line: 4},
		"github": {Kind: config.AuthUserSecrets, Secrets: []config.UserSecret{
			{Name: "token", Header: "Authorization", Format: "Bearer {value}"}, {Name: "org", Header: "X-Org"}}, Line: 13},
		"plain": nil,
	}
	for _, s := range cfg.Servers {
		if !reflect.DeepEqual(s.Auth, want[s.Name]) {
			t.Errorf("%s: auth %+v, want %+v", s.Name, s.Auth, want[s.Name])
		}
	}
}

func TestServerAuthErrors(t *testing.T) {
	checkErrors(t, "toolmux.yaml", `servers:
  a:
    command: a
    auth: {secrets: {X: {env: X}}}
  b:
    command: b
    auth: {kind: oauth}
  c:
    command: c
    auth: {kind: magic}
  d:
    command: d
    auth: {kind: user_secrets}
  e:
    command: e
    auth:
      kind: user_secrets
      max_connections: 0
      idle_timeout: soon
      scopes: [x]
      secrets:
        "a/b": {env: X}
        T1: {header: Authorization}
        T2: {}
        T3: {env: "A=B"}
        T4: {env: U, format: "{value}"}
        T5: {env: T}
        T6: {env: T}
  f:
    url: https://example.com/mcp
    auth:
      kind: user_secrets
      secrets:
        T1: {env: T}
        T2: {header: X-A, format: "Bearer"}
        T3: {header: X-B, env: B}
        T4: {header: "a b"}
  g:
    discover: [ls]
    call: [echo]
    auth: {kind: user_secrets, secrets: {T: {env: T}}}
`, []wantErr{
		{4, 5, "servers.a.auth", "needs kind (user_secrets)"},
		{7, 18, "servers.b.auth.kind", `"oauth" is not available yet (expected user_secrets)`},
		{10, 18, "servers.c.auth.kind", `unknown kind "magic" (expected user_secrets)`},
		{13, 5, "servers.d.auth", "kind user_secrets needs secrets (each secret's name and where it goes: env or header)"},
		{18, 24, "servers.e.auth.max_connections", "must be between 1 and 10000, got 0"},
		{19, 21, "servers.e.auth.idle_timeout", `"soon" is not a duration`},
		{20, 7, "servers.e.auth.scopes", "unknown key (expected one of: kind, max_connections, idle_timeout, secrets)"},
		{22, 9, `servers.e.auth.secrets.a/b`, `a secret's name is letters, digits, '_', '-' and '.' (at most 128), got "a/b"`},
		{23, 14, "servers.e.auth.secrets.T1.header", "applies only to sse and http servers, but this server has command (use env)"},
		{24, 9, "servers.e.auth.secrets.T2", "needs env (the environment variable of the user's process it goes in)"},
		{25, 19, "servers.e.auth.secrets.T3.env", `"A=B" is not an environment variable name`},
		{26, 22, "servers.e.auth.secrets.T4.format", "applies only to a secret sent as a header"},
		{28, 9, "servers.e.auth.secrets.T6", "goes where secret T5 goes already"},
		{34, 14, "servers.f.auth.secrets.T1.env", "applies only to stdio servers, but this server has url (use header)"},
		{35, 35, "servers.f.auth.secrets.T2.format", "must hold {value} once, where the secret goes"},
		{36, 14, "servers.f.auth.secrets.T3.header", "a secret goes to either env or header, not both"},
		{37, 22, "servers.f.auth.secrets.T4.header", `"a b" is not an HTTP header name`},
		{41, 5, "servers.g.auth", "applies only to MCP servers (stdio, sse, http), but this server has discover"},
	})
}
