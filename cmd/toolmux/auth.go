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
// to trust), so that serve may listen beyond loopback without --token.
func guardedByConfig(cfg *config.Config) bool {
	return len(cfg.Auth.Issuers) > 0
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
		return serveAuth{auth: auth, settings: st}, nil
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
	return serveAuth{auth: gateway.AuthFromConfig(cfg.Auth, vs), settings: st}, nil
}
