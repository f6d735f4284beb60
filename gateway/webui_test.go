package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/webui"
)

// With the API, / is the web page for a browser, without the token (the
// page holds no data), and the plain-text index for anyone else, behind
// the token; the page's files are under /ui/; the API stays behind the
// token; Host and Origin checks apply to all of it, and the page's own
// requests (same origin) pass them.
func TestWebPageRoutes(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok": true}`)
	})
	g := gateway.New(chain{}, gateway.Options{API: api})
	defer g.Close()
	hs := httptest.NewServer(g.Mux("sekret", gateway.Security{Loopback: true}))
	defer hs.Close()
	do := func(method, path string, header map[string]string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, hs.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			if k == "Host" {
				req.Host = v
				continue
			}
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	const browser = "text/html,application/xhtml+xml,*/*;q=0.8"
	bearer := "Bearer sekret"

	resp, body := do(http.MethodGet, "/", map[string]string{"Accept": browser})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "/ui/app.js") {
		t.Fatalf("the page without the token: %d %q", resp.StatusCode, body)
	}
	if resp.Header.Get("Content-Security-Policy") != webui.ContentSecurityPolicy || resp.Header.Get("Vary") != "Accept" {
		t.Errorf("the page's headers: %v", resp.Header)
	}
	if resp, _ := do(http.MethodGet, "/ui/app.js", nil); resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/javascript") {
		t.Errorf("/ui/app.js without the token: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if resp, _ := do(http.MethodGet, "/ui/nope.js", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("/ui/nope.js: %d", resp.StatusCode)
	}

	// The index names the servers: behind the token.
	if resp, _ := do(http.MethodGet, "/", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the index without the token: %d", resp.StatusCode)
	}
	resp, body = do(http.MethodGet, "/", map[string]string{"Authorization": bearer, "Accept": "text/plain"})
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") ||
		!strings.Contains(body, "/mcp") || !strings.Contains(body, "/api/events") || resp.Header.Get("Vary") != "Accept" {
		t.Errorf("the index: %d %q %v", resp.StatusCode, body, resp.Header)
	}

	// The API's 401 is JSON like its other errors; the page reads the status.
	if resp, body := do(http.MethodGet, "/api/tools", map[string]string{"Accept": browser}); resp.StatusCode != http.StatusUnauthorized ||
		resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(body, `"kind":"unauthorized"`) {
		t.Errorf("the API without the token: %d %q", resp.StatusCode, body)
	}
	// What the page sends: same origin (POST carries Origin), the token.
	if resp, body := do(http.MethodPost, "/api/approvals/x", map[string]string{"Authorization": bearer, "Origin": hs.URL}); resp.StatusCode != http.StatusOK {
		t.Errorf("a same-origin request of the page: %d %q", resp.StatusCode, body)
	}
	if resp, _ := do(http.MethodGet, "/", map[string]string{"Accept": browser, "Host": "evil.example"}); resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("the page under a foreign Host: %d", resp.StatusCode)
	}
	if resp, _ := do(http.MethodGet, "/ui/app.js", map[string]string{"Origin": "http://evil.example"}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a file of the page from a foreign origin: %d", resp.StatusCode)
	}
}

// Without the API there is nothing for the page to show: / stays the
// plain-text index, whatever the client accepts.
func TestIndexWithoutAPI(t *testing.T) {
	g := gateway.New(chain{}, gateway.Options{})
	defer g.Close()
	hs := httptest.NewServer(g.Mux("", gateway.Security{Loopback: true}))
	defer hs.Close()
	for _, path := range []string{"/", "/ui/app.js"} {
		req, _ := http.NewRequest(http.MethodGet, hs.URL+path, nil)
		req.Header.Set("Accept", "text/html")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch path {
		case "/":
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") || !strings.Contains(string(b), "/mcp") {
				t.Errorf("/: %d %q", resp.StatusCode, b)
			}
		default:
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("%s: %d", path, resp.StatusCode)
			}
		}
	}
}
