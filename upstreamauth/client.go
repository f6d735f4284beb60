package upstreamauth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"
	"golang.org/x/sync/singleflight"

	"github.com/toolmux/toolmux/vault"
)

// Defaults of Options.
const (
	// DefaultLeeway: a token is refreshed when it has less than this to
	// live, so that a call does not reach the upstream with a token that
	// expires on the way.
	DefaultLeeway = time.Minute
	// DefaultMaxPending bounds the authorizations waiting for their
	// callback: each holds a PKCE verifier in memory until it completes or
	// expires.
	DefaultMaxPending = 1024
	// DefaultStateTTL is how long an authorization URL may be used: long
	// enough for a person to log in, short enough that a leaked one is soon
	// worthless.
	DefaultStateTTL = 10 * time.Minute
	// DefaultTimeout bounds one request to an upstream or an authorization
	// server made by the package (discovery, registration, token requests).
	DefaultTimeout = 30 * time.Second
)

// Options configure a Client. Zero values mean the defaults.
type Options struct {
	// RedirectURL is the URL of the gateway's callback route, where
	// Callback is mounted: the redirect URI of every client the gateway
	// registers or is given. Required.
	RedirectURL string
	// ClientName is the name an authorization server shows the user on its
	// consent page (dynamic registration, the Client ID Metadata Document);
	// "": "toolmux".
	ClientName string
	// ClientMetadataURL is the HTTPS URL at which the gateway serves
	// MetadataDocument: with it, an authorization server that says it
	// supports Client ID Metadata Documents knows the gateway by that URL,
	// without a registration. "": never used.
	ClientMetadataURL string
	// Leeway: a token with less than this to live is refreshed before use
	// (DefaultLeeway).
	Leeway time.Duration
	// MaxPending bounds the authorizations started and not yet completed
	// (DefaultMaxPending); one more is refused with KindTooManyPending.
	MaxPending int
	// StateTTL is how long an authorization, and its URL, stays usable
	// (DefaultStateTTL).
	StateTTL time.Duration
	// HTTPClient makes the requests to upstreams (discovery) and
	// authorization servers; nil: one with a DefaultTimeout timeout.
	HTTPClient *http.Client
	// Logger says what happened (an authorization completed, a token
	// refreshed or given up), never with a credential; nil: nothing.
	Logger *slog.Logger
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// Authorized, when set, is told that owner authorized the gateway
	// to call server (a callback completed, its token kept): a call
	// waiting for it may go on.
	Authorized func(owner, server string)
	// Elsewhere, when set, makes a client that never starts an
	// authorization nor registers a client: one beside the gateway,
	// sharing its vault, whose callback route users' browsers do not
	// reach (a fleet's worker). It uses and refreshes the tokens the
	// vault holds, with the clients the gateway registered there; a
	// caller without a usable token gets KindAuthRequired without a URL,
	// whose message ends with Elsewhere: where to authorize instead.
	// RedirectURL may then be empty.
	Elsewhere string
}

func (o Options) withDefaults() Options {
	if o.ClientName == "" {
		o.ClientName = "toolmux"
	}
	if o.Leeway <= 0 {
		o.Leeway = DefaultLeeway
	}
	if o.MaxPending <= 0 {
		o.MaxPending = DefaultMaxPending
	}
	if o.StateTTL <= 0 {
		o.StateTTL = DefaultStateTTL
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: DefaultTimeout}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Upstream is an MCP server reached over HTTP whose users authorize the
// gateway one by one.
type Upstream struct {
	// Name is the server's name: its tokens are the vault's entries
	// vault.TokenName(Name) of each caller.
	Name string
	// URL is its MCP endpoint: the protected resource, whose metadata
	// names the authorization server, and the resource indicator (RFC
	// 8707) of its tokens.
	URL string
	// ClientID and ClientSecret are a client registered for the gateway at
	// the upstream's authorization server by an operator; with them no
	// other registration is tried. ClientSecret "" is a public client.
	ClientID, ClientSecret string
	// Scopes are asked for; nil: those of the upstream's challenge or
	// metadata (scopes_supported), and offline_access when the
	// authorization server supports it (a refresh token).
	Scopes []string
}

// Client is the gateway as an OAuth client of its upstreams, on behalf of
// each caller. It is safe for concurrent use.
type Client struct {
	vault *vault.Vault
	regs  Registrations
	opts  Options

	mu        sync.Mutex
	upstreams map[string]*upstream
	pending   map[string]*pending // by state
	waiting   map[ownerServer]string

	refreshes singleflight.Group
}

// upstream is an Upstream and what was learnt of it.
type upstream struct {
	Upstream

	mu sync.Mutex // held while discovering and registering
	// Known once discovered, kept for the Client's life.
	resource string
	asm      *oauthex.AuthServerMeta
	scopes   []string
	config   *oauth2.Config
}

type ownerServer struct{ owner, server string }

// New returns a client keeping its users' tokens in v, and the clients it
// registers in regs (VaultRegistrations(v), usually).
func New(v *vault.Vault, regs Registrations, o Options) (*Client, error) {
	if v == nil || regs == nil {
		return nil, errors.New("upstreamauth: a vault and a registration store are needed")
	}
	if o.Elsewhere == "" || o.RedirectURL != "" {
		if err := checkURL("the redirect URL", o.RedirectURL); err != nil {
			return nil, err
		}
	}
	if o.ClientMetadataURL != "" {
		if u, err := url.Parse(o.ClientMetadataURL); err != nil || u.Scheme != "https" || u.Path == "" || u.Path == "/" {
			return nil, fmt.Errorf("upstreamauth: the client metadata URL must be an https URL with a path, not %q", o.ClientMetadataURL)
		}
	}
	return &Client{vault: v, regs: regs, opts: o.withDefaults(),
		upstreams: map[string]*upstream{}, pending: map[string]*pending{}, waiting: map[ownerServer]string{}}, nil
}

func checkURL(what, s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("upstreamauth: %s must be an http or https URL, not %q", what, s)
	}
	return nil
}

// Add makes u known; a name added again is refused.
func (c *Client) Add(u Upstream) error {
	if err := checkUpstream(u); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.upstreams[u.Name]; ok {
		return fmt.Errorf("upstreamauth: upstream %s is added already", u.Name)
	}
	c.upstreams[u.Name] = &upstream{Upstream: u}
	return nil
}

// checkUpstream checks what Add and Set are given.
func checkUpstream(u Upstream) error {
	if u.Name == "" {
		return errors.New("upstreamauth: an upstream needs a name")
	}
	return checkURL("the URL of upstream "+u.Name, u.URL)
}

// Set makes u known as Add does, or, when an upstream of its name is
// known already, replaces it if u differs (a reload changed its URL, its
// client or its scopes): what was discovered of it and its client are
// found again at the next use. An equal u changes nothing.
func (c *Client) Set(u Upstream) error {
	if err := checkUpstream(u); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.upstreams[u.Name]; ok && old.URL == u.URL && old.ClientID == u.ClientID &&
		old.ClientSecret == u.ClientSecret && slices.Equal(old.Scopes, u.Scopes) && (old.Scopes == nil) == (u.Scopes == nil) {
		return nil
	}
	c.upstreams[u.Name] = &upstream{Upstream: u}
	return nil
}

func (c *Client) upstream(server string) (*upstream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	u, ok := c.upstreams[server]
	if !ok {
		return nil, &Error{Kind: KindUnknownServer, Server: server, Message: "no such upstream"}
	}
	return u, nil
}

// httpContext carries the client's HTTP client to golang.org/x/oauth2.
func (c *Client) httpContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, oauth2.HTTPClient, c.opts.HTTPClient)
}

// setup discovers u's authorization server and registers the gateway
// there, once; a failure is not kept (the next call tries again).
func (c *Client) setup(ctx context.Context, u *upstream) (*oauth2.Config, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.config != nil {
		return u.config, nil
	}
	if u.asm == nil {
		if err := c.discover(ctx, u); err != nil {
			return nil, err
		}
	}
	cfg, err := c.register(ctx, u)
	if err != nil {
		return nil, err
	}
	u.config = cfg
	return cfg, nil
}

// discover finds u's protected resource metadata (RFC 9728) where the MCP
// specification says to look: the resource_metadata of the challenge of
// a request without a token, then the well-known URLs of its path and of
// its root; then its authorization server's metadata (RFC 8414, or OpenID
// Connect discovery). The fetching and its checks are the go-sdk's.
func (c *Client) discover(ctx context.Context, u *upstream) error {
	challenges := c.probe(ctx, u.URL)
	type candidate struct{ url, resource string }
	var cands []candidate
	for _, ch := range challenges {
		if ch.Scheme == "bearer" && ch.Params["resource_metadata"] != "" {
			cands = append(cands, candidate{ch.Params["resource_metadata"], u.URL})
		}
	}
	ru, _ := url.Parse(u.URL) // checked by Add
	wk := *ru
	wk.RawQuery, wk.Fragment = "", ""
	wk.Path = "/.well-known/oauth-protected-resource/" + strings.TrimLeft(ru.Path, "/")
	cands = append(cands, candidate{wk.String(), u.URL})
	wk.Path = "/.well-known/oauth-protected-resource"
	root := *ru
	root.Path, root.RawQuery, root.Fragment = "", "", ""
	cands = append(cands, candidate{wk.String(), root.String()})
	var prm *oauthex.ProtectedResourceMetadata
	var errs []error
	for _, cand := range cands {
		m, err := oauthex.GetProtectedResourceMetadata(ctx, cand.url, cand.resource, c.opts.HTTPClient)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if m != nil {
			prm = m
			break
		}
	}
	if prm == nil {
		return &Error{Kind: KindDiscovery, Server: u.Name, Message: "no protected resource metadata (RFC 9728) found for " + u.URL, Err: errors.Join(errs...)}
	}
	if len(prm.AuthorizationServers) == 0 {
		return &Error{Kind: KindDiscovery, Server: u.Name, Message: "its protected resource metadata names no authorization server"}
	}
	asm, err := auth.GetAuthServerMetadata(ctx, prm.AuthorizationServers[0], c.opts.HTTPClient)
	if err == nil && asm == nil {
		err = errors.New("none served")
	}
	if err != nil {
		return &Error{Kind: KindDiscovery, Server: u.Name, Message: "the metadata of authorization server " + prm.AuthorizationServers[0], Err: err}
	}
	if !slices.Contains(asm.CodeChallengeMethodsSupported, "S256") {
		return &Error{Kind: KindDiscovery, Server: u.Name, Message: "authorization server " + asm.Issuer + " does not support PKCE with S256"}
	}
	scopes := u.Scopes
	if scopes == nil {
		for _, ch := range challenges {
			if ch.Scheme == "bearer" && ch.Params["scope"] != "" {
				scopes = strings.Fields(ch.Params["scope"])
			}
		}
		if scopes == nil {
			scopes = slices.Clone(prm.ScopesSupported)
		}
		// A refresh token, where the server gives one for this scope.
		if slices.Contains(asm.ScopesSupported, "offline_access") && !slices.Contains(scopes, "offline_access") {
			scopes = append(scopes, "offline_access")
		}
	}
	u.resource, u.asm, u.scopes = prm.Resource, asm, scopes
	return nil
}

// probe asks the upstream without a token for its challenge; nothing
// when it does not answer 401 with one.
func (c *Client) probe(ctx context.Context, target string) []oauthex.Challenge {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		return nil
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		return nil
	}
	cs, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	if err != nil {
		return nil
	}
	return cs
}

// register returns the gateway's client at u's authorization server, in
// the order the MCP specification gives: a pre-registered client, a
// Client ID Metadata Document, a dynamic registration (RFC 7591), made
// once and kept in the registration store.
func (c *Client) register(ctx context.Context, u *upstream) (*oauth2.Config, error) {
	asm := u.asm
	cfg := &oauth2.Config{
		Endpoint:    oauth2.Endpoint{AuthURL: asm.AuthorizationEndpoint, TokenURL: asm.TokenEndpoint},
		RedirectURL: c.opts.RedirectURL,
		Scopes:      u.scopes,
	}
	switch {
	case u.ClientID != "":
		cfg.ClientID, cfg.ClientSecret = u.ClientID, u.ClientSecret
		cfg.Endpoint.AuthStyle = authStyle(asm.TokenEndpointAuthMethodsSupported, u.ClientSecret != "")
		return cfg, nil
	case c.opts.ClientMetadataURL != "" && asm.ClientIDMetadataDocumentSupported:
		// A public client known by its URL (token_endpoint_auth_method
		// none): the client id sent in the form.
		cfg.ClientID, cfg.Endpoint.AuthStyle = c.opts.ClientMetadataURL, oauth2.AuthStyleInParams
		return cfg, nil
	}
	reg, found, err := c.regs.Registration(ctx, u.Name)
	if err != nil {
		return nil, &Error{Kind: KindVault, Server: u.Name, Message: "reading its client registration", Err: err}
	}
	switch {
	case c.opts.Elsewhere != "" && (!found || reg.Issuer != asm.Issuer):
		// Registering is the gateway's: its redirect URL is the one the
		// users' authorizations came back to.
		return nil, &Error{Kind: KindRegistration, Server: u.Name,
			Message: "the gateway has registered no client at authorization server " + asm.Issuer + " yet; " + c.opts.Elsewhere}
	case c.opts.Elsewhere != "":
		cfg.RedirectURL = reg.RedirectURL
	case !found || reg.Issuer != asm.Issuer || reg.RedirectURL != c.opts.RedirectURL:
		if asm.RegistrationEndpoint == "" {
			return nil, &Error{Kind: KindRegistration, Server: u.Name,
				Message: "authorization server " + asm.Issuer + " offers no dynamic client registration and no Client ID Metadata Document is served: configure a client id for this server"}
		}
		meta := c.clientMetadata(u.scopes)
		meta.TokenEndpointAuthMethod = "client_secret_basic"
		if len(asm.TokenEndpointAuthMethodsSupported) > 0 && !slices.Contains(asm.TokenEndpointAuthMethodsSupported, "client_secret_basic") {
			meta.TokenEndpointAuthMethod = "client_secret_post"
		}
		resp, err := c.registerClient(ctx, asm.RegistrationEndpoint, meta)
		if err != nil {
			return nil, &Error{Kind: KindRegistration, Server: u.Name, Message: "dynamic client registration at " + asm.RegistrationEndpoint, Err: err}
		}
		method := resp.TokenEndpointAuthMethod
		if method == "" {
			method = meta.TokenEndpointAuthMethod
		}
		reg = Registration{Issuer: asm.Issuer, ClientID: resp.ClientID, ClientSecret: resp.ClientSecret,
			AuthMethod: method, RedirectURL: c.opts.RedirectURL}
		if err := c.regs.PutRegistration(ctx, u.Name, reg); err != nil {
			return nil, &Error{Kind: KindVault, Server: u.Name, Message: "keeping its client registration", Err: err}
		}
		c.opts.Logger.Info("upstream client registered", "server", u.Name, "issuer", asm.Issuer, "client_id", reg.ClientID)
	}
	cfg.ClientID, cfg.ClientSecret = reg.ClientID, reg.ClientSecret
	cfg.Endpoint.AuthStyle = oauth2.AuthStyleInHeader
	if reg.AuthMethod == "client_secret_post" || reg.AuthMethod == "none" {
		cfg.Endpoint.AuthStyle = oauth2.AuthStyleInParams
	}
	return cfg, nil
}

// authStyle is how a pre-registered client authenticates: HTTP Basic when
// the server takes it (RFC 6749's default), else in the form.
func authStyle(supported []string, secret bool) oauth2.AuthStyle {
	if !secret || (len(supported) > 0 && !slices.Contains(supported, "client_secret_basic")) {
		return oauth2.AuthStyleInParams
	}
	return oauth2.AuthStyleInHeader
}

// clientMetadata is what the gateway says of itself as a client: in a
// dynamic registration and in its Client ID Metadata Document.
func (c *Client) clientMetadata(scopes []string) *oauthex.ClientRegistrationMetadata {
	return &oauthex.ClientRegistrationMetadata{
		RedirectURIs:  []string{c.opts.RedirectURL},
		GrantTypes:    []string{"authorization_code", "refresh_token"},
		ResponseTypes: []string{"code"},
		ClientName:    c.opts.ClientName,
		Scope:         strings.Join(scopes, " "),
	}
}
