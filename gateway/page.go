package gateway

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/toolmux/toolmux/identity"
)

// The web page's login (docs/identity.md, "The page logs in"). With a
// PageLogin, a person opens the page, is sent to log in at the OpenID
// Connect provider (/auth/login), comes back with a code
// (/auth/callback), and is given a session: a random id in a cookie the
// page's scripts cannot read, which authenticates the page's requests to
// the API (/api/, and the index at /) instead of a bearer credential.
// The MCP routes and /metrics never take the cookie: they are for clients
// that send a credential of their own.
//
// A cookie is sent by the browser with any request to the gateway,
// whichever site made it, so a request that changes something
// (any method but GET, HEAD and OPTIONS) must also carry the session's
// CSRF token in the X-CSRF-Token header: the page reads it from a cookie
// of its own (not HttpOnly), which another site can neither read nor
// send as a header. A request with a bearer credential carries nothing
// ambient, and is not asked for it.
//
// Between /auth/login and /auth/callback the login's state, nonce and
// PKCE verifier are kept in the browser, in a cookie sealed (AES-GCM) with
// a key of this gateway's that lives as long as it does, and that expires
// with the login: nothing is kept on the gateway for a login that never
// comes back, and the callback is that browser's only (a code sent to
// another browser finds no cookie there, so nobody can be logged in as
// someone else by following a link).

// The page's login routes.
const (
	LoginPath    = "/auth/login"
	CallbackPath = "/auth/callback"
	LogoutPath   = "/auth/logout"
)

// CSRFHeader is the header a request of the page that changes something
// carries the session's CSRF token in.
const CSRFHeader = "X-CSRF-Token"

// Cookie names. Beyond loopback the cookies are Secure and take the
// __Host- prefix (the login's, limited to /auth/, __Secure-), which a
// browser accepts only over TLS, from the host itself, for the whole
// host: a page of a sibling domain, or one served in the clear, cannot
// set them.
const (
	sessionCookie = "toolmux_session"
	csrfCookie    = "toolmux_csrf"
	loginCookie   = "toolmux_login"
)

// cookieName is the name of cookie base as this request's cookies are
// named.
func cookieName(base string, secure bool) string {
	if !secure {
		return base
	}
	if base == loginCookie {
		return "__Secure-" + base
	}
	return "__Host-" + base
}

// loginProvider is the OpenID Connect client of the page's login
// (identity.Login).
type loginProvider interface {
	Issuer() string
	AuthCodeURL(ctx context.Context, req identity.LoginRequest) (string, error)
	Finish(ctx context.Context, req identity.LoginRequest, code string) (*identity.Caller, error)
}

// PageLogin is the web page's login and its sessions (Auth.Page).
type PageLogin struct {
	login        loginProvider
	sessions     *identity.Sessions
	loginTimeout time.Duration
	now          func() time.Time
	// seal seals the login cookie; its key is made by NewPageLogin and
	// never leaves memory.
	seal cipher.AEAD
}

// NewPageLogin returns the page's login with login (an identity.Login),
// its sessions kept in sessions, a login at the provider taking at most
// loginTimeout (0: identity.DefaultLoginTimeout).
func NewPageLogin(login loginProvider, sessions *identity.Sessions, loginTimeout time.Duration) *PageLogin {
	if loginTimeout <= 0 {
		loginTimeout = identity.DefaultLoginTimeout
	}
	var key [32]byte
	_, _ = rand.Read(key[:]) // never fails (crypto/rand)
	block, err := aes.NewCipher(key[:])
	if err != nil {
		panic("gateway: AES-256 with a key of 32 bytes: " + err.Error()) // cannot happen
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic("gateway: GCM of AES: " + err.Error()) // cannot happen
	}
	return &PageLogin{login: login, sessions: sessions, loginTimeout: loginTimeout, now: time.Now, seal: aead}
}

// Sessions returns the sessions of the page.
func (p *PageLogin) Sessions() *identity.Sessions { return p.sessions }

// pageAuth is the page's login as MuxAuth serves it: with whether its
// cookies are Secure everywhere (beyond loopback, or an https resource),
// and the Auth it belongs to (the resource its redirect URI is on).
type pageAuth struct {
	*PageLogin
	auth   Auth
	secure bool
	log    *slog.Logger
}

// secureFor reports whether the cookies of r are Secure: beyond loopback,
// behind an https resource, or over TLS.
func (p *pageAuth) secureFor(r *http.Request) bool { return p.secure || r.TLS != nil }

// csrfError is the refusal of a request of the page that changes
// something without the session's CSRF token.
type csrfError struct{ reason string }

func (e *csrfError) Error() string {
	return "a request of the page that changes something must carry the session's CSRF token in the " + CSRFHeader + " header (" + e.reason + ")"
}

// sessionOf returns the caller of r's session cookie; found is false when
// r has none (the bearer credential decides). A cookie of no session
// kept (forged, expired, ended by a logout or a restart) is refused as an
// invalid credential; a session's request that changes something without
// its CSRF token, with a *csrfError.
func (p *pageAuth) sessionOf(r *http.Request) (c *identity.Caller, found bool, err error) {
	secure := p.secureFor(r)
	ck, err := r.Cookie(cookieName(sessionCookie, secure))
	if err != nil {
		return nil, false, nil
	}
	s, ok := p.sessions.Get(ck.Value)
	if !ok {
		return nil, true, &identity.Error{Kind: identity.KindInvalid, Message: "the page's session has ended (it expired, was logged out, or the gateway restarted): log in again"}
	}
	if !safeMethod(r.Method) {
		if err := checkCSRF(s, r.Header.Values(CSRFHeader)); err != nil {
			return nil, true, err
		}
	}
	return s.Caller, true, nil
}

// checkCSRF checks the CSRF header values of a request of session s:
// exactly one, the session's token.
func checkCSRF(s *identity.Session, values []string) error {
	switch {
	case len(values) == 0:
		return &csrfError{reason: "none sent"}
	case len(values) > 1:
		return &csrfError{reason: "sent more than once"}
	case !s.CheckCSRF(values[0]):
		return &csrfError{reason: "not this session's"}
	}
	return nil
}

// safeMethod reports whether a request of method changes nothing (RFC
// 9110 section 9.2.1), so that a session's cookie alone may make it.
func safeMethod(method string) bool {
	return method == http.MethodGet || method == http.MethodHead || method == http.MethodOptions
}

// refuseCSRF answers a request refused by the CSRF check: 403, the API's
// error object.
func refuseCSRF(w http.ResponseWriter, err error) {
	writeAPIError(w, http.StatusForbidden, "forbidden", "toolmux: "+err.Error(), "")
}

// writeAPIError writes the API's error object, with where to log in when
// login is set.
func writeAPIError(w http.ResponseWriter, status int, kind, msg, login string) {
	e := map[string]string{"kind": kind, "message": msg}
	if login != "" {
		e["login"] = login
	}
	b, _ := json.Marshal(map[string]any{"error": e})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// only serves a route of one method (GET takes HEAD too, as the mux's
// patterns do); another is refused with 405.
func only(method string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method == method || method == http.MethodGet && r.Method == http.MethodHead {
			h(w, r)
			return
		}
		allow := method
		if method == http.MethodGet {
			allow += ", " + http.MethodHead
		}
		w.Header().Set("Allow", allow)
		writeAPIError(w, http.StatusMethodNotAllowed, "method_not_allowed", "toolmux: "+r.URL.Path+" answers "+allow+" only", "")
	}
}

// handler serves the login's routes.
func (p *pageAuth) handler() http.Handler {
	mux := http.NewServeMux()
	// Another path or method is refused in the API's error shape, not
	// the mux's plain text.
	mux.HandleFunc(LoginPath, only(http.MethodGet, p.serveLogin))
	mux.HandleFunc(CallbackPath, only(http.MethodGet, p.serveCallback))
	mux.HandleFunc(LogoutPath, only(http.MethodPost, p.serveLogout))
	mux.HandleFunc("/", serveNoRoute)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "no-store")
		// The callback's address holds the code and the state: no page
		// after it is told where it came from.
		h.Set("Referrer-Policy", "no-referrer")
		mux.ServeHTTP(w, r)
	})
}

// serveLogin starts a login: a new state, nonce and PKCE verifier, sealed
// in the login cookie, and the browser sent to the provider.
func (p *pageAuth) serveLogin(w http.ResponseWriter, r *http.Request) {
	secure := p.secureFor(r)
	req := identity.NewLoginRequest(p.auth.resourceOf(r) + CallbackPath)
	where, err := p.login.AuthCodeURL(r.Context(), req)
	if err != nil {
		p.loginFailed(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName(loginCookie, secure), Value: p.sealLogin(req, p.now().Add(p.loginTimeout)),
		Path: "/auth/", MaxAge: int(p.loginTimeout.Seconds()), HttpOnly: true, Secure: secure, SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, where, http.StatusFound)
}

// serveCallback finishes a login: the provider's answer checked against
// the login cookie, the code exchanged, a session started, the browser
// sent back to the page.
func (p *pageAuth) serveCallback(w http.ResponseWriter, r *http.Request) {
	secure := p.secureFor(r)
	name := cookieName(loginCookie, secure)
	// The login cookie is for one answer, whatever it is.
	http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: "/auth/", MaxAge: -1, HttpOnly: true, Secure: secure, SameSite: http.SameSiteLaxMode})
	ck, err := r.Cookie(name)
	if err != nil {
		loginError(w, http.StatusBadRequest, "this browser started no login (or it took longer than "+p.loginTimeout.String()+")")
		return
	}
	req, ok := p.openLogin(ck.Value)
	q := r.URL.Query()
	switch {
	case !ok:
		loginError(w, http.StatusBadRequest, "the login took longer than "+p.loginTimeout.String()+", or the gateway restarted since it began")
		return
	case !identity.WellFormedSessionID(q.Get("state")) || q.Get("state") != req.State:
		loginError(w, http.StatusBadRequest, "the provider's answer is not of the login this browser began (another login began since?)")
		return
	case q.Get("error") != "":
		// The person declined, or the provider refused the client: its
		// words, bounded, since they come through the address.
		msg := "the provider refused the login: " + quoteHeader(q.Get("error"))
		if d := q.Get("error_description"); d != "" {
			msg += " (" + quoteHeader(d) + ")"
		}
		loginError(w, http.StatusForbidden, msg)
		return
	case q.Get("code") == "":
		loginError(w, http.StatusBadRequest, "the provider's answer has no code")
		return
	}
	c, err := p.login.Finish(r.Context(), req, q.Get("code"))
	if err != nil {
		p.loginFailed(w, r, err)
		return
	}
	if old, err := r.Cookie(cookieName(sessionCookie, secure)); err == nil {
		// A browser logging in again leaves its old session behind: end
		// it, rather than keep it until its age.
		p.sessions.End(old.Value)
	}
	id, s := p.sessions.Start(c)
	maxAge := int(p.sessions.MaxAge().Seconds())
	http.SetCookie(w, &http.Cookie{Name: cookieName(sessionCookie, secure), Value: id,
		Path: "/", MaxAge: maxAge, HttpOnly: true, Secure: secure, SameSite: http.SameSiteLaxMode})
	// The CSRF token, for the page's scripts to read and send back.
	http.SetCookie(w, &http.Cookie{Name: cookieName(csrfCookie, secure), Value: s.CSRF,
		Path: "/", MaxAge: maxAge, Secure: secure, SameSite: http.SameSiteLaxMode})
	if p.log != nil {
		p.log.Info("the page logged in", "caller", s.Caller.Name, "issuer", s.Caller.Issuer, "until", s.Caller.Expires)
	}
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// serveLogout ends the request's session, and clears its cookies. It
// changes something, so the session's CSRF token is asked for.
func (p *pageAuth) serveLogout(w http.ResponseWriter, r *http.Request) {
	secure := p.secureFor(r)
	if ck, err := r.Cookie(cookieName(sessionCookie, secure)); err == nil {
		if s, ok := p.sessions.Get(ck.Value); ok {
			if err := checkCSRF(s, r.Header.Values(CSRFHeader)); err != nil {
				refuseCSRF(w, err)
				return
			}
			p.sessions.End(ck.Value)
		}
	}
	p.clearSession(w, secure)
	w.WriteHeader(http.StatusNoContent)
}

// clearSession tells the browser to drop the session's cookies.
func (p *pageAuth) clearSession(w http.ResponseWriter, secure bool) {
	http.SetCookie(w, &http.Cookie{Name: cookieName(sessionCookie, secure), Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: secure, SameSite: http.SameSiteLaxMode})
	http.SetCookie(w, &http.Cookie{Name: cookieName(csrfCookie, secure), Value: "", Path: "/", MaxAge: -1, Secure: secure, SameSite: http.SameSiteLaxMode})
}

// loginFailed answers a login the provider could not finish: 503 when it
// could not be asked (the operator reads why in the log), else 401.
func (p *pageAuth) loginFailed(w http.ResponseWriter, r *http.Request, err error) {
	status := identity.KindOf(err).Status()
	msg := err.Error()
	if e, ok := errors.AsType[*identity.Error](err); ok {
		msg = e.Message
	}
	if p.log != nil {
		p.log.Warn("a login of the page failed", "route", r.URL.Path, "error", err)
	}
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "5")
	}
	loginError(w, status, msg)
}

// loginError answers a login that failed: a sentence for the person, and
// where to begin again.
func loginError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	fmt.Fprintf(w, "toolmux: the login failed: %s.\nOpen the page again (/) to log in.\n", strings.TrimSuffix(msg, "."))
}

// The login cookie: the expiry (8 bytes, Unix seconds) and the login
// request's JSON, sealed with AES-GCM under the gateway's key (a random
// nonce before the ciphertext, the cookie's name as additional data), in
// base64url. Only this gateway can read it or make one it accepts.

// maxLoginCookie bounds the login cookie read: a login request is some
// hundreds of bytes (three tokens and the redirect URI).
const maxLoginCookie = 4096

// sealLogin returns the login cookie's value for req, good until until.
func (p *PageLogin) sealLogin(req identity.LoginRequest, until time.Time) string {
	plain := binary.BigEndian.AppendUint64(nil, uint64(until.Unix()))
	plain = append(plain, identity.MarshalLoginRequest(req)...)
	nonce := make([]byte, p.seal.NonceSize(), p.seal.NonceSize()+len(plain)+p.seal.Overhead())
	_, _ = rand.Read(nonce) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(p.seal.Seal(nonce, nonce, plain, []byte(loginCookie)))
}

// openLogin returns the login request of a login cookie's value, if this
// gateway sealed it and it has not expired.
func (p *PageLogin) openLogin(value string) (identity.LoginRequest, bool) {
	if len(value) > maxLoginCookie {
		return identity.LoginRequest{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil || len(b) < p.seal.NonceSize()+p.seal.Overhead() {
		return identity.LoginRequest{}, false
	}
	plain, err := p.seal.Open(nil, b[:p.seal.NonceSize()], b[p.seal.NonceSize():], []byte(loginCookie))
	if err != nil || len(plain) < 8 {
		return identity.LoginRequest{}, false
	}
	if until := int64(binary.BigEndian.Uint64(plain)); !p.now().Before(time.Unix(until, 0)) {
		return identity.LoginRequest{}, false
	}
	req, err := identity.UnmarshalLoginRequest(plain[8:])
	return req, err == nil
}
