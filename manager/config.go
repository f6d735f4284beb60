package manager

import (
	"fmt"
	"log/slog"
	"path"
	"strings"

	"github.com/toolmux/toolmux/builtin"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/mcpsource"
)

// FromConfig builds a manager for cfg: the built-in tools on the workspace
// (unless disabled) and one MCP source per configured server, with the
// policy the configuration gives each. Nothing is started yet.
func FromConfig(cfg *config.Config, log *slog.Logger, opts ...Option) (*Manager, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	all := []Option{WithLogger(log), WithFilter(cfg.Allow, cfg.Deny)}
	if cfg.Builtin.Enabled {
		ws := cfg.Workspace
		if ws == "" {
			ws = "."
		}
		b, err := builtin.New(ws)
		if err != nil {
			return nil, fmt.Errorf("built-in tools: workspace %q: %w", ws, err)
		}
		all = append(all, WithSource(b, ServerOptions{Timeout: cfg.Timeout, Transport: "builtin"}))
	}
	for _, sc := range cfg.Servers {
		src, err := mcpsource.New(mcpsource.Config{
			Name:           sc.Name,
			Transport:      sc.Transport,
			Command:        sc.Command,
			Args:           sc.Args,
			Env:            sc.Env,
			Dir:            sc.Cwd,
			URL:            sc.URL,
			Headers:        sc.Headers,
			BearerToken:    sc.BearerToken,
			ConnectTimeout: first(sc.ConnectTimeout, cfg.ConnectTimeout),
			Logger:         log.With("server", sc.Name),
		})
		if err != nil {
			return nil, err
		}
		all = append(all, WithSource(src, serverOptions(cfg, sc)))
	}
	return New(append(all, opts...)...)
}

func serverOptions(cfg *config.Config, sc config.Server) ServerOptions {
	retry := cfg.Retry
	retry.Tools = toolGlobsFor(sc.Name, cfg.Retry.Tools)
	if sc.Retry != nil {
		retry = *sc.Retry
	}
	breaker := cfg.CircuitBreaker
	if sc.CircuitBreaker != nil {
		breaker = *sc.CircuitBreaker
	}
	return ServerOptions{
		Allow:          sc.Allow,
		Deny:           sc.Deny,
		Timeout:        first(sc.Timeout, cfg.Timeout),
		ToolTimeouts:   sc.ToolTimeouts,
		ConnectTimeout: first(sc.ConnectTimeout, cfg.ConnectTimeout),
		Retry: Retry{
			MaxAttempts:    retry.MaxAttempts,
			InitialBackoff: retry.InitialBackoff,
			MaxBackoff:     retry.MaxBackoff,
			Tools:          retry.Tools,
		},
		Breaker:   Breaker{Failures: breaker.Failures, Cooldown: breaker.Cooldown},
		Disabled:  sc.Disabled,
		Transport: sc.Transport,
	}
}

// toolGlobsFor turns global "server/tool" patterns into the bare tool globs
// that apply to one server.
func toolGlobsFor(server string, globs []string) []string {
	var out []string
	for _, g := range globs {
		srv, tl, ok := strings.Cut(g, "/")
		if !ok {
			out = append(out, g)
			continue
		}
		if m, _ := path.Match(srv, server); m {
			out = append(out, tl)
		}
	}
	return out
}

func first[T comparable](vals ...T) T {
	var zero T
	for _, v := range vals {
		if v != zero {
			return v
		}
	}
	return zero
}
