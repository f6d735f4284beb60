// Package tokenexchange gets, for the caller of a request, a token of an
// upstream server by OAuth 2.0 Token Exchange (RFC 8693) at the caller's
// identity provider: the caller's own access token (the one it
// authenticated to the gateway with, identity.TokenFrom) is traded for
// one whose audience is the upstream and whose subject is still the
// caller.
//
// Why: an upstream MCP server that trusts the same identity provider as
// the gateway should see each caller as themselves, not toolmux's one
// credential; and the MCP authorization specification forbids passing
// the caller's token through (it was issued for the gateway, and a server
// that accepts tokens meant for another is a confused deputy). Token
// exchange needs nothing configured per user: toolmux is a client of the
// identity provider allowed to exchange, and the provider decides whom it
// issues tokens for and for which audiences.
//
// An Exchanger is one upstream's: where the provider's token endpoint is,
// toolmux's client credentials there, the audience and/or resource to ask
// for, scopes, the token type. Its tokens are kept per caller, keyed by
// the SHA-256 of the caller's token (never the token), until shortly
// before they expire; how many are kept is bounded (Options.MaxEntries),
// and requests of the same caller that arrive together exchange once.
// Transport is the http.RoundTripper that puts the caller's exchanged
// token on each request to the upstream, for the client of a caller's
// upstream connection.
//
// Errors are *Error with a Kind: KindNoToken (the caller has no token an
// issuer would exchange: it used an API key, or the web page's session),
// KindRefused (the provider said no: its OAuth error code, never a
// token), KindUnreachable (the provider could not be asked, or failed),
// KindConfig (the configuration is incomplete).
//
// # Configuration (draft)
//
// The shape of a server's token exchange in toolmux.yaml, which config/
// will parse into Config (the integration of per-caller upstream
// connections):
//
//	servers:
//	  jira:
//	    url: https://jira-mcp.example.com/mcp
//	    auth:
//	      kind: token_exchange
//	      issuer: https://idp.example.com       # discovery of the token endpoint
//	      token_url: https://idp.example.com/oauth/token   # or the endpoint itself
//	      client_id: toolmux
//	      client_secret: ${TOOLMUX_IDP_SECRET}  # toolmux's secret at the provider
//	      client_auth: client_secret_basic      # or client_secret_post
//	      audience: jira                        # and/or
//	      resource: https://jira-mcp.example.com/mcp
//	      scopes: [jira.read]
//	      requested_token_type: urn:ietf:params:oauth:token-type:access_token
//	      max_entries: 1000                     # callers' tokens kept
//	      refresh_before: 30s                   # a token is exchanged again this long before it expires
//	      timeout: 10s                          # one exchange at the provider
package tokenexchange

import (
	"container/list"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
	"golang.org/x/sync/singleflight"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/errkind"
)

// Token type identifiers of RFC 8693 section 3.
const (
	TokenTypeAccessToken = "urn:ietf:params:oauth:token-type:access_token"
	TokenTypeJWT         = "urn:ietf:params:oauth:token-type:jwt"
	TokenTypeIDToken     = "urn:ietf:params:oauth:token-type:id_token"

	// GrantType is the token exchange grant (RFC 8693 section 2.1).
	GrantType = "urn:ietf:params:oauth:grant-type:token-exchange"
)

// The ways toolmux authenticates to the provider (RFC 6749 section 2.3.1).
const (
	ClientSecretBasic = "client_secret_basic"
	ClientSecretPost  = "client_secret_post"
)

// Defaults of Options.
const (
	DefaultMaxEntries    = 1000
	DefaultRefreshBefore = 30 * time.Second
	DefaultTimeout       = 10 * time.Second
)

// Config is the token exchange of one upstream server.
type Config struct {
	// Server names the upstream, for messages.
	Server string
	// Issuer is the identity provider's issuer identifier; its token
	// endpoint is found by OpenID Connect discovery when TokenURL is not
	// set.
	Issuer string
	// TokenURL is the provider's token endpoint.
	TokenURL string
	// ClientID and ClientSecret are toolmux's at the provider: the
	// client it allows to exchange tokens.
	ClientID, ClientSecret string
	// ClientAuth is how they are sent: ClientSecretBasic (default) or
	// ClientSecretPost.
	ClientAuth string
	// Audience and Resource name the upstream (RFC 8693 section 2.1): a
	// logical name the provider knows, and/or the upstream's URL (RFC
	// 8707). At least one is needed.
	Audience, Resource string
	// Scopes are asked for the upstream's token; none: the provider's
	// choice.
	Scopes []string
	// RequestedTokenType is the type of token asked for (default
	// TokenTypeAccessToken).
	RequestedTokenType string
	// SubjectTokenType is the type of the caller's token (default
	// TokenTypeAccessToken: what the gateway verified).
	SubjectTokenType string
}

// Options are an Exchanger's bounds and what it talks through.
type Options struct {
	// MaxEntries bounds the callers' tokens kept; past it the least
	// recently used is forgotten (default DefaultMaxEntries).
	MaxEntries int
	// RefreshBefore is how long before its expiry a token kept is
	// exchanged anew, so that a request does not reach the upstream with
	// a token about to lapse (default DefaultRefreshBefore; at most half
	// a token's lifetime).
	RefreshBefore time.Duration
	// Timeout bounds one exchange (and the discovery) at the provider
	// (default DefaultTimeout).
	Timeout time.Duration
	// Transport carries the requests to the provider (default
	// http.DefaultTransport).
	Transport http.RoundTripper
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	if o.RefreshBefore <= 0 {
		o.RefreshBefore = DefaultRefreshBefore
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Transport == nil {
		o.Transport = http.DefaultTransport
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Exchanger exchanges callers' tokens for tokens of one upstream server,
// and keeps them. It is safe for concurrent use.
type Exchanger struct {
	cfg    Config
	opts   Options
	client *http.Client
	flight singleflight.Group

	mu       sync.Mutex
	tokenURL string // discovered, or Config.TokenURL
	entries  map[[sha256.Size]byte]*list.Element
	lru      list.List // of *entry, most recently used first
}

// entry is the token of one caller's token.
type entry struct {
	key     [sha256.Size]byte
	token   *oauth2.Token
	renewAt time.Time // when it is exchanged anew
}

// New returns the exchanger of c. Nothing is asked of the provider before
// the first token.
func New(c Config, o Options) (*Exchanger, error) {
	if c.RequestedTokenType == "" {
		c.RequestedTokenType = TokenTypeAccessToken
	}
	if c.SubjectTokenType == "" {
		c.SubjectTokenType = TokenTypeAccessToken
	}
	if c.ClientAuth == "" {
		c.ClientAuth = ClientSecretBasic
	}
	name := c.Server
	if name == "" {
		name = "the upstream"
	}
	switch {
	case c.Issuer == "" && c.TokenURL == "":
		return nil, &Error{Kind: KindConfig, Message: fmt.Sprintf("token exchange for %s: set issuer (discovery) or token_url", name)}
	case c.ClientID == "":
		return nil, &Error{Kind: KindConfig, Message: fmt.Sprintf("token exchange for %s: set client_id (toolmux's client at the identity provider)", name)}
	case c.Audience == "" && c.Resource == "":
		return nil, &Error{Kind: KindConfig, Message: fmt.Sprintf("token exchange for %s: set audience or resource (what the upstream's tokens are for)", name)}
	case c.ClientAuth != ClientSecretBasic && c.ClientAuth != ClientSecretPost:
		return nil, &Error{Kind: KindConfig, Message: fmt.Sprintf("token exchange for %s: client_auth %q is not %s or %s", name, c.ClientAuth, ClientSecretBasic, ClientSecretPost)}
	}
	o = o.withDefaults()
	e := &Exchanger{
		cfg:      c,
		opts:     o,
		client:   &http.Client{Transport: o.Transport, Timeout: o.Timeout},
		tokenURL: c.TokenURL,
		entries:  map[[sha256.Size]byte]*list.Element{},
	}
	return e, nil
}

// Token returns the upstream's token for the caller ctx carries: the one
// kept for its token, or a new one exchanged at the provider. Callers of
// the same token asking together wait for one exchange.
func (e *Exchanger) Token(ctx context.Context) (*oauth2.Token, error) {
	subject, ok := identity.TokenFrom(ctx)
	if !ok {
		return nil, e.noToken(ctx)
	}
	key := sha256.Sum256([]byte(subject.Raw()))
	if t := e.kept(key); t != nil {
		return t, nil
	}
	// One exchange per caller's token at a time; it runs to its end for
	// every caller waiting on it, whoever of them gives up.
	ch := e.flight.DoChan(string(key[:]), func() (any, error) {
		if t := e.kept(key); t != nil {
			return t, nil // exchanged while this one waited to start
		}
		xctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.opts.Timeout)
		defer cancel()
		t, err := e.exchange(xctx, subject)
		if err != nil {
			return nil, err
		}
		e.keep(key, t)
		return t, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return copyToken(r.Val.(*oauth2.Token)), nil
	case <-ctx.Done():
		k := KindUnreachable
		if errors.Is(ctx.Err(), context.Canceled) {
			k = KindCancelled
		}
		return nil, &Error{Kind: k, Message: fmt.Sprintf("token exchange for %s: gave up waiting for the identity provider", e.name()), Err: ctx.Err()}
	}
}

// noToken is the error of a caller without a token to exchange.
func (e *Exchanger) noToken(ctx context.Context) error {
	c := identity.From(ctx)
	msg := fmt.Sprintf("%s takes each caller's own identity by token exchange, which needs an access token of the identity provider", e.name())
	switch {
	case c == nil:
		msg += ": the request has no caller"
	case c.Method == identity.MethodKey:
		msg += fmt.Sprintf(": %s authenticated with an API key; call with a token of the identity provider instead", c.Name)
	default:
		msg += fmt.Sprintf(": %s authenticated by %s, which carries no such token", c.Name, c.Method)
	}
	return &Error{Kind: KindNoToken, Message: msg}
}

// kept returns the token kept for key while it is good, else nil.
func (e *Exchanger) kept(key [sha256.Size]byte) *oauth2.Token {
	e.mu.Lock()
	defer e.mu.Unlock()
	el, ok := e.entries[key]
	if !ok {
		return nil
	}
	en := el.Value.(*entry)
	if !e.opts.Now().Before(en.renewAt) {
		e.lru.Remove(el)
		delete(e.entries, key)
		return nil
	}
	e.lru.MoveToFront(el)
	return copyToken(en.token)
}

// keep keeps t for key until shortly before it expires, forgetting the
// least recently used token past MaxEntries. A token without a lifetime
// is not kept: nothing says until when it is good.
func (e *Exchanger) keep(key [sha256.Size]byte, t *oauth2.Token) {
	if t.Expiry.IsZero() {
		return
	}
	now := e.opts.Now()
	life := t.Expiry.Sub(now)
	before := min(e.opts.RefreshBefore, life/2)
	renewAt := t.Expiry.Add(-before)
	if !now.Before(renewAt) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if el, ok := e.entries[key]; ok {
		e.lru.Remove(el)
	}
	e.entries[key] = e.lru.PushFront(&entry{key: key, token: t, renewAt: renewAt})
	for e.lru.Len() > e.opts.MaxEntries {
		old := e.lru.Back()
		e.lru.Remove(old)
		delete(e.entries, old.Value.(*entry).key)
	}
}

// Len is how many callers' tokens are kept.
func (e *Exchanger) Len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lru.Len()
}

// exchange asks the provider for the upstream's token of subject.
//
// It is x/oauth2's token request with the token exchange grant's
// parameters, not the go-sdk's oauthex.ExchangeToken: that one is the
// SEP-990 profile (an ID token for an ID-JAG), which requires both an
// audience and a resource, both URLs, and sends the client's secret only
// in the request's body, where RFC 8693 lets an upstream be named by
// either, the audience by a logical name, and the client authenticate as
// the provider wants.
func (e *Exchanger) exchange(ctx context.Context, subject identity.Token) (*oauth2.Token, error) {
	tokenURL, err := e.endpoint(ctx)
	if err != nil {
		return nil, err
	}
	style := oauth2.AuthStyleInHeader
	if e.cfg.ClientAuth == ClientSecretPost {
		style = oauth2.AuthStyleInParams
	}
	oc := &oauth2.Config{
		ClientID:     e.cfg.ClientID,
		ClientSecret: e.cfg.ClientSecret,
		Endpoint:     oauth2.Endpoint{TokenURL: tokenURL, AuthStyle: style},
	}
	params := []oauth2.AuthCodeOption{
		oauth2.SetAuthURLParam("grant_type", GrantType),
		oauth2.SetAuthURLParam("subject_token", subject.Raw()),
		oauth2.SetAuthURLParam("subject_token_type", e.cfg.SubjectTokenType),
		oauth2.SetAuthURLParam("requested_token_type", e.cfg.RequestedTokenType),
	}
	if e.cfg.Audience != "" {
		params = append(params, oauth2.SetAuthURLParam("audience", e.cfg.Audience))
	}
	if e.cfg.Resource != "" {
		params = append(params, oauth2.SetAuthURLParam("resource", e.cfg.Resource))
	}
	if len(e.cfg.Scopes) > 0 {
		params = append(params, oauth2.SetAuthURLParam("scope", strings.Join(e.cfg.Scopes, " ")))
	}
	now := e.opts.Now()
	// Exchange sends an empty code, which RFC 6749 section 3.2 has the
	// provider ignore as a parameter without a value.
	t, err := oc.Exchange(context.WithValue(ctx, oauth2.HTTPClient, e.client), "", params...)
	if err != nil {
		return nil, e.failed(err, subject.Raw(), e.cfg.ClientSecret)
	}
	if tt, _ := t.Extra("issued_token_type").(string); tt != "" && tt != e.cfg.RequestedTokenType {
		return nil, &Error{Kind: KindRefused, Message: fmt.Sprintf("token exchange for %s: the identity provider issued a token of type %s, not the %s asked for", e.name(), tt, e.cfg.RequestedTokenType)}
	}
	if !strings.EqualFold(t.TokenType, "bearer") && t.TokenType != "" {
		return nil, &Error{Kind: KindRefused, Message: fmt.Sprintf("token exchange for %s: the identity provider issued a token of type %q, not a bearer token", e.name(), t.TokenType)}
	}
	// The token's lifetime counts from when it was asked for, by this
	// exchanger's clock (x/oauth2 counts from the answer, by the
	// system's).
	out := &oauth2.Token{AccessToken: t.AccessToken, TokenType: "Bearer"}
	if t.ExpiresIn > 0 {
		out.Expiry = now.Add(time.Duration(t.ExpiresIn) * time.Second)
	}
	return out, nil
}

// failed turns the provider's answer, or the failure to get one, into an
// *Error: an OAuth error the provider answered with is a refusal naming
// its code, a server's error or a network's is unreachable. The
// provider's description is its own text, which may quote what it was
// sent: each of credentials in it is replaced, since the message goes
// to the task log and the event stream.
func (e *Exchanger) failed(err error, credentials ...string) error {
	if re, ok := errors.AsType[*oauth2.RetrieveError](err); ok && re.Response != nil {
		if re.Response.StatusCode >= 500 {
			return &Error{Kind: KindUnreachable, Message: fmt.Sprintf("token exchange for %s: the identity provider failed (HTTP %d)", e.name(), re.Response.StatusCode)}
		}
		code := re.ErrorCode
		if code == "" {
			code = fmt.Sprintf("HTTP %d", re.Response.StatusCode)
		}
		msg := fmt.Sprintf("token exchange for %s: the identity provider refused: %s", e.name(), code)
		if d := re.ErrorDescription; d != "" {
			for _, c := range credentials {
				if c != "" {
					d = strings.ReplaceAll(d, c, "[credential]")
				}
			}
			msg += " (" + quote(d) + ")"
		}
		return &Error{Kind: KindRefused, Code: re.ErrorCode, Message: msg}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Kind: KindUnreachable, Message: fmt.Sprintf("token exchange for %s: the identity provider did not answer within %s", e.name(), e.opts.Timeout), Err: err}
	}
	return &Error{Kind: KindUnreachable, Message: fmt.Sprintf("token exchange for %s: the identity provider could not be reached", e.name()), Err: err}
}

// endpoint returns the provider's token endpoint: configured, or found
// by OpenID Connect discovery of the issuer (once it succeeds; a failure
// is tried again by the next exchange).
func (e *Exchanger) endpoint(ctx context.Context) (string, error) {
	e.mu.Lock()
	u := e.tokenURL
	e.mu.Unlock()
	if u != "" {
		return u, nil
	}
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, e.client), e.cfg.Issuer)
	if err != nil {
		return "", &Error{Kind: KindUnreachable, Message: fmt.Sprintf("token exchange for %s: the discovery of the identity provider %s failed (set token_url if it has no OpenID Connect discovery)", e.name(), e.cfg.Issuer), Err: err}
	}
	u = p.Endpoint().TokenURL
	if u == "" {
		return "", &Error{Kind: KindConfig, Message: fmt.Sprintf("token exchange for %s: the identity provider %s names no token endpoint: set token_url", e.name(), e.cfg.Issuer)}
	}
	e.mu.Lock()
	e.tokenURL = u
	e.mu.Unlock()
	return u, nil
}

func (e *Exchanger) name() string {
	if e.cfg.Server == "" {
		return "the upstream"
	}
	return e.cfg.Server
}

// quote quotes what the provider said, shortened.
func quote(s string) string {
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return fmt.Sprintf("%q", s)
}

func copyToken(t *oauth2.Token) *oauth2.Token {
	return &oauth2.Token{AccessToken: t.AccessToken, TokenType: t.TokenType, Expiry: t.Expiry}
}

// Kind says why no token could be had.
type Kind string

// The kinds of Error.
const (
	// KindNoToken: the caller has no token of the identity provider to
	// exchange (it authenticated with an API key or the page's session,
	// or there is no caller).
	KindNoToken Kind = "no_token"
	// KindRefused: the identity provider refused the exchange
	// (Error.Code is its OAuth error: invalid_grant, invalid_target,
	// invalid_client, ...).
	KindRefused Kind = "refused"
	// KindUnreachable: the identity provider could not be asked, did not
	// answer in time, or failed (a 5xx).
	KindUnreachable Kind = "unreachable"
	// KindConfig: the exchange's configuration is incomplete.
	KindConfig Kind = "config"
	// KindCancelled: the request was cancelled while it waited.
	KindCancelled Kind = "cancelled"
)

// Error is why no token of the upstream could be had. It never holds a
// token.
type Error struct {
	Kind Kind
	// Code is the identity provider's OAuth error code, for KindRefused.
	Code    string
	Message string
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the kind of err (internal/errkind's convention): an
// *Error's; KindUnreachable for a deadline, KindCancelled for a
// cancellation; "" for nil or any other error.
func KindOf(err error) Kind {
	return errkind.Of(err, func(e *Error) (Kind, bool) {
		if e == nil {
			return "", false
		}
		return e.Kind, true
	}, KindUnreachable, KindCancelled)
}
