package web

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolmux/toolmux/tool"
)

func TestToolDefinitions(t *testing.T) {
	for _, def := range []tool.Tool{FetchTool(), SearchTool()} {
		t.Run(def.Name, func(t *testing.T) {
			if def.Server != "" {
				t.Errorf("Server = %q, want empty for the registering source to set", def.Server)
			}
			if def.Description == "" || def.Title == "" {
				t.Error("no description or title")
			}
			a := def.Annotations
			if a.ReadOnly == nil || !*a.ReadOnly || a.OpenWorld == nil || !*a.OpenWorld || a.Destructive == nil || *a.Destructive {
				t.Errorf("annotations = %+v", a)
			}
			if def.InputSchema["additionalProperties"] != false {
				t.Error("additionalProperties is not false")
			}
			// The schema compiles (draft 2020-12) and says what the
			// arguments code accepts.
			c := jsonschema.NewCompiler()
			raw, _ := json.Marshal(def.InputSchema)
			doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(raw)))
			if err != nil {
				t.Fatal(err)
			}
			if err := c.AddResource("schema.json", doc); err != nil {
				t.Fatal(err)
			}
			sch, err := c.Compile("schema.json")
			if err != nil {
				t.Fatal(err)
			}
			valid := map[string][]string{
				FetchToolName:  {`{"url": "https://example.com"}`},
				SearchToolName: {`{"query": "x"}`, `{"query": "x", "num": 5}`},
			}[def.Name]
			invalid := map[string][]string{
				FetchToolName:  {`{}`, `{"url": 1}`, `{"url": "x", "extra": 1}`},
				SearchToolName: {`{}`, `{"query": "x", "num": 0}`, `{"query": "x", "num": 1.5}`, `{"query": "x", "n": 1}`},
			}[def.Name]
			for _, v := range valid {
				inst, _ := jsonschema.UnmarshalJSON(strings.NewReader(v))
				if err := sch.Validate(inst); err != nil {
					t.Errorf("%s rejected: %v", v, err)
				}
			}
			for _, v := range invalid {
				inst, _ := jsonschema.UnmarshalJSON(strings.NewReader(v))
				if sch.Validate(inst) == nil {
					t.Errorf("%s accepted", v)
				}
			}
		})
	}
	// Fresh values each call.
	a, b := FetchTool(), FetchTool()
	a.InputSchema["x"] = 1
	if _, ok := b.InputSchema["x"]; ok {
		t.Error("FetchTool returns shared maps")
	}
}

func TestFetchCall(t *testing.T) {
	srv := serve(t, respond("text/html", []byte(`<html><head><title>Hi</title></head><body><p>Hello there.</p></body></html>`)))
	f := newTestFetcher(t)
	res, err := f.Call(context.Background(), map[string]any{"url": srv.URL + "/page"})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || len(res.Content) != 1 || res.Content[0].Type != tool.ContentText {
		t.Fatalf("result = %+v", res)
	}
	if want := "# Hi\n\nURL: " + srv.URL + "/page\n\nHello there.\n"; res.Text() != want {
		t.Errorf("text = %q, want %q", res.Text(), want)
	}
	want := map[string]any{"url": srv.URL + "/page", "final_url": srv.URL + "/page", "status": 200,
		"content_type": "text/html", "title": "Hi", "truncated": false}
	if !reflect.DeepEqual(res.Structured, want) {
		t.Errorf("structured = %#v", res.Structured)
	}

	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{nil, `missing required argument "url"`},
		{map[string]any{"url": nil}, `missing required argument "url"`},
		{map[string]any{"url": 42.0}, `argument "url" must be a string, not a number`},
		{map[string]any{"url": ""}, `argument "url" must not be empty`},
		{map[string]any{"url": "ftp://x/y"}, `scheme "ftp" is not supported`},
		{map[string]any{"url": srv.URL, "timeout": 5}, `web_fetch does not take the argument(s) "timeout"; its arguments are "url"`},
	} {
		_, err := f.Call(context.Background(), c.args)
		te := wantKind(t, err, tool.KindInvalidParams)
		if !strings.Contains(te.Message, c.want) {
			t.Errorf("%v: message %q lacks %q", c.args, te.Message, c.want)
		}
		if te.Tool != FetchToolName {
			t.Errorf("%v: Tool = %q", c.args, te.Tool)
		}
	}

	// Errors from the fetch carry the tool name too.
	_, err = f.Call(context.Background(), map[string]any{"url": srv.URL + "/%zz"})
	if te := tool.AsError(err); te == nil || te.Tool != FetchToolName {
		t.Errorf("error = %v", err)
	}
}

// staticSearcher returns fixed hits and records its arguments.
type staticSearcher struct {
	hits       []Hit
	err        error
	query      string
	num        int
	calledWith bool
}

func (s *staticSearcher) Search(_ context.Context, query string, num int) ([]Hit, error) {
	s.query, s.num, s.calledWith = query, num, true
	return s.hits, s.err
}

func TestSearchCall(t *testing.T) {
	s := &staticSearcher{hits: []Hit{
		{Title: "Mars", Snippet: "The fourth planet.", Source: "knowledge graph", Answer: true, URL: "https://w/Mars"},
		{Title: "Moons [of] Mars", URL: "https://w/Moons", Snippet: "Phobos and Deimos.", Position: 1, Date: "2024-01-02", Source: "wikipedia"},
		{Title: "Untitled", Position: 2},
	}}
	res, err := SearchCall(context.Background(), s, map[string]any{"query": "mars moons", "num": 3.0})
	if err != nil {
		t.Fatal(err)
	}
	if s.query != "mars moons" || s.num != 3 {
		t.Errorf("searched %q num %d", s.query, s.num)
	}
	want := `Search results for "mars moons" (2 results):

**Mars** (knowledge graph) <https://w/Mars>
The fourth planet.

1. [Moons \[of\] Mars](https://w/Moons)
   2024-01-02 · wikipedia
   Phobos and Deimos.

2. Untitled
`
	if res.Text() != want {
		t.Errorf("text =\n%s\nwant\n%s", res.Text(), want)
	}
	st := res.Structured.(map[string]any)
	results := st["results"].([]any)
	if st["query"] != "mars moons" || len(results) != 3 {
		t.Fatalf("structured = %#v", st)
	}
	first := results[1].(map[string]any)
	if first["title"] != "Moons [of] Mars" || first["url"] != "https://w/Moons" || first["position"] != 1.0 {
		t.Errorf("structured hit = %#v", first)
	}

	// num absent: 0, the backend's default.
	SearchCall(context.Background(), s, map[string]any{"query": "q"})
	if s.num != 0 {
		t.Errorf("num = %d", s.num)
	}
	SearchCall(context.Background(), s, map[string]any{"query": "q", "num": json.Number("7")})
	if s.num != 7 {
		t.Errorf("json.Number num = %d", s.num)
	}

	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{}, `missing required argument "query"`},
		{map[string]any{"query": "  "}, `argument "query" must not be empty`},
		{map[string]any{"query": []any{"a"}}, `argument "query" must be a string, not an array`},
		{map[string]any{"query": "q", "num": 0.0}, `argument "num" must be at least 1`},
		{map[string]any{"query": "q", "num": 2.5}, `argument "num" must be an integer`},
		{map[string]any{"query": "q", "num": "5"}, `argument "num" must be an integer, not a string`},
		{map[string]any{"query": "q", "limit": 5}, `does not take the argument(s) "limit"`},
	} {
		s.calledWith = false
		_, err := SearchCall(context.Background(), s, c.args)
		te := wantKind(t, err, tool.KindInvalidParams)
		if !strings.Contains(te.Message, c.want) || te.Tool != SearchToolName {
			t.Errorf("%v: error %v, want message with %q", c.args, te, c.want)
		}
		if s.calledWith {
			t.Errorf("%v: the searcher was called", c.args)
		}
	}

	_, err = SearchCall(context.Background(), nil, map[string]any{"query": "q"})
	te := wantKind(t, err, tool.KindToolError)
	if !strings.Contains(te.Message, "not configured") {
		t.Errorf("nil searcher: %q", te.Message)
	}

	s.err = &tool.Error{Kind: tool.KindToolError, Message: "rate limited"}
	_, err = SearchCall(context.Background(), s, map[string]any{"query": "q"})
	if te := wantKind(t, err, tool.KindToolError); te.Tool != SearchToolName {
		t.Errorf("Tool = %q", te.Tool)
	}
}
