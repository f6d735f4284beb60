package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/petstore"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/vault"
)

// The openapi section through the real binary: an API's operations listed
// by toolmux tools with their annotations, called by toolmux call through
// the governed path; an API whose spec does not validate, and one whose
// spec URL is down, are servers that failed, with the reason.
func TestOpenAPITools(t *testing.T) {
	t.Parallel()
	const bound = 200
	ps := petstore.New(t, bound+1)
	dir := workspace(t, "")
	bad := strings.Replace(string(petstore.Spec), "      - name: petId\n", "      - name: id\n", 1)
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL + "/openapi.yaml"
	down.Close()
	cfg := fmt.Sprintf(`builtin: {enabled: false}
openapi:
  pets:
    spec: %s
    base_url: %s
    headers: {X-Api-Key: "${PETS_KEY}"}
    max_response_bytes: %d
  broken:
    spec: bad.yaml
    base_url: http://127.0.0.1:1
  gone:
    spec: %s
    spec_timeout: 5s
`, ps.SpecURL, ps.BaseURL, bound, downURL)
	if err := os.WriteFile(filepath.Join(dir, "toolmux.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "XDG_DATA_HOME="+t.TempDir(), "PETS_KEY=key-123")
	run := func(args ...string) result { return execToolmux(t, dir, "", env, args...) }

	r := run("tools", "--json")
	if r.code != 1 || !strings.Contains(r.stderr, "2 servers failed to come up") {
		t.Fatalf("tools: exit %d, want 1 naming the failed APIs: %s", r.code, r.stderr)
	}
	var entries []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil {
		t.Fatal(err)
	}
	found := map[string]map[string]any{}
	for _, e := range entries {
		if n, ok := e["name"].(string); ok {
			found[n] = e
		} else if s, ok := e["server"].(string); ok {
			found["server:"+s] = e
		}
	}
	if g := found["pets__getPet"]; g == nil || !strings.Contains(fmt.Sprint(g["annotations"]), "readOnlyHint:true") {
		t.Errorf("pets__getPet: %v\n%s", g, r.stdout)
	}
	if d := found["pets__deletePet"]; d == nil || !strings.Contains(fmt.Sprint(d["annotations"]), "destructiveHint:true") {
		t.Errorf("pets__deletePet: %v", d)
	}
	if b := found["server:broken"]; b == nil || b["state"] != "failed" || !strings.Contains(fmt.Sprint(b["error"]), "does not validate") ||
		!strings.Contains(fmt.Sprint(b["error"]), "/pets/{petId}") {
		t.Errorf("broken: %v", b)
	}
	if g := found["server:gone"]; g == nil || g["state"] != "failed" || !strings.Contains(fmt.Sprint(g["error"]), "could not be read") {
		t.Errorf("gone: %v", g)
	}

	r = run("call", "pets", "getPet", `{"petId": "x/y z"}`)
	if r.code != 0 || !strings.Contains(r.stdout, `"Odd"`) {
		t.Errorf("getPet: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, c := range []struct {
		name, tool, args, stderr string
	}{
		{"missing argument", "getPet", `{}`, "invalid_tool_params"},
		{"over the schema's maximum", "listPets", `{"limit": 101}`, "invalid_tool_params"},
		{"not found", "getPet", `{"petId": "p9"}`, "404 Not Found"},
		{"server error", "crash", `{}`, "500 Internal Server Error"},
	} {
		r := run("call", "pets", c.tool, c.args)
		if r.code != 1 || !strings.Contains(r.stderr, c.stderr) {
			t.Errorf("%s: exit %d (want 1), stderr %q (want %q)", c.name, r.code, r.stderr, c.stderr)
		}
	}
	r = run("call", "pets", "big")
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("response cut at %d bytes", bound)) {
		t.Errorf("big: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for i, h := range ps.Headers() {
		if h.Get("X-Api-Key") != "key-123" {
			t.Errorf("request %d without the configured header: %v", i, h)
		}
	}
}

// The example of docs/openapi.md works as written, with the pet store's
// spec beside it and its base_url pointed at the pet store: the tools
// listed, a GET called without approval, a POST only with it.
func TestOpenAPIDocExample(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "openapi.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?ms)^```yaml toolmux.yaml\n(.*?)^```$").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/openapi.md has no toolmux.yaml")
	}
	ps := petstore.New(t, 10)
	cfg := strings.Replace(string(m[1]), "http://localhost:8080/v1", ps.BaseURL, 1)
	if cfg == string(m[1]) {
		t.Fatal("the example's base_url is not http://localhost:8080/v1")
	}
	dir := workspace(t, cfg)
	if err := os.WriteFile(filepath.Join(dir, "petstore.yaml"), petstore.Spec, 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "XDG_DATA_HOME="+t.TempDir(), "PETS_TOKEN=tok-9")
	r := execToolmux(t, dir, "", env, "tools", "--json")
	var entries []struct{ Name, Approval string }
	if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil || r.code != 0 {
		t.Fatalf("tools: exit %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	approval := map[string]string{}
	for _, e := range entries {
		approval[e.Name] = e.Approval
	}
	if _, ok := approval["pets__deletePet"]; ok {
		t.Error("the excluded deletePet is listed")
	}
	if approval["pets__createPet"] != "ask" || approval["pets__getPet"] == "ask" || approval["pets__getPet"] == "" {
		t.Errorf("approval of the example's tools: %v", approval)
	}
	r = execToolmux(t, dir, "", env, "call", "pets", "getPet", `{"petId": "p1"}`)
	if r.code != 0 || !strings.Contains(r.stdout, `"Rex"`) {
		t.Errorf("getPet: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = execToolmux(t, dir, "", env, "call", "pets", "createPet", `{"body": {"name": "Nemo"}}`)
	if r.code != 1 || !strings.Contains(r.stderr, "approval_unavailable") {
		t.Errorf("createPet without --yes: exit %d %s", r.code, r.stderr)
	}
	r = execToolmux(t, dir, "", env, "call", "pets", "createPet", `{"body": {"name": "Nemo"}}`, "--yes")
	if r.code != 0 || !strings.Contains(r.stdout, `"Nemo"`) {
		t.Errorf("createPet with --yes: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if h := ps.Headers(); len(h) == 0 || h[len(h)-1].Get("Authorization") != "Bearer tok-9" {
		t.Errorf("the bearer token was not sent")
	}
}

// An API's tools on the MCP routes of toolmux serve, in both protocol
// eras on /mcp and on serve --stdio: listed with the annotations of their
// method, called with structured results, a 404 an error result, and
// arguments that do not fit the schema refused.
func TestOpenAPIServe(t *testing.T) {
	t.Parallel()
	ps := petstore.New(t, 10)
	cfg := fmt.Sprintf("builtin: {enabled: false}\nopenapi:\n  pets:\n    spec: %s\n    base_url: %s\n", ps.SpecFile, ps.BaseURL)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startServeProc(t, workspace(t, cfg), "")
	cmd, _ := stdioServe(t, workspace(t, cfg))
	clients := []*eraClient{
		connectEra(t, ctx, "old", legacyProtocol, &mcp.StreamableClientTransport{Endpoint: p.url("/mcp")}),
		connectEra(t, ctx, "modern", "2026-07-28", &mcp.StreamableClientTransport{Endpoint: p.url("/mcp")}),
		connectEra(t, ctx, "stdio", "2026-07-28", &mcp.CommandTransport{Command: cmd}),
	}
	for _, ec := range clients {
		list, err := ec.cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatalf("%s: %v", ec.name, err)
		}
		annotations := map[string]*mcp.ToolAnnotations{}
		for _, tl := range list.Tools {
			annotations[tl.Name] = tl.Annotations
		}
		if a := annotations["pets__getPet"]; a == nil || !a.ReadOnlyHint || a.IdempotentHint != true {
			t.Errorf("%s: pets__getPet annotations %+v", ec.name, a)
		}
		if a := annotations["pets__deletePet"]; a == nil || a.DestructiveHint == nil || !*a.DestructiveHint {
			t.Errorf("%s: pets__deletePet annotations %+v", ec.name, a)
		}
		res, err := ec.cs.CallTool(ctx, &mcp.CallToolParams{Name: "pets__getPet", Arguments: map[string]any{"petId": "p2"}})
		if err != nil || res.IsError {
			t.Fatalf("%s: getPet: %v %+v", ec.name, err, res)
		}
		if st, _ := res.StructuredContent.(map[string]any); st["name"] != "Tom" {
			t.Errorf("%s: getPet structured content %v", ec.name, res.StructuredContent)
		}
		res, err = ec.cs.CallTool(ctx, &mcp.CallToolParams{Name: "pets__getPet", Arguments: map[string]any{"petId": "p9"}})
		if err != nil || !res.IsError || !strings.Contains(testservers.ResultText(res), "404") {
			t.Errorf("%s: getPet p9: %v %+v", ec.name, err, res)
		}
		res, err = ec.cs.CallTool(ctx, &mcp.CallToolParams{Name: "pets__listPets", Arguments: map[string]any{"limit": 0}})
		if (err == nil && !res.IsError) || (err == nil && !strings.Contains(testservers.ResultText(res), "limit")) || (err != nil && !strings.Contains(err.Error(), "limit")) {
			t.Errorf("%s: listPets limit 0: %v %+v", ec.name, err, res)
		}
	}
}

// An API's per-caller secret through the real binary: ann sets hers with
// toolmux secrets set, and her calls on /mcp reach the API with it; bob,
// who has none, is told auth_required and nothing is sent.
func TestOpenAPIServeUserSecrets(t *testing.T) {
	t.Parallel()
	ps := petstore.New(t, 10)
	home := t.TempDir()
	keys := map[string]string{"ann": addKey(t, home, "ann"), "bob": addKey(t, home, "bob")}
	env := []string{"TOOLMUX_VAULT_KEY=" + vault.GenerateKey()}
	dir := workspace(t, fmt.Sprintf(`builtin: {enabled: false}
openapi:
  pets:
    spec: %s
    base_url: %s
    auth:
      kind: user_secrets
      secrets: {TOKEN: {header: Authorization, format: "Bearer {value}"}}
`, ps.SpecFile, ps.BaseURL))
	p := startServeEnv(t, binary, dir, home, env)
	e := append(os.Environ(), "XDG_DATA_HOME="+home, "TOOLMUX_URL=http://"+p.addr, "TOOLMUX_TOKEN="+keys["ann"])
	if r := execToolmux(t, dir, "ann-api-token\n", append(e, env...), "secrets", "set", "pets", "TOKEN"); r.code != 0 {
		t.Fatalf("secrets set: %d %s", r.code, r.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	getPet := func(who string) (*mcp.CallToolResult, error) {
		client := mcp.NewClient(&mcp.Implementation{Name: "openapi-secrets"}, nil)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.url("/mcp"), HTTPClient: bearer(keys[who])}, nil)
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		defer cs.Close()
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: "pets__getPet", Arguments: map[string]any{"petId": "p1"}})
	}
	if res, err := getPet("ann"); err != nil || res.IsError {
		t.Fatalf("ann: %v %+v", err, res)
	}
	h := ps.Headers()
	if got := h[len(h)-1].Get("Authorization"); got != "Bearer ann-api-token" {
		t.Errorf("ann's call went with %q", got)
	}
	sent := len(ps.Headers())
	res, err := getPet("bob")
	if err == nil && (!res.IsError || !strings.Contains(testservers.ResultText(res), "secrets set pets TOKEN")) {
		t.Errorf("bob: %+v", res)
	} else if err != nil && !strings.Contains(err.Error(), "secrets set pets TOKEN") {
		t.Errorf("bob: %v", err)
	}
	if n := len(ps.Headers()); n != sent {
		t.Errorf("bob's call was sent")
	}
	if strings.Contains(p.stderr.String(), "ann-api-token") {
		t.Error("the secret is on stderr")
	}
}
