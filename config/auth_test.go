package config_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/toolmux/toolmux/config"
)

func TestAuth(t *testing.T) {
	cfg, err := config.ParseWith("toolmux.yaml", []byte(`auth:
  resource: https://gw.example.com
  issuers:
    - issuer: https://idp.example.com
      audiences: [toolmux]
    - issuer: http://127.0.0.1:4444
      jwks_url: http://127.0.0.1:4444/.well-known/jwks.json
      introspection:
        url: http://127.0.0.1:4445/admin/oauth2/introspect
        client_id: gateway
        client_secret_env: HYDRA_SECRET
  claims: {subject: oid, name: ext.name, groups: realm_access.roles}
  clock_skew: 30s
  scopes: [mcp, "tools:call"]
  admin_group: ops
  approvers_group: leads
  keys: keys.json
  token_cache: {max_age: 2m, max_entries: 500}
  timeout: 3s
  jwks_refetch_interval: 1m
  page:
    issuer: https://idp.example.com
    client_id: toolmux-page
    client_secret_env: PAGE_SECRET
    scopes: [profile, groups]
    claims: {groups: groups}
    session_max_age: 12h
    max_sessions: 500
    login_timeout: 5m
`), config.Options{Dir: "/work"})
	if err != nil {
		t.Fatal(err)
	}
	want := config.Auth{
		Resource: "https://gw.example.com",
		Issuers: []config.Issuer{
			{Issuer: "https://idp.example.com", Audiences: []string{"toolmux"}},
			{Issuer: "http://127.0.0.1:4444", JWKSURL: "http://127.0.0.1:4444/.well-known/jwks.json",
				Introspection: &config.Introspection{URL: "http://127.0.0.1:4445/admin/oauth2/introspect", ClientID: "gateway", ClientSecretEnv: "HYDRA_SECRET"}},
		},
		Claims:    config.Claims{Subject: "oid", Name: "ext.name", Groups: "realm_access.roles"},
		ClockSkew: 30 * time.Second, Scopes: []string{"mcp", "tools:call"}, AdminGroup: "ops", ApproversGroup: "leads",
		Keys: "/work/keys.json", TokenCache: config.TokenCache{MaxAge: 2 * time.Minute, MaxEntries: 500},
		Timeout: 3 * time.Second, JWKSRefetchInterval: time.Minute,
		Page: &config.Page{Issuer: "https://idp.example.com", ClientID: "toolmux-page", ClientSecretEnv: "PAGE_SECRET", Scopes: []string{"profile", "groups"},
			Claims: config.Claims{Groups: "groups"}, SessionMaxAge: 12 * time.Hour, MaxSessions: 500, LoginTimeout: 5 * time.Minute},
	}
	if !reflect.DeepEqual(cfg.Auth, want) {
		t.Errorf("auth:\n got %+v\nwant %+v", cfg.Auth, want)
	}
	// Left out: the zero value, which means no authentication but
	// --token's.
	cfg, err = config.ParseWith("toolmux.yaml", []byte("workspace: .\n"), config.Options{Dir: "/work"})
	if err != nil || !reflect.DeepEqual(cfg.Auth, config.Auth{}) {
		t.Errorf("without the section: %v %+v", err, cfg.Auth)
	}
}

func TestAuthErrors(t *testing.T) {
	checkErrors(t, "toolmux.yaml", `auth:
  resource: gw.example.com
  issuers:
    - issuer: http://idp.example.com
    - jwks_url: https://idp.example.com/keys
    - issuer: https://a.example
      introspection: {client_id: gw}
    - issuer: https://a.example
    - issuer: https://b.example
      introspection: {client_secret_env: "${SECRET}"}
      audience: [x]
  clock_skew: 2h
  scopes: ["two words"]
  token_cache: {max_entries: 1000001}
  timeout: 10m
  admin_group: ""
  page:
    issuer: http://idp.example.com
    client_secret_env: "${PAGE}"
    session_max_age: 721h
    max_sessions: 1000001
    login_timeout: 2h
    scope: [x]
authh: {}
`, []wantErr{
		{2, 13, "auth.resource", `"gw.example.com" is not an http(s) URL`},
		{4, 15, "auth.issuers[0].issuer", "must use https (plain http only on loopback"},
		{5, 7, "auth.issuers[1]", "an issuer needs issuer:"},
		{7, 34, "auth.issuers[2].introspection.client_id", "a client_id needs client_secret_env"},
		{8, 15, "auth.issuers[3].issuer", `issuer "https://a.example" is already configured at line 6`},
		{10, 42, "auth.issuers[4].introspection.client_secret_env", "must be the name of an environment variable"},
		{10, 42, "auth.issuers[4].introspection.client_secret_env", "client_secret_env needs a client_id"},
		{11, 7, "auth.issuers[4].audience", "did you mean audiences?"},
		{12, 15, "auth.clock_skew", "must be at most 1h"},
		{13, 12, "auth.scopes[0]", `"two words" is not a scope`},
		{14, 30, "auth.token_cache.max_entries", "must be between 1 and 1000000"},
		{15, 12, "auth.timeout", "must be at most 5m"},
		{16, 16, "auth.admin_group", "must not be empty"},
		{18, 5, "auth.page", "needs client_id: the gateway's client id"},
		{18, 13, "auth.page.issuer", "must use https (plain http only on loopback"},
		{19, 24, "auth.page.client_secret_env", "must be the name of an environment variable"},
		{20, 22, "auth.page.session_max_age", "must be at most 720h (30 days)"},
		{21, 19, "auth.page.max_sessions", "must be between 1 and 1000000"},
		{22, 20, "auth.page.login_timeout", "must be at most 1h"},
		{23, 5, "auth.page.scope", "did you mean scopes?"},
		{24, 1, "authh", "did you mean auth?"},
	})
}
