package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/toolmux/toolmux/tool"
)

// serve returns a test server answering with handler, closed when the
// test ends.
func serve(t *testing.T, handler http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return srv
}

// respond returns a handler that answers with a fixed content type and body.
func respond(contentType string, body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		} else {
			// Keep net/http from sniffing one itself.
			w.Header()["Content-Type"] = nil
		}
		w.Write(body)
	}
}

func TestFetchHTMLArticle(t *testing.T) {
	article, err := os.ReadFile("testdata/article.html")
	if err != nil {
		t.Fatal(err)
	}
	var gotUA, gotAccept string
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		gotUA, gotAccept = r.Header.Get("User-Agent"), r.Header.Get("Accept")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(article)
	})
	f := newTestFetcher(t, WithUserAgent("toolmux-test/1"))
	page, err := f.Fetch(context.Background(), srv.URL+"/news/2024/moons.html")
	if err != nil {
		t.Fatal(err)
	}
	if gotUA != "toolmux-test/1" {
		t.Errorf("User-Agent = %q", gotUA)
	}
	if !strings.Contains(gotAccept, "text/html") {
		t.Errorf("Accept = %q", gotAccept)
	}
	if page.Kind != PageHTML || page.ContentType != "text/html" || page.Status != 200 || page.Truncated {
		t.Errorf("page = %+v", page)
	}
	if page.Title != "Moons of the Inner Planets" {
		t.Errorf("title = %q", page.Title)
	}
	md := page.Content
	for _, want := range []string{
		"only Earth and Mars have any moons at all",
		"Phobos is slowly spiralling inwards",
		// The table, as a Markdown table with its header row.
		"| Planet | Moons | Largest moon |",
		"|---|---|---|",
		"| Mars | 2 | Phobos |",
		// Links made absolute: root-relative and page-relative.
		"[giant impact guide](" + srv.URL + "/guides/giant-impact)",
		"(" + srv.URL + "/news/2024/phobos-deimos.html)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
	for _, noise := range []string{"NAVIGATION-", "FOOTER-", "SIDEBAR-", "ADVERTISEMENT", "window.analytics", "font-family"} {
		if strings.Contains(md, noise) {
			t.Errorf("Markdown contains page furniture %q:\n%s", noise, md)
		}
	}
	out := page.Markdown()
	if !strings.HasPrefix(out, "# Moons of the Inner Planets\n\nURL: "+srv.URL+"/news/2024/moons.html\n") {
		t.Errorf("rendered page starts:\n%s", out[:min(len(out), 200)])
	}
}

func TestFetchHTMLFallsBackToWholePage(t *testing.T) {
	// Nothing for readability to score: the whole page is converted.
	srv := serve(t, respond("text/html", []byte(`<html><head><title>Tiny</title><base href="/docs/"></head><body><p>Just <a href="intro">one line</a>.</p></body></html>`)))
	f := newTestFetcher(t, WithExtractor(ExtractorFunc(func(*html.Node, *url.URL) (Extracted, error) {
		return Extracted{}, nil
	})))
	page, err := f.Fetch(context.Background(), srv.URL+"/a/b")
	if err != nil {
		t.Fatal(err)
	}
	if page.Title != "Tiny" {
		t.Errorf("title = %q", page.Title)
	}
	// <base href> decides where relative links lead.
	if want := "Just [one line](" + srv.URL + "/docs/intro)."; page.Content != want {
		t.Errorf("content = %q, want %q", page.Content, want)
	}

	// An extractor that panics costs nothing but the extraction.
	f2 := newTestFetcher(t, WithExtractor(ExtractorFunc(func(*html.Node, *url.URL) (Extracted, error) {
		panic("extractor bug")
	})))
	page, err = f2.Fetch(context.Background(), srv.URL+"/a/b")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.Content, "one line") {
		t.Errorf("content = %q", page.Content)
	}
}

func TestFetchHTMLTooDeep(t *testing.T) {
	// The HTML parser refuses elements nested over 512 deep; the text is
	// returned anyway.
	body := "<html><body>" + strings.Repeat("<div>", 2000) + "deep text" + "</body></html>"
	srv := serve(t, respond("text/html", []byte(body)))
	page, err := newTestFetcher(t).Fetch(context.Background(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if page.Content != "deep text" || len(page.Notes) != 1 {
		t.Errorf("page = %+v", page)
	}
}

func TestFetchCharsets(t *testing.T) {
	latin1 := []byte("caf\xe9 cr\xe8me")
	cases := []struct {
		name, ct string
		body     []byte
		want     string
	}{
		{"text latin1 header", "text/plain; charset=iso-8859-1", latin1, "café crème"},
		{"text no charset invalid bytes", "text/plain", latin1, "caf\uFFFD cr\uFFFDme"},
		{"json", "application/json", []byte(`{"a": "é"}`), `{"a": "é"}`},
		{"xml", "application/rss+xml", []byte(`<rss><title>x</title></rss>`), `<rss><title>x</title></rss>`},
		{"html meta charset", "text/html", append([]byte(`<html><head><meta charset="windows-1252"></head><body><p>`), append(latin1, []byte(`</p></body></html>`)...)...), "café crème"},
		{"sniffed text", "", []byte("plain words\n"), "plain words\n"},
		{"sniffed html meta charset", "", append([]byte(`<!DOCTYPE html><html><head><meta charset="windows-1252"></head><body><p>`), append(latin1, []byte(`</p></body></html>`)...)...), "café crème"},
		{"utf-16 text with BOM", "text/plain", []byte{0xFF, 0xFE, 'h', 0, 'i', 0}, "hi"},
	}
	f := newTestFetcher(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := serve(t, respond(c.ct, c.body))
			page, err := f.Fetch(context.Background(), srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			if page.Content != c.want {
				t.Errorf("content = %q, want %q", page.Content, c.want)
			}
		})
	}
}

func TestFetchRedirects(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/r1", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/r2", http.StatusFound) })
	mux.HandleFunc("/r2", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/r3", http.StatusMovedPermanently) })
	mux.HandleFunc("/r3", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/final", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/final", respond("text/plain", []byte("arrived")))
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop", http.StatusFound) })
	mux.HandleFunc("/ftp", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "ftp://example.com/x", http.StatusFound)
	})
	srv := serve(t, mux.ServeHTTP)
	f := newTestFetcher(t)

	page, err := f.Fetch(context.Background(), srv.URL+"/r1")
	if err != nil {
		t.Fatal(err)
	}
	if page.FinalURL != srv.URL+"/final" || page.URL != srv.URL+"/r1" || page.Content != "arrived" {
		t.Errorf("page = %+v", page)
	}
	if out := page.Markdown(); !strings.Contains(out, "URL: "+srv.URL+"/final\nRedirected from: "+srv.URL+"/r1\n") {
		t.Errorf("rendered:\n%s", out)
	}

	_, err = f.Fetch(context.Background(), srv.URL+"/loop")
	te := wantKind(t, err, tool.KindToolError)
	if !strings.Contains(te.Message, "too many redirects (more than 10)") {
		t.Errorf("message = %q", te.Message)
	}

	// A lower limit stops the chain of three.
	_, err = newTestFetcher(t, WithMaxRedirects(2)).Fetch(context.Background(), srv.URL+"/r1")
	wantKind(t, err, tool.KindToolError)

	_, err = f.Fetch(context.Background(), srv.URL+"/ftp")
	te = wantKind(t, err, tool.KindToolError)
	if !strings.Contains(te.Message, `scheme "ftp"`) {
		t.Errorf("message = %q", te.Message)
	}
}

func TestFetchSizeLimit(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 1024) // 16 KiB
	srv := serve(t, respond("text/plain", big))
	f := newTestFetcher(t, WithMaxBytes(4096))
	page, err := f.Fetch(context.Background(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if !page.Truncated || page.Size != 4096 || len(page.Content) != 4096 {
		t.Errorf("truncated=%v size=%d len=%d", page.Truncated, page.Size, len(page.Content))
	}
	if !strings.Contains(page.Markdown(), "[Truncated:") {
		t.Errorf("rendered page does not say it was truncated")
	}
	res, err := f.Call(context.Background(), map[string]any{"url": srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if res.Structured.(map[string]any)["truncated"] != true {
		t.Errorf("structured = %v", res.Structured)
	}

	// Exactly at the limit is not truncated.
	page, err = newTestFetcher(t, WithMaxBytes(int64(len(big)))).Fetch(context.Background(), srv.URL)
	if err != nil || page.Truncated {
		t.Errorf("at the limit: truncated=%v err=%v", page.Truncated, err)
	}

	// A cut PDF cannot be read.
	pdfSrv := serve(t, respond("application/pdf", textPDF("t", strings.Repeat("long text ", 500))))
	_, err = f.Fetch(context.Background(), pdfSrv.URL)
	te := wantKind(t, err, tool.KindToolError)
	if !strings.Contains(te.Message, "larger than the size limit") {
		t.Errorf("message = %q", te.Message)
	}
}

func TestFetchTimeout(t *testing.T) {
	release := make(chan struct{})
	// arrived gets each request as it reaches the server; dropped, each
	// request the client hung up on.
	arrived, dropped := make(chan string, 3), make(chan string, 3)
	hold := func(r *http.Request) {
		arrived <- r.URL.Path
		select {
		case <-r.Context().Done():
			dropped <- r.URL.Path
		case <-release:
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/headers", func(w http.ResponseWriter, r *http.Request) { hold(r) })
	mux.HandleFunc("/body", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("start of the body"))
		w.(http.Flusher).Flush()
		hold(r)
	})
	srv := serve(t, mux.ServeHTTP)
	t.Cleanup(func() { close(release) })
	// The timeout ends the fetch by hanging up: the server sees it.
	wantDropped := func(path string) {
		t.Helper()
		select {
		case got := <-dropped:
			if got != path {
				t.Errorf("%s was dropped, want %s", got, path)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: the server never saw the client hang up", path)
		}
	}
	f := newTestFetcher(t, WithTimeout(200*time.Millisecond))
	for _, path := range []string{"/headers", "/body"} {
		_, err := f.Fetch(context.Background(), srv.URL+path)
		te := wantKind(t, err, tool.KindTimeout)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(te.Message, "200ms") {
			t.Errorf("%s: error = %v", path, err)
		}
		wantDropped(path)
		select {
		case <-arrived: // a request dropped had arrived
		default:
		}
	}

	// The caller's own cancellation, once the request is at the server,
	// is reported as such.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-arrived:
		case <-ctx.Done():
		}
		cancel()
	}()
	_, err := newTestFetcher(t).Fetch(ctx, srv.URL+"/headers")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: error = %v", err)
	}
	wantDropped("/headers")
}

func TestFetchHTTPErrors(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`<html><head><title>x</title><style>p{}</style></head><body><h1>Not Found</h1><p>The page /missing does not exist.</p></body></html>`))
	})
	mux.HandleFunc("/broken", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "database exploded "+strings.Repeat("x", 1000), http.StatusInternalServerError)
	})
	srv := serve(t, mux.ServeHTTP)
	f := newTestFetcher(t)

	_, err := f.Fetch(context.Background(), srv.URL+"/missing")
	te := wantKind(t, err, tool.KindToolError)
	if te.Message != "HTTP 404 Not Found from "+srv.URL+"/missing" {
		t.Errorf("message = %q", te.Message)
	}
	if te.Detail != "response body: Not Found The page /missing does not exist." {
		t.Errorf("detail = %q", te.Detail)
	}

	_, err = f.Fetch(context.Background(), srv.URL+"/broken")
	te = wantKind(t, err, tool.KindToolError)
	if !strings.Contains(te.Message, "HTTP 500 Internal Server Error") || !strings.HasPrefix(te.Detail, "response body: database exploded xxx") {
		t.Errorf("error = %v", te)
	}
	if len(te.Detail) > 400 {
		t.Errorf("detail is %d bytes long", len(te.Detail))
	}
}

func TestFetchNetworkError(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close()
	_, err := newTestFetcher(t).Fetch(context.Background(), addr+"/x")
	te := wantKind(t, err, tool.KindToolError)
	if !strings.Contains(te.Message, "refused") {
		t.Errorf("message = %q", te.Message)
	}
}

func TestFetchPDF(t *testing.T) {
	pdf := textPDF("Solar System Notes", "Hello from page one", "Page two says (hi)")
	for _, isolated := range []bool{true, false} {
		t.Run(fmt.Sprintf("isolated=%v", isolated), func(t *testing.T) {
			srv := serve(t, respond("application/pdf", pdf))
			page, err := newTestFetcher(t, WithPDFIsolation(isolated)).Fetch(context.Background(), srv.URL+"/notes.pdf")
			if err != nil {
				t.Fatal(err)
			}
			if page.Kind != PagePDF || page.Title != "Solar System Notes" {
				t.Errorf("page = %+v", page)
			}
			if page.Content != "Hello from page one\n\nPage two says (hi)" {
				t.Errorf("content = %q", page.Content)
			}
		})
	}

	// Served as application/octet-stream, as many servers do: sniffed.
	srv := serve(t, respond("application/octet-stream", pdf))
	page, err := newTestFetcher(t).Fetch(context.Background(), srv.URL)
	if err != nil || page.Kind != PagePDF || page.ContentType != "application/pdf" {
		t.Errorf("octet-stream PDF: page = %+v, err = %v", page, err)
	}
}

func TestFetchPDFPageCap(t *testing.T) {
	pages := make([]string, 5)
	for i := range pages {
		pages[i] = fmt.Sprintf("text of page %d", i+1)
	}
	srv := serve(t, respond("application/pdf", textPDF("five", pages...)))
	page, err := newTestFetcher(t, WithMaxPDFPages(2)).Fetch(context.Background(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if page.Content != "text of page 1\n\ntext of page 2" {
		t.Errorf("content = %q", page.Content)
	}
	if len(page.Notes) != 1 || page.Notes[0] != "Only the first 2 of 5 pages are shown." {
		t.Errorf("notes = %q", page.Notes)
	}
}

// malformedPDFs are files the PDF library fails on, each in its own way.
func malformedPDFs() map[string][]byte {
	font := "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
	page := func(content string) []byte {
		return buildPDF(
			"<< /Type /Catalog /Pages 2 0 R >>",
			"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
			"<< /Type /Page /Parent 2 0 R /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
			font,
			stream(content))
	}
	return map[string][]byte{
		"garbage":       []byte("%PDF-1.4\nthis is not a pdf at all\n%%EOF\n"),
		"no xref":       append([]byte("%PDF-1.4\n1 0 obj << >> endobj\nstartxref\n999999\n"), append(bytes.Repeat([]byte(" "), 100), "\n%%EOF\n"...)...),
		"bad operators": page("BT /F1 Tf (x) Tj ET"), // Tf with one operand: the library panics
		"no pages":      buildPDF("<< /Type /Catalog /Pages 2 0 R >>", "<< /Type /Pages /Kids [] /Count 0 >>"),
		// A page tree whose node is its own kid: the library's own walk
		// would loop forever.
		"page tree cycle": buildPDF("<< /Type /Catalog /Pages 2 0 R >>", "<< /Type /Pages /Kids [2 0 R] /Count 5 >>"),
	}
}

// fatalPDFs are files that kill a process running the PDF library in ways
// recover() cannot catch; only the worker process survives them (by dying
// alone).
func fatalPDFs() map[string][]byte {
	pad := "%" + strings.Repeat("x", 200) + "\n"
	// A cross-reference section numbering its object from 4 billion: the
	// library allocates a table that large.
	var huge bytes.Buffer
	huge.WriteString("%PDF-1.4\n" + pad)
	x := huge.Len()
	fmt.Fprintf(&huge, "xref\n4000000000 1\n0000000000 00000 n \ntrailer\n<< /Size 1 >>\nstartxref\n%d\n%%%%EOF\n", x)

	// An xref stream putting object 1 inside object stream 1, itself: the
	// library recurses until the stack limit.
	var self bytes.Buffer
	self.WriteString("%PDF-1.5\n" + pad)
	x = self.Len()
	entries := []byte{
		0, 0, 0, 0, 0, 0xff, 0xff, // object 0: free
		2, 0, 0, 0, 1, 0, 0, // object 1: in object stream 1
		1, 0, 0, byte(x >> 8), byte(x), 0, 0, // object 2: this stream
	}
	fmt.Fprintf(&self, "2 0 obj\n<< /Type /XRef /Size 3 /W [1 4 2] /Root 1 0 R /Length %d >>\nstream\n%s\nendstream\nendobj\nstartxref\n%d\n%%%%EOF\n", len(entries), entries, x)
	return map[string][]byte{"huge xref": huge.Bytes(), "self-containing object stream": self.Bytes()}
}

func TestFetchMalformedPDF(t *testing.T) {
	for _, isolated := range []bool{true, false} {
		f := newTestFetcher(t, WithPDFIsolation(isolated), WithTimeout(10*time.Second))
		cases := malformedPDFs()
		if isolated {
			for name, data := range fatalPDFs() {
				cases[name] = data
			}
		}
		for name, data := range cases {
			t.Run(fmt.Sprintf("%s/isolated=%v", name, isolated), func(t *testing.T) {
				srv := serve(t, respond("application/pdf", data))
				_, err := f.Fetch(context.Background(), srv.URL+"/bad.pdf")
				te := wantKind(t, err, tool.KindToolError)
				if !strings.Contains(te.Message, "could not read the application/pdf at "+srv.URL+"/bad.pdf") {
					t.Errorf("message = %q", te.Message)
				}
				t.Log(te.Message)
			})
		}
	}
}

// hangingPDF returns a PDF on which the library loops forever without
// reading: object 1 lives in object stream 3, which holds no objects and
// names itself as the stream it extends.
func hangingPDF() []byte {
	var b bytes.Buffer
	b.WriteString("%PDF-1.5\n%" + strings.Repeat("x", 200) + "\n")
	objStm := b.Len()
	b.WriteString("3 0 obj\n<< /Type /ObjStm /N 0 /First 1 /Extends 3 0 R /Length 1 >>\nstream\n \nendstream\nendobj\n")
	x := b.Len()
	entries := []byte{
		0, 0, 0, 0, 0, 0xff, 0xff, // object 0: free
		2, 0, 0, 0, 3, 0, 0, // object 1: in object stream 3
		1, 0, 0, byte(x >> 8), byte(x), 0, 0, // object 2: the xref stream
		1, 0, 0, byte(objStm >> 8), byte(objStm), 0, 0, // object 3: the object stream
	}
	fmt.Fprintf(&b, "2 0 obj\n<< /Type /XRef /Size 4 /W [1 4 2] /Root 1 0 R /Length %d >>\nstream\n%s\nendstream\nendobj\nstartxref\n%d\n%%%%EOF\n", len(entries), entries, x)
	return b.Bytes()
}

func TestFetchPDFWorkerKilledAtTimeLimit(t *testing.T) {
	srv := serve(t, respond("application/pdf", hangingPDF()))
	f := newTestFetcher(t, WithTimeout(time.Second))
	start := time.Now()
	_, err := f.Fetch(context.Background(), srv.URL)
	wantKind(t, err, tool.KindTimeout)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestFetchBinary(t *testing.T) {
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{0}, 2048)...)
	srv := serve(t, respond("image/png", png))
	page, err := newTestFetcher(t).Fetch(context.Background(), srv.URL+"/logo.png")
	if err != nil {
		t.Fatal(err)
	}
	if page.Kind != PageBinary || page.Content != "" || page.ContentType != "image/png" || page.Size != int64(len(png)) {
		t.Errorf("page = %+v", page)
	}
	out := page.Markdown()
	for _, want := range []string{"image/png", "2.0 KiB (2056 bytes)", srv.URL + "/logo.png"} {
		if !strings.Contains(out, want) {
			t.Errorf("description lacks %q:\n%s", want, out)
		}
	}

	// Labelled text, but binary.
	srv = serve(t, respond("text/plain", png))
	page, err = newTestFetcher(t).Fetch(context.Background(), srv.URL)
	if err != nil || page.Kind != PageBinary || page.ContentType != "image/png" || page.Content != "" {
		t.Errorf("png as text/plain: page = %+v, err = %v", page, err)
	}

	// No Content-Type: sniffed.
	srv = serve(t, respond("", append([]byte("PK\x03\x04"), bytes.Repeat([]byte{1}, 64)...)))
	page, err = newTestFetcher(t).Fetch(context.Background(), srv.URL)
	if err != nil || page.Kind != PageBinary || page.ContentType != "application/zip" {
		t.Errorf("zip: page = %+v, err = %v", page, err)
	}
}

func TestFetchInvalidURL(t *testing.T) {
	f := newTestFetcher(t)
	for _, u := range []string{"", "   ", "file:///etc/passwd", "ftp://example.com/x", "javascript:alert(1)", "example.com/page", "http://", "http://[::1"} {
		_, err := f.Fetch(context.Background(), u)
		te := wantKind(t, err, tool.KindInvalidParams)
		if !strings.Contains(te.Message, `"url"`) {
			t.Errorf("%q: message %q does not name the argument", u, te.Message)
		}
	}
}

func TestFetchDenyPrivate(t *testing.T) {
	hit := false
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) { hit = true })
	f := newTestFetcher(t, WithDenyPrivate(true))
	_, err := f.Fetch(context.Background(), srv.URL)
	te := wantKind(t, err, tool.KindPolicyViolation)
	if !strings.Contains(te.Message, "127.0.0.1 is a loopback address") {
		t.Errorf("message = %q", te.Message)
	}
	if hit {
		t.Error("the request reached the server")
	}
	// localhost resolves to loopback: refused after resolution too.
	_, err = f.Fetch(context.Background(), strings.Replace(srv.URL, "127.0.0.1", "localhost", 1))
	wantKind(t, err, tool.KindPolicyViolation)
}

func TestPrivateReason(t *testing.T) {
	for addr, private := range map[string]bool{
		"127.0.0.1": true, "::1": true, "10.1.2.3": true, "172.16.0.1": true, "192.168.1.1": true,
		"169.254.169.254": true, "fe80::1": true, "fd00::1": true, "0.0.0.0": true, "::": true,
		"100.100.100.200": true, "::ffff:127.0.0.1": true, "224.0.0.1": true,
		"8.8.8.8": false, "1.1.1.1": false, "2606:4700:4700::1111": false, "172.32.0.1": false,
	} {
		err := denyPrivateControl("tcp", net.JoinHostPort(addr, "80"), nil)
		if (err != nil) != private {
			t.Errorf("%s: error = %v, want private=%v", addr, err, private)
		}
	}
}

func TestReadLimited(t *testing.T) {
	data, cut, err := readLimited(io.LimitReader(zeros{}, 10), 10)
	if err != nil || cut || len(data) != 10 {
		t.Errorf("10 of 10: %d %v %v", len(data), cut, err)
	}
	data, cut, err = readLimited(io.LimitReader(zeros{}, 11), 10)
	if err != nil || !cut || len(data) != 10 {
		t.Errorf("11 of 10: %d %v %v", len(data), cut, err)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }
