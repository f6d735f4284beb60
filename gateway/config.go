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
	return Route{Server: src, MaxSessions: p.MaxSessions, IdleTimeout: p.IdleTimeout, MaxParked: p.MaxParked, ParkTimeout: p.ParkTimeout}
}

// ToolSearchFromConfig returns the tool search of a tool_search section.
func ToolSearchFromConfig(ts config.ToolSearch) ToolSearch {
	return ToolSearch{Enabled: ts.Enabled, Above: ts.Above, Pinned: ts.Pinned, Limit: ts.Limit}
}

// VirtualFromConfig returns the virtual servers of a configuration.
func VirtualFromConfig(c *config.Config) []Virtual {
	out := make([]Virtual, 0, len(c.VirtualServers))
	for _, vs := range c.VirtualServers {
		out = append(out, Virtual{Name: vs.Name, Description: vs.Description, Tools: vs.Tools,
			Rename: vs.Rename, Describe: vs.Descriptions, ToolSearch: ToolSearchFromConfig(vs.ToolSearch)})
	}
	return out
}
