package web

import (
	"context"
	"net/url"
	"os"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzHTMLToMarkdown feeds arbitrary bytes through the whole HTML path
// (charset detection, parsing, readability, Markdown conversion): it must
// never panic and always yield valid UTF-8.
func FuzzHTMLToMarkdown(f *testing.F) {
	article, err := os.ReadFile("testdata/article.html")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(article, "")
	f.Add([]byte(`<html><head><base href="javascript:x"></head><body><a href="../../x">y</a><table><tr><td>a<br>b</td></tr></table></body></html>`), "")
	f.Add([]byte("<p>caf\xe9</p>"), "iso-8859-1")
	f.Add([]byte("<meta charset=shift_jis><p>\x82\xa0</p>"), "")
	f.Add([]byte("<table><tr><td colspan=1000000>x</td></tr></table>"), "")
	f.Add([]byte(strings.Repeat("<ul><li>", 300)), "utf-8")
	f.Add([]byte("<svg><foreignObject><math><mi><table><template><frameset>"), "")
	base, _ := url.Parse("https://example.com/a/b.html")
	fetcher := NewFetcher()
	defer fetcher.Close()
	f.Fuzz(func(t *testing.T, body []byte, label string) {
		title, md, err := fetcher.htmlToMarkdown(context.Background(), body, label, base)
		if err != nil {
			return
		}
		if !utf8.ValidString(md) || !utf8.ValidString(title) {
			t.Errorf("invalid UTF-8 in output: title %q, markdown %q", title, md)
		}
	})
}

// FuzzSearXNGResponse feeds arbitrary bodies to the SearXNG parser: no
// panics, never more ranked results than asked for, positions 1..n.
func FuzzSearXNGResponse(f *testing.F) {
	f.Add([]byte(searxngResponse), 3)
	f.Add([]byte(`{"results": [{"title": "a", "url": "u", "publishedDate": null}], "answers": [{"answer": 1}, "x"]}`), 1)
	f.Add([]byte(`{"results": {"title": "a"}, "infoboxes": [{"urls": [{}]}, null]}`), 10)
	f.Add([]byte(`null`), 0)
	fuzzParser(f, parseSearXNG)
}

// FuzzSerperResponse is FuzzSearXNGResponse for the Serper parser.
func FuzzSerperResponse(f *testing.F) {
	f.Add([]byte(serperResponse), 3)
	f.Add([]byte(`{"organic": [{"position": "x"}, {"title": "t", "position": -1}], "knowledgeGraph": {"attributes": {"a": 1}}}`), 2)
	f.Add([]byte(`{"message": "x"}`), 1)
	fuzzParser(f, parseSerper)
}

func fuzzParser(f *testing.F, parse func([]byte, int) ([]Hit, error)) {
	f.Fuzz(func(t *testing.T, body []byte, num int) {
		if num <= 0 || num > 100 {
			num = 10
		}
		hits, err := parse(body, num)
		if err != nil {
			return
		}
		ranked := 0
		for _, h := range hits {
			if h.Answer {
				if h.Position != 0 {
					t.Errorf("answer with position %d", h.Position)
				}
				if ranked > 0 {
					t.Error("an answer after a ranked result")
				}
				continue
			}
			ranked++
			if h.Position <= 0 {
				t.Errorf("ranked result with position %d", h.Position)
			}
		}
		if ranked > num {
			t.Errorf("%d ranked results for num %d", ranked, num)
		}
	})
}
