package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// The web page's login (auth.page): the gateway is a confidential OpenID
// Connect client of a provider, and a person logs in with the
// authorization code flow and PKCE. Login makes the provider's
// authorization URL and turns the code it sends back into the person's
// caller: the code exchanged at the token endpoint (the client
// authenticated, the PKCE verifier sent), the ID token verified (its
// signature by the provider's keys, its issuer, its audience the client,
// its expiry, its nonce the login's), and the caller read from its claims
// as an access token's are (Claims). Where the login's state, nonce and
// verifier are kept between the two, and the session it starts, are the
// gateway's (gateway.PageLogin, Sessions). Discovery, keys and the code's
// exchange are go-oidc's and golang.org/x/oauth2's.

// MethodSession is the Method of a caller authenticated by a session of
// the web page, which a login with the page's provider started.
const MethodSession = "session"

// DefaultPageScopes are the scopes a login asks besides openid: the
// claims a person's name is read from.
var DefaultPageScopes = []string{"profile", "email"}

// LoginOptions configure the page's login. Zero values mean the defaults.
type LoginOptions struct {
	// Issuer is the provider's issuer identifier.
	Issuer string
	// ClientID and ClientSecret are the gateway's client at the provider.
	ClientID, ClientSecret string
	// Scopes are asked besides openid; nil: DefaultPageScopes.
	Scopes []string
	// Claims name the ID token's claims the caller is read from.
	Claims Claims
	// Timeout bounds one request to the provider.
	Timeout time.Duration
	// RetryInterval is the least time between two attempts at the
	// provider's discovery document after one failed.
	RetryInterval time.Duration
	// Transport makes the requests to the provider; nil:
	// http.DefaultTransport.
	Transport http.RoundTripper
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

func (o LoginOptions) withDefaults() LoginOptions {
	if o.Scopes == nil {
		o.Scopes = DefaultPageScopes
	}
	// The provider is reached as the issuers are.
	t := TokenOptions{Timeout: o.Timeout, JWKSRefetchInterval: o.RetryInterval, Transport: o.Transport, Now: o.Now}.withDefaults()
	o.Timeout, o.RetryInterval, o.Transport, o.Now = t.Timeout, t.JWKSRefetchInterval, t.Transport, t.Now
	o.Claims = o.Claims.withDefaults()
	return o
}

// Login is the page's OpenID Connect client. It is safe for concurrent
// use.
type Login struct {
	opts   LoginOptions
	client *http.Client

	mu       sync.Mutex
	provider *oidc.Provider // nil until discovered
	err      error          // the last failure, said again until next
	next     time.Time
}

// NewLogin returns the client of o. Nothing is fetched before the first
// login (or Check).
func NewLogin(o LoginOptions) *Login {
	o = o.withDefaults()
	t := &providerTransport{issuer: o.Issuer, base: o.Transport}
	return &Login{opts: o, client: &http.Client{Transport: t, Timeout: o.Timeout}}
}

// providerTransport makes the requests to the page's provider; a request
// that fails is an unavailableError, which go-oidc and x/oauth2 wrap, so
// that a provider that could not be reached is told from an ID token or a
// code that does not hold.
type providerTransport struct {
	issuer string
	base   http.RoundTripper
}

func (t *providerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, &unavailableError{issuer: t.issuer, what: req.URL.Path, err: err}
	}
	return resp, nil
}

// Issuer is the provider's issuer identifier.
func (l *Login) Issuer() string { return l.opts.Issuer }

// Check reaches the provider now (its discovery document), so that a
// provider that cannot be reached is said at start rather than at the
// first login.
func (l *Login) Check(ctx context.Context) error {
	_, err := l.discover(ctx)
	return err
}

// discover returns the provider, found by its discovery document (whose
// issuer go-oidc holds to the one configured); after a failure, it is
// tried again no sooner than RetryInterval.
func (l *Login) discover(ctx context.Context) (*oidc.Provider, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.provider != nil {
		return l.provider, nil
	}
	now := l.opts.Now()
	if l.err != nil && now.Before(l.next) {
		return nil, l.err
	}
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, l.client), l.opts.Issuer)
	if err != nil {
		l.err = &unavailableError{issuer: l.opts.Issuer, what: "the discovery document", err: err}
		l.next = now.Add(l.opts.RetryInterval)
		return nil, l.err
	}
	l.provider, l.err = p, nil
	return p, nil
}

// config is the OAuth client of the login, redirected to redirectURL.
func (l *Login) config(p *oidc.Provider, redirectURL string) *oauth2.Config {
	ep := p.Endpoint()
	// The client authenticates as its registration says; x/oauth2 finds
	// which (client_secret_basic, else client_secret_post) and remembers.
	ep.AuthStyle = oauth2.AuthStyleAutoDetect
	return &oauth2.Config{ClientID: l.opts.ClientID, ClientSecret: l.opts.ClientSecret, Endpoint: ep,
		RedirectURL: redirectURL, Scopes: append([]string{oidc.ScopeOpenID}, l.opts.Scopes...)}
}

// LoginRequest is what a login keeps between its start and the
// provider's answer: the state the answer must carry back, the nonce its
// ID token must hold, the PKCE verifier the code is exchanged with, and
// the redirect URI it was asked with.
type LoginRequest struct {
	State, Nonce, Verifier, RedirectURL string
}

// NewLoginRequest returns a login's random state, nonce and PKCE verifier,
// redirected to redirectURL.
func NewLoginRequest(redirectURL string) LoginRequest {
	return LoginRequest{State: randomToken(), Nonce: randomToken(), Verifier: oauth2.GenerateVerifier(), RedirectURL: redirectURL}
}

// AuthCodeURL returns the provider's authorization URL for req: where the
// browser is sent to log in.
func (l *Login) AuthCodeURL(ctx context.Context, req LoginRequest) (string, error) {
	p, err := l.discover(ctx)
	if err != nil {
		return "", loginUnavailable(err)
	}
	return l.config(p, req.RedirectURL).AuthCodeURL(req.State, oauth2.S256ChallengeOption(req.Verifier), oidc.Nonce(req.Nonce)), nil
}

// Finish exchanges code, the provider's answer to req, and returns the
// caller its ID token names (Method MethodSession, Issuer the provider).
// A refusal is an *Error: KindInvalid for a code or ID token that does
// not hold, KindUnavailable for a provider that could not be asked.
func (l *Login) Finish(ctx context.Context, req LoginRequest, code string) (*Caller, error) {
	p, err := l.discover(ctx)
	if err != nil {
		return nil, loginUnavailable(err)
	}
	tok, err := l.config(p, req.RedirectURL).Exchange(oidc.ClientContext(ctx, l.client), code, oauth2.VerifierOption(req.Verifier))
	if err != nil {
		if re, ok := errors.AsType[*oauth2.RetrieveError](err); ok && re.ErrorCode != "" {
			if re.ErrorCode == "invalid_client" || re.ErrorCode == "unauthorized_client" {
				return nil, &Error{Kind: KindInvalid, Message: fmt.Sprintf("the provider refused the gateway's client (%s): check auth.page's client_id and the secret of client_secret_env", re.ErrorCode), Err: err}
			}
			// The provider refused the code: used already, expired, of
			// another client, exchanged with another verifier.
			return nil, &Error{Kind: KindInvalid, Message: fmt.Sprintf("the provider refused the login's code (%s): log in again", re.ErrorCode), Err: err}
		}
		return nil, loginUnavailable(&unavailableError{issuer: l.opts.Issuer, what: "the token endpoint", err: err})
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return nil, &Error{Kind: KindInvalid, Message: "the provider sent no ID token (may the client ask for the scope openid?)"}
	}
	v := p.Verifier(&oidc.Config{ClientID: l.opts.ClientID, SupportedSigningAlgs: signingAlgs(), Now: l.opts.Now})
	idt, err := v.Verify(oidc.ClientContext(ctx, l.client), raw)
	if err != nil {
		if _, ok := errors.AsType[*unavailableError](err); ok {
			return nil, loginUnavailable(err)
		}
		if _, ok := errors.AsType[*oidc.TokenExpiredError](err); ok {
			return nil, &Error{Kind: KindExpired, Message: "the provider's ID token has expired already (is the gateway's clock right?)", Err: err}
		}
		return nil, &Error{Kind: KindInvalid, Message: "the provider's ID token does not verify", Err: err}
	}
	if len(idt.Nonce) != len(req.Nonce) || idt.Nonce != req.Nonce {
		return nil, &Error{Kind: KindInvalid, Message: "the ID token is not of this login (its nonce differs): log in again"}
	}
	var m map[string]any
	if err := idt.Claims(&m); err != nil {
		return nil, &Error{Kind: KindInvalid, Message: "the ID token's claims do not decode", Err: err}
	}
	c, err := callerOf(m, l.opts.Claims)
	if err != nil {
		return nil, err
	}
	// An ID token grants no scope and is for the client, not for the
	// gateway as a resource: the session's caller has neither.
	c.Method, c.Issuer, c.Scopes = MethodSession, l.opts.Issuer, nil
	return c, nil
}

// loginUnavailable is the refusal of a login whose provider could not be
// asked; what failed is in Err, for the operator.
func loginUnavailable(err error) *Error {
	return &Error{Kind: KindUnavailable, Message: "the identity provider did not answer; try again later", Err: err}
}

// signingAlgs are the algorithms of allowedAlgs, as go-oidc names them.
func signingAlgs() []string {
	out := make([]string, 0, len(allowedAlgs))
	for _, a := range allowedAlgs {
		out = append(out, string(a))
	}
	return slices.Clip(out)
}

// MarshalLoginRequest and UnmarshalLoginRequest write a login request as
// JSON, for the gateway to seal in a cookie.
func MarshalLoginRequest(r LoginRequest) []byte {
	b, _ := json.Marshal(loginJSON{S: r.State, N: r.Nonce, V: r.Verifier, R: r.RedirectURL})
	return b
}

// UnmarshalLoginRequest reads what MarshalLoginRequest wrote; every field
// must be there.
func UnmarshalLoginRequest(b []byte) (LoginRequest, error) {
	var j loginJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return LoginRequest{}, err
	}
	if j.S == "" || j.N == "" || j.V == "" || j.R == "" {
		return LoginRequest{}, errors.New("a login request without its state, nonce, verifier or redirect URI")
	}
	return LoginRequest{State: j.S, Nonce: j.N, Verifier: j.V, RedirectURL: j.R}, nil
}

type loginJSON struct {
	S string `json:"s"`
	N string `json:"n"`
	V string `json:"v"`
	R string `json:"r"`
}
