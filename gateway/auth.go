package gateway

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/identity"
)

// Who may call the gateway (docs/identity.md). Every route but the page's
// files and the protected resource metadata is behind Auth: a request's
// bearer credential is verified (an API key, a JWT of a trusted issuer, a
// token introspected at its issuer: identity.Verifier), its caller put in
// the request's context (identity.From) for every decision after, and a
// request refused says why in a WWW-Authenticate challenge (RFC 6750)
// naming the protected resource metadata (RFC 9728), which is how an MCP
// client learns where to get a token. The credential itself goes no
// further: it is never passed upstream, logged or recorded. An issuer's
// access token, once verified, stays in the request's context
// (identity.TokenFrom) for token exchange to trade at its issuer, and
// nowhere else.

// Auth configures who may call the gateway. The zero value lets every
// request through without a caller (a gateway on loopback).
type Auth struct {
	// Verifier verifies a request's bearer credential; nil: no
	// authentication.
	Verifier identity.Verifier
	// Resource is the gateway's canonical URL, scheme and authority
	// ("https://gw.example.com"): the resource its tokens are issued for,
	// each route's being it and the route's path. "" takes it from each
	// request (its Host, http unless behind TLS).
	Resource string
	// AuthorizationServers are the issuers the protected resource
	// metadata names, where clients get tokens; with none, no metadata is
	// served (API keys only).
	AuthorizationServers []string
	// Audiences are accepted in a token's aud besides the resource and
	// the route's URL.
	Audiences []string
	// IssuerAudiences are accepted in the aud of a token of the issuer
	// they are keyed by (its Caller.Issuer), besides Audiences.
	IssuerAudiences map[string][]string
	// Scopes must all be granted by a token (an API key is not held to
	// them).
	Scopes []string
	// Required, when set, says whether a request must carry a credential
	// now; while it says no, requests pass without a caller, as without a
	// Verifier. serve sets it when it starts with no API key and no
	// token, so that the first key added turns authentication on.
	Required func() bool
	// Page, when set, is the web page's login: its session cookie
	// authenticates the page's requests to the API (/api/ and the index)
	// besides a bearer credential (page.go).
	Page *PageLogin
	// Upstream, when set, are the routes of the gateway as the OAuth
	// client of its upstream servers on its callers' behalf (package
	// upstreamauth).
	Upstream *UpstreamRoutes

	// page is Page as MuxAuth serves it (whether its cookies are Secure).
	page *pageAuth
	// log receives why a credential could not be checked (MuxAuth sets
	// the gateway's).
	log *slog.Logger
}

// TokenAuth is the Auth of one static bearer token (serve --token): an
// API key named "default" in group admin, which sees everything, as the
// holder of the token always did.
func TokenAuth(token string) Auth { return TokenAuthIn(token, AdminGroup) }

// TokenAuthIn is TokenAuth whose caller is in group (the admin group
// auth.admin_group names).
func TokenAuthIn(token, group string) Auth {
	if token == "" {
		return Auth{}
	}
	return Auth{Verifier: &staticToken{want: []byte(token), group: group}}
}

// TokenVerifier verifies the static token of serve --token among other
// verifiers (identity.Verifiers): its caller is TokenAuth's, and any
// other credential is not its own (identity.ErrNotMine), for the next
// verifier to know.
func TokenVerifier(token string) identity.Verifier {
	return TokenVerifierIn(token, AdminGroup)
}

// TokenVerifierIn is TokenVerifier whose caller is in group (the admin
// group auth.admin_group names).
func TokenVerifierIn(token, group string) identity.Verifier {
	return &staticToken{want: []byte(token), amongOthers: true, group: group}
}

// staticToken verifies the one token of TokenAuth, compared in constant
// time (it is the user's choice, of any form).
type staticToken struct {
	want        []byte
	amongOthers bool
	group       string // "": AdminGroup
}

func (s *staticToken) Verify(_ context.Context, token string) (*identity.Caller, error) {
	if subtle.ConstantTimeCompare([]byte(token), s.want) != 1 {
		if s.amongOthers {
			return nil, identity.ErrNotMine
		}
		return nil, &identity.Error{Kind: identity.KindInvalid, Message: "wrong bearer token"}
	}
	group := s.group
	if group == "" {
		group = AdminGroup
	}
	return &identity.Caller{Subject: identity.KeySubject("default"), Name: "default", Groups: []string{group}, Method: identity.MethodKey}, nil
}

// AuthFromConfig is the Auth of the `auth:` section (docs/identity.md):
// its resource, its issuers (the authorization servers the protected
// resource metadata names) and the audiences each accepts, its scopes;
// credentials verified by v, which the caller builds from the section
// (identity.FromConfig, the API keys, --token).
func AuthFromConfig(c config.Auth, v identity.Verifier) Auth {
	a := Auth{Verifier: v, Resource: c.Resource, Scopes: c.Scopes}
	for _, is := range c.Issuers {
		a.AuthorizationServers = append(a.AuthorizationServers, is.Issuer)
		if len(is.Audiences) > 0 {
			if a.IssuerAudiences == nil {
				a.IssuerAudiences = map[string][]string{}
			}
			a.IssuerAudiences[is.Issuer] = is.Audiences
		}
	}
	return a
}

// UpstreamRoutes are the routes of the gateway as the OAuth client of its
// upstream servers (docs/identity.md, "Per-user OAuth"). They are served
// without a bearer credential: the callback is reached by a user's
// browser coming back from an authorization server, and is protected by
// its state, random, single use, expiring, and bound to the caller who
// started the authorization; when the browser has a session of the page
// (auth.page), it must be that caller's.
type UpstreamRoutes struct {
	// CallbackPath is where Callback is mounted.
	CallbackPath string
	// Callback returns the callback's handler; session gives the key
	// (identity.Caller.Key) of the caller whose page session the request
	// carries, "" when none.
	Callback func(session func(*http.Request) string) http.Handler
	// MetadataPath is where Metadata, when set, is mounted: the gateway's
	// Client ID Metadata Document.
	MetadataPath string
	Metadata     http.Handler
}

// sessionKey returns the key of the caller of r's page session, "" when r
// has none (no page login, no cookie, a session ended).
func (a Auth) sessionKey(r *http.Request) string {
	if a.page == nil {
		return ""
	}
	c, found, err := a.page.sessionOf(r)
	if !found || err != nil {
		return ""
	}
	return c.Key()
}

// AdminGroup is the group whose members see everything (every caller's
// tasks, approvals and listings).
const AdminGroup = identity.AdminGroup

// routeKind says how a route answers a refusal: a JSON-RPC error on the
// MCP routes, the API's error object elsewhere.
type routeKind int

const (
	mcpRoute routeKind = iota
	apiRoute
	// pageRoute is a route of the API the web page calls: it takes the
	// page's session cookie too.
	pageRoute
)

// metadataPath is where the protected resource metadata is served (RFC
// 9728 section 3: the well-known path inserted before the resource's
// path).
const metadataPath = "/.well-known/oauth-protected-resource"

// resourceOf returns the gateway's resource URL for r: Auth.Resource, or
// the request's own scheme and host.
func (a Auth) resourceOf(r *http.Request) string {
	if a.Resource != "" {
		return strings.TrimSuffix(a.Resource, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// authenticate wraps h so that a request's caller is verified and carried
// in its context, or the request refused.
func (a Auth) authenticate(kind routeKind, h http.Handler) http.Handler {
	if !a.on() {
		return h
	}
	var page *pageAuth
	if kind == pageRoute {
		page = a.page
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.Required != nil && !a.Required() {
			h.ServeHTTP(w, r)
			return
		}
		var c *identity.Caller
		var err error
		found := false
		// A bearer credential, when sent, decides; else the page's
		// session cookie, where the page is served.
		if page != nil && r.Header.Get("Authorization") == "" {
			c, found, err = page.sessionOf(r)
		}
		if !found {
			c, err = a.verify(r)
		}
		if _, ok := errors.AsType[*csrfError](err); ok {
			refuseCSRF(w, err)
			return
		}
		if err != nil {
			if found {
				// Whatever the cookie was, it is no session: drop it.
				page.clearSession(w, page.secureFor(r))
			}
			a.refuse(w, r, kind, err)
			return
		}
		ctx := identity.With(r.Context(), c)
		if !found && c != nil && (c.Method == identity.MethodJWT || c.Method == identity.MethodIntrospection) {
			// An issuer's access token, verified: kept in the request's
			// context (only there) for token exchange, which trades it
			// at its issuer for a token of an upstream server. An API
			// key is no token an issuer would take, and is not kept.
			if token, ok := bearerToken(r.Header.Get("Authorization")); ok {
				ctx = identity.WithToken(ctx, token)
			}
		}
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// on reports whether requests are authenticated at all: a verifier of
// bearer credentials, or the page's login.
func (a Auth) on() bool { return a.Verifier != nil || a.Page != nil }

// verify returns the caller of r's credential, checked against the
// resource r asks for and the scopes required.
func (a Auth) verify(r *http.Request) (*identity.Caller, error) {
	token, ok := bearerToken(r.Header.Get("Authorization"))
	if !ok {
		msg := "no bearer credential: send Authorization: Bearer TOKEN (an API key, or an access token of an issuer the gateway trusts)"
		if a.Page != nil {
			msg += ", or log in on the web page (" + LoginPath + ")"
		}
		return nil, &identity.Error{Kind: identity.KindMissing, Message: msg}
	}
	if a.Verifier == nil {
		return nil, &identity.Error{Kind: identity.KindInvalid, Message: "this gateway takes no bearer credential (no API key, --token or auth.issuers): log in on the web page (" + LoginPath + ")"}
	}
	c, err := a.Verifier.Verify(r.Context(), token)
	if err != nil {
		return nil, err
	}
	if c.Method == identity.MethodKey {
		return c, nil
	}
	// A token is for the resources its aud names (RFC 8707): the gateway,
	// the route asked for, or an audience configured.
	base := a.resourceOf(r)
	ok = slices.ContainsFunc(c.Audience, func(aud string) bool {
		aud = strings.TrimSuffix(aud, "/")
		return aud == base || aud == base+r.URL.Path || slices.Contains(a.Audiences, aud) || slices.Contains(a.IssuerAudiences[c.Issuer], aud)
	})
	if !ok {
		return nil, &identity.Error{Kind: identity.KindAudience, Message: fmt.Sprintf(
			"the token was issued for %s, not for this gateway (%s): get a token with resource=%s", quoteList(c.Audience), base, base)}
	}
	for _, s := range a.Scopes {
		if !slices.Contains(c.Scopes, s) {
			return nil, &identity.Error{Kind: identity.KindScope, Scope: strings.Join(a.Scopes, " "),
				Message: fmt.Sprintf("the token does not grant the scope %q", s)}
		}
	}
	return c, nil
}

func quoteList(l []string) string {
	if len(l) == 0 {
		return "no audience"
	}
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// refuse answers a request whose credential was refused (err): the
// status of its kind, a WWW-Authenticate challenge naming the protected
// resource metadata, and the route's kind of error body.
func (a Auth) refuse(w http.ResponseWriter, r *http.Request, kind routeKind, err error) {
	k := identity.KindOf(err)
	challenge := `Bearer realm="toolmux"`
	if len(a.AuthorizationServers) > 0 {
		challenge += fmt.Sprintf(`, resource_metadata="%s%s%s"`, a.resourceOf(r), metadataPath, r.URL.Path)
	}
	if code := k.OAuthError(); code != "" {
		challenge += fmt.Sprintf(`, error="%s", error_description=%s`, code, quoteHeader(err.Error()))
	}
	if e, ok := err.(*identity.Error); ok && e.Scope != "" {
		challenge += fmt.Sprintf(`, scope="%s"`, e.Scope)
	}
	h := w.Header()
	h.Set("WWW-Authenticate", challenge)
	h.Set("Cache-Control", "no-store")
	status := k.Status()
	if status == http.StatusServiceUnavailable {
		h.Set("Retry-After", "5")
	}
	msg := "toolmux: " + err.Error()
	if e, ok := errors.AsType[*identity.Error](err); ok && k == identity.KindUnavailable {
		// Why the issuer could not be asked (its address, the network's
		// error) is for the operator, not for whoever sent the request.
		msg = "toolmux: " + e.Message
		if a.log != nil {
			a.log.Warn("a credential could not be checked", "route", r.URL.Path, "error", err)
		}
	}
	if kind == mcpRoute {
		writeRPCError(w, status, nil, codeServerError, msg)
		return
	}
	login := ""
	if kind == pageRoute && a.Page != nil && status == http.StatusUnauthorized {
		// The page offers to log in where the answer says.
		login = LoginPath
	}
	writeAPIError(w, status, authErrorKind(k), msg, login)
}

// authErrorKind is the API's error kind of a refused credential.
func authErrorKind(k identity.Kind) string {
	switch k {
	case identity.KindScope:
		return "forbidden"
	case identity.KindUnavailable:
		return "unavailable"
	}
	return "unauthorized"
}

// metadata serves the protected resource metadata of the gateway (at
// metadataPath) and of each route (below it, the route's path), naming
// the authorization servers; nil without any.
func (a Auth) metadata() http.Handler {
	if !a.on() || len(a.AuthorizationServers) == 0 {
		return nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodOptions {
			// Refused in the API's error shape, not the go-sdk's plain
			// text.
			w.Header().Set("Allow", "GET, OPTIONS")
			writeAPIError(w, http.StatusMethodNotAllowed, "method_not_allowed", "toolmux: "+metadataPath+" answers GET only", "")
			return
		}
		resource := a.resourceOf(r) + strings.TrimPrefix(r.URL.Path, metadataPath)
		sdkauth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
			Resource:               resource,
			AuthorizationServers:   a.AuthorizationServers,
			ScopesSupported:        a.Scopes,
			BearerMethodsSupported: []string{"header"},
			ResourceName:           "toolmux",
		}).ServeHTTP(w, r)
	})
}
