package openapisource_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolmux/toolmux/internal/petstore"
	"github.com/toolmux/toolmux/openapisource"
	"github.com/toolmux/toolmux/tool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// open makes a source of the pet store, closed with the test.
func open(t *testing.T, cfg openapisource.Config) *openapisource.Source {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "pets"
	}
	s, err := openapisource.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func toolsByName(t *testing.T, s *openapisource.Source) map[string]tool.Tool {
	t.Helper()
	tools, err := s.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]tool.Tool{}
	for _, tl := range tools {
		out[tl.Name] = tl
	}
	return out
}

func TestToolsFromSpec(t *testing.T) {
	ps := petstore.New(t, 10)
	s := open(t, openapisource.Config{Spec: ps.SpecFile, BaseURL: ps.BaseURL})
	tools := toolsByName(t, s)
	var names []string
	for n := range tools {
		names = append(names, n)
	}
	slices.Sort(names)
	// put has no operationId: its name is its method and path.
	want := []string{"big", "crash", "createPet", "deletePet", "getPet", "listPets", "put_pets_petId"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}

	list := tools["listPets"]
	if list.Exposed != "pets__listPets" || !strings.HasPrefix(list.Description, "List the pets") {
		t.Errorf("listPets: exposed %q, description %q", list.Exposed, list.Description)
	}
	props := list.InputSchema["properties"].(map[string]any)
	if _, ok := props["session"]; ok {
		t.Error("the cookie parameter is in the schema")
	}
	limit := props["limit"].(map[string]any)
	if limit["type"] != "integer" || limit["maximum"] != 100.0 || !strings.Contains(limit["description"].(string), "query parameter limit") {
		t.Errorf("limit schema %v", limit)
	}
	if tags := props["tags"].(map[string]any); tags["type"] != "array" {
		t.Errorf("tags schema %v", tags)
	}
	if _, ok := props["X-Request-Id"]; !ok {
		t.Errorf("no header parameter in %v", props)
	}
	if list.InputSchema["required"] != nil || list.InputSchema["additionalProperties"] != false {
		t.Errorf("listPets schema %v", list.InputSchema)
	}

	get := tools["getPet"]
	if !reflect.DeepEqual(get.InputSchema["required"], []string{"petId"}) {
		t.Errorf("getPet required %v", get.InputSchema["required"])
	}
	create := tools["createPet"]
	body := create.InputSchema["properties"].(map[string]any)["body"].(map[string]any)
	b, _ := json.Marshal(body)
	if strings.Contains(string(b), "$ref") {
		t.Errorf("the body schema keeps a reference: %s", b)
	}
	tag := body["properties"].(map[string]any)["tag"].(map[string]any)
	if !reflect.DeepEqual(tag["type"], []any{"string", "null"}) {
		t.Errorf("nullable tag: type %v", tag["type"])
	}
	if !reflect.DeepEqual(create.InputSchema["required"], []string{"body"}) {
		t.Errorf("createPet required %v", create.InputSchema["required"])
	}

	for name, w := range map[string]struct{ ro, idem, destr bool }{
		"getPet": {true, true, false}, "listPets": {true, true, false},
		"createPet": {false, false, true}, "put_pets_petId": {false, true, true}, "deletePet": {false, true, true},
	} {
		tl := tools[name]
		if tl.IsReadOnly() != w.ro || tl.IsIdempotent() != w.idem || tl.IsDestructive() != w.destr {
			t.Errorf("%s: read-only %v idempotent %v destructive %v, want %+v", name, tl.IsReadOnly(), tl.IsIdempotent(), tl.IsDestructive(), w)
		}
	}
}

func TestIncludeExclude(t *testing.T) {
	ps := petstore.New(t, 10)
	s := open(t, openapisource.Config{Spec: ps.SpecFile, BaseURL: ps.BaseURL,
		Include: []string{"GET /pets/*", "createPet"}, Exclude: []string{"listPets"}})
	var names []string
	for n := range toolsByName(t, s) {
		names = append(names, n)
	}
	slices.Sort(names)
	if want := []string{"createPet", "getPet"}; !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
}

func call(t *testing.T, s *openapisource.Source, name string, args map[string]any) (*tool.Result, error) {
	t.Helper()
	return s.Call(context.Background(), name, args)
}

func TestCalls(t *testing.T) {
	ps := petstore.New(t, 10)
	s := open(t, openapisource.Config{Spec: ps.SpecFile, BaseURL: ps.BaseURL})

	res, err := call(t, s, "getPet", map[string]any{"petId": "p1"})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := res.Structured.(map[string]any); st["name"] != "Rex" || !strings.Contains(res.Text(), `"Rex"`) {
		t.Errorf("getPet p1: %+v", res)
	}
	// A value with a slash and a space stays one path segment.
	res, err = call(t, s, "getPet", map[string]any{"petId": "x/y z"})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := res.Structured.(map[string]any); st["name"] != "Odd" {
		t.Errorf("getPet x/y z: %v", res.Text())
	}
	res, err = call(t, s, "listPets", map[string]any{"limit": 5.0, "tags": []any{"cat", "dog"}, "X-Request-Id": "r-42"})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := res.Structured.(map[string]any)
	if pets, _ := st["pets"].([]any); len(pets) != 2 || st["request_id"] != "r-42" {
		t.Errorf("listPets: %v", res.Text())
	}
	res, err = call(t, s, "createPet", map[string]any{"body": map[string]any{"name": "Nemo", "tag": "fish"}})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := res.Structured.(map[string]any); st["id"] != "p3" || st["name"] != "Nemo" {
		t.Errorf("createPet: %v", res.Text())
	}
	res, err = call(t, s, "deletePet", map[string]any{"petId": "p3"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Structured != nil || !strings.Contains(res.Text(), "204") {
		t.Errorf("deletePet: %+v", res)
	}
}

func TestNonSuccessStatus(t *testing.T) {
	ps := petstore.New(t, 10)
	s := open(t, openapisource.Config{Spec: ps.SpecFile, BaseURL: ps.BaseURL})
	for _, c := range []struct {
		tool   string
		args   map[string]any
		code   int
		detail string
	}{
		{"getPet", map[string]any{"petId": "p9"}, 404, "no pet p9"},
		{"crash", nil, 500, "database is on fire"},
		// The source sends what it is given (the pipeline validates
		// arguments); the API's own check answers, which shows the pet
		// store checks every request against the spec.
		{"listPets", map[string]any{"limit": "many"}, 400, "does not fit the spec"},
	} {
		_, err := call(t, s, c.tool, c.args)
		var se *openapisource.StatusError
		if tool.KindOf(err) != tool.KindToolError || !errors.As(err, &se) || se.Code != c.code {
			t.Fatalf("%s: %v, want a tool_error of status %d", c.tool, err, c.code)
		}
		if te := tool.AsError(err); !strings.Contains(te.Detail, c.detail) || !strings.Contains(te.Message, "answered") {
			t.Errorf("%s: message %q, detail %q", c.tool, te.Message, te.Detail)
		}
	}
}

func TestResponseBound(t *testing.T) {
	const bound = 1000
	for _, c := range []struct {
		size int
		cut  bool
	}{{bound, false}, {bound + 1, true}} {
		ps := petstore.New(t, c.size)
		s := open(t, openapisource.Config{Spec: ps.SpecFile, BaseURL: ps.BaseURL, MaxResponseBytes: bound})
		res, err := call(t, s, "big", nil)
		if err != nil {
			t.Fatal(err)
		}
		cut := strings.Contains(res.Text(), "response cut at 1000 bytes")
		if cut != c.cut || (res.Structured != nil) == c.cut {
			t.Errorf("a %d-byte response with a bound of %d: cut %v, structured %v", c.size, bound, cut, res.Structured != nil)
		}
	}
}

func TestArgumentErrors(t *testing.T) {
	ps := petstore.New(t, 10)
	s := open(t, openapisource.Config{Spec: ps.SpecFile, BaseURL: ps.BaseURL})
	for _, c := range []struct {
		tool string
		args map[string]any
		arg  string
	}{
		{"getPet", map[string]any{"petId": ".."}, "petId"},
		{"getPet", map[string]any{}, "petId"},
		{"getPet", map[string]any{"petId": "p1", "extra": 1}, "extra"},
		{"listPets", map[string]any{"X-Request-Id": "a\r\nX-Evil: 1"}, "X-Request-Id"},
		{"listPets", map[string]any{"limit": map[string]any{"a": []any{1}}}, "limit"},
		{"createPet", map[string]any{}, "body"},
	} {
		_, err := call(t, s, c.tool, c.args)
		var ae *openapisource.ArgumentError
		if tool.KindOf(err) != tool.KindInvalidParams || !errors.As(err, &ae) || ae.Arg != c.arg {
			t.Errorf("%s %v: %v, want invalid_tool_params naming %q", c.tool, c.args, err, c.arg)
		}
	}
	// None of them reached the API (only the spec-less calls above: the
	// pet store saw no request).
	if n := len(ps.Headers()); n != 0 {
		t.Errorf("the API received %d requests", n)
	}
}

func TestHeadersAndSpecURL(t *testing.T) {
	ps := petstore.New(t, 10)
	// No base_url: the spec's server, "/v1", is relative to the spec's URL.
	s := open(t, openapisource.Config{Spec: ps.SpecURL, Headers: map[string]string{"X-Api-Key": "k1"}, BearerToken: "tok"})
	if _, err := call(t, s, "getPet", map[string]any{"petId": "p2"}); err != nil {
		t.Fatal(err)
	}
	hs := ps.Headers()
	if len(hs) != 2 {
		t.Fatalf("%d requests, want the spec's and the call's", len(hs))
	}
	for i, h := range hs {
		if h.Get("X-Api-Key") != "k1" || h.Get("Authorization") != "Bearer tok" {
			t.Errorf("request %d: headers %v", i, h)
		}
	}
}

func TestSpecErrors(t *testing.T) {
	dir := t.TempDir()
	invalid := filepath.Join(dir, "invalid.yaml")
	// {petId} is in the path but declared nowhere.
	bad := strings.Replace(string(petstore.Spec), "  /pets/{petId}:\n    parameters:\n      - name: petId", "  /pets/{petId}:\n    parameters:\n      - name: id", 1)
	if bad == string(petstore.Spec) {
		t.Fatal("the spec did not change")
	}
	os.WriteFile(invalid, []byte(bad), 0o600)
	swagger := filepath.Join(dir, "swagger.yaml")
	os.WriteFile(swagger, []byte("swagger: \"2.0\"\ninfo: {title: t, version: \"1\"}\npaths: {}\n"), 0o600)
	notYAML := filepath.Join(dir, "not.yaml")
	os.WriteFile(notYAML, []byte("openapi: [3"), 0o600)
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL + "/openapi.yaml"
	down.Close()

	for _, c := range []struct {
		spec, step, where string
		max               int64
	}{
		{invalid, "validate", "/pets/{petId}", 0},
		{notYAML, "parse", "", 0},
		{swagger, "parse", "only OpenAPI 3 is read", 0},
		{filepath.Join(dir, "missing.yaml"), "read", "missing.yaml", 0},
		{downURL, "read", "", 0},
		{invalid, "read", "max_spec_bytes", int64(len(bad) - 1)},
	} {
		s := open(t, openapisource.Config{Spec: c.spec, BaseURL: "http://127.0.0.1:1", MaxSpecBytes: c.max})
		_, err := s.Tools(context.Background())
		var se *openapisource.SpecError
		if tool.KindOf(err) != tool.KindServerUnavailable || !errors.As(err, &se) || se.Step != c.step || se.Spec != c.spec {
			t.Errorf("%s: %v, want a %s SpecError", c.spec, err, c.step)
			continue
		}
		if !strings.Contains(err.Error(), c.where) {
			t.Errorf("%s: %q does not say %q", c.spec, err, c.where)
		}
		// A call lists first, and fails the same way.
		if _, err := call(t, s, "getPet", map[string]any{"petId": "p1"}); !errors.As(err, &se) {
			t.Errorf("%s: call: %v", c.spec, err)
		}
	}
	// At the bound exactly, the spec is read.
	s := open(t, openapisource.Config{Spec: petstoreFile(t), BaseURL: "http://127.0.0.1:1", MaxSpecBytes: int64(len(petstore.Spec))})
	if _, err := s.Tools(context.Background()); err != nil {
		t.Errorf("a spec of exactly max_spec_bytes: %v", err)
	}
}

func petstoreFile(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "petstore.yaml")
	os.WriteFile(p, petstore.Spec, 0o600)
	return p
}

func TestAPIDown(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	base := down.URL
	down.Close()
	s := open(t, openapisource.Config{Spec: petstoreFile(t), BaseURL: base})
	_, err := call(t, s, "getPet", map[string]any{"petId": "p1"})
	if tool.KindOf(err) != tool.KindServerUnavailable || !errors.Is(err, tool.ErrNotSent) {
		t.Fatalf("%v, want server_unavailable, never sent", err)
	}
	if strings.Contains(err.Error(), base) {
		t.Errorf("the message quotes the URL: %v", err)
	}
}

func TestNew(t *testing.T) {
	for _, c := range []openapisource.Config{
		{Spec: "x.yaml"},
		{Name: "a"},
		{Name: "a", Spec: "x.yaml", BaseURL: "ftp://h"},
		{Name: "a", Spec: "x.yaml", Include: []string{"["}},
		{Name: "a", Spec: "x.yaml", Headers: map[string]string{"X": "a\nb"}},
		{Name: "a", Spec: "x.yaml", MaxResponseBytes: -1},
	} {
		if _, err := openapisource.New(c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

// hanging answers nothing until the client gives up.
func hanging(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(srv.Close)
	return srv
}

// The call's timeout and the spec's are the source's own bounds: a call
// that gets no answer within timeout is a timeout; a spec URL that does
// not answer within spec_timeout leaves the API unavailable.
func TestTimeouts(t *testing.T) {
	h := hanging(t)
	s := open(t, openapisource.Config{Spec: petstoreFile(t), BaseURL: h.URL, Timeout: 100 * time.Millisecond})
	_, err := call(t, s, "getPet", map[string]any{"petId": "p1"})
	if tool.KindOf(err) != tool.KindTimeout || !strings.Contains(err.Error(), "did not answer within 100ms") {
		t.Errorf("call: %v, want a timeout", err)
	}
	s = open(t, openapisource.Config{Spec: h.URL + "/openapi.yaml", SpecTimeout: 100 * time.Millisecond})
	_, err = s.Tools(context.Background())
	var se *openapisource.SpecError
	if tool.KindOf(err) != tool.KindServerUnavailable || !errors.As(err, &se) || se.Step != "read" || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("spec: %v, want a read SpecError past its deadline", err)
	}
}

// A redirect to another host is not followed: the configured credential
// would go with it. It is the answer, a 3xx, and a tool_error.
func TestRedirectElsewhere(t *testing.T) {
	got := make(chan string, 1)
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
	}))
	t.Cleanup(elsewhere.Close)
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+r.URL.Path, http.StatusFound)
	}))
	t.Cleanup(redirecting.Close)
	s := open(t, openapisource.Config{Spec: petstoreFile(t), BaseURL: redirecting.URL, BearerToken: "tok"})
	_, err := call(t, s, "getPet", map[string]any{"petId": "p1"})
	var se *openapisource.StatusError
	if tool.KindOf(err) != tool.KindToolError || !errors.As(err, &se) || se.Code != http.StatusFound {
		t.Errorf("%v, want the 302 as a tool_error", err)
	}
	select {
	case a := <-got:
		t.Errorf("the other host was called (Authorization %q)", a)
	default:
	}
}

// treeSpec is an API whose one operation takes a body of levels schemas,
// each holding two references to the next: written out, 2^levels - 1
// schema objects.
func treeSpec(t *testing.T, levels int) string {
	var b strings.Builder
	b.WriteString("openapi: 3.0.3\ninfo: {title: tree, version: '1'}\npaths:\n  /x:\n    post:\n      operationId: grow\n")
	b.WriteString("      requestBody:\n        content:\n          application/json:\n            schema: {$ref: '#/components/schemas/S0'}\n")
	b.WriteString("      responses:\n        '200': {description: ok}\ncomponents:\n  schemas:\n")
	for i := range levels - 1 {
		fmt.Fprintf(&b, "    S%d:\n      type: object\n      properties:\n        a: {$ref: '#/components/schemas/S%d'}\n        b: {$ref: '#/components/schemas/S%d'}\n", i, i+1, i+1)
	}
	fmt.Fprintf(&b, "    S%d: {type: string}\n", levels-1)
	p := filepath.Join(t.TempDir(), "tree.yaml")
	os.WriteFile(p, []byte(b.String()), 0o600)
	return p
}

// typed counts the schema objects of s that were written out (those with
// a type; one past the bound is {}).
func typed(s any) int {
	m, ok := s.(map[string]any)
	if !ok {
		return 0
	}
	n := 0
	if _, ok := m["type"]; ok {
		n = 1
	}
	if props, ok := m["properties"].(map[string]any); ok {
		for _, p := range props {
			n += typed(p)
		}
	}
	return n
}

// max_schema_nodes bounds how many schema objects an input schema is
// written with: a body of 7 is whole with a bound of 7 and cut with one
// fewer; a spec whose schemas would
// write out 2^40 objects lists at once.
func TestSchemaBound(t *testing.T) {
	body := func(spec string, bound int) map[string]any {
		s := open(t, openapisource.Config{Spec: spec, BaseURL: "http://127.0.0.1:1", MaxSchemaNodes: bound})
		tools := toolsByName(t, s)
		return tools["grow"].InputSchema["properties"].(map[string]any)["body"].(map[string]any)
	}
	small := treeSpec(t, 3)
	if n := typed(body(small, 7)); n != 7 {
		t.Errorf("a bound of 7: %d schema objects written, want 7", n)
	}
	if n := typed(body(small, 6)); n != 6 {
		t.Errorf("a bound of 6: %d schema objects written, want 6", n)
	}
	if n := typed(body(treeSpec(t, 40), 0)); n != openapisource.DefaultMaxSchemaNodes {
		t.Errorf("the default bound: %d schema objects written", n)
	}
}
