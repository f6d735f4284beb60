package toolmux

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/toolmux/toolmux/builtin"
	"github.com/toolmux/toolmux/cmdsource"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/toolglob"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/openapisource"
	"github.com/toolmux/toolmux/percaller"
	"github.com/toolmux/toolmux/telemetry"
	"github.com/toolmux/toolmux/tool"
	"github.com/toolmux/toolmux/upstreamauth"
	"github.com/toolmux/toolmux/vault"
	"github.com/toolmux/toolmux/web"
)

// NewManager builds a manager for cfg: the built-in tools on the workspace
// (unless disabled), with the settings of cfg.Builtin, and one source per
// configured server — an MCP source, or a command source for command
// servers — with the policy the configuration gives each. Nothing is
// started yet.
//
// cfg.DataDir, when set, is where the built-in tools keep state by
// default: memory's facts in DataDir/memory (unless builtin.memory_dir says
// otherwise) and the full output of long shell commands in
// DataDir/spill/shell.
func NewManager(cfg *config.Config, log *slog.Logger, opts ...manager.Option) (*manager.Manager, error) {
	return newManager(cfg, log, sourceDeps{}, opts...)
}

// sourceDeps is what the sources of configured servers are made with,
// besides the configuration.
type sourceDeps struct {
	// tel traces the MCP sources' calls (nil: not at all).
	tel *telemetry.Telemetry
	// vault keeps users' secrets for the servers that take each
	// caller's own (nil: none; their calls are refused saying so).
	vault *vault.Vault
	// oauth is the gateway as the OAuth client of the servers whose auth
	// kind is oauth (nil: none; their calls are refused saying so), and
	// getenv reads their client secrets.
	oauth  *upstreamauth.Client
	getenv func(string) string
	// perCaller, when set, learns the per-caller sources made
	// (Runtime.DisconnectCaller).
	perCaller *perCallers
	// secretsURL is where users set their secrets (Options.SecretsURL).
	secretsURL string
}

// perCallers are the per-caller sources of a runtime, by server: the
// last one made for a name (a reload's replaces the one before).
type perCallers struct {
	mu sync.Mutex
	by map[string]*percaller.Source
}

func (p *perCallers) add(name string, s *percaller.Source) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.by == nil {
		p.by = map[string]*percaller.Source{}
	}
	p.by[name] = s
}

func (p *perCallers) get(name string) *percaller.Source {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.by[name]
}

// newManager is NewManager whose sources are made with deps.
func newManager(cfg *config.Config, log *slog.Logger, deps sourceDeps, opts ...manager.Option) (m *manager.Manager, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Sources already made are closed when a later step fails: they may
	// hold web backends, and New closes only the sources it has added.
	// Closing a source twice is harmless.
	var made []manager.Source
	defer func() {
		if err != nil {
			for _, s := range made {
				s.Close()
			}
		}
	}()
	all := []manager.Option{manager.WithLogger(log), manager.WithFilter(cfg.Allow, cfg.Deny)}
	if cfg.Builtin.Enabled {
		b, err := newBuiltin(cfg)
		if err != nil {
			return nil, err
		}
		made = append(made, b)
		all = append(all, manager.WithSource(b, builtinServerOptions(cfg)))
	}
	for _, sc := range cfg.Servers {
		src, sopts, err := newSource(cfg, sc, log, deps)
		if err != nil {
			return nil, err
		}
		made = append(made, src)
		all = append(all, manager.WithSource(src, sopts))
	}
	for _, a := range cfg.OpenAPI {
		src, sopts, err := newAPISource(cfg, a, log, deps)
		if err != nil {
			return nil, err
		}
		made = append(made, src)
		all = append(all, manager.WithSource(src, sopts))
	}
	return manager.New(append(all, opts...)...)
}

// newAPISource makes the source of one configured OpenAPI API
// (`openapi:`), with the policy the manager applies to it: the global
// retry policy, circuit breaker and health check, as for a server that
// sets none of its own. An API with an auth section (user_secrets) sends
// each caller's own secrets, from deps' vault, as headers.
func newAPISource(cfg *config.Config, a config.OpenAPI, log *slog.Logger, deps sourceDeps) (manager.Source, manager.ServerOptions, error) {
	timeout := first(a.Timeout, cfg.Timeout)
	// The manager cuts a listing off at its connect timeout plus a
	// margin; the source's own bound on reading the spec comes first, so
	// the error says what happened.
	specTimeout := first(a.SpecTimeout, openapisource.DefaultSpecTimeout)
	src, err := openapisource.New(openapisource.Config{
		Name:             a.Name,
		Spec:             a.Spec,
		BaseURL:          a.BaseURL,
		Headers:          a.Headers,
		BearerToken:      a.BearerToken,
		Include:          a.Include,
		Exclude:          a.Exclude,
		Timeout:          timeout,
		SpecTimeout:      specTimeout,
		MaxSpecBytes:     a.MaxSpecBytes,
		MaxResponseBytes: a.MaxResponseBytes,
		MaxSchemaNodes:   a.MaxSchemaNodes,
		Logger:           log.With("server", a.Name),
		Credential:       apiCredential(a, deps),
		CredentialKind:   apiCredentialKind(a),
	})
	if err != nil {
		return nil, manager.ServerOptions{}, err
	}
	sopts := serverOptions(cfg, config.Server{Name: a.Name, Transport: openapisource.Transport})
	sopts.ConnectTimeout = specTimeout
	return src, sopts, nil
}

// newSource makes the source of one configured server, with the policy
// the manager applies to it, with deps.
func newSource(cfg *config.Config, sc config.Server, log *slog.Logger, deps sourceDeps) (manager.Source, manager.ServerOptions, error) {
	var src manager.Source
	var err error
	sopts := serverOptions(cfg, sc)
	if sc.Transport == config.Command {
		src, err = newCommandSource(cfg, sc, log)
		// The manager cuts discovery off at its connect timeout (plus
		// its listing margin). It must not be the first to give up:
		// cmdsource stops a slow discovery command itself, after
		// DiscoverTimeout and the kill grace, with an error quoting
		// what the command printed.
		sopts.ConnectTimeout = first(sc.ConnectTimeout, cfg.ConnectTimeout) + cmdsource.DefaultKillGrace
	} else {
		mc := MCPSourceConfig(cfg, sc, log.With("server", sc.Name))
		mc.Tracer, mc.Propagator = deps.tel.Tracer(), deps.tel.Propagator()
		if sc.Auth != nil {
			var pc *percaller.Source
			if pc, err = perCallerSource(cfg, sc, mc, deps, log); err == nil {
				deps.perCaller.add(sc.Name, pc)
				src = pc
			}
		} else {
			src, err = mcpsource.New(mc)
		}
	}
	switch {
	case err != nil && sc.Disabled:
		// A disabled server may use variables that are not set (often
		// why it is disabled), which can leave it without a program
		// or URL; it is never started, so it only needs to be listed.
		src = disabledSource(sc.Name)
	case err != nil:
		return nil, sopts, err
	}
	return src, sopts, nil
}

// perCallerSource makes the source of a server with an auth section: each
// caller's calls over a connection of their own, opened with their
// credential (package percaller); its tool list kept in
// DATA_DIR/percaller/NAME.tools.json when there is a data directory.
func perCallerSource(cfg *config.Config, sc config.Server, mc mcpsource.Config, deps sourceDeps, log *slog.Logger) (*percaller.Source, error) {
	var sv percaller.SecretVault
	if deps.vault != nil {
		sv = deps.vault
	}
	o := percaller.OptionsFromConfig(*sc.Auth)
	o.Logger = log.With("server", sc.Name)
	if cfg.DataDir != "" {
		o.ToolsFile = filepath.Join(cfg.DataDir, "percaller", sc.Name+".tools.json")
	}
	var cred percaller.Credential
	switch sc.Auth.Kind {
	case config.AuthTokenExchange:
		x, err := percaller.ExchangeFromConfig(sc.Name, *sc.Auth.Exchange, os.Getenv)
		if err != nil {
			return nil, err
		}
		cred = x
	case config.AuthOAuth:
		getenv := deps.getenv
		if getenv == nil {
			getenv = func(string) string { return "" }
		}
		oc, err := percaller.OAuthFromConfig(sc, deps.oauth, sv, getenv)
		if err != nil {
			return nil, err
		}
		cred = oc
	default:
		secrets := percaller.SecretsFromConfig(sc.Name, *sc.Auth, sv)
		secrets.URL = deps.secretsURL
		cred = secrets
	}
	return percaller.New(mc, cred, o), nil
}

// apiCredential is the callers' own credential of an API with an auth
// section: the user_secrets of percaller, whose Connect puts a caller's
// secrets in the headers of a connection's configuration, read here for
// one request. nil for an API without one.
func apiCredential(a config.OpenAPI, deps sourceDeps) func(context.Context) (http.Header, error) {
	if a.Auth == nil {
		return nil
	}
	var sv percaller.SecretVault
	if deps.vault != nil {
		sv = deps.vault
	}
	secrets := percaller.SecretsFromConfig(a.Name, *a.Auth, sv)
	secrets.URL = deps.secretsURL
	return func(ctx context.Context) (http.Header, error) {
		c := identity.From(ctx)
		if c == nil {
			return nil, &tool.Error{Kind: tool.KindAuthRequired, Server: a.Name, Err: tool.ErrNotSent,
				Message: fmt.Sprintf("API %s takes each caller's own credential, and this call has no caller: configure authentication (auth: in the configuration, docs/identity.md)", a.Name)}
		}
		mc, err := secrets.Connect(ctx, c.Key(), mcpsource.Config{Name: a.Name, Transport: config.HTTP})
		if err != nil {
			return nil, err
		}
		h := http.Header{}
		for k, v := range mc.Headers {
			h.Set(k, v)
		}
		return h, nil
	}
}

func apiCredentialKind(a config.OpenAPI) string {
	if a.Auth == nil {
		return ""
	}
	return tool.CredentialUserSecret
}

// disabledSource stands in for a disabled server whose source cannot be
// made. The manager never lists or calls a disabled server; should it,
// the server is reported unavailable.
type disabledSource string

func (d disabledSource) Name() string { return string(d) }

func (d disabledSource) Tools(context.Context) ([]tool.Tool, error) { return nil, d.err() }

func (d disabledSource) Call(context.Context, string, map[string]any) (*tool.Result, error) {
	return nil, d.err()
}

func (d disabledSource) Close() error { return nil }

func (d disabledSource) err() error {
	return &tool.Error{Kind: tool.KindServerUnavailable, Server: string(d),
		Message: fmt.Sprintf("server %s is disabled in the configuration", string(d))}
}

// newBuiltin makes the built-in source with the settings of cfg.Builtin.
// Zero settings are passed on as they are: the builtin and web options
// keep their defaults for them.
func newBuiltin(cfg *config.Config) (manager.Source, error) {
	bc := cfg.Builtin
	ws := cfg.Workspace
	if ws == "" {
		ws = "."
	}
	opts := []builtin.Option{
		builtin.WithMaxReadBytes(bc.MaxReadBytes),
		builtin.WithMaxWriteBytes(bc.MaxWriteBytes),
		builtin.WithShellTimeout(bc.Shell.Timeout),
		builtin.WithShellMaxTimeout(bc.Shell.MaxTimeout),
		builtin.WithShellInactivityTimeout(bc.Shell.InactivityTimeout),
		builtin.WithShellMaxOutputBytes(bc.Shell.MaxOutputBytes),
	}
	memoryDir := bc.MemoryDir
	if cfg.DataDir != "" {
		if memoryDir == "" {
			memoryDir = filepath.Join(cfg.DataDir, "memory")
		}
		opts = append(opts, builtin.WithSpillDir(filepath.Join(cfg.DataDir, "spill", "shell")))
	}
	opts = append(opts, builtin.WithMemoryDir(memoryDir))

	// builtin closes only a fetcher it made itself; the web backends made
	// here belong to the manager, which closes them with the source.
	var owned []io.Closer
	w := bc.Web
	if w.Timeout > 0 || w.MaxBytes > 0 || w.DenyPrivate {
		f := web.NewFetcher(web.WithTimeout(w.Timeout), web.WithMaxBytes(w.MaxBytes), web.WithDenyPrivate(w.DenyPrivate))
		owned = append(owned, f)
		opts = append(opts, builtin.WithFetcher(f))
	}
	if w.Search.Provider != "" {
		s, err := web.NewSearcher(w.Search.Provider, w.Search.URL, w.Search.Key)
		if err != nil {
			closeAll(owned)
			return nil, fmt.Errorf("built-in tools: web search: %w", err)
		}
		if c, ok := s.(io.Closer); ok {
			owned = append(owned, c)
		}
		opts = append(opts, builtin.WithSearcher(s))
	}

	b, err := builtin.New(ws, opts...)
	if err != nil {
		closeAll(owned)
		return nil, fmt.Errorf("built-in tools: workspace %q: %w", ws, err)
	}
	if len(owned) == 0 {
		return b, nil
	}
	return &ownedBuiltin{Source: b, owned: owned}, nil
}

// ownedBuiltin is the built-in source together with the web backends made
// for it, which its Close closes too.
type ownedBuiltin struct {
	*builtin.Source
	owned []io.Closer
}

// Close closes the source, then the backends.
func (o *ownedBuiltin) Close() error {
	return errors.Join(o.Source.Close(), closeAll(o.owned))
}

func closeAll(cs []io.Closer) error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// reportMargin is the time a tool that stops a command itself is given,
// beyond the command's limit and kill grace, to report before the manager
// cancels the call.
const reportMargin = 5 * time.Second

// builtinServerOptions is the policy of the built-in tools. A shell time
// limit set in the configuration that is longer than the call timeout is
// what bounds shell calls: otherwise the call timeout would cut such a
// command first, and the setting would do nothing. The kill grace lets the
// shell end the command and report what it printed before the manager
// gives up.
func builtinServerOptions(cfg *config.Config) manager.ServerOptions {
	o := manager.ServerOptions{Timeout: cfg.Timeout, Transport: "builtin"}
	sh := cfg.Builtin.Shell
	if d := max(sh.Timeout, sh.MaxTimeout); d > 0 {
		if bound := d + builtin.DefaultShellKillGrace + reportMargin; bound > cfg.Timeout {
			o.ToolTimeouts = map[string]time.Duration{builtin.Shell: bound}
		}
	}
	return o
}

// newCommandSource makes the source of a command server.
func newCommandSource(cfg *config.Config, sc config.Server, log *slog.Logger) (*cmdsource.Source, error) {
	env := make([]string, 0, len(sc.Env))
	for k, v := range sc.Env {
		env = append(env, k+"="+v)
	}
	slices.Sort(env) // deterministic, for logs and tests
	// The manager bounds each call by the server's timeout or its tool's;
	// cmdsource's own bound must not be the shorter one, or a tool given a
	// longer timeout than the server would be killed early.
	callTimeout := first(sc.Timeout, cfg.Timeout)
	for _, d := range sc.ToolTimeouts {
		callTimeout = max(callTimeout, d)
	}
	return cmdsource.New(cmdsource.Config{
		Name:            sc.Name,
		Discover:        sc.Discover,
		Call:            sc.Call,
		Dir:             sc.Cwd,
		Env:             env,
		DiscoverTimeout: first(sc.ConnectTimeout, cfg.ConnectTimeout),
		CallTimeout:     callTimeout,
		Logger:          log.With("server", sc.Name),
	})
}

// connectTimeoutHint says which key sets sc's connect timeout, its value,
// and how to raise it: the server's own key when it has one, else the
// global one (or the server's, for it alone).
func connectTimeoutHint(cfg *config.Config, sc config.Server) string {
	if sc.ConnectTimeout > 0 {
		return fmt.Sprintf("servers.%s.connect_timeout is %s: raise it for a server slower to start", sc.Name, sc.ConnectTimeout)
	}
	d := cfg.ConnectTimeout
	if d <= 0 {
		d = config.DefaultConnectTimeout
	}
	return fmt.Sprintf("connect_timeout is %s: raise it, or servers.%s.connect_timeout for this server alone", d, sc.Name)
}

// MCPSourceConfig returns the settings of the MCP source of one configured
// MCP server (stdio, SSE or streamable HTTP), as NewManager makes it: the
// gateway's passthrough routes open their own sessions with the same ones.
func MCPSourceConfig(cfg *config.Config, sc config.Server, log *slog.Logger) mcpsource.Config {
	hc := healthCheck(cfg, sc)
	return mcpsource.Config{
		Name:               sc.Name,
		Transport:          sc.Transport,
		Command:            sc.Command,
		Args:               sc.Args,
		Env:                sc.Env,
		Dir:                sc.Cwd,
		URL:                sc.URL,
		Headers:            sc.Headers,
		BearerToken:        sc.BearerToken,
		ConnectTimeout:     first(sc.ConnectTimeout, cfg.ConnectTimeout),
		ConnectTimeoutHint: connectTimeoutHint(cfg, sc),
		MaxResultBytes:     int(cfg.Limits.MaxResultBytes),
		SpillDir:           spillDir(cfg),
		MinBackoff:         hc.MinBackoff,
		MaxBackoff:         hc.MaxBackoff,
		HealthCheck: mcpsource.HealthCheck{
			Disabled:    !hc.Enabled,
			PingAfter:   hc.PingAfter,
			PingTimeout: hc.PingTimeout,
			Interval:    hc.PingInterval,
		},
		Logger: log,
	}
}

// spillDir is where results too large to hold go: DATA_DIR/spill, beside
// the outputs the pipeline's truncation saves; "" (no data directory)
// leaves the choice to mcpsource.
func spillDir(cfg *config.Config) string {
	if cfg.DataDir == "" {
		return ""
	}
	return filepath.Join(cfg.DataDir, "spill")
}

// healthCheck is the health check of one server: its own, else the
// configuration's.
func healthCheck(cfg *config.Config, sc config.Server) config.HealthCheck {
	if sc.HealthCheck != nil {
		return *sc.HealthCheck
	}
	return cfg.HealthCheck
}

func serverOptions(cfg *config.Config, sc config.Server) manager.ServerOptions {
	retry := cfg.Retry
	retry.Tools = toolglob.Scope(cfg.Retry.Tools, sc.Name)
	if sc.Retry != nil {
		retry = *sc.Retry
	}
	breaker := cfg.CircuitBreaker
	if sc.CircuitBreaker != nil {
		breaker = *sc.CircuitBreaker
	}
	hc := healthCheck(cfg, sc)
	return manager.ServerOptions{
		Allow:          sc.Allow,
		Deny:           sc.Deny,
		Timeout:        first(sc.Timeout, cfg.Timeout),
		ToolTimeouts:   sc.ToolTimeouts,
		ConnectTimeout: first(sc.ConnectTimeout, cfg.ConnectTimeout),
		Retry: manager.Retry{
			MaxAttempts:    retry.MaxAttempts,
			InitialBackoff: retry.InitialBackoff,
			MaxBackoff:     retry.MaxBackoff,
			Tools:          retry.Tools,
		},
		Breaker:   manager.Breaker{Failures: breaker.Failures, Cooldown: breaker.Cooldown},
		Disabled:  sc.Disabled,
		Transport: sc.Transport,
		Recovery:  manager.Recovery{MinBackoff: hc.MinBackoff, MaxBackoff: hc.MaxBackoff},
	}
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
