package main_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/internal/petstore"
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
