package config_test

import (
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/toolmux/toolmux/config"
)

func TestOpenAPI(t *testing.T) {
	cfg, dir := mustLoad(t, "toolmux.yaml", `
servers:
  fs: {command: fs-server}
openapi:
  pets:
    spec: specs/petstore.yaml
    base_url: http://localhost:8080/v1
    headers: {X-Api-Key: "${EVERYTHING_KEY}"}
    bearer_token: ${EVERYTHING_KEY}
    include: [listPets, "GET /pets/*"]
    exclude: ["delete*"]
    timeout: 20s
    spec_timeout: 5s
    max_spec_bytes: 2MiB
    max_response_bytes: 65536
    max_schema_nodes: 500
  remote:
    spec: https://api.example.com/openapi.json
    auth:
      kind: user_secrets
      secrets: {TOKEN: {header: Authorization, format: "Bearer {value}"}}
`)
	want := []config.OpenAPI{
		{
			Name: "pets", Spec: filepath.Join(dir, "specs", "petstore.yaml"), BaseURL: "http://localhost:8080/v1",
			Headers: map[string]string{"X-Api-Key": "secret"}, BearerToken: "secret",
			Include: []string{"listPets", "GET /pets/*"}, Exclude: []string{"delete*"},
			Timeout: 20 * time.Second, SpecTimeout: 5 * time.Second, MaxSpecBytes: 2 << 20, MaxResponseBytes: 65536,
			MaxSchemaNodes: 500, Line: 5,
		},
		{Name: "remote", Spec: "https://api.example.com/openapi.json", Line: 17, Auth: &config.ServerAuth{
			Kind: config.AuthUserSecrets, Line: 19,
			Secrets: []config.UserSecret{{Name: "TOKEN", Header: "Authorization", Format: "Bearer {value}"}},
		}},
	}
	if !reflect.DeepEqual(cfg.OpenAPI, want) {
		t.Errorf("openapi:\n got %+v\nwant %+v", cfg.OpenAPI, want)
	}
	if len(cfg.Servers) != 1 {
		t.Errorf("servers %+v", cfg.Servers)
	}
}

// An API is a server for the sections that name servers: pinning.servers
// accepts its name.
func TestOpenAPIIsAServer(t *testing.T) {
	cfg, _ := mustLoad(t, "toolmux.yaml", `
openapi:
  pets: {spec: a.yaml}
pinning:
  servers: {pets: warn}
`)
	if cfg.Pinning.Servers["pets"] != config.PinWarn {
		t.Errorf("pinning %+v", cfg.Pinning)
	}
}

func TestOpenAPIErrors(t *testing.T) {
	checkErrors(t, "toolmux.yaml", `servers:
  fs: {command: fs-server}
openapi:
  fs: {spec: a.yaml}
  b: {base_url: "http://h"}
  c: {spec: a.yaml, base_url: "ftp://h", include: ["["], auth: {kind: user_secrets}}
  d: {spec: a.yaml, bearer_token: "${NOPE}", max_response_bytes: 0, timeout: -1s}
  e:
  f: {spec: a.yaml, max_schema_nodes: 0}
  g: {spec: a.yaml, auth: {kind: oauth}}
  h: {spec: a.yaml, auth: {kind: user_secrets, secrets: {T: {env: X}}}}
  i: {spec: a.yaml, bad: 1}
`, []wantErr{
		{4, 3, "openapi.fs", `a server named "fs" is already defined (line 2): an API's name is a server name and must differ`},
		{5, 3, "openapi.b", "needs spec: the OpenAPI 3 document, a file or an http(s) URL"},
		{6, 31, "openapi.c.base_url", `expected an http(s) URL such as https://api.example.com/v1, got "ftp://h"`},
		{6, 52, "openapi.c.include[0]", `"[" is not a pattern`},
		{6, 58, "openapi.c.auth", "kind user_secrets needs secrets"},
		{7, 35, "openapi.d.bearer_token", "environment variable NOPE is not set"},
		{7, 66, "openapi.d.max_response_bytes", "must be between 1 byte and 1GiB, got 0"},
		{7, 78, "openapi.d.timeout", `must be positive, got "-1s"`},
		{8, 5, "openapi.e", "expected a mapping with spec, got null"},
		{9, 39, "openapi.f.max_schema_nodes", "must be between 1 and 1000000"},
		{10, 34, "openapi.g.auth.kind", "kind oauth does not apply to an API (only user_secrets does)"},
		{11, 62, "openapi.h.auth.secrets.T.env", "applies only to stdio servers, but this server has base_url (use header)"},
		{12, 21, "openapi.i.bad", "unknown key (expected one of: spec, base_url, headers, bearer_token, include, exclude, timeout, spec_timeout, max_spec_bytes, max_response_bytes, max_schema_nodes, auth)"},
	})
}
