// Package webui is toolmux's web page: plain HTML, CSS and ES modules
// embedded in the binary, served by the gateway at / and /ui/.
//
// The page holds no data of its own. Everything it shows comes from the
// HTTP API (/api/...) and the event stream (/api/events), which it reads
// with fetch so that it can send the bearer token (or, logged in at the
// gateway's identity provider, the session's CSRF token beside the cookie
// the browser sends); so the page and its files are served without the
// token, and the API stays behind it.
//
// There is no build step: the files under assets/ are what the browser
// runs, so the binary needs nothing at run time and the page works
// offline.
package webui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed assets
var assets embed.FS

// ContentSecurityPolicy is the policy every answer of Handler carries.
// The page loads its scripts, styles and icon from the gateway alone,
// runs no inline script or style, talks to the gateway alone, and may not
// be framed: a tool result shown on the page (text from anywhere) cannot
// run code, send data elsewhere, or be used for clickjacking. Images
// may be data: URLs, because tools return image content as base64.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// contentTypes maps the extensions of the embedded files to their types.
// A fixed table rather than the mime package: the system's mime.types
// could serve JavaScript as text/plain, which a module script refuses.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
}

// file is one embedded file, ready to serve.
type file struct {
	body  []byte
	ctype string
	etag  string
}

// Handler returns the handler of the page: GET (or HEAD) / answers
// index.html, /ui/NAME the file NAME of the page, anything else 404.
//
// Every answer has the Content-Security-Policy above and
// X-Content-Type-Options: nosniff. Files are served with "Cache-Control:
// no-cache" and a strong ETag (a hash of the content): the browser asks
// again on every load and gets a 304 while the binary is the same, so a
// new toolmux never runs with the page of an old one.
func Handler() http.Handler {
	files := map[string]file{}
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := assets.ReadFile(p)
		if err != nil {
			return err
		}
		ctype, ok := contentTypes[path.Ext(p)]
		if !ok {
			ctype = "application/octet-stream"
		}
		sum := sha256.Sum256(body)
		route := strings.TrimPrefix(p, "assets")
		if route == "/index.html" {
			route = "/"
		}
		files[route] = file{body: body, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	if err != nil {
		// The files are compiled in: failing to read them is a broken
		// build, not a condition to handle at run time.
		panic("webui: reading the embedded files: " + err.Error())
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		f, ok := files[r.URL.Path]
		if !ok {
			refuse(w, http.StatusNotFound, "not_found", "toolmux: no such file of the web page: "+r.URL.Path)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			refuse(w, http.StatusMethodNotAllowed, "method_not_allowed", "toolmux: the web page answers GET and HEAD only")
			return
		}
		h.Set("Content-Type", f.ctype)
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", f.etag)
		// ServeContent answers If-None-Match with 304, ranges, and HEAD.
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.body))
	})
}

// WantsPage reports whether r asks for a web page (its Accept header
// names text/html), as a browser's navigation does; API clients and curl
// do not, so the gateway can answer them at / with plain text instead.
func WantsPage(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, _, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(mt), "text/html") {
				return true
			}
		}
	}
	return false
}

// refuse answers a request the page's files cannot, in the error shape of
// every route of the page and the API ({"error": {"kind", "message"}},
// docs/api.md), which the page shows.
func refuse(w http.ResponseWriter, status int, kind, msg string) {
	b, _ := json.Marshal(map[string]map[string]string{"error": {"kind": kind, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
