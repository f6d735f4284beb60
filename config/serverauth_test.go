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
  tracker:
    url: https://tracker.example.com/mcp
    auth: {kind: oauth}
  wiki:
    url: https://wiki.example.com/mcp
    auth:
      kind: oauth
      client_id: toolmux
      client_secret_env: WIKI_CLIENT_SECRET
      scopes: [read, write]
      max_connections: 8
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
		"plain":   nil,
		"tracker": {Kind: config.AuthOAuth, Line: 22},
		"wiki": {Kind: config.AuthOAuth, ClientID: "toolmux", ClientSecretEnv: "WIKI_CLIENT_SECRET", Scopes: []string{"read", "write"},
			MaxConnections: 8, Line: 25},
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
  i:
    url: https://example.com/mcp
    auth:
      kind: oauth
      client_secret_env: "${SECRET}"
      scopes: ["a b"]
      secrets: {T: {header: X}}
`, []wantErr{
		{4, 5, "servers.a.auth", "needs kind (user_secrets, oauth or token_exchange)"},
		{7, 18, "servers.b.auth.kind", "oauth applies only to sse and http servers (an MCP endpoint that asks for OAuth), but this server has command (use user_secrets)"},
		{10, 18, "servers.c.auth.kind", `unknown kind "magic" (expected user_secrets, oauth or token_exchange)`},
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
		{46, 26, "servers.i.auth.client_secret_env", "must be the name of an environment variable"},
		{46, 26, "servers.i.auth.client_secret_env", "client_secret_env needs a client_id"},
		{47, 16, "servers.i.auth.scopes[0]", `"a b" is not a scope`},
		{48, 7, "servers.i.auth.secrets", "unknown key (expected one of: kind, max_connections, idle_timeout, client_id, client_secret_env, scopes)"},
	})
}

func TestUpstreamOAuth(t *testing.T) {
	cfg, err := config.ParseWith("toolmux.yaml", []byte(`upstream_oauth:
  public_url: https://gw.example.com
  client_name: Acme toolmux
  client_metadata: true
  leeway: 2m
  max_pending: 50
  state_ttl: 5m
  timeout: 10s
  allow_private_networks: true
servers:
  fx: {url: https://fx.example.com/mcp}
`), config.Options{Dir: "/work"})
	if err != nil {
		t.Fatal(err)
	}
	want := config.UpstreamOAuth{PublicURL: "https://gw.example.com", ClientName: "Acme toolmux", ClientMetadata: true,
		Leeway: 2 * time.Minute, MaxPending: 50, StateTTL: 5 * time.Minute, Timeout: 10 * time.Second, AllowPrivateNetworks: true}
	if cfg.UpstreamOAuth != want {
		t.Errorf("upstream_oauth: %+v, want %+v", cfg.UpstreamOAuth, want)
	}
}

func TestUpstreamOAuthErrors(t *testing.T) {
	checkErrors(t, "toolmux.yaml", `upstream_oauth:
  public_url: http://gw.example.com
  client_metadata: true
  leeway: 2h
  max_pending: 1000001
  state_ttl: 25h
  timeout: 6m
  redirect: x
servers:
  fx: {url: https://fx.example.com/mcp}
`, []wantErr{
		{3, 20, "upstream_oauth.client_metadata", "needs public_url, an https URL"},
		{4, 11, "upstream_oauth.leeway", `must be at most 1h, got "2h"`},
		{5, 16, "upstream_oauth.max_pending", "must be between 1 and 1000000, got 1000001"},
		{6, 14, "upstream_oauth.state_ttl", `must be at most 24h, got "25h"`},
		{7, 12, "upstream_oauth.timeout", `must be at most 5m, got "6m"`},
		{8, 3, "upstream_oauth.redirect", "unknown key"},
	})
}

func TestServerAuthTokenExchange(t *testing.T) {
	cfg, err := config.ParseWith("toolmux.yaml", []byte(`servers:
  jira:
    url: https://jira.example.com/mcp
    auth:
      kind: token_exchange
      issuer: https://idp.example.com
      client_id: toolmux
      client_secret_env: TOOLMUX_EXCHANGE_SECRET
      client_auth: client_secret_post
      audience: jira
      resource: https://jira.example.com/mcp
      scopes: [jira.read, jira.write]
      requested_token_type: urn:ietf:params:oauth:token-type:jwt
      max_tokens: 50
      refresh_before: 1m
      timeout: 5s
      max_connections: 8
  wiki:
    url: https://wiki.example.com/mcp
    auth: {kind: token_exchange, token_url: "http://127.0.0.1:9/token", client_id: t, client_secret_env: S, audience: wiki}
`), config.Options{Dir: "/work"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*config.ServerAuth{
		"jira": {Kind: config.AuthTokenExchange, MaxConnections: 8, Line: 4, Exchange: &config.TokenExchange{
			Issuer: "https://idp.example.com", ClientID: "toolmux", ClientSecretEnv: "TOOLMUX_EXCHANGE_SECRET",
			ClientAuth: "client_secret_post", Audience: "jira", Resource: "https://jira.example.com/mcp",
			Scopes: []string{"jira.read", "jira.write"}, RequestedTokenType: "urn:ietf:params:oauth:token-type:jwt",
			MaxTokens: 50, RefreshBefore: time.Minute, Timeout: 5 * time.Second}},
		"wiki": {Kind: config.AuthTokenExchange, Line: 20, Exchange: &config.TokenExchange{
			TokenURL: "http://127.0.0.1:9/token", ClientID: "t", ClientSecretEnv: "S", Audience: "wiki"}},
	}
	for _, s := range cfg.Servers {
		if !reflect.DeepEqual(s.Auth, want[s.Name]) {
			t.Errorf("%s: auth %+v, want %+v", s.Name, s.Auth, want[s.Name])
		}
	}
}

func TestServerAuthTokenExchangeErrors(t *testing.T) {
	checkErrors(t, "toolmux.yaml", `servers:
  a:
    command: a
    auth: {kind: token_exchange, issuer: "https://idp.example.com", client_id: t, client_secret_env: S, audience: a}
  b:
    url: https://b.example.com/mcp
    auth: {kind: token_exchange}
  c:
    url: https://c.example.com/mcp
    auth:
      kind: token_exchange
      issuer: http://idp.example.com
      token_url: https://idp.example.com/token
      client_id: t
      client_secret_env: "${SECRET}"
      client_auth: private_key_jwt
      resource: "not a url"
      requested_token_type: bearer
      max_tokens: 0
      timeout: 1h
      secrets: {X: {header: X}}
`, []wantErr{
		{4, 5, "servers.a.auth", "kind token_exchange applies only to sse and http servers, but this server has command (a stdio server takes user_secrets)"},
		{7, 5, "servers.b.auth", "kind token_exchange needs issuer (the identity provider, its token endpoint found by discovery) or token_url"},
		{7, 5, "servers.b.auth", "kind token_exchange needs client_id: toolmux's client at the identity provider, allowed to exchange tokens"},
		{7, 5, "servers.b.auth", "kind token_exchange needs client_secret_env: the environment variable holding toolmux's client secret at the identity provider"},
		{7, 5, "servers.b.auth", "kind token_exchange needs audience (the server's name at the identity provider) or resource (its URL), or both"},
		{12, 15, "servers.c.auth.issuer", `"http://idp.example.com" must use https (plain http only on loopback: localhost, 127.0.0.1, [::1])`},
		{13, 18, "servers.c.auth.token_url", "give issuer or token_url, not both"},
		{15, 26, "servers.c.auth.client_secret_env", "must be the name of an environment variable (letters, digits and _), such as IDP_CLIENT_SECRET: not the secret itself, nor ${...}"},
		{16, 20, "servers.c.auth.client_auth", `must be client_secret_basic or client_secret_post, got "private_key_jwt"`},
		{17, 17, "servers.c.auth.resource", `"not a url" is not an http(s) URL such as https://idp.example.com`},
		{18, 29, "servers.c.auth.requested_token_type", `"bearer" is not a token type of RFC 8693 (such as urn:ietf:params:oauth:token-type:access_token)`},
		{19, 19, "servers.c.auth.max_tokens", "must be between 1 and 1000000, got 0"},
		{20, 16, "servers.c.auth.timeout", "must be at most 5m, got \"1h\""},
		{21, 7, "servers.c.auth.secrets", "unknown key (expected one of: kind, max_connections, idle_timeout, issuer, token_url, client_id, client_secret_env, client_auth, audience, resource, scopes, requested_token_type, subject_token_type, max_tokens, refresh_before, timeout)"},
	})
}
