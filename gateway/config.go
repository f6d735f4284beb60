package gateway

import (
	"github.com/toolmux/toolmux/codemode"
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
	return Route{Server: src, MaxSessions: p.MaxSessions, IdleTimeout: p.IdleTimeout, MaxParked: p.MaxParked, ParkTimeout: p.ParkTimeout,
		Groups: p.Groups}
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
			Rename: vs.Rename, Describe: vs.Descriptions, ToolSearch: ToolSearchFromConfig(vs.ToolSearch), Groups: vs.Groups})
	}
	return out
}

// TasksFromConfig returns the MCP tasks of a configuration, kept in store
// (the task log); tasks are off (the zero Tasks) when store is nil or
// mcp_tasks.enabled is false. Tasks live as long as the task log keeps
// them (task_log.retention.max_age), which clients are told as ttlMs.
func TasksFromConfig(c *config.Config, store TaskStore) Tasks {
	mt := c.MCPTasks
	if store == nil || mt.Disabled {
		return Tasks{}
	}
	o := Tasks{Store: store, Threshold: mt.Threshold, Long: mt.Long, Required: mt.Required, MaxRunning: mt.MaxRunning,
		PollInterval: mt.PollInterval, TTL: c.TaskLog.Retention.MaxAge}
	for _, th := range mt.Thresholds {
		o.Thresholds = append(o.Thresholds, TaskThreshold{Tools: th.Tools, After: th.After})
	}
	return o
}

// CodeModeFromConfig returns the code mode of a code_mode section
// (codemode's defaults for what it leaves out).
func CodeModeFromConfig(c config.CodeMode) CodeMode {
	return CodeMode{Enabled: c.Enabled, Bounds: codemode.Options{Timeout: c.Timeout, MaxCalls: c.MaxCalls,
		MaxOutputBytes: int(c.MaxOutputBytes), MaxMemoryBytes: c.MaxMemoryBytes, Engine: c.Engine,
		Programs: codemode.NewPrograms(c.MaxPrograms)}}
}
