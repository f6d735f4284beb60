package builtin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/builtin"
	"github.com/toolmux/toolmux/tool"
	"github.com/toolmux/toolmux/web"
)

func names(t *testing.T, s *builtin.Source) []string {
	t.Helper()
	ts, err := s.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, x := range ts {
		if x.Server != builtin.ServerName {
			t.Errorf("%s has server %q", x.Name, x.Server)
		}
		out = append(out, x.Name)
	}
	return out
}

// web_fetch is always offered and fetches through package web; web_search
// only with a search backend, here a local server speaking SearXNG's JSON.
func TestWebTools(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/page":
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte(`<html><head><title>Notes</title></head><body><article><h1>Notes</h1><p>The answer is forty-two, as the long article explains in some detail here.</p></article></body></html>`))
		case "/search":
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"results": []any{
				map[string]any{"title": "Forty-two", "url": "https://example.org/42", "content": "the answer"}}})
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()

	plain, err := builtin.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if n := names(t, plain); !slices.Contains(n, builtin.WebFetch) || slices.Contains(n, builtin.WebSearch) {
		t.Fatalf("without a search backend: %v", n)
	}
	res, err := plain.Call(context.Background(), builtin.WebFetch, map[string]any{"url": srv.URL + "/page"})
	if err != nil || !strings.Contains(res.Text(), "forty-two") {
		t.Fatalf("web_fetch: %v %v", res, err)
	}
	_, err = plain.Call(context.Background(), builtin.WebFetch, map[string]any{"url": srv.URL + "/missing"})
	if tool.KindOf(err) != tool.KindToolError {
		t.Fatalf("web_fetch of a 404: %v", err)
	}

	searcher, err := web.NewSearcher("searxng", srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := builtin.New(t.TempDir(), builtin.WithSearcher(searcher))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n := names(t, s); !slices.Contains(n, builtin.WebSearch) {
		t.Fatalf("with a search backend: %v", n)
	}
	res, err = s.Call(context.Background(), builtin.WebSearch, map[string]any{"query": "the answer", "num": 3})
	if err != nil || !strings.Contains(res.Text(), "Forty-two") {
		t.Fatalf("web_search: %v %v", res, err)
	}
	if c, ok := searcher.(interface{ Close() error }); ok {
		_ = c.Close()
	}
}
