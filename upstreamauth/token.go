package upstreamauth

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/oauth2"

	"github.com/toolmux/toolmux/vault"
)

func fromOAuth2(t *oauth2.Token) vault.OAuthToken {
	scope, _ := t.Extra("scope").(string)
	return vault.OAuthToken{AccessToken: t.AccessToken, TokenType: t.TokenType, RefreshToken: t.RefreshToken, Expiry: t.Expiry, Scope: scope}
}

func toOAuth2(t vault.OAuthToken) *oauth2.Token {
	return &oauth2.Token{AccessToken: t.AccessToken, TokenType: t.TokenType, RefreshToken: t.RefreshToken, Expiry: t.Expiry}
}

// safeError is err without what an authorization server's answer may
// hold besides its error code and description, and without credentials
// (what the request sent: a refresh token, a code, the client's secret)
// where the description, the server's own text, quotes them.
func safeError(err error, credentials ...string) error {
	if re, ok := errors.AsType[*oauth2.RetrieveError](err); ok {
		msg := "status " + re.Response.Status
		if re.ErrorCode != "" {
			msg += ", error " + re.ErrorCode
		}
		if re.ErrorDescription != "" {
			msg += ": " + redact(re.ErrorDescription, credentials...)
		}
		return errors.New(msg)
	}
	return err
}

// redact returns s with each of credentials in it replaced.
func redact(s string, credentials ...string) string {
	for _, c := range credentials {
		if c != "" {
			s = strings.ReplaceAll(s, c, "[credential]")
		}
	}
	return s
}

// fresh reports whether t may be sent: it has Leeway or more to live.
func (c *Client) fresh(t vault.OAuthToken) bool {
	return t.AccessToken != "" && (t.Expiry.IsZero() || c.opts.Now().Add(c.opts.Leeway).Before(t.Expiry))
}

// Token returns owner's token for server, refreshed first when it has
// less than Options.Leeway to live. With no token, or one whose refresh
// the authorization server refused (it is deleted then), the error is of
// KindAuthRequired, with the URL to send owner to.
func (c *Client) Token(ctx context.Context, owner, server string) (*oauth2.Token, error) {
	u, err := c.upstream(server)
	if err != nil {
		return nil, err
	}
	t, err := c.vault.Token(ctx, owner, server)
	switch {
	case vault.IsNotFound(err):
		return nil, c.authRequired(ctx, owner, u, "no authorization to call it on your behalf yet")
	case err != nil:
		return nil, &Error{Kind: KindVault, Server: server, Message: "reading the token", Err: err}
	case c.fresh(t):
		return toOAuth2(t), nil
	}
	return c.refresh(ctx, owner, u, t.AccessToken)
}

// refresh refreshes owner's token for u, unless the vault holds another
// than stale (the access token found wanting) that is fresh: refreshed by
// another call meanwhile. The calls for one owner and server at once
// share one refresh: a second refresh with the same refresh token would
// be refused by a server that rotates them, or take it for a replay.
func (c *Client) refresh(ctx context.Context, owner string, u *upstream, stale string) (*oauth2.Token, error) {
	v, err, _ := c.refreshes.Do(owner+"\x00"+u.Name, func() (any, error) {
		// Shared by every waiter: not cancelled with the first's context.
		ctx := context.WithoutCancel(ctx)
		t, err := c.vault.Token(ctx, owner, u.Name)
		switch {
		case vault.IsNotFound(err):
			return nil, c.authRequired(ctx, owner, u, "no authorization to call it on your behalf yet")
		case err != nil:
			return nil, &Error{Kind: KindVault, Server: u.Name, Message: "reading the token", Err: err}
		case t.AccessToken != stale && c.fresh(t):
			return toOAuth2(t), nil
		case t.RefreshToken == "":
			return nil, c.giveUp(ctx, owner, u, "the token expired and there is no refresh token: authorize again")
		}
		cfg, err := c.setup(ctx, u)
		if err != nil {
			return nil, err
		}
		nt, err := cfg.TokenSource(c.httpContext(ctx), &oauth2.Token{RefreshToken: t.RefreshToken}).Token()
		if err != nil {
			// Refreshed meanwhile by another process sharing the vault: its
			// token, not a refusal (nor a deletion of what it kept).
			if now, gerr := c.vault.Token(ctx, owner, u.Name); gerr == nil && now.AccessToken != t.AccessToken && c.fresh(now) {
				return toOAuth2(now), nil
			}
			if re, ok := errors.AsType[*oauth2.RetrieveError](err); ok && (re.ErrorCode == "invalid_grant" || re.ErrorCode == "unauthorized_client" || re.ErrorCode == "invalid_client") {
				return nil, c.giveUp(ctx, owner, u, "the authorization server refused to refresh the token ("+re.ErrorCode+"): authorize again")
			}
			return nil, &Error{Kind: KindExchange, Server: u.Name, Message: "refreshing the token", Err: safeError(err, t.RefreshToken, cfg.ClientSecret)}
		}
		if err := c.vault.PutToken(ctx, owner, u.Name, fromOAuth2(nt)); err != nil {
			return nil, &Error{Kind: KindVault, Server: u.Name, Message: "keeping the refreshed token", Err: err}
		}
		c.opts.Logger.Info("upstream token refreshed", "owner", owner, "server", u.Name)
		return nt, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*oauth2.Token), nil
}

// giveUp deletes owner's token for u, which can no longer be used or
// refreshed, and returns the error asking owner to authorize again.
func (c *Client) giveUp(ctx context.Context, owner string, u *upstream, why string) error {
	if err := c.vault.Delete(ctx, owner, vault.TokenName(u.Name)); err != nil && !vault.IsNotFound(err) {
		return &Error{Kind: KindVault, Server: u.Name, Message: "deleting a token no longer usable", Err: err}
	}
	c.opts.Logger.Info("upstream token given up", "owner", owner, "server", u.Name, "why", why)
	return c.authRequired(ctx, owner, u, why)
}

// Revoke disconnects owner from server: the token is revoked at the
// authorization server when it has a revocation endpoint (RFC 7009: the
// refresh token, which revokes the grant, else the access token), and
// deleted from the vault whatever the server answered (a token the server
// keeps is one the gateway no longer holds). The error, when the server
// could not be told, says so after the token was deleted.
func (c *Client) Revoke(ctx context.Context, owner, server string) error {
	u, err := c.upstream(server)
	if err != nil {
		return err
	}
	t, err := c.vault.Token(ctx, owner, server)
	if vault.IsNotFound(err) {
		return nil
	}
	var told error
	if err == nil {
		told = c.revokeAt(ctx, u, t)
	}
	if err := c.vault.Delete(ctx, owner, vault.TokenName(server)); err != nil && !vault.IsNotFound(err) {
		return &Error{Kind: KindVault, Server: server, Message: "deleting the token", Err: err}
	}
	c.opts.Logger.Info("upstream token revoked", "owner", owner, "server", server)
	return told
}

// revokeAt asks u's authorization server to revoke t (RFC 7009), the
// client authenticated as at its token endpoint. Neither x/oauth2 nor the
// go-sdk has it.
func (c *Client) revokeAt(ctx context.Context, u *upstream, t vault.OAuthToken) error {
	cfg, err := c.setup(ctx, u)
	if err != nil {
		return err
	}
	if u.asm.RevocationEndpoint == "" {
		return nil
	}
	form := url.Values{"token": {t.RefreshToken}, "token_type_hint": {"refresh_token"}}
	if t.RefreshToken == "" {
		form = url.Values{"token": {t.AccessToken}, "token_type_hint": {"access_token"}}
	}
	if cfg.Endpoint.AuthStyle == oauth2.AuthStyleInParams {
		form.Set("client_id", cfg.ClientID)
		if cfg.ClientSecret != "" {
			form.Set("client_secret", cfg.ClientSecret)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.asm.RevocationEndpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if cfg.Endpoint.AuthStyle != oauth2.AuthStyleInParams {
		// RFC 6749 §2.3.1: the id and secret form-encoded, then Basic.
		req.SetBasicAuth(url.QueryEscape(cfg.ClientID), url.QueryEscape(cfg.ClientSecret))
	}
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		return &Error{Kind: KindExchange, Server: u.Name, Message: "revoking the token at " + u.asm.RevocationEndpoint, Err: err}
	}
	drain(resp)
	if resp.StatusCode != http.StatusOK {
		return &Error{Kind: KindExchange, Server: u.Name, Message: "revoking the token at " + u.asm.RevocationEndpoint + ": " + resp.Status}
	}
	return nil
}

// TokenSource returns owner's tokens for server as an oauth2.TokenSource
// (Token, with ctx).
func (c *Client) TokenSource(ctx context.Context, owner, server string) oauth2.TokenSource {
	return tokenSource{ctx: ctx, c: c, owner: owner, server: server}
}

type tokenSource struct {
	ctx           context.Context
	c             *Client
	owner, server string
}

func (s tokenSource) Token() (*oauth2.Token, error) { return s.c.Token(s.ctx, s.owner, s.server) }

// Transport returns a RoundTripper sending each request to server with
// owner's token, over base (nil: http.DefaultTransport). A request
// without a usable token fails with the KindAuthRequired error (in the
// *url.Error of http.Client). When the upstream answers 401 to a token,
// the token is refreshed and the request sent again once (when its body
// can be: GetBody); a second 401 deletes it, and the error asks the user
// to authorize again.
func (c *Client) Transport(owner, server string, base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{c: c, owner: owner, server: server, base: base}
}

type transport struct {
	c             *Client
	owner, server string
	base          http.RoundTripper
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	tok, err := t.c.Token(ctx, t.owner, t.server)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	resp, err := t.base.RoundTrip(withToken(req, tok))
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return resp, err
	}
	if req.Body != nil && req.GetBody == nil {
		return resp, nil // not sent again: the caller sees the 401
	}
	drain(resp)
	u, err := t.c.upstream(t.server)
	if err != nil {
		return nil, err
	}
	tok, err = t.c.refresh(ctx, t.owner, u, tok.AccessToken)
	if err != nil {
		return nil, err
	}
	again := req.Clone(ctx)
	if req.GetBody != nil {
		if again.Body, err = req.GetBody(); err != nil {
			return nil, err
		}
	}
	resp, err = t.base.RoundTrip(withToken(again, tok))
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return resp, err
	}
	drain(resp)
	return nil, t.c.giveUp(ctx, t.owner, u, "the upstream refused a fresh token: authorize again")
}

// withToken returns a copy of req carrying tok (a RoundTripper must not
// change its request).
func withToken(req *http.Request, tok *oauth2.Token) *http.Request {
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", tok.Type()+" "+tok.AccessToken)
	return r
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// closeBody closes a request's body that will not be sent, as a
// RoundTripper must.
func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
