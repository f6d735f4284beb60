package config

import (
	"net/url"
	"time"

	"go.yaml.in/yaml/v3"
)

// This file reads what per-user OAuth to upstream servers needs: a
// server's auth section of kind oauth (its client at the upstream's
// authorization server, when an operator registered one, and the scopes
// asked), and the upstream_oauth section, the gateway's settings as the
// OAuth client of every such server (docs/identity.md, "Per-user OAuth").

// UpstreamOAuth is the upstream_oauth section. Zero values mean the
// defaults of package upstreamauth.
type UpstreamOAuth struct {
	// PublicURL is the gateway's URL as users' browsers reach it (scheme,
	// host, and a path prefix if a proxy adds one): the callback route is
	// PublicURL/oauth/callback. "": auth.resource, else the address serve
	// listens on.
	PublicURL string
	// ClientName is the name authorization servers show on their consent
	// page.
	ClientName string
	// ClientMetadata serves the gateway's Client ID Metadata Document at
	// PublicURL/oauth/client-metadata.json (an https URL), by which an
	// authorization server that supports them knows the gateway without
	// a registration.
	ClientMetadata bool
	// Leeway: a token with less than this to live is refreshed first.
	Leeway time.Duration
	// MaxPending bounds the authorizations waiting for their callback.
	MaxPending int
	// StateTTL is how long an authorization URL may be used.
	StateTTL time.Duration
	// Timeout bounds one request to an upstream or an authorization
	// server (discovery, registration, tokens).
	Timeout time.Duration
	// AllowPrivateNetworks lets discovery fetch metadata at addresses of
	// private networks (10.0.0.0/8, 192.168.0.0/16, ...), which the
	// go-sdk refuses by default against request forgery.
	AllowPrivateNetworks bool
}

var (
	upstreamOAuthKeys = []string{"public_url", "client_name", "client_metadata", "leeway", "max_pending", "state_ttl", "timeout", "allow_private_networks"}
)

// Bounds of upstream_oauth: a token refreshed an hour early is refreshed
// at every use; an authorization URL good for a day is one that leaked
// and still works.
const (
	maxOAuthLeewaySecs   = 60 * 60
	maxOAuthStateTTLSecs = 24 * 60 * 60
	maxOAuthTimeoutSecs  = 5 * 60
	maxOAuthPending      = 1_000_000
)

// upstreamOAuth reads the upstream_oauth section.
func (p *parser) upstreamOAuth(n *yaml.Node, kp string) UpstreamOAuth {
	var u UpstreamOAuth
	var metaNode *yaml.Node
	p.fields(n, kp, upstreamOAuthKeys, func(e entry, fp string) {
		switch e.key {
		case "public_url":
			if s := p.httpURL(e.v, fp, false); s != "" {
				if pu, _ := url.Parse(s); pu.User != nil {
					p.errAt(e.v, fp, "must hold no user or password")
					return
				}
				u.PublicURL = s
			}
		case "client_name":
			u.ClientName, _ = p.text(e.v, fp)
		case "client_metadata":
			metaNode = e.v
			u.ClientMetadata, _ = p.boolean(e.v, fp)
		case "leeway":
			u.Leeway = p.boundedDuration(e.v, fp, maxOAuthLeewaySecs, "1h")
		case "max_pending":
			u.MaxPending, _ = p.integer(e.v, fp, 1, maxOAuthPending)
		case "state_ttl":
			u.StateTTL = p.boundedDuration(e.v, fp, maxOAuthStateTTLSecs, "24h")
		case "timeout":
			u.Timeout = p.boundedDuration(e.v, fp, maxOAuthTimeoutSecs, "5m")
		case "allow_private_networks":
			u.AllowPrivateNetworks, _ = p.boolean(e.v, fp)
		}
	})
	if u.ClientMetadata && metaNode != nil {
		// An authorization server fetches the document by its URL, which
		// the MCP specification wants https.
		if pu, err := url.Parse(u.PublicURL); u.PublicURL == "" || err != nil || pu.Scheme != "https" {
			p.errAt(metaNode, kp+".client_metadata", "needs public_url, an https URL: the document's URL is the gateway's client id")
		}
	}
	return u
}

// serverOAuth reads the keys of an auth section of kind oauth: an HTTP
// server only (its MCP endpoint is the protected resource).
func (p *parser) serverOAuth(d *serverDecl, kindNode *yaml.Node, es []entry, kp string, a *ServerAuth) {
	if d.s.Transport == Stdio {
		p.errAt(kindNode, kp+".kind", "%s applies only to sse and http servers (an MCP endpoint that asks for OAuth), but this server has command (use %s)",
			AuthOAuth, AuthUserSecrets)
		return
	}
	var idNode, envNode *yaml.Node
	for _, f := range es {
		fp := kp + "." + f.key
		switch f.key {
		case "client_id":
			idNode = f.v
			a.ClientID, _ = p.text(f.v, fp)
		case "client_secret_env":
			envNode = f.v
			a.ClientSecretEnv = p.envName(f.v, fp)
		case "scopes":
			a.Scopes = p.strList(f.v, fp, checkScope)
		}
	}
	if envNode != nil && idNode == nil {
		p.errAt(envNode, kp+".client_secret_env", "client_secret_env needs a client_id")
	}
}
