package toolmux

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/toolmux/toolmux/builtin"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/policy"
)

// Reloaded says what a reload changed.
type Reloaded struct {
	// Added, Removed and Restarted are server names (the built-in tools
	// as builtin.ServerName).
	Added, Removed, Restarted []string
	// Unchanged lists the settings a reload does not apply (a running
	// process keeps them until it restarts) that differ in the new
	// configuration: task_log, passthrough, policy.persist,
	// limits.max_depth, limits.max_event_bytes, pinning, tool_search,
	// virtual_servers, mcp_tasks, subscriptions, hooks, guardrails, and,
	// in a runtime with agents, model and agents.
	Unchanged []string
}

// Changed reports whether the reload added, removed or restarted a
// server, which changes the tools clients see.
func (r Reloaded) Changed() bool {
	return len(r.Added)+len(r.Removed)+len(r.Restarted) > 0
}

// Reload applies cfg, a new configuration of the same file, to the running
// runtime without stopping it: servers added start (at the next listing),
// removed ones drain (their calls in flight finish, at most drain, then
// they are closed), changed ones are replaced the same way; the global
// allow and deny lists, the policy (rules and mode; a mode given to Open
// stays) and the pipeline's settings apply to the calls that start from
// now on. Sessions, tasks, the task log and the "always" answers given so
// far are kept. Reloads take turns.
//
// A configuration without servers is refused with a *NoServersError
// while the one in use has some, unless it says so on purpose
// (cfg.NoServers: `servers: {}`): an empty file, a file of comments only,
// `servers:` with nothing under it and a file cut while it was being
// written look the same, and a reload must not take every server away by
// accident.
//
// On error nothing changed (no servers, as above; a server whose source
// cannot be made, a policy or pipeline the configuration's checks let
// through but their builders refuse). Settings that need a restart are reported in
// Reloaded.Unchanged and otherwise ignored: Reload sets them in cfg to
// those in use (as it does data_dir), and cfg becomes CurrentConfig.
func (rt *Runtime) Reload(ctx context.Context, cfg *config.Config, drain time.Duration) (Reloaded, error) {
	rt.reloadMu.Lock()
	defer rt.reloadMu.Unlock()
	old := rt.current
	if len(cfg.Servers) == 0 && !cfg.NoServers && len(old.Servers) > 0 {
		e := &NoServersError{Path: cfg.Path}
		for _, sc := range old.Servers {
			e.Running = append(e.Running, sc.Name)
		}
		return Reloaded{}, e
	}
	var r Reloaded
	// What the process keeps from its start.
	cfg.DataDir = old.DataDir
	fixed := []struct {
		name     string
		old, new any
	}{
		{"task_log", old.TaskLog, cfg.TaskLog},
		{"passthrough", old.Passthrough, cfg.Passthrough},
		{"policy.persist", old.Policy.Persist, cfg.Policy.Persist},
		// Held by the scheduler, the gateway and the event sink too.
		{"limits.max_depth", old.Limits.MaxDepth, cfg.Limits.MaxDepth},
		{"limits.max_event_bytes", old.Limits.MaxEventBytes, cfg.Limits.MaxEventBytes},
		// Held by the pins and the gateway's routes, made at start.
		{"pinning", old.Pinning, cfg.Pinning},
		{"tool_search", old.ToolSearch, cfg.ToolSearch},
		{"virtual_servers", old.VirtualServers, cfg.VirtualServers},
		{"mcp_tasks", old.MCPTasks, cfg.MCPTasks},
		{"subscriptions", old.Subscriptions, cfg.Subscriptions},
		// Held by the gateway's routes, made at start.
		{"auth", old.Auth, cfg.Auth},
		// The vault's keys, read once at start by what uses them: a
		// rotation configures both keys and restarts (docs/vault.md).
		{"vault", old.Vault, cfg.Vault},
		// Held by serve's OAuth client of its upstreams, made at start.
		{"upstream_oauth", old.UpstreamOAuth, cfg.UpstreamOAuth},
		// Held by the scheduler's gate and the pipeline, made at start
		// (docs/hooks.md).
		{"hooks", old.Hooks, cfg.Hooks},
		{"guardrails", old.Guardrails, cfg.Guardrails},
	}
	if !rt.noAgents {
		fixed = append(fixed, []struct {
			name     string
			old, new any
		}{{"model", old.Model, cfg.Model}, {"agent", old.Agent, cfg.Agent}, {"agents", old.Agents, cfg.Agents}}...)
	}
	for _, u := range fixed {
		if !reflect.DeepEqual(u.old, u.new) {
			r.Unchanged = append(r.Unchanged, u.name)
		}
	}

	// The policy and the pipeline are built first: if either fails,
	// nothing has changed yet.
	pol, err := policy.ForConfig(cfg)
	if err != nil {
		return Reloaded{}, err
	}
	if rt.mode != "" {
		if pol, err = pol.WithMode(rt.mode); err != nil {
			return Reloaded{}, err
		}
	}
	popts := append(pipeline.FromConfig(cfg.Pipeline), rt.popts...)
	popts = append(popts, pipeline.WithLimits(pipeline.Limits{MaxDepth: old.Limits.MaxDepth, MaxRecordBytes: int(cfg.Limits.MaxRecordBytes)}))
	// Built before the servers change, put in use with them.
	applyPipeline, err := rt.Pipeline.Prepare(popts...)
	if err != nil {
		return Reloaded{}, err
	}

	var rc manager.Reconfiguration
	rc.Allow, rc.Deny, rc.Drain = cfg.Allow, cfg.Deny, drain
	closeAdded := func() {
		for _, a := range rc.Add {
			a.Source.Close()
		}
	}
	if cfg.Builtin.Enabled {
		rc.Order = append(rc.Order, builtin.ServerName)
		switch {
		case !old.Builtin.Enabled:
			r.Added = append(r.Added, builtin.ServerName)
		case !reflect.DeepEqual(builtinKey(old), builtinKey(cfg)):
			r.Restarted = append(r.Restarted, builtin.ServerName)
		}
		if !old.Builtin.Enabled || !reflect.DeepEqual(builtinKey(old), builtinKey(cfg)) {
			b, err := newBuiltin(cfg)
			if err != nil {
				return Reloaded{}, err
			}
			rc.Add = append(rc.Add, manager.Server{Source: b, Options: builtinServerOptions(cfg)})
		}
	} else if old.Builtin.Enabled {
		r.Removed = append(r.Removed, builtin.ServerName)
	}
	err = remake(&rc, &r, old.Servers, cfg.Servers,
		func(sc config.Server) string { return sc.Name }, serverKey, old, cfg,
		func(sc config.Server) (manager.Source, manager.ServerOptions, error) {
			return newSource(cfg, sc, rt.log, rt.sourceDeps)
		})
	if err == nil {
		err = remake(&rc, &r, old.OpenAPI, cfg.OpenAPI,
			func(a config.OpenAPI) string { return a.Name }, apiKey, old, cfg,
			func(a config.OpenAPI) (manager.Source, manager.ServerOptions, error) {
				return newAPISource(cfg, a, rt.log, rt.sourceDeps)
			})
	}
	if err != nil {
		closeAdded()
		return Reloaded{}, err
	}
	// The sources that are not the configuration's (the caller's own,
	// the sub-agents) stay, after the configured ones as at Open.
	for _, name := range rt.Manager.Servers() {
		if !rt.configured(old, name) && !slices.Contains(rc.Order, name) {
			rc.Order = append(rc.Order, name)
		}
	}

	// The pipeline and the policy apply to the calls that start after the
	// servers changed: a call of a new server is governed by the new rules.
	rc.Swapped = func() {
		applyPipeline()
		rt.Gate.SetEngine(pol)
	}
	if err := rt.Manager.Reconfigure(ctx, rc); err != nil {
		return Reloaded{}, err
	}
	// What is not applied stays as it was in the configuration in use.
	cfg.Limits.MaxDepth, cfg.Limits.MaxEventBytes = old.Limits.MaxDepth, old.Limits.MaxEventBytes
	cfg.Policy.Persist, cfg.TaskLog, cfg.Passthrough = old.Policy.Persist, old.TaskLog, old.Passthrough
	cfg.Pinning, cfg.ToolSearch, cfg.VirtualServers = old.Pinning, old.ToolSearch, old.VirtualServers
	cfg.MCPTasks, cfg.Subscriptions, cfg.Auth, cfg.Vault = old.MCPTasks, old.Subscriptions, old.Auth, old.Vault
	cfg.UpstreamOAuth = old.UpstreamOAuth
	cfg.Hooks, cfg.Guardrails = old.Hooks, old.Guardrails
	rt.current = cfg
	return r, nil
}

// NoServersError is Reload's refusal of a configuration that has no
// server, and does not say so on purpose (config.Config.NoServers), while
// the configuration in use has some.
type NoServersError struct {
	// Path is the new configuration's file ("" for one made in code).
	Path string
	// Running are the servers of the configuration in use, which the
	// reload would have removed.
	Running []string
}

func (e *NoServersError) Error() string {
	what := "the new configuration"
	if e.Path != "" {
		what = e.Path
	}
	return fmt.Sprintf("%s has no server, and the configuration in use has %d (%s): applied, it would remove them all. "+
		"An empty file, a file of comments only, \"servers:\" with nothing under it and a file read while it was being written look like this "+
		"(write the file to a temporary one and rename it over the configuration); to remove every server, write \"servers: {}\"",
		what, len(e.Running), strings.Join(e.Running, ", "))
}

// configured reports whether name is a server of cfg (the built-in tools
// included).
func (rt *Runtime) configured(cfg *config.Config, name string) bool {
	if cfg.Builtin.Enabled && name == builtin.ServerName {
		return true
	}
	return slices.ContainsFunc(cfg.Servers, func(sc config.Server) bool { return sc.Name == name }) ||
		slices.ContainsFunc(cfg.OpenAPI, func(a config.OpenAPI) bool { return a.Name == name })
}

// remake adds to rc, in the order of news, the entries of one kind
// (servers, APIs) of the new configuration, with a source made by newSrc
// for each one that is new or whose key (what its source is made of)
// changed, and reports them in r as added, restarted or removed.
func remake[E any](rc *manager.Reconfiguration, r *Reloaded, olds, news []E, name func(E) string,
	key func(*config.Config, E) any, oldCfg, newCfg *config.Config, newSrc func(E) (manager.Source, manager.ServerOptions, error)) error {
	was := make(map[string]E, len(olds))
	for _, e := range olds {
		was[name(e)] = e
	}
	for _, e := range news {
		n := name(e)
		rc.Order = append(rc.Order, n)
		prev, ok := was[n]
		delete(was, n)
		if ok && reflect.DeepEqual(key(oldCfg, prev), key(newCfg, e)) {
			continue
		}
		src, sopts, err := newSrc(e)
		if err != nil {
			return err
		}
		rc.Add = append(rc.Add, manager.Server{Source: src, Options: sopts})
		if ok {
			r.Restarted = append(r.Restarted, n)
		} else {
			r.Added = append(r.Added, n)
		}
	}
	for _, e := range olds {
		if _, gone := was[name(e)]; gone {
			r.Removed = append(r.Removed, name(e))
		}
	}
	return nil
}

// apiKey is what an API's source is made of: a change remakes it (and
// reads its spec again). Line is where the entry is, not what it says.
func apiKey(cfg *config.Config, a config.OpenAPI) any {
	a.Line = 0
	return []any{a, cfg.Timeout, cfg.Retry, cfg.CircuitBreaker, cfg.HealthCheck}
}

// builtinKey is what the built-in tools are made of: a change restarts
// them.
func builtinKey(cfg *config.Config) any {
	return []any{cfg.Builtin, cfg.Workspace, cfg.DataDir, builtinServerOptions(cfg)}
}

// serverKey is what one server's source and policy are made of: a change
// restarts the server. The line it was configured on is not.
func serverKey(cfg *config.Config, sc config.Server) any {
	sc.Line = 0
	mc := MCPSourceConfig(cfg, sc, nil)
	mc.Logger = nil
	return struct {
		Server  config.Server
		Options manager.ServerOptions
		Source  mcpsource.Config
	}{sc, serverOptions(cfg, sc), mc}
}
