package config

import (
	"time"

	"go.yaml.in/yaml/v3"
)

// TokenExchange is a token_exchange auth section's own part: where and as
// whom toolmux exchanges each caller's access token for one whose
// audience is the server (RFC 8693; package tokenexchange).
type TokenExchange struct {
	// Issuer is the identity provider whose token endpoint is found by
	// discovery; TokenURL is that endpoint itself. One of them is set.
	Issuer, TokenURL string
	// ClientID is toolmux's client at the provider; ClientSecretEnv the
	// environment variable holding its secret (never the secret).
	ClientID, ClientSecretEnv string
	// ClientAuth is client_secret_basic or client_secret_post; "": the
	// default of package tokenexchange.
	ClientAuth string
	// Audience and Resource name the server at the provider; at least
	// one is set.
	Audience, Resource string
	// Scopes are asked for the server's tokens.
	Scopes []string
	// RequestedTokenType and SubjectTokenType are RFC 8693 token type
	// URNs; "": the defaults of package tokenexchange.
	RequestedTokenType, SubjectTokenType string
	// MaxTokens bounds the callers' exchanged tokens kept; RefreshBefore
	// is how long before its expiry one is exchanged anew; Timeout bounds
	// one exchange. 0: the defaults of package tokenexchange.
	MaxTokens     int
	RefreshBefore time.Duration
	Timeout       time.Duration
}

// maxExchangeTokens bounds max_tokens: each is a token kept in memory.
const maxExchangeTokens = 1_000_000

// The keys of a token_exchange section, beside serverAuthKeys.
var tokenExchangeKeys = []string{"issuer", "token_url", "client_id", "client_secret_env", "client_auth",
	"audience", "resource", "scopes", "requested_token_type", "subject_token_type",
	"max_tokens", "refresh_before", "timeout"}

// tokenExchange reads a token_exchange section's own keys (es, the
// section's entries; the shared ones were read by serverAuth).
func (p *parser) tokenExchange(d *serverDecl, section *yaml.Node, es []entry, kp string, a *ServerAuth) {
	if d.s.Transport == Stdio {
		p.errAt(section, kp, "kind %s applies only to sse and http servers, but this server has command (a stdio server takes user_secrets)", AuthTokenExchange)
		return
	}
	x := &TokenExchange{}
	var issuer, tokenURL, id, env, audience, resource *yaml.Node
	for _, f := range es {
		fp := kp + "." + f.key
		switch f.key {
		case "issuer":
			issuer = f.v
			x.Issuer = p.httpURL(f.v, fp, true)
		case "token_url":
			tokenURL = f.v
			x.TokenURL = p.httpURL(f.v, fp, true)
		case "client_id":
			id = f.v
			x.ClientID, _ = p.text(f.v, fp)
		case "client_secret_env":
			env = f.v
			x.ClientSecretEnv = p.envName(f.v, fp)
		case "client_auth":
			if v, ok := p.str(f.v, fp); ok {
				if v != "client_secret_basic" && v != "client_secret_post" {
					p.errAt(f.v, fp, "must be client_secret_basic or client_secret_post, got %s", quote(v))
				}
				x.ClientAuth = v
			}
		case "audience":
			audience = f.v
			x.Audience, _ = p.text(f.v, fp)
		case "resource":
			resource = f.v
			x.Resource = p.httpURL(f.v, fp, false)
		case "scopes":
			x.Scopes = p.strList(f.v, fp, checkScope)
		case "requested_token_type":
			x.RequestedTokenType = p.tokenType(f.v, fp)
		case "subject_token_type":
			x.SubjectTokenType = p.tokenType(f.v, fp)
		case "max_tokens":
			x.MaxTokens, _ = p.integer(f.v, fp, 1, maxExchangeTokens)
		case "refresh_before":
			x.RefreshBefore = p.boundedDuration(f.v, fp, 3600, "1h")
		case "timeout":
			x.Timeout = p.boundedDuration(f.v, fp, 300, "5m")
		}
	}
	switch {
	case issuer == nil && tokenURL == nil:
		p.errAt(section, kp, "kind %s needs issuer (the identity provider, its token endpoint found by discovery) or token_url", AuthTokenExchange)
	case issuer != nil && tokenURL != nil:
		p.errAt(tokenURL, kp+".token_url", "give issuer or token_url, not both")
	}
	if id == nil {
		p.errAt(section, kp, "kind %s needs client_id: toolmux's client at the identity provider, allowed to exchange tokens", AuthTokenExchange)
	}
	if env == nil {
		p.errAt(section, kp, "kind %s needs client_secret_env: the environment variable holding toolmux's client secret at the identity provider", AuthTokenExchange)
	}
	if audience == nil && resource == nil {
		p.errAt(section, kp, "kind %s needs audience (the server's name at the identity provider) or resource (its URL), or both", AuthTokenExchange)
	}
	a.Exchange = x
}

// tokenType reads an RFC 8693 token type identifier (a URN).
func (p *parser) tokenType(n *yaml.Node, kp string) string {
	v, ok := p.str(n, kp)
	if !ok {
		return ""
	}
	switch v {
	case "urn:ietf:params:oauth:token-type:access_token", "urn:ietf:params:oauth:token-type:jwt",
		"urn:ietf:params:oauth:token-type:id_token", "urn:ietf:params:oauth:token-type:refresh_token":
		return v
	}
	p.errAt(n, kp, "%s is not a token type of RFC 8693 (such as urn:ietf:params:oauth:token-type:access_token)", quote(v))
	return ""
}
