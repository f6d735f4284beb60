package percaller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"golang.org/x/oauth2"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/tool"
	"github.com/toolmux/toolmux/upstreamauth"
	"github.com/toolmux/toolmux/vault"
)

// OAuthClient is what the user-oauth credential needs of the gateway as
// an OAuth client of its upstreams: an *upstreamauth.Client.
type OAuthClient interface {
	// Token returns owner's token for server, refreshed when it is about
	// to expire; without one, an *upstreamauth.Error of KindAuthRequired
	// carrying the authorization URL.
	Token(ctx context.Context, owner, server string) (*oauth2.Token, error)
	// Transport sends each request with owner's token, over base.
	Transport(owner, server string, base http.RoundTripper) http.RoundTripper
}

// OAuth is the user-oauth credential: each caller's own OAuth token for
// the server, which the user authorized toolmux to get at the server's
// authorization server (package upstreamauth), sent by the transport of
// the caller's connection, refreshed by it before it expires.
type OAuth struct {
	// Server is the server's name, its upstream's in Client.
	Server string
	// Client is the gateway's OAuth client; nil when serve has no callback
	// route to complete an authorization on (calls are refused saying so).
	Client OAuthClient
	// Vault, when set, is where the tokens are kept: their holders are
	// those with an entry vault.TokenName(Server).
	Vault SecretVault
}

// OAuthFromConfig returns the credential of an oauth server sc, and its
// upstream registered with c (a reload's changes replacing the one
// there): its client secret read with getenv. c nil: a credential whose
// calls are refused, saying why.
func OAuthFromConfig(sc config.Server, c *upstreamauth.Client, v SecretVault, getenv func(string) string) (*OAuth, error) {
	o := &OAuth{Server: sc.Name, Vault: v}
	if c == nil {
		return o, nil
	}
	u := upstreamauth.Upstream{Name: sc.Name, URL: sc.URL, ClientID: sc.Auth.ClientID, Scopes: sc.Auth.Scopes}
	if env := sc.Auth.ClientSecretEnv; env != "" {
		if u.ClientSecret = getenv(env); u.ClientSecret == "" {
			return nil, fmt.Errorf("server %s: the environment variable %s (servers.%s.auth.client_secret_env) is not set", sc.Name, env, sc.Name)
		}
	}
	if err := c.Set(u); err != nil {
		return nil, fmt.Errorf("server %s: %w", sc.Name, err)
	}
	o.Client = c
	return o, nil
}

// Kind is tool.CredentialUserOAuth.
func (o *OAuth) Kind() string { return tool.CredentialUserOAuth }

// Connect returns base with an HTTP client whose transport sends owner's
// token. An owner without a usable token gets auth_required whose URL is
// where to authorize; its message says where to go without the URL (a
// message is kept in records, the URL is the user's alone).
func (o *OAuth) Connect(ctx context.Context, owner string, base mcpsource.Config) (mcpsource.Config, error) {
	if o.Client == nil {
		return base, &tool.Error{Kind: tool.KindExecutionFailed, Server: o.Server, Err: tool.ErrNotSent,
			Message: fmt.Sprintf("server %s takes each user's own OAuth authorization, which completes at toolmux serve's callback route, and this toolmux serves none: run toolmux serve over HTTP, with a data directory and a vault key (docs/identity.md)", o.Server)}
	}
	if _, err := o.Client.Token(ctx, owner, o.Server); err != nil {
		return base, o.toolError(err)
	}
	cfg := base
	hc := &http.Client{}
	var rt http.RoundTripper
	if base.HTTPClient != nil {
		*hc = *base.HTTPClient
		rt = base.HTTPClient.Transport
	}
	hc.Transport = &authErrors{base: o.Client.Transport(owner, o.Server, rt), cred: o}
	cfg.HTTPClient = hc
	return cfg, nil
}

// toolError is err of the OAuth client as a tool error: auth_required
// with the authorization URL, or the gateway's failure to get a token.
func (o *OAuth) toolError(err error) error {
	var ue *upstreamauth.Error
	if !errors.As(err, &ue) {
		return &tool.Error{Kind: tool.KindExecutionFailed, Server: o.Server, Err: errors.Join(err, tool.ErrNotSent),
			Message: fmt.Sprintf("server %s: your token could not be had: %v", o.Server, err)}
	}
	switch ue.Kind {
	case upstreamauth.KindAuthRequired:
		return &tool.Error{Kind: tool.KindAuthRequired, Server: o.Server, URL: ue.URL, Err: tool.ErrNotSent,
			Message: fmt.Sprintf("server %s needs your authorization (%s): open the link your client shows with this error, if it shows one, "+
				"or Connect %s on the web page's Connections tab (POST /api/connections/%s gives the link); log in there as yourself, then call again",
				o.Server, ue.Message, o.Server, o.Server)}
	}
	// Not the URL (there is none), nor a credential: upstreamauth's
	// errors hold none. The vault's failure is said as it is (a vault
	// locked says which key to configure; its errors hold no value).
	why := ue.Message
	if ue.Kind == upstreamauth.KindVault && ue.Err != nil {
		why += ": " + ue.Err.Error()
	}
	return &tool.Error{Kind: tool.KindExecutionFailed, Server: o.Server, Err: errors.Join(err, tool.ErrNotSent),
		Message: fmt.Sprintf("server %s: no token for you could be had (%s): %s", o.Server, ue.Kind, why)}
}

// Recheck says, after a call over owner's connection failed, whether the
// failure was the authorization's: a token the server or its
// authorization server revoked meanwhile (which the transport deleted),
// then auth_required with the URL to authorize again.
func (o *OAuth) Recheck(ctx context.Context, owner string, callErr error) error {
	if o.Client == nil {
		return nil
	}
	_, err := o.Client.Token(ctx, owner, o.Server)
	if upstreamauth.KindOf(err) != upstreamauth.KindAuthRequired {
		return nil
	}
	te := o.toolError(err).(*tool.Error)
	// Whether the call reached the server is the call's error's to say.
	te.Err = callErr
	return te
}

// Holders returns the owners who hold a token for the server.
func (o *OAuth) Holders(ctx context.Context) ([]string, error) {
	if o.Client == nil {
		return nil, nil
	}
	return holders(ctx, o.Vault, func(infos []vault.Info) bool {
		return slices.ContainsFunc(infos, func(in vault.Info) bool { return in.Name == vault.TokenName(o.Server) })
	})
}

// authErrors is the transport of an OAuth caller's connection: a request
// the OAuth client could not give a token to fails with auth_required as
// a tool error, whose text holds no URL (the go-sdk may quote a
// transport's error in its own).
type authErrors struct {
	base http.RoundTripper
	cred *OAuth
}

func (t *authErrors) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		if _, ok := errors.AsType[*upstreamauth.Error](err); ok {
			return nil, t.cred.toolError(err)
		}
	}
	return resp, err
}
