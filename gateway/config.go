package gateway

import (
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/mcpsource"
)

// RouteFromConfig returns the passthrough route of server sc of c, whose
// sessions are opened with src (the source settings the manager gives the
// server): the bounds of the server's passthrough section, else of the
// configuration's, else the defaults.
func RouteFromConfig(c *config.Config, sc config.Server, src mcpsource.Config) Route {
	p := c.Passthrough
	if sc.Passthrough != nil {
		p = *sc.Passthrough
	}
	return Route{Server: src, MaxSessions: p.MaxSessions, IdleTimeout: p.IdleTimeout}
}
