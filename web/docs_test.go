package web

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// docExamples returns the example argument blocks of docs/web.md: the
// ```json block after each "<!-- example: TOOL -->" line, by tool name.
func docExamples(t *testing.T) (map[string]map[string]any, string) {
	t.Helper()
	data, err := os.ReadFile("../docs/web.md")
	if err != nil {
		t.Fatal(err)
	}
	examples := map[string]map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		name, ok := strings.CutPrefix(line, "<!-- example: ")
		if !ok {
			continue
		}
		name = strings.TrimSuffix(name, " -->")
		if !sc.Scan() || strings.TrimSpace(sc.Text()) != "```json" {
			t.Fatalf("example %s is not followed by a ```json block", name)
		}
		var block strings.Builder
		for sc.Scan() && strings.TrimSpace(sc.Text()) != "```" {
			block.WriteString(sc.Text() + "\n")
		}
		var args map[string]any
		if err := json.Unmarshal([]byte(block.String()), &args); err != nil {
			t.Fatalf("example %s: %v\n%s", name, err, block.String())
		}
		examples[name] = args
	}
	return examples, string(data)
}

// TestDocExamples runs the example arguments of docs/web.md against local
// servers: web_fetch's URL through a fetcher whose connections all lead to
// a local TLS server (its certificate is valid for example.com), and
// web_search's against a local Serper-compatible server, whose rendered
// results must be the ones the document shows.
func TestDocExamples(t *testing.T) {
	examples, doc := docExamples(t)
	for _, name := range []string{FetchToolName, SearchToolName} {
		if examples[name] == nil {
			t.Fatalf("docs/web.md has no example for %s", name)
		}
	}

	t.Run(FetchToolName, func(t *testing.T) {
		article, err := os.ReadFile("testdata/article.html")
		if err != nil {
			t.Fatal(err)
		}
		var gotHost, gotPath string
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			gotHost, gotPath = r.Host, r.URL.Path
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write(article)
		}))
		defer srv.Close()
		f := newTestFetcher(t)
		addr := srv.Listener.Addr().String()
		dialer := &net.Dialer{}
		f.transport.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, addr)
		}
		f.transport.TLSClientConfig = &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}

		res, err := f.Call(context.Background(), examples[FetchToolName])
		if err != nil {
			t.Fatal(err)
		}
		if gotHost != "example.com" || gotPath != "/articles/moons.html" {
			t.Errorf("request for %s%s", gotHost, gotPath)
		}
		if !strings.Contains(res.Text(), "| Planet | Moons | Largest moon |") {
			t.Errorf("result:\n%s", res.Text())
		}
		st := res.Structured.(map[string]any)
		if st["final_url"] != examples[FetchToolName]["url"] || st["status"] != 200 {
			t.Errorf("structured = %v", st)
		}
	})

	t.Run(SearchToolName, func(t *testing.T) {
		fb := &fakeBackend{body: `{
			"answerBox": {"title": "Moons of the inner planets", "answer": "Earth has 1 moon and Mars has 2", "link": "https://example.org/answer"},
			"organic": [
				{"title": "Moons of Mars - Wikipedia", "link": "https://en.wikipedia.org/wiki/Moons_of_Mars", "snippet": "The two moons of Mars are Phobos and Deimos.", "position": 1, "date": "Jan 2, 2024"},
				{"title": "Why does Venus have no moon?", "link": "https://example.com/venus", "snippet": "Venus and Mercury have no moons.", "position": 2}
			]}`}
		srv := serve(t, fb.ServeHTTP)
		s := newSerper(t, srv.URL, "doc-key")
		res, err := SearchCall(context.Background(), s, examples[SearchToolName])
		if err != nil {
			t.Fatal(err)
		}
		var sent map[string]any
		json.Unmarshal(fb.last(t).body, &sent)
		if sent["q"] != examples[SearchToolName]["query"] || sent["num"] != examples[SearchToolName]["num"] {
			t.Errorf("sent %v", sent)
		}
		// The document shows this output in its ```text block.
		start := strings.Index(doc, "```text\n")
		end := strings.Index(doc[start+8:], "```")
		if start < 0 || end < 0 {
			t.Fatal("docs/web.md has no ```text block")
		}
		if want := doc[start+8 : start+8+end]; res.Text() != want {
			t.Errorf("docs/web.md shows\n%s\nbut the result is\n%s", want, res.Text())
		}
	})
}
