package percaller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/tokenexchange"
	"github.com/toolmux/toolmux/tool"
)

// Exchange is the token_exchange credential: each caller's connection
// sends a token of the server's own, exchanged at the caller's identity
// provider for the access token the caller authenticated to the gateway
// with (package tokenexchange). Nothing is set per user and nothing is
// stored: the caller's token is in its requests, the exchanged ones are
// kept in memory by the exchanger, bounded.
type Exchange struct {
	// Server is the server's name, for messages.
	Server string
	// Exchanger trades the callers' tokens for the server's.
	Exchanger *tokenexchange.Exchanger

	once sync.Once
	pool *http.Transport // the connections to the server, every caller's
}

// ExchangeFromConfig returns the token_exchange credential of a server's
// auth section; getenv reads the environment variable holding toolmux's
// client secret, which must be set.
func ExchangeFromConfig(server string, c config.TokenExchange, getenv func(string) string) (*Exchange, error) {
	secret := getenv(c.ClientSecretEnv)
	if secret == "" {
		return nil, fmt.Errorf("servers.%s.auth: toolmux's client secret at the identity provider: environment variable %s is not set", server, c.ClientSecretEnv)
	}
	x, err := tokenexchange.New(tokenexchange.Config{
		Server: server, Issuer: c.Issuer, TokenURL: c.TokenURL,
		ClientID: c.ClientID, ClientSecret: secret, ClientAuth: c.ClientAuth,
		Audience: c.Audience, Resource: c.Resource, Scopes: c.Scopes,
		RequestedTokenType: c.RequestedTokenType, SubjectTokenType: c.SubjectTokenType,
	}, tokenexchange.Options{MaxEntries: c.MaxTokens, RefreshBefore: c.RefreshBefore, Timeout: c.Timeout})
	if err != nil {
		return nil, fmt.Errorf("servers.%s.auth: %w", server, err)
	}
	return &Exchange{Server: server, Exchanger: x}, nil
}

// Kind is tool.CredentialTokenExchange.
func (x *Exchange) Kind() string { return tool.CredentialTokenExchange }

// Connect returns base with an HTTP client that puts, on each request, the
// server's token for the caller: exchanged for the token of the request's
// own caller (a call's), else for the latest one the connection was
// given (the connection's own requests: its event stream, its end). A
// caller who has no issuer's token (an API key, the page's session) gets
// auth_required saying so; nothing is sent.
func (x *Exchange) Connect(ctx context.Context, owner string, base mcpsource.Config) (mcpsource.Config, error) {
	tok, ok := identity.TokenFrom(ctx)
	if !ok {
		return base, &tool.Error{Kind: tool.KindAuthRequired, Server: x.Server, Err: tool.ErrNotSent,
			Message: fmt.Sprintf("server %s is reached with a token exchanged for your own access token from the identity provider (token exchange), and this request has none (an API key or the web page's session is no token the provider would exchange, and a fleet's run carries none of its submitter's): call with an access token of the identity provider, through the gateway (docs/identity.md)", x.Server)}
	}
	cfg := base
	cfg.HTTPClient = &http.Client{Transport: &latestToken{tok: tok, next: x.Exchanger.Transport(x.connections())}}
	return cfg, nil
}

// connections is the pool of connections to the server, every caller's,
// made at its first use.
func (x *Exchange) connections() *http.Transport {
	x.once.Do(func() {
		x.pool = http.DefaultTransport.(*http.Transport).Clone()
		x.pool.MaxIdleConnsPerHost = 64
	})
	return x.pool
}

// CloseIdleConnections closes the idle connections to the server (Source's
// Close).
func (x *Exchange) CloseIdleConnections() { x.connections().CloseIdleConnections() }

// latestToken gives each request of one caller's connection the caller's
// token: the request's own, which it then keeps, else the one kept. The
// go-sdk sends a call with the call's context (the caller's, with its
// token of the moment) and the session's own requests with the context
// it was connected with, which has none.
type latestToken struct {
	mu   sync.Mutex
	tok  identity.Token
	next http.RoundTripper
}

func (t *latestToken) RoundTrip(r *http.Request) (*http.Response, error) {
	if tok, ok := identity.TokenFrom(r.Context()); ok {
		t.mu.Lock()
		t.tok = tok
		t.mu.Unlock()
		return t.next.RoundTrip(r)
	}
	t.mu.Lock()
	tok := t.tok
	t.mu.Unlock()
	return t.next.RoundTrip(r.WithContext(identity.WithToken(r.Context(), tok.Raw())))
}

// CallError turns a failed exchange, in a call's chain of errors, into
// the call's error: the provider's refusal of the caller's token is the
// caller's to fix (auth_required); a provider that could not be asked is
// the server's failure (server_unavailable), the request not sent.
func (x *Exchange) CallError(err error) error {
	server := x.Server
	var xe *tokenexchange.Error
	if !errors.As(err, &xe) {
		return err
	}
	switch xe.Kind {
	case tokenexchange.KindNoToken, tokenexchange.KindRefused:
		return &tool.Error{Kind: tool.KindAuthRequired, Server: server, Err: errors.Join(xe, tool.ErrNotSent),
			Message: fmt.Sprintf("server %s: %s", server, xe.Error())}
	case tokenexchange.KindUnreachable:
		return &tool.Error{Kind: tool.KindServerUnavailable, Server: server, Err: errors.Join(xe, tool.ErrNotSent),
			Message: fmt.Sprintf("server %s: %s", server, xe.Error())}
	}
	return err
}
