package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/identity"
)

// Who may call what serve and run --serve serve (docs/identity.md): the
// `auth:` section's issuers (access tokens, checked as an OAuth resource
// server checks them), beside --token and the API keys. Without issuers,
// who may call is what --token and the keys say, as before the section;
// with none of them the gateway listens on loopback only, and there is no
// caller.

// serveAuth is who may call a gateway, and the settings of the auth:
// section the rest of serve reads (its groups).
type serveAuth struct {
	auth     gateway.Auth
	settings identity.Settings
}

// guardedByConfig reports whether cfg itself says who may call (issuers
// to trust, the page's login), so that serve may listen beyond loopback
// without --token.
func guardedByConfig(cfg *config.Config) bool {
	return len(cfg.Auth.Issuers) > 0 || cfg.Auth.Page != nil
}

// checkPageResource refuses the page's login beyond loopback without an
// https resource: its session cookie is Secure there (a browser sends it
// over TLS only), and its redirect URI is on the resource, which the
// provider must be told exactly.
func checkPageResource(cfg *config.Config, loopback bool) error {
	if cfg.Auth.Page == nil || loopback || strings.HasPrefix(cfg.Auth.Resource, "https://") {
		return nil
	}
	return usageError("auth.page beyond loopback needs auth.resource, the gateway's https URL (TLS in front of serve): " +
		"the page's session cookie is sent over TLS only, and the login comes back to RESOURCE/auth/callback")
}

// withIssuers returns auth (who may call with --token or an API key; the
// zero Auth: anybody) with cfg's auth: section applied. With issuers, a
// request must carry one of: token (the key named "default", in the admin
// group), an API key that keys verifies (nil: none; a nil pointer must be
// passed as a nil interface), an access token of an issuer; the resource,
// the audiences and the scopes are the section's, and the protected
// resource metadata names the issuers. The issuers are reached now (their
// discovery documents, their keys), and whichever cannot be is said on
// stderr: its tokens are refused as unavailable (503) until it answers.
// Without issuers, auth is returned as it is.
func (a *app) withIssuers(ctx context.Context, cfg *config.Config, auth gateway.Auth, token string, keys identity.Verifier) (serveAuth, error) {
	st, err := identity.FromConfig(cfg.Auth, os.Getenv)
	if err != nil {
		return serveAuth{}, usageError("%v", err)
	}
	if len(st.Tokens.Issuers) == 0 {
		return a.withPage(ctx, cfg, serveAuth{auth: auth, settings: st}), nil
	}
	var vs identity.Verifiers
	if token != "" {
		vs = append(vs, identity.NewKeys(identity.Key{Name: "default", Groups: []string{st.AdminGroup}, Hash: identity.HashKey(token)}))
	}
	if keys != nil {
		vs = append(vs, keys)
	}
	tokens := identity.NewTokens(st.Tokens)
	for _, err := range tokens.Check(ctx) {
		fmt.Fprintf(a.stderr, "toolmux: warning: %v; its tokens are refused (503, Retry-After) until it answers\n", err)
	}
	vs = append(vs, tokens.Verifiers()...)
	names := make([]string, len(st.Tokens.Issuers))
	for i, is := range st.Tokens.Issuers {
		names[i] = is.URL
	}
	fmt.Fprintf(a.stderr, "toolmux: accepting access tokens of %s\n", strings.Join(names, ", "))
	return a.withPage(ctx, cfg, serveAuth{auth: gateway.AuthFromConfig(cfg.Auth, vs), settings: st}), nil
}

// withPage returns sa with the page's login of auth.page, if any
// (docs/identity.md, "The page logs in"): its provider is reached now
// (whichever cannot be is said on stderr; a login is refused as
// unavailable until it answers), and every request must then carry a
// credential or a session, even before the first API key.
func (a *app) withPage(ctx context.Context, cfg *config.Config, sa serveAuth) serveAuth {
	pg := sa.settings.Page
	if pg == nil {
		return sa
	}
	login := identity.NewLogin(pg.Login)
	if err := login.Check(ctx); err != nil {
		fmt.Fprintf(a.stderr, "toolmux: warning: the web page's login: %v; logins are refused (503) until it answers\n", err)
	}
	sa.auth.Page = gateway.NewPageLogin(login, identity.NewSessions(pg.Sessions), pg.LoginTimeout)
	sa.auth.Required = nil
	if sa.auth.Resource == "" {
		sa.auth.Resource = cfg.Auth.Resource
	}
	fmt.Fprintf(a.stderr, "toolmux: the web page logs in at %s (client %s)\n", pg.Login.Issuer, pg.Login.ClientID)
	return sa
}
