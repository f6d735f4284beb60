package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/identity"
)

// provider is the page's OpenID Connect provider as the gateway sees it,
// without one (identity.Login is tested against a real one, Hydra): it
// keeps the login requests it was asked, and finishes a login whose code
// names a caller of callers, given the request it began with (so a
// request that did not come back whole from the login cookie fails).
type provider struct {
	callers map[string]*identity.Caller // by code
	down    bool

	mu   sync.Mutex
	reqs map[string]identity.LoginRequest // by state
}

func (p *provider) Issuer() string { return "https://idp.test" }

func (p *provider) AuthCodeURL(_ context.Context, req identity.LoginRequest) (string, error) {
	if p.down {
		return "", &identity.Error{Kind: identity.KindUnavailable, Message: "the identity provider did not answer; try again later"}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reqs == nil {
		p.reqs = map[string]identity.LoginRequest{}
	}
	p.reqs[req.State] = req
	return "https://idp.test/authorize?" + url.Values{"state": {req.State}, "redirect_uri": {req.RedirectURL}}.Encode(), nil
}

func (p *provider) Finish(_ context.Context, req identity.LoginRequest, code string) (*identity.Caller, error) {
	p.mu.Lock()
	began, ok := p.reqs[req.State]
	p.mu.Unlock()
	if !ok || began != req {
		return nil, &identity.Error{Kind: identity.KindInvalid, Message: "not a login this provider began"}
	}
	c, ok := p.callers[code]
	if !ok {
		return nil, &identity.Error{Kind: identity.KindInvalid, Message: "the provider refused the login's code (invalid_grant): log in again"}
	}
	return c, nil
}

// whoAPI is an API answering every request with its method and caller.
var whoAPI = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"method": r.Method, "caller": identity.From(r.Context())})
})

// pageServer is a gateway with a page login of p, an API key, and an API
// answering who called.
type pageServer struct {
	*httptest.Server
	login *gateway.PageLogin
	key   string
}

func startPageServer(t *testing.T, p *provider, sessions *identity.Sessions, sec gateway.Security, resource string) *pageServer {
	t.Helper()
	g := builtinGateway(t, t.TempDir(), gateway.Options{API: whoAPI, Metrics: http.NotFoundHandler()})
	ps := &pageServer{login: gateway.NewPageLogin(p, sessions, 0), key: identity.NewKeySecret()}
	auth := gateway.Auth{Resource: resource, Page: ps.login,
		Verifier: identity.NewKeys(identity.Key{Name: "ci", Hash: identity.HashKey(ps.key)})}
	ps.Server = httptest.NewServer(g.MuxAuth(auth, sec))
	t.Cleanup(ps.Close)
	return ps
}

// exchange is one request and its answer.
type exchange struct {
	status  int
	header  http.Header
	body    string
	cookies map[string]*http.Cookie
}

// do sends a request with cookies (name=value) and headers, following no
// redirect.
func (ps *pageServer) do(t *testing.T, method, path string, cookies []*http.Cookie, header map[string]string) exchange {
	t.Helper()
	req, err := http.NewRequest(method, ps.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cookies {
		req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
	}
	req.Header.Set("Accept", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	ex := exchange{status: resp.StatusCode, header: resp.Header, body: string(b), cookies: map[string]*http.Cookie{}}
	for _, c := range resp.Cookies() {
		ex.cookies[c.Name] = c
	}
	return ex
}

// logIn goes through /auth/login and /auth/callback with code, as a
// browser coming back from the provider does, and returns the callback's
// answer and the login cookie it was sent with.
func (ps *pageServer) logIn(t *testing.T, code string) (login *http.Cookie, callback exchange) {
	t.Helper()
	start := ps.do(t, http.MethodGet, gateway.LoginPath, nil, nil)
	if start.status != http.StatusFound {
		t.Fatalf("/auth/login: %d %s", start.status, start.body)
	}
	where, err := url.Parse(start.header.Get("Location"))
	if err != nil || where.Host != "idp.test" {
		t.Fatalf("/auth/login sent the browser to %q", start.header.Get("Location"))
	}
	for _, c := range start.cookies {
		login = c
	}
	if login == nil {
		t.Fatal("/auth/login set no cookie")
	}
	q := url.Values{"state": {where.Query().Get("state")}, "code": {code}}
	return login, ps.do(t, http.MethodGet, gateway.CallbackPath+"?"+q.Encode(), []*http.Cookie{login}, nil)
}

// apiError reads the API's error object.
func apiError(t *testing.T, body string) (kind, login string) {
	t.Helper()
	var e struct {
		Error struct{ Kind, Login string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("not the API's error: %v %s", err, body)
	}
	return e.Error.Kind, e.Error.Login
}

// The page logs in: a request without a credential is told where to log
// in; /auth/login sends the browser to the provider with a sealed login
// cookie; the callback starts a session whose cookies are HttpOnly (the
// CSRF token's not), SameSite=Lax, on the whole path, not Secure on
// loopback, and bounded in time; the session's caller is the login's on
// the API and the index, never on the MCP routes or the metrics; what
// changes something needs the CSRF token (once, the session's), but not
// with a bearer credential; a forged cookie is refused and dropped; a
// logout needs the CSRF token, and ends the session.
func TestPageLogin(t *testing.T) {
	alice := &identity.Caller{Subject: "alice", Name: "Alice", Groups: []string{"eng"}, Method: identity.MethodSession, Issuer: "https://idp.test"}
	p := &provider{callers: map[string]*identity.Caller{"alice-code": alice}}
	ps := startPageServer(t, p, identity.NewSessions(identity.SessionOptions{MaxAge: 2 * time.Hour}), gateway.Security{Loopback: true}, "")

	ex := ps.do(t, http.MethodGet, "/api/who", nil, nil)
	if kind, login := apiError(t, ex.body); ex.status != http.StatusUnauthorized || kind != "unauthorized" || login != gateway.LoginPath {
		t.Fatalf("without a credential: %d %s", ex.status, ex.body)
	}
	login, cb := ps.logIn(t, "alice-code")
	if !login.HttpOnly || login.Secure || login.SameSite != http.SameSiteLaxMode || login.Path != "/auth/" || login.Name != "toolmux_login" ||
		login.MaxAge != int(identity.DefaultLoginTimeout.Seconds()) {
		t.Errorf("the login cookie: %+v", login)
	}
	if got := p.reqs[mustState(t, p)].RedirectURL; got != ps.URL+gateway.CallbackPath {
		t.Errorf("redirect URI %q, want the gateway's own %s", got, ps.URL+gateway.CallbackPath)
	}
	if cb.status != http.StatusSeeOther || cb.header.Get("Location") != "/" || cb.header.Get("Cache-Control") != "no-store" || cb.header.Get("Referrer-Policy") != "no-referrer" {
		t.Fatalf("the callback: %d %v %s", cb.status, cb.header, cb.body)
	}
	session, csrf := cb.cookies["toolmux_session"], cb.cookies["toolmux_csrf"]
	if session == nil || csrf == nil {
		t.Fatalf("the callback's cookies: %v", cb.cookies)
	}
	if !session.HttpOnly || session.Secure || session.SameSite != http.SameSiteLaxMode || session.Path != "/" || session.MaxAge != 2*60*60 ||
		!identity.WellFormedSessionID(session.Value) {
		t.Errorf("the session cookie: %+v", session)
	}
	if csrf.HttpOnly || csrf.Secure || csrf.SameSite != http.SameSiteLaxMode || csrf.Path != "/" || csrf.MaxAge != 2*60*60 || csrf.Value == session.Value {
		t.Errorf("the CSRF cookie: %+v", csrf)
	}
	if c := cb.cookies["toolmux_login"]; c == nil || c.MaxAge >= 0 {
		t.Errorf("the callback did not drop the login cookie: %+v", c)
	}
	jar := []*http.Cookie{session, csrf}
	// Logging in again in the same browser ends the session it had.
	start := ps.do(t, http.MethodGet, gateway.LoginPath, nil, nil)
	where, _ := url.Parse(start.header.Get("Location"))
	again := ps.do(t, http.MethodGet, gateway.CallbackPath+"?"+url.Values{"state": {where.Query().Get("state")}, "code": {"alice-code"}}.Encode(),
		[]*http.Cookie{start.cookies["toolmux_login"], session}, nil)
	if again.status != http.StatusSeeOther || again.cookies["toolmux_session"] == nil {
		t.Fatalf("a second login: %d %s", again.status, again.body)
	}
	if ex := ps.do(t, http.MethodGet, "/api/who", jar, nil); ex.status != http.StatusUnauthorized {
		t.Errorf("the session of before a second login: %d", ex.status)
	}
	session, csrf = again.cookies["toolmux_session"], again.cookies["toolmux_csrf"]
	jar = []*http.Cookie{session, csrf}

	who := func(ex exchange) string {
		var v struct {
			Method string
			Caller *identity.Caller
		}
		if ex.status != http.StatusOK || json.Unmarshal([]byte(ex.body), &v) != nil || v.Caller == nil {
			return ""
		}
		return v.Method + " " + v.Caller.Name + " " + v.Caller.Method
	}
	if got := who(ps.do(t, http.MethodGet, "/api/who", jar, nil)); got != "GET Alice session" {
		t.Errorf("GET with the session: %q", got)
	}
	if ex := ps.do(t, http.MethodGet, "/", jar, map[string]string{"Accept": "text/plain"}); ex.status != http.StatusOK || !strings.Contains(ex.body, "/mcp") {
		t.Errorf("the index with the session: %d %s", ex.status, ex.body)
	}
	for _, method := range []string{http.MethodPost, http.MethodDelete, http.MethodPut, http.MethodPatch} {
		for what, h := range map[string]map[string]string{
			"no CSRF token":      nil,
			"another's token":    {gateway.CSRFHeader: identity.RandomToken()},
			"the session's id":   {gateway.CSRFHeader: session.Value},
			"an empty token":     {gateway.CSRFHeader: ""},
			"the token, mangled": {gateway.CSRFHeader: csrf.Value + "x"},
		} {
			ex := ps.do(t, method, "/api/who", jar, h)
			if kind, _ := apiError(t, ex.body); ex.status != http.StatusForbidden || kind != "forbidden" || !strings.Contains(ex.body, gateway.CSRFHeader) {
				t.Errorf("%s with %s: %d %s", method, what, ex.status, ex.body)
			}
		}
		if got := who(ps.do(t, method, "/api/who", jar, map[string]string{gateway.CSRFHeader: csrf.Value})); got != method+" Alice session" {
			t.Errorf("%s with the CSRF token: %q", method, got)
		}
	}
	// Sent twice, even the right token is refused: which one was meant?
	req, _ := http.NewRequest(http.MethodPost, ps.URL+"/api/who", nil)
	req.AddCookie(session)
	req.Header.Add(gateway.CSRFHeader, csrf.Value)
	req.Header.Add(gateway.CSRFHeader, csrf.Value)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("the CSRF token twice: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}
	// A bearer credential decides, the cookie beside it or not; it needs
	// no CSRF token.
	if got := who(ps.do(t, http.MethodPost, "/api/who", jar, map[string]string{"Authorization": "Bearer " + ps.key})); got != "POST ci key" {
		t.Errorf("POST with a key and the session's cookie: %q", got)
	}
	if ex := ps.do(t, http.MethodGet, "/api/who", jar, map[string]string{"Authorization": "Bearer wrong"}); ex.status != http.StatusUnauthorized {
		t.Errorf("a wrong bearer credential with the session's cookie: %d", ex.status)
	}
	// The MCP routes and the metrics take no cookie.
	for _, route := range []struct{ method, path string }{{http.MethodPost, "/mcp"}, {http.MethodGet, "/metrics"}} {
		if ex := ps.do(t, route.method, route.path, jar, map[string]string{gateway.CSRFHeader: csrf.Value}); ex.status != http.StatusUnauthorized {
			t.Errorf("%s %s with the session: %d %s", route.method, route.path, ex.status, ex.body)
		}
	}
	// A cookie of no session: refused, told where to log in, dropped.
	for _, forged := range []string{identity.RandomToken(), "garbage", session.Value[1:] + "A"} {
		ex := ps.do(t, http.MethodGet, "/api/who", []*http.Cookie{{Name: "toolmux_session", Value: forged}}, nil)
		if kind, login := apiError(t, ex.body); ex.status != http.StatusUnauthorized || kind != "unauthorized" || login != gateway.LoginPath {
			t.Errorf("a forged session %q: %d %s", forged, ex.status, ex.body)
		}
		if c := ex.cookies["toolmux_session"]; c == nil || c.MaxAge >= 0 {
			t.Errorf("a forged session %q is not dropped: %+v", forged, c)
		}
	}
	// A cookie named as beyond loopback is no cookie here.
	if ex := ps.do(t, http.MethodGet, "/api/who", []*http.Cookie{{Name: "__Host-toolmux_session", Value: session.Value}}, nil); ex.status != http.StatusUnauthorized {
		t.Errorf("the session under the __Host- name on loopback: %d", ex.status)
	}

	// Logging out needs the CSRF token; then the session is no more.
	if ex := ps.do(t, http.MethodPost, gateway.LogoutPath, jar, nil); ex.status != http.StatusForbidden {
		t.Errorf("a logout without the CSRF token: %d %s", ex.status, ex.body)
	}
	if got := who(ps.do(t, http.MethodGet, "/api/who", jar, nil)); got == "" {
		t.Error("a logout without the CSRF token ended the session")
	}
	out := ps.do(t, http.MethodPost, gateway.LogoutPath, jar, map[string]string{gateway.CSRFHeader: csrf.Value})
	if out.status != http.StatusNoContent || out.cookies["toolmux_session"] == nil || out.cookies["toolmux_session"].MaxAge >= 0 ||
		out.cookies["toolmux_csrf"] == nil || out.cookies["toolmux_csrf"].MaxAge >= 0 {
		t.Errorf("the logout: %d %v", out.status, out.cookies)
	}
	if ex := ps.do(t, http.MethodGet, "/api/who", jar, nil); ex.status != http.StatusUnauthorized {
		t.Errorf("after the logout: %d %s", ex.status, ex.body)
	}
	if ex := ps.do(t, http.MethodGet, gateway.LogoutPath, jar, nil); ex.status != http.StatusMethodNotAllowed {
		t.Errorf("GET /auth/logout: %d", ex.status)
	}
}

func mustState(t *testing.T, p *provider) string {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.reqs {
		return s
	}
	t.Fatal("the provider was asked nothing")
	return ""
}

// A callback is refused, and starts no session, when the browser began
// no login, when its state is not the login's, when the login cookie is
// another gateway's, expired or tampered with, when the provider said no
// (its words shown), refused the code, or could not be reached (503); a
// login that could not start says so.
func TestPageLoginRefused(t *testing.T) {
	p := &provider{callers: map[string]*identity.Caller{"good": {Subject: "bob", Name: "Bob", Method: identity.MethodSession}}}
	ps := startPageServer(t, p, identity.NewSessions(identity.SessionOptions{}), gateway.Security{Loopback: true}, "")
	other := startPageServer(t, p, identity.NewSessions(identity.SessionOptions{}), gateway.Security{Loopback: true}, "")
	callback := func(login *http.Cookie, q url.Values) exchange {
		var cookies []*http.Cookie
		if login != nil {
			cookies = append(cookies, login)
		}
		return ps.do(t, http.MethodGet, gateway.CallbackPath+"?"+q.Encode(), cookies, nil)
	}
	// start begins a login at s and returns its cookie and state.
	start := func(s *pageServer) (*http.Cookie, string) {
		ex := s.do(t, http.MethodGet, gateway.LoginPath, nil, nil)
		where, _ := url.Parse(ex.header.Get("Location"))
		return ex.cookies["toolmux_login"], where.Query().Get("state")
	}
	refused := func(what string, ex exchange, status int, says string) {
		t.Helper()
		if ex.status != status || !strings.Contains(ex.body, says) || ex.cookies["toolmux_session"] != nil {
			t.Errorf("%s: %d %q %v", what, ex.status, ex.body, ex.cookies)
		}
	}

	login, state := start(ps)
	refused("no login cookie", callback(nil, url.Values{"state": {state}, "code": {"good"}}), http.StatusBadRequest, "started no login")
	refused("another state", callback(login, url.Values{"state": {identity.RandomToken()}, "code": {"good"}}), http.StatusBadRequest, "not of the login this browser began")
	refused("no state", callback(login, url.Values{"code": {"good"}}), http.StatusBadRequest, "not of the login this browser began")
	otherLogin, otherState := start(other)
	refused("another gateway's login", callback(otherLogin, url.Values{"state": {otherState}, "code": {"good"}}), http.StatusBadRequest, "took longer")
	tampered := *login
	tampered.Value = login.Value[:len(login.Value)-2] + "AA"
	refused("a tampered login cookie", callback(&tampered, url.Values{"state": {state}, "code": {"good"}}), http.StatusBadRequest, "took longer")
	refused("the provider said no", callback(login, url.Values{"state": {state}, "error": {"access_denied"}, "error_description": {"The user said no"}}),
		http.StatusForbidden, `the provider refused the login: "access_denied" ("The user said no")`)
	refused("a code refused", callback(login, url.Values{"state": {state}, "code": {"bad"}}), http.StatusUnauthorized, "invalid_grant")
	refused("no code", callback(login, url.Values{"state": {state}}), http.StatusBadRequest, "no code")
	// The login cookie lasts the login's timeout.
	ps.login.SetNowForTest(func() time.Time { return time.Now().Add(identity.DefaultLoginTimeout) })
	refused("an expired login", callback(login, url.Values{"state": {state}, "code": {"good"}}), http.StatusBadRequest, "took longer")
	ps.login.SetNowForTest(time.Now)
	if ex := callback(login, url.Values{"state": {state}, "code": {"good"}}); ex.status != http.StatusSeeOther || ex.cookies["toolmux_session"] == nil {
		t.Errorf("the login itself: %d %s", ex.status, ex.body)
	}
	// The provider unreachable: a login can neither start nor finish.
	p.down = true
	if ex := ps.do(t, http.MethodGet, gateway.LoginPath, nil, nil); ex.status != http.StatusServiceUnavailable || ex.header.Get("Retry-After") == "" ||
		ex.cookies["toolmux_login"] != nil {
		t.Errorf("a login with the provider down: %d %s", ex.status, ex.body)
	}
}

// Beyond loopback, or behind an https resource, the cookies are Secure
// and named __Host- (the login's __Secure-, as it is for /auth/ only); the
// redirect URI is on the resource; a session cookie of the loopback's name
// is none.
func TestPageLoginSecure(t *testing.T) {
	alice := &identity.Caller{Subject: "alice", Name: "Alice", Method: identity.MethodSession}
	for _, c := range []struct {
		what     string
		sec      gateway.Security
		resource string
	}{
		{"beyond loopback", gateway.Security{}, ""},
		{"an https resource", gateway.Security{Loopback: true}, "https://gw.example.com"},
	} {
		t.Run(c.what, func(t *testing.T) {
			p := &provider{callers: map[string]*identity.Caller{"code": alice}}
			ps := startPageServer(t, p, identity.NewSessions(identity.SessionOptions{}), c.sec, c.resource)
			login, cb := ps.logIn(t, "code")
			if login.Name != "__Secure-toolmux_login" || !login.Secure || !login.HttpOnly || login.Path != "/auth/" {
				t.Errorf("the login cookie: %+v", login)
			}
			want := ps.URL + gateway.CallbackPath
			if c.resource != "" {
				want = c.resource + gateway.CallbackPath
			}
			if got := p.reqs[mustState(t, p)].RedirectURL; got != want {
				t.Errorf("redirect URI %q, want %q", got, want)
			}
			session, csrf := cb.cookies["__Host-toolmux_session"], cb.cookies["__Host-toolmux_csrf"]
			if session == nil || csrf == nil || !session.Secure || !session.HttpOnly || session.Path != "/" || session.Domain != "" ||
				!csrf.Secure || csrf.HttpOnly || csrf.Path != "/" || session.SameSite != http.SameSiteLaxMode || csrf.SameSite != http.SameSiteLaxMode {
				t.Fatalf("the session's cookies: %d %v", cb.status, cb.cookies)
			}
			if ex := ps.do(t, http.MethodGet, "/api/who", []*http.Cookie{session}, nil); ex.status != http.StatusOK {
				t.Errorf("with the session: %d %s", ex.status, ex.body)
			}
			if ex := ps.do(t, http.MethodGet, "/api/who", []*http.Cookie{{Name: "toolmux_session", Value: session.Value}}, nil); ex.status != http.StatusUnauthorized {
				t.Errorf("the session under the loopback's name: %d", ex.status)
			}
		})
	}
}

// A session lasts its max age; the sessions are bounded, one more ending
// the oldest (its cookie refused).
func TestPageSessionsBounded(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	p := &provider{callers: map[string]*identity.Caller{"a": {Subject: "a", Name: "A"}, "b": {Subject: "b", Name: "B"}, "c": {Subject: "c", Name: "C"}}}
	ps := startPageServer(t, p, identity.NewSessions(identity.SessionOptions{MaxAge: time.Hour, MaxEntries: 2, Now: clock}), gateway.Security{Loopback: true}, "")
	session := map[string]*http.Cookie{}
	for _, code := range []string{"a", "b", "c"} {
		_, cb := ps.logIn(t, code)
		session[code] = cb.cookies["toolmux_session"]
	}
	status := func(code string) int {
		return ps.do(t, http.MethodGet, "/api/who", []*http.Cookie{session[code]}, nil).status
	}
	if status("a") != http.StatusUnauthorized || status("b") != http.StatusOK || status("c") != http.StatusOK {
		t.Errorf("three sessions, two kept: a %d, b %d, c %d", status("a"), status("b"), status("c"))
	}
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	if status("c") != http.StatusUnauthorized {
		t.Error("a session lasts past its max age")
	}
}

// Without a login for the page, a 401 says nowhere to log in (the page
// asks for a key, as before), and there are no login routes; the cookie
// of a session is nothing.
func TestNoPageLogin(t *testing.T) {
	g := builtinGateway(t, t.TempDir(), gateway.Options{API: whoAPI})
	key := identity.NewKeySecret()
	srv := httptest.NewServer(g.MuxAuth(gateway.Auth{Verifier: identity.NewKeys(identity.Key{Name: "ci", Hash: identity.HashKey(key)})}, gateway.Security{Loopback: true}))
	defer srv.Close()
	ps := &pageServer{Server: srv}
	ex := ps.do(t, http.MethodGet, "/api/who", []*http.Cookie{{Name: "toolmux_session", Value: identity.RandomToken()}}, nil)
	if kind, login := apiError(t, ex.body); ex.status != http.StatusUnauthorized || kind != "unauthorized" || login != "" || ex.cookies["toolmux_session"] != nil {
		t.Errorf("without a credential: %d %s %v", ex.status, ex.body, ex.cookies)
	}
	for _, path := range []string{gateway.LoginPath, gateway.CallbackPath} {
		if ex := ps.do(t, http.MethodGet, path, nil, nil); ex.status != http.StatusNotFound {
			t.Errorf("%s without a login: %d", path, ex.status)
		}
	}
}
