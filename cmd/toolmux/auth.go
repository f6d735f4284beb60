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
// server checks them), the API keys, and --token, the one key named
// "default". With none of them the gateway listens on loopback only, and
// there is no caller: everything is as it always was.

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

// gatewayAuth builds who may call the gateway from cfg's auth: section,
// the API keys and --token (token). The issuers are reached now (their
// discovery documents, their keys), and whichever cannot be is said on
// stderr: its tokens are refused as unavailable (503) until it answers.
func (a *app) gatewayAuth(ctx context.Context, cfg *config.Config, token string) (serveAuth, error) {
	st, err := identity.FromConfig(cfg.Auth, os.Getenv)
	if err != nil {
		return serveAuth{}, usageError("%v", err)
	}
	keys, err := a.apiKeys(cfg, st)
	if err != nil {
		return serveAuth{}, err
	}
	var v identity.Verifier
	if len(st.Tokens.Issuers) == 0 && keys == nil && st.AdminGroup == gateway.AdminGroup {
		// --token alone (or nothing): as before the auth: section.
		v = gateway.TokenAuth(token).Verifier
	} else {
		var vs identity.Verifiers
		if token != "" {
			vs = append(vs, identity.NewKeys(identity.Key{Name: "default", Groups: []string{st.AdminGroup}, Hash: identity.HashKey(token)}))
		}
		if keys != nil {
			vs = append(vs, keys)
		}
		if len(st.Tokens.Issuers) > 0 {
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
		}
		if len(vs) > 0 {
			v = vs
		}
	}
	return serveAuth{auth: gateway.AuthFromConfig(cfg.Auth, v), settings: st}, nil
}

// apiKeys returns the verifier of the API keys kept for this gateway
// (auth.keys, by default in the data directory): nil while there are none.
// The key store fills it in.
func (a *app) apiKeys(cfg *config.Config, st identity.Settings) (identity.Verifier, error) {
	_, _ = cfg, st
	return nil, nil
}
