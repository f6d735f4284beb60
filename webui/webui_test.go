package webui_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/webui"
)

func get(t *testing.T, h http.Handler, method, path string, header map[string]string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The page is served with its policy, its type and a cache validator;
// nothing else is sniffed or framed.
func TestIndex(t *testing.T) {
	h := webui.Handler()
	resp := get(t, h, http.MethodGet, "/", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /: %d", resp.StatusCode)
	}
	for k, want := range map[string]string{
		"Content-Type":            "text/html; charset=utf-8",
		"Content-Security-Policy": webui.ContentSecurityPolicy,
		"X-Content-Type-Options":  "nosniff",
		"Cache-Control":           "no-cache",
		"Referrer-Policy":         "no-referrer",
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	for _, directive := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(webui.ContentSecurityPolicy, directive) {
			t.Errorf("the policy lacks %s", directive)
		}
	}
	if strings.Contains(webui.ContentSecurityPolicy, "unsafe") {
		t.Errorf("the policy allows something unsafe: %s", webui.ContentSecurityPolicy)
	}
	page := body(t, resp)
	if !strings.Contains(page, `<script type="module" src="/ui/app.js"></script>`) {
		t.Errorf("the page does not load its module:\n%s", page)
	}
	// The revalidation the Cache-Control asks for answers 304.
	etag := resp.Header.Get("ETag")
	if etag == "" {
		t.Fatal("no ETag")
	}
	again := get(t, h, http.MethodGet, "/", map[string]string{"If-None-Match": etag})
	if again.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match: %d, want 304", again.StatusCode)
	}
	head := get(t, h, http.MethodHead, "/", nil)
	if head.StatusCode != http.StatusOK || body(t, head) != "" {
		t.Errorf("HEAD /: %d", head.StatusCode)
	}
}

// Every file the page refers to (links, scripts, module imports) is served
// with the type a browser needs: a module script with a type other than
// JavaScript is refused.
func TestAssets(t *testing.T) {
	h := webui.Handler()
	types := map[string]string{
		".js":  "text/javascript; charset=utf-8",
		".css": "text/css; charset=utf-8",
		".svg": "image/svg+xml",
	}
	refs := regexp.MustCompile(`(?:src|href)="(/ui/[^"]+)"|from '\./([^']+)'|import\('/ui/([^']+)'\)`)
	seen := map[string]bool{}
	queue := []string{"/"}
	for len(queue) > 0 {
		path := queue[0]
		queue = queue[1:]
		if seen[path] {
			continue
		}
		seen[path] = true
		resp := get(t, h, http.MethodGet, path, nil)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d", path, resp.StatusCode)
			continue
		}
		if ext := filepath.Ext(path); path != "/" && resp.Header.Get("Content-Type") != types[ext] {
			t.Errorf("%s: Content-Type %q, want %q", path, resp.Header.Get("Content-Type"), types[ext])
		}
		if resp.Header.Get("Content-Security-Policy") == "" || resp.Header.Get("ETag") == "" {
			t.Errorf("%s: no policy or no ETag", path)
		}
		for _, m := range refs.FindAllStringSubmatch(body(t, resp), -1) {
			for _, ref := range m[1:] {
				if ref == "" {
					continue
				}
				if !strings.HasPrefix(ref, "/") {
					ref = "/ui/" + ref
				}
				queue = append(queue, ref)
			}
		}
	}
	for _, want := range []string{"/ui/app.js", "/ui/app.css", "/ui/sse.js", "/ui/stream.js", "/ui/live.js", "/ui/fleet.js", "/ui/secrets.js", "/ui/connections.js", "/ui/favicon.svg"} {
		if !seen[want] {
			t.Errorf("%s is not reachable from the page", want)
		}
	}
}

// The page runs under a policy without inline scripts or styles: every
// script has a src and no body, and no element has an event handler or a
// style attribute.
func TestNoInlineCode(t *testing.T) {
	page := body(t, get(t, webui.Handler(), http.MethodGet, "/", nil))
	scripts := regexp.MustCompile(`<script([^>]*)>([^<]*)</script>`).FindAllStringSubmatch(page, -1)
	if len(scripts) != strings.Count(page, "<script") {
		t.Errorf("a script element that is not <script ...></script>")
	}
	for _, m := range scripts {
		if !strings.Contains(m[1], ` src="`) || strings.TrimSpace(m[2]) != "" {
			t.Errorf("inline script: %s", m[0])
		}
	}
	for _, bad := range []*regexp.Regexp{regexp.MustCompile(`\son[a-z]+\s*=`), regexp.MustCompile(`\sstyle\s*=`), regexp.MustCompile(`<style`)} {
		for _, m := range bad.FindAllString(page, -1) {
			t.Errorf("inline code in the page: %q", m)
		}
	}
}

// Unknown files are 404, directories too; only GET and HEAD are answered.
func TestNotFoundAndMethods(t *testing.T) {
	h := webui.Handler()
	for _, path := range []string{"/ui/nope.js", "/ui/", "/ui", "/index.html", "/ui/../index.html", "/api/tools"} {
		if resp := get(t, h, http.MethodGet, path, nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, resp.StatusCode)
		}
	}
	resp := get(t, h, http.MethodPost, "/", nil)
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

// A browser's navigation asks for HTML; curl, Go's client and API clients
// do not.
func TestWantsPage(t *testing.T) {
	for accept, want := range map[string]bool{
		"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8": true,
		"TEXT/HTML":                    true,
		"":                             false,
		"*/*":                          false,
		"text/plain, application/json": false,
		"application/json":             false,
	} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		if got := webui.WantsPage(req); got != want {
			t.Errorf("Accept %q: %v, want %v", accept, got, want)
		}
	}
}

// The Fleet tab and its panel ship hidden: a gateway that is not a
// fleet's (GET /api/fleet answers 404) shows the page as it was; only
// fleet.js, on a 200, reveals the tab.
func TestFleetTabHidden(t *testing.T) {
	page := body(t, get(t, webui.Handler(), http.MethodGet, "/", nil))
	for _, re := range []string{
		`<a href="#fleet" data-tab="fleet" hidden>Fleet</a>`,
		`<section id="tab-fleet" class="tab" data-tab-panel="fleet" hidden>`,
	} {
		if !strings.Contains(page, re) {
			t.Errorf("the page lacks %s", re)
		}
	}
	// The elements fleet.js is given by app.js are in the page.
	app := body(t, get(t, webui.Handler(), http.MethodGet, "/ui/app.js", nil))
	for _, m := range regexp.MustCompile(`\$\('(fleet-[a-z-]+)'\)`).FindAllStringSubmatch(app, -1) {
		if !strings.Contains(page, `id="`+m[1]+`"`) {
			t.Errorf("app.js looks for #%s, which the page lacks", m[1])
		}
	}
	if !strings.Contains(app, "$('fleet-workers')") {
		t.Error("app.js does not wire the fleet panel")
	}
}
