package main

import (
	"cmp"
	"fmt"
	"net"
	"strings"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/api"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/upstreamauth"
	"github.com/toolmux/toolmux/vault"
)

// Per-user OAuth to upstream servers (docs/identity.md "Per-user OAuth"):
// serve is the OAuth client of the servers whose auth kind is oauth, on
// each caller's behalf; a user's authorization comes back to its callback
// route, and the tokens are kept in the data directory's vault.

// upstreamOAuth returns serve's OAuth client of its upstreams, its
// callback below the gateway's public URL (upstream_oauth.public_url,
// else auth.resource, else the address ln listens on); nil when nothing
// could complete an authorization: no vault, or no HTTP listener (serve
// --stdio without --addr), which the servers' calls then say. authorized,
// when set, is told of each authorization completed.
func (a *app) upstreamOAuth(cfg *config.Config, v *vault.Vault, ln net.Listener, authorized func(owner, server string)) (*upstreamauth.Client, error) {
	if v == nil || ln == nil {
		return nil, nil
	}
	public := cmp.Or(cfg.UpstreamOAuth.PublicURL, cfg.Auth.Resource, strings.TrimSuffix(pageURL(ln.Addr()), "/"))
	o := upstreamauth.OptionsFromConfig(cfg.UpstreamOAuth, public)
	o.Logger, o.Authorized = a.logger(), authorized
	c, err := upstreamauth.New(v, upstreamauth.VaultRegistrations(v), o)
	if err != nil {
		return nil, usageError("upstream_oauth: %v", err)
	}
	for _, sc := range cfg.Servers {
		if sc.Auth != nil && sc.Auth.Kind == config.AuthOAuth {
			// Said once, for the operator registering a client by hand.
			fmt.Fprintf(a.stderr, "toolmux: users authorize toolmux to call %s on their behalf; their browsers come back to %s (upstream_oauth.public_url)\n",
				sc.Name, o.RedirectURL)
			break
		}
	}
	return c, nil
}

// upstreamRoutes are the routes serve mounts for c; nil without c.
func upstreamRoutes(cfg *config.Config, c *upstreamauth.Client) *gateway.UpstreamRoutes {
	if c == nil {
		return nil
	}
	r := &gateway.UpstreamRoutes{CallbackPath: upstreamauth.CallbackPath, Callback: c.Callback}
	if cfg.UpstreamOAuth.ClientMetadata {
		r.MetadataPath, r.Metadata = upstreamauth.MetadataPath, c.MetadataDocument()
	}
	return r
}

// connectionsAPI is what /api/connections serves: each caller's own
// authorizations of the runtime's oauth servers; nil without c.
func connectionsAPI(rt *toolmux.Runtime, v *vault.Vault, c *upstreamauth.Client) *api.Connections {
	if c == nil {
		return nil
	}
	return &api.Connections{Vault: v, Client: c, Servers: rt.OAuthServers,
		Changed: func(owner, server string) { rt.DisconnectCaller(server, owner) }}
}
