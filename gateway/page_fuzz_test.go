package gateway

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/identity"
)

// FuzzLoginCookie feeds the login cookie's reading any value: it never
// panics, and accepts none but what this gateway sealed; a login request
// of any fields sealed reads back whole, and one byte changed anywhere in
// what was sealed makes it unreadable. (The seed corpus is under
// testdata/fuzz/FuzzLoginCookie.)
func FuzzLoginCookie(f *testing.F) {
	for _, s := range []struct {
		value, state string
		flip         uint
	}{
		{"", "s", 0}, {"AAAA", "state", 3}, {strings.Repeat("A", 100), "é", 40}, {"not base64!", "", 7}, {strings.Repeat("_-", 3000), "x", 1 << 20},
	} {
		f.Add(s.value, s.state, s.flip)
	}
	p := NewPageLogin(nil, identity.NewSessions(identity.SessionOptions{}), time.Minute)
	f.Fuzz(func(t *testing.T, value, state string, flip uint) {
		if _, ok := p.openLogin(value); ok {
			t.Fatalf("%q, which this gateway did not seal, is accepted", value)
		}
		// A login's fields are base64url and a URL: JSON keeps any valid
		// UTF-8 as it is.
		state = strings.ToValidUTF8(state, "?")
		req := identity.LoginRequest{State: state, Nonce: "n" + state, Verifier: "v", RedirectURL: "http://127.0.0.1/auth/callback"}
		sealed := p.sealLogin(req, time.Now().Add(time.Minute))
		got, ok := p.openLogin(sealed)
		if wantOK := state != "" && len(sealed) <= maxLoginCookie; ok != wantOK || ok && got != req {
			t.Fatalf("sealed %+v, read %+v, %v", req, got, ok)
		}
		b := []byte(sealed)
		i := int(flip % uint(len(b)))
		for _, c := range []byte{'A', 'B', '-'} {
			if b[i] != c {
				b[i] = c
				break
			}
		}
		if got, ok := p.openLogin(string(b)); ok && got != req {
			t.Fatalf("a changed cookie reads as another request: %+v", got)
		} else if ok && string(b) != sealed && i < len(b)-1 {
			// Only the last character's spare bits (base64 of a length
			// not a multiple of 3) may change without changing a byte.
			t.Fatalf("a cookie changed at %d is accepted", i)
		}
		if _, ok := p.openLogin(sealed); ok {
			// A cookie expired is refused.
			if _, ok := p.openLogin(p.sealLogin(req, time.Now().Add(-time.Second))); ok {
				t.Fatal("an expired login cookie is accepted")
			}
		}
	})
}

// FuzzPageSession feeds the session's check any Cookie header, CSRF
// header and method ({id} and {csrf} in them stand for a real session's
// id and CSRF token): it never panics, and a request is the session's
// exactly when its session cookie is the session's id and, for a method
// that changes something, its one CSRF header is the session's token.
// (The seed corpus is under testdata/fuzz/FuzzPageSession.)
func FuzzPageSession(f *testing.F) {
	for _, s := range []struct{ cookie, csrf, method string }{
		{"toolmux_session={id}", "", "GET"},
		{"toolmux_session={id}", "{csrf}", "POST"},
		{"toolmux_session={id}", "", "POST"},
		{"toolmux_session={id}; toolmux_csrf={csrf}", "{csrf}x", "DELETE"},
		{"toolmux_session=x{id}", "{csrf}", "POST"},
		{"a=b; toolmux_session={id}", "{id}", "PUT"},
		{"toolmux_session=\"{id}\"", "{csrf}", "HEAD"},
		{"__Host-toolmux_session={id}", "{csrf}", "POST"},
		{"toolmux_session=; toolmux_session={id}", "", "OPTIONS"},
	} {
		f.Add(s.cookie, s.csrf, s.method)
	}
	sessions := identity.NewSessions(identity.SessionOptions{})
	id, s := sessions.Start(&identity.Caller{Subject: "alice", Name: "Alice", Method: identity.MethodSession})
	p := &pageAuth{PageLogin: NewPageLogin(nil, sessions, 0)}
	f.Fuzz(func(t *testing.T, cookie, csrf, method string) {
		fill := strings.NewReplacer("{id}", id, "{csrf}", s.CSRF)
		cookie, csrf = fill.Replace(cookie), fill.Replace(csrf)
		r, err := http.NewRequest(http.MethodGet, "http://127.0.0.1/api/tools", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Method = method
		r.Header.Set("Cookie", cookie)
		if csrf != "" {
			r.Header.Set(CSRFHeader, csrf)
		}
		c, found, err := p.sessionOf(r)
		ck, cerr := r.Cookie(sessionCookie)
		wantFound := cerr == nil
		wantOK := wantFound && ck.Value == id && (safeMethod(method) || csrf == s.CSRF)
		if found != wantFound || (err == nil && found) != wantOK || wantOK && c != s.Caller {
			t.Fatalf("cookie %q, csrf %q, %s: found %v, caller %v, error %v; want found %v, ok %v", cookie, csrf, method, found, c, err, wantFound, wantOK)
		}
	})
}
