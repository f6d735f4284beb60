package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmux/toolmux/tool"
)

// serperResponse is a response in Serper's format, trimmed from a real one.
const serperResponse = `{
  "searchParameters": {"q": "inner planets moons", "type": "search", "engine": "google"},
  "answerBox": {"title": "Moons of the inner planets", "answer": "Earth has 1 moon and Mars has 2", "link": "https://example.org/answer"},
  "knowledgeGraph": {"title": "Mars", "type": "Planet", "description": "Mars is the fourth planet from the Sun.", "descriptionLink": "https://en.wikipedia.org/wiki/Mars", "attributes": {"Moons": "Phobos, Deimos", "Radius": "3,389.5 km"}},
  "organic": [
    {"title": "Moons of Mars - Wikipedia", "link": "https://en.wikipedia.org/wiki/Moons_of_Mars", "snippet": "The two moons of Mars are Phobos and Deimos,\n   irregular in shape.", "position": 1, "date": "Jan 2, 2024"},
    {"title": "Why does Venus have no moon?", "link": "https://example.com/venus", "snippet": "Venus and Mercury have no moons.", "position": 2},
    {"title": "Planetary satellites", "link": "https://example.net/sats", "snippet": "A list of moons.", "position": 3}
  ],
  "peopleAlsoAsk": [{"question": "Does Mercury have a moon?"}],
  "credits": 1
}`

// searxngResponse is a response in SearXNG's JSON format.
const searxngResponse = `{
  "query": "inner planets moons",
  "number_of_results": 3,
  "results": [
    {"url": "https://en.wikipedia.org/wiki/Moons_of_Mars", "title": "Moons of Mars", "content": "The two moons of Mars are Phobos and Deimos.", "engine": "wikipedia", "engines": ["wikipedia", "duckduckgo"], "score": 3.5, "category": "general", "publishedDate": null},
    {"url": "https://example.com/venus", "title": "Why does Venus have no moon?", "content": "Venus and Mercury have no moons.", "engine": "duckduckgo", "publishedDate": "2023-05-01T00:00:00"},
    {"url": "https://example.net/sats", "title": "Planetary satellites", "content": "A list of moons.", "engine": "bing"}
  ],
  "answers": ["Earth: 1 moon, Mars: 2 moons", {"answer": "Phobos is the larger moon of Mars", "url": "https://example.org/phobos", "engine": "wikidata"}],
  "corrections": [],
  "infoboxes": [{"infobox": "Mars", "id": "https://en.wikipedia.org/wiki/Mars", "content": "Mars is the fourth planet from the Sun.", "engine": "wikipedia", "urls": [{"title": "Wikipedia", "url": "https://en.wikipedia.org/wiki/Mars"}]}],
  "suggestions": [],
  "unresponsive_engines": []
}`

// recorded is what a fake backend saw of one request.
type recorded struct {
	method, path, query string
	header              http.Header
	body                []byte
}

// fakeBackend answers every request with status and body, recording it.
type fakeBackend struct {
	mu       sync.Mutex
	requests []recorded
	status   int
	body     string
	header   map[string]string
}

func (fb *fakeBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	fb.mu.Lock()
	fb.requests = append(fb.requests, recorded{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), body})
	status, resp, header := fb.status, fb.body, fb.header
	fb.mu.Unlock()
	for k, v := range header {
		w.Header().Set(k, v)
	}
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	io.WriteString(w, resp)
}

func (fb *fakeBackend) last(t *testing.T) recorded {
	t.Helper()
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if len(fb.requests) == 0 {
		t.Fatal("the backend received no request")
	}
	return fb.requests[len(fb.requests)-1]
}

func (fb *fakeBackend) set(status int, body string, header map[string]string) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	fb.status, fb.body, fb.header = status, body, header
}

func newSerper(t *testing.T, base, key string, opts ...SearchOption) *Serper {
	t.Helper()
	s, err := NewSerper(base, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newSearXNG(t *testing.T, base, key string, opts ...SearchOption) *SearXNG {
	t.Helper()
	s, err := NewSearXNG(base, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestSerperSearch(t *testing.T) {
	fb := &fakeBackend{body: serperResponse}
	srv := serve(t, fb.ServeHTTP)
	s := newSerper(t, srv.URL+"/", "secret-key")

	hits, err := s.Search(context.Background(), "  inner planets moons ", 2)
	if err != nil {
		t.Fatal(err)
	}
	req := fb.last(t)
	if req.method != http.MethodPost || req.path != "/search" {
		t.Errorf("request = %s %s", req.method, req.path)
	}
	if req.header.Get("X-API-KEY") != "secret-key" || req.header.Get("Content-Type") != "application/json" {
		t.Errorf("headers = %v", req.header)
	}
	var sent map[string]any
	if err := json.Unmarshal(req.body, &sent); err != nil {
		t.Fatal(err)
	}
	if sent["q"] != "inner planets moons" || sent["num"] != float64(2) || len(sent) != 2 {
		t.Errorf("body = %s", req.body)
	}

	want := []Hit{
		{Title: "Moons of the inner planets", URL: "https://example.org/answer", Snippet: "Earth has 1 moon and Mars has 2", Source: "answer box", Answer: true},
		{Title: "Mars", URL: "https://en.wikipedia.org/wiki/Mars", Snippet: "Planet. Mars is the fourth planet from the Sun. Moons: Phobos, Deimos; Radius: 3,389.5 km", Source: "knowledge graph", Answer: true},
		{Title: "Moons of Mars - Wikipedia", URL: "https://en.wikipedia.org/wiki/Moons_of_Mars", Snippet: "The two moons of Mars are Phobos and Deimos, irregular in shape.", Position: 1, Date: "Jan 2, 2024"},
		{Title: "Why does Venus have no moon?", URL: "https://example.com/venus", Snippet: "Venus and Mercury have no moons.", Position: 2},
	}
	assertHits(t, hits, want)
}

func TestSearXNGSearch(t *testing.T) {
	fb := &fakeBackend{body: searxngResponse}
	srv := serve(t, fb.ServeHTTP)
	// An instance under a path, with a parameter of its own.
	s := newSearXNG(t, srv.URL+"/searx/?token=abc", "bearer-key")

	hits, err := s.Search(context.Background(), "inner planets moons", 0)
	if err != nil {
		t.Fatal(err)
	}
	req := fb.last(t)
	if req.method != http.MethodGet || req.path != "/searx/search" {
		t.Errorf("request = %s %s", req.method, req.path)
	}
	if req.query != "format=json&q=inner+planets+moons&token=abc" {
		t.Errorf("query = %q", req.query)
	}
	if req.header.Get("Authorization") != "Bearer bearer-key" {
		t.Errorf("Authorization = %q", req.header.Get("Authorization"))
	}
	want := []Hit{
		{Title: "Answer", Snippet: "Earth: 1 moon, Mars: 2 moons", Source: "answer", Answer: true},
		{Title: "Answer", URL: "https://example.org/phobos", Snippet: "Phobos is the larger moon of Mars", Source: "wikidata", Answer: true},
		{Title: "Mars", URL: "https://en.wikipedia.org/wiki/Mars", Snippet: "Mars is the fourth planet from the Sun.", Source: "wikipedia", Answer: true},
		{Title: "Moons of Mars", URL: "https://en.wikipedia.org/wiki/Moons_of_Mars", Snippet: "The two moons of Mars are Phobos and Deimos.", Position: 1, Source: "wikipedia"},
		{Title: "Why does Venus have no moon?", URL: "https://example.com/venus", Snippet: "Venus and Mercury have no moons.", Position: 2, Date: "2023-05-01T00:00:00", Source: "duckduckgo"},
		{Title: "Planetary satellites", URL: "https://example.net/sats", Snippet: "A list of moons.", Position: 3, Source: "bing"},
	}
	assertHits(t, hits, want)

	// num cuts the ranked results, not the answers.
	hits, err = s.Search(context.Background(), "inner planets moons", 1)
	if err != nil || len(hits) != 4 || hits[3].Position != 1 {
		t.Errorf("num=1: %d hits, err %v", len(hits), err)
	}

	// Without a key no Authorization header is sent.
	s2 := newSearXNG(t, srv.URL, "")
	if _, err := s2.Search(context.Background(), "x", 3); err != nil {
		t.Fatal(err)
	}
	if req := fb.last(t); req.header.Get("Authorization") != "" || req.path != "/search" {
		t.Errorf("keyless request: %s, Authorization %q", req.path, req.header.Get("Authorization"))
	}
}

func assertHits(t *testing.T, got, want []Hit) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d hits, want %d:\n%+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("hit %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

func TestSearchNumLimits(t *testing.T) {
	fb := &fakeBackend{body: `{"organic": []}`}
	srv := serve(t, fb.ServeHTTP)
	s := newSerper(t, srv.URL, "k", WithMaxResults(5))
	for num, want := range map[int]float64{0: 5, -3: 5, 3: 3, 50: 5} {
		if _, err := s.Search(context.Background(), "q", num); err != nil {
			t.Fatal(err)
		}
		var sent map[string]any
		json.Unmarshal(fb.last(t).body, &sent)
		if sent["num"] != want {
			t.Errorf("num %d: sent %v, want %v", num, sent["num"], want)
		}
	}
	s2 := newSerper(t, srv.URL, "k")
	s2.Search(context.Background(), "q", 0)
	var sent map[string]any
	json.Unmarshal(fb.last(t).body, &sent)
	if sent["num"] != float64(DefaultNumResults) {
		t.Errorf("default num: sent %v", sent["num"])
	}
	_, err := s2.Search(context.Background(), "   ", 3)
	wantKind(t, err, tool.KindInvalidParams)
}

func TestSearchEmpty(t *testing.T) {
	for name, body := range map[string]string{
		"serper":  `{"searchParameters": {"q": "zzqx"}, "organic": []}`,
		"searxng": `{"query": "zzqx", "results": [], "answers": [], "infoboxes": []}`,
	} {
		t.Run(name, func(t *testing.T) {
			fb := &fakeBackend{body: body}
			srv := serve(t, fb.ServeHTTP)
			var s Searcher
			if name == "serper" {
				s = newSerper(t, srv.URL, "k")
			} else {
				s = newSearXNG(t, srv.URL, "")
			}
			hits, err := s.Search(context.Background(), "zzqx", 5)
			if err != nil || hits == nil || len(hits) != 0 {
				t.Fatalf("hits = %#v, err = %v", hits, err)
			}
			res, err := SearchCall(context.Background(), s, map[string]any{"query": "zzqx"})
			if err != nil {
				t.Fatal(err)
			}
			if res.Text() != "No results for \"zzqx\".\n" {
				t.Errorf("text = %q", res.Text())
			}
			if r := res.Structured.(map[string]any)["results"].([]any); len(r) != 0 {
				t.Errorf("structured results = %v", r)
			}
		})
	}
}

func TestSearchErrors(t *testing.T) {
	type backendCase struct {
		name string
		make func(t *testing.T, url, key string) Searcher
	}
	backends := []backendCase{
		{"Serper", func(t *testing.T, url, key string) Searcher { return newSerper(t, url, key) }},
		{"SearXNG", func(t *testing.T, url, key string) Searcher { return newSearXNG(t, url, key) }},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			fb := &fakeBackend{}
			srv := serve(t, fb.ServeHTTP)
			s := b.make(t, srv.URL, "wrong-key")

			fb.set(http.StatusUnauthorized, `{"message": "Unauthorized.", "statusCode": 401}`, nil)
			_, err := s.Search(context.Background(), "q", 3)
			te := wantKind(t, err, tool.KindToolError)
			if !strings.HasPrefix(te.Message, b.name+" search refused the request (HTTP 401 Unauthorized): check the API key") {
				t.Errorf("401: %q", te.Message)
			}
			if !strings.Contains(te.Detail, "Unauthorized.") {
				t.Errorf("401 detail: %q", te.Detail)
			}

			fb.set(http.StatusForbidden, `Forbidden`, map[string]string{"Content-Type": "text/plain"})
			_, err = s.Search(context.Background(), "q", 3)
			te = wantKind(t, err, tool.KindToolError)
			if !strings.Contains(te.Message, "HTTP 403 Forbidden") || (b.name == "SearXNG") != strings.Contains(te.Message, "search.formats") {
				t.Errorf("403: %q", te.Message)
			}

			// Without a key the message says so.
			keyless := b.make(t, srv.URL, "")
			_, err = keyless.Search(context.Background(), "q", 3)
			te = wantKind(t, err, tool.KindToolError)
			if !strings.Contains(te.Message, "no API key is configured") {
				t.Errorf("keyless 403: %q", te.Message)
			}

			fb.set(http.StatusTooManyRequests, `{"message": "Too many requests"}`, map[string]string{"Retry-After": "30"})
			_, err = s.Search(context.Background(), "q", 3)
			te = wantKind(t, err, tool.KindToolError)
			if te.Message != b.name+" search is rate limited (HTTP 429); retry after 30 seconds" {
				t.Errorf("429: %q", te.Message)
			}

			fb.set(http.StatusOK, `<html><body><h1>Sign in</h1> to continue</body></html>`, map[string]string{"Content-Type": "text/html"})
			_, err = s.Search(context.Background(), "q", 3)
			te = wantKind(t, err, tool.KindToolError)
			if !strings.Contains(te.Message, "not the expected JSON") || !strings.Contains(te.Message, "<html><body><h1>Sign in</h1>") {
				t.Errorf("malformed: %q", te.Message)
			}

			fb.set(http.StatusOK, `{"organic": [`, nil)
			_, err = s.Search(context.Background(), "q", 3)
			wantKind(t, err, tool.KindToolError)

			fb.set(http.StatusBadGateway, `upstream down`, map[string]string{"Content-Type": "text/plain"})
			_, err = s.Search(context.Background(), "q", 3)
			te = wantKind(t, err, tool.KindToolError)
			if te.Message != b.name+" search failed: HTTP 502 Bad Gateway" || te.Detail != "response body: upstream down" {
				t.Errorf("502: %v", te)
			}
		})
	}
}

func TestSearchTimeoutAndNetwork(t *testing.T) {
	release := make(chan struct{})
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	s := newSearXNG(t, srv.URL, "", WithSearchTimeout(100*time.Millisecond))
	_, err := s.Search(context.Background(), "q", 3)
	wantKind(t, err, tool.KindTimeout)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = s.Search(ctx, "q", 3)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}

	down := newSerper(t, "http://127.0.0.1:1", "k")
	_, err = down.Search(context.Background(), "q", 3)
	te := wantKind(t, err, tool.KindToolError)
	if !strings.Contains(te.Message, "could not be reached") {
		t.Errorf("message = %q", te.Message)
	}
}

func TestNewBackendValidation(t *testing.T) {
	if _, err := NewSearXNG("", ""); err == nil {
		t.Error("SearXNG without a URL was accepted")
	}
	if _, err := NewSearXNG("searx.local", ""); err == nil {
		t.Error("SearXNG URL without a scheme was accepted")
	}
	s, err := NewSerper("", "k")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.b.endpoint().String(); got != "https://google.serper.dev/search" {
		t.Errorf("default endpoint = %s", got)
	}
	c := &http.Client{}
	s2, err := NewSerper("https://proxy.example/serper/", "k", WithHTTPClient(c))
	if err != nil {
		t.Fatal(err)
	}
	if s2.b.client != c || s2.b.endpoint().String() != "https://proxy.example/serper/search" {
		t.Errorf("client/endpoint not as configured: %s", s2.b.endpoint())
	}
	s2.Close()
}

func TestParseLenient(t *testing.T) {
	// Entries of the wrong shape are skipped, not fatal.
	hits, err := parseSerper([]byte(`{"organic": [{"title": 5}, {"title": "ok", "link": "https://x", "position": "7"}, "junk"], "answerBox": "junk"}`), 10)
	if err != nil || len(hits) != 1 || hits[0].Position != 7 {
		t.Errorf("serper: %+v %v", hits, err)
	}
	hits, err = parseSearXNG([]byte(`{"results": [{"title": "a", "url": "https://a", "publishedDate": 12}, {"url": []}], "answers": [1, ""], "infoboxes": "x"}`), 10)
	if err != nil || len(hits) != 1 || hits[0].Date != "" {
		t.Errorf("searxng: %+v %v", hits, err)
	}
	for _, body := range []string{``, `null`, `[]`, `"x"`, `{`} {
		if _, err := parseSearXNG([]byte(body), 10); err == nil {
			t.Errorf("%q was accepted", body)
		}
	}
	// A 200 answer with only a message is the service's error.
	_, err = parseSerper([]byte(`{"message": "Not enough credits", "statusCode": 400}`), 10)
	te := wantKind(t, err, tool.KindToolError)
	if !strings.Contains(te.Message, "Not enough credits") {
		t.Errorf("message = %q", te.Message)
	}
}

func TestNewSearcher(t *testing.T) {
	for provider, want := range map[string]string{"serper": "*web.Serper", "SearXNG": "*web.SearXNG"} {
		s, err := NewSearcher(provider, "http://127.0.0.1:1", "k")
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("%T", s); got != want {
			t.Errorf("%s: %s", provider, got)
		}
		s.(io.Closer).Close()
	}
	if s, err := NewSearcher("searxng", "", ""); err == nil || s != nil {
		t.Errorf("bad URL: %v, %v", s, err)
	}
	if _, err := NewSearcher("bing", "", ""); err == nil || !strings.Contains(err.Error(), "serper and searxng") {
		t.Errorf("unknown provider: %v", err)
	}
}
