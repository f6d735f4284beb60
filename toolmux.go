// Package toolmux assembles toolmux's parts into one runtime: the manager
// of a configuration's tool sources, the governance pipeline around it
// (recording into the task log), the policy gate, the scheduler, the event
// hub and the agents with their sub-agents. It is the shortest way to use
// toolmux as a library:
//
//	rt, err := toolmux.Open(ctx, config.Default(), toolmux.Options{Model: model})
//	defer rt.Close(ctx)
//	a, err := rt.Agent()
//	res, err := a.Run(ctx, "Summarise README.md")
//
// Each part can also be built on its own from its package (see
// docs/design.md); Open is what `toolmux run` does.
package toolmux

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"

	"github.com/toolmux/toolmux/agent"
	"github.com/toolmux/toolmux/codemode"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/hooks"
	"github.com/toolmux/toolmux/llm"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/telemetry"
	"github.com/toolmux/toolmux/tool"
	"github.com/toolmux/toolmux/upstreamauth"
	"github.com/toolmux/toolmux/vault"
)

// Options adjust Open. The zero value is a runtime of the configuration
// alone: its model, its sources, no task log unless cfg.DataDir is set,
// and nobody to approve calls the policy asks about (they are refused with
// a message saying how to allow them).
type Options struct {
	// Logger receives diagnostics (default: discarded).
	Logger *slog.Logger
	// Model is the agents' model; nil: the configuration's `model:`
	// section, if any.
	Model llm.Model
	// AgentObserver, when set, is told of every agent run's end, model
	// turn and rollback, sub-agents' included (a *metrics.Metrics).
	AgentObserver agent.Observer
	// Sources are further tool sources beside the configuration's (a
	// program's own tools; see package funcsource), with the default
	// per-server policy.
	Sources []manager.Source
	// Mode overrides the configuration's approval mode ("" keeps it).
	Mode policy.Mode
	// Approver answers the calls the policy asks about.
	Approver policy.Approver
	// ConcurrentApprovals lets approval questions wait side by side (an
	// approver that shows many at once, such as a web page).
	ConcurrentApprovals bool
	// NoTaskLog keeps no task log even when cfg.DataDir is set.
	NoTaskLog bool
	// Hub options for the event hub (the task log is its store when
	// there is one).
	Hub []stream.Option
	// Events is an event hub of the caller's to publish into instead of
	// one of the runtime's own (Hub is then unused, and the events are
	// kept by whatever store that hub has, not by this runtime's task
	// log). The caller closes it, after the runtime.
	Events *stream.Hub
	// NoEvents makes a runtime without an event hub: the scheduler's
	// events go only to Sinks, and no agent can run on it (toolmux
	// call, which keeps no events of its one call).
	NoEvents bool
	// NoAgents makes a runtime without models, agents or sub-agents: the
	// configuration's model and agents sections are not read (the
	// commands that only list or call tools).
	NoAgents bool
	// Sinks receive the scheduler's events too, after the hub.
	Sinks []schedule.Sink
	// ManagerOptions are further options of the manager (a listing
	// observer, say).
	ManagerOptions []manager.Option
	// Backend, when set, returns what the scheduler drives, given the
	// parts built before it (Manager, Pipeline, Log); nil: the pipeline.
	// toolmux call --raw drives the manager, and bounds each call.
	Backend func(rt *Runtime) schedule.Backend
	// Dispatcher runs the tasks given to Runtime.Run; nil: they run in
	// this process (see Dispatcher).
	Dispatcher Dispatcher
	// TaskLog are further options of the task log, after the
	// configuration's (a journal of its own: a fleet's on JetStream).
	TaskLog []tasklog.Option
	// Middleware are further middlewares of the pipeline, innermost
	// (pipeline.WithMiddleware): a fleet worker's call ledger.
	Middleware []pipeline.Middleware
	// Telemetry is where the runtime's spans go (the caller closes it,
	// after the runtime); nil: Open sets tracing up from the
	// configuration's telemetry section and Getenv (telemetry.New), and
	// the runtime closes it.
	Telemetry *telemetry.Telemetry
	// Vault keeps users' secrets for the servers that take each caller's
	// own (a server's auth section, docs/identity.md); nil: none, and
	// calls to such servers are refused saying so. The caller closes it.
	Vault *vault.Vault
	// UpstreamOAuth is the gateway as the OAuth client of the servers
	// whose auth kind is oauth, on each caller's behalf (serve makes it,
	// with its callback route); nil: none, and calls to such servers are
	// refused saying so. Their client secrets are read with Getenv.
	UpstreamOAuth *upstreamauth.Client
	// SecretsURL, when set, is where users set their own secrets (serve:
	// the web page's Secrets tab, PAGE/#secrets): a caller who has not
	// set a server's is sent there (tool.Error.URL).
	SecretsURL string
	// Getenv reads the OTEL_* environment variables when Open sets
	// tracing up (the CLI passes os.Getenv); nil: only the configuration
	// decides.
	Getenv func(string) string
	// Visibility, when set, says which tools each caller may see and
	// call (the groups section's tools, policy.VisibilityFromConfig): an
	// agent run made for a caller (its context carries it: a fleet's
	// run, its submitter's) is offered and may call only those
	// (visibility.go). nil: every run sees every tool.
	Visibility func() *policy.Visibility
}

// TaskLogError is a task log that could not be opened.
type TaskLogError struct{ Err error }

func (e *TaskLogError) Error() string { return "task log: " + e.Err.Error() }
func (e *TaskLogError) Unwrap() error { return e.Err }

// TaskLogOptions are the options of the task log cfg configures: its
// durability (a recorded call survives a kill of toolmux by default, and a
// power cut with durability full) and retention. Open uses them; so does
// whoever opens the same task log to read it (toolmux logs).
func TaskLogOptions(cfg config.TaskLog, log *slog.Logger) []tasklog.Option {
	d := tasklog.DurabilityProcess
	if cfg.Durability == config.DurabilityFull {
		d = tasklog.DurabilityFull
	}
	return []tasklog.Option{tasklog.WithLogger(log), tasklog.WithDurability(d),
		tasklog.WithRetention(tasklog.Retention{MaxAge: cfg.Retention.MaxAge, MaxBytes: cfg.Retention.MaxBytes})}
}

// Runtime is an assembled toolmux. Its fields are the parts, for callers
// that need one (the gateway takes the pipeline and the scheduler).
type Runtime struct {
	// Config is the configuration Open was given (Reload does not change
	// it; CurrentConfig is the one in use).
	Config   *config.Config
	Manager  *manager.Manager
	Pipeline *pipeline.Pipeline
	// Policy is the policy engine Open built; after a Reload, the Gate's
	// engine (Gate.Engine) is the one in use.
	Policy    *policy.Engine
	Gate      *policy.Gate
	Scheduler *schedule.Scheduler
	Events    *stream.Hub
	// Log is the task log; nil when there is none.
	Log *tasklog.Log
	// Pins are the pinned tool definitions (docs/operations.md); nil
	// without a data directory.
	Pins *pipeline.Pins
	// Model is the agents' model; nil when none is configured.
	Model llm.Model
	// Telemetry is the runtime's tracing (nil when off): its tracer and
	// propagator, for the parts built after Open (the gateway).
	Telemetry *telemetry.Telemetry

	agents    agent.Runtime
	subAgents []*agent.SubAgent
	// programs bounds the code mode programs of the runtime's agents
	// running at once (code_mode.max_programs).
	programs   *codemode.Programs
	dispatcher Dispatcher
	// ownEvents: Events is the runtime's own, closed by Close.
	ownEvents bool

	// Reload: the configuration in use, what Open was told that a new
	// configuration does not change (the mode, the pipeline's options
	// other than the configuration's), and the turn of reloads.
	reloadMu sync.Mutex
	current  *config.Config
	mode     policy.Mode
	noAgents bool
	popts    []pipeline.Option
	log      *slog.Logger
	// ownTelemetry: Telemetry is the runtime's own, closed by Close.
	ownTelemetry bool
	// sourceDeps makes the sources of servers added by a reload.
	sourceDeps sourceDeps
}

// DisconnectCaller closes the connection of the caller whose key is owner
// (identity.Caller.Key) to server, when server takes each caller's own
// credential (its auth section) and the caller has one open: their next
// call opens it again with their credential as it is now. Anything else
// is left alone.
func (rt *Runtime) DisconnectCaller(server, owner string) {
	if s := rt.sourceDeps.perCaller.get(server); s != nil {
		s.Disconnect(owner)
	}
}

// UserSecrets returns, by server, the names of the secrets each user sets
// for the servers and APIs of the configuration in use that take them
// (auth kind user_secrets).
func (rt *Runtime) UserSecrets() map[string][]string {
	out := map[string][]string{}
	for _, sc := range rt.CurrentConfig().Servers {
		if sc.Auth == nil || sc.Auth.Kind != config.AuthUserSecrets || sc.Disabled {
			continue
		}
		for _, s := range sc.Auth.Secrets {
			out[sc.Name] = append(out[sc.Name], s.Name)
		}
	}
	for _, a := range rt.CurrentConfig().OpenAPI {
		if a.Auth == nil {
			continue
		}
		for _, s := range a.Auth.Secrets {
			out[a.Name] = append(out[a.Name], s.Name)
		}
	}
	return out
}

// OAuthServers returns the names of the servers of the configuration in
// use that each user authorizes toolmux to call (auth kind oauth), sorted.
func (rt *Runtime) OAuthServers() []string {
	var out []string
	for _, sc := range rt.CurrentConfig().Servers {
		if sc.Auth != nil && sc.Auth.Kind == config.AuthOAuth && !sc.Disabled {
			out = append(out, sc.Name)
		}
	}
	slices.Sort(out)
	return out
}

// CurrentConfig returns the configuration in use: Open's, or the last one
// Reload applied.
func (rt *Runtime) CurrentConfig() *config.Config {
	rt.reloadMu.Lock()
	defer rt.reloadMu.Unlock()
	return rt.current
}

// Open builds the runtime of cfg. Nothing is started until it is used:
// servers connect at the first listing or call.
func Open(ctx context.Context, cfg *config.Config, o Options) (rt *Runtime, err error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rt = &Runtime{Config: cfg, Model: o.Model, current: cfg, mode: o.Mode, noAgents: o.NoAgents, log: log,
		programs: codemode.NewPrograms(cfg.CodeMode.MaxPrograms)}
	defer func() {
		if err != nil {
			rt.Close(context.WithoutCancel(ctx))
			rt = nil
		}
	}()
	rt.Telemetry = o.Telemetry
	if rt.Telemetry == nil {
		getenv := o.Getenv
		if getenv == nil {
			getenv = func(string) string { return "" }
		}
		if rt.Telemetry, err = telemetry.New(ctx, cfg.Telemetry, getenv); err != nil {
			return rt, err
		}
		rt.ownTelemetry = true
	}
	models := map[string]llm.Model{}
	var lopts []llm.Option
	if hc := rt.Telemetry.HTTPClient(); hc != nil {
		// The model's requests carry the trace context of their chat span.
		lopts = append(lopts, llm.WithHTTPClient(hc))
	}
	if !o.NoAgents {
		if rt.Model == nil && cfg.Model.Set {
			if rt.Model, err = llm.FromConfig(cfg.Model, lopts...); err != nil {
				return rt, fmt.Errorf("model: %w", err)
			}
		}
		for _, a := range append([]config.Agent{cfg.Agent}, cfg.Agents...) {
			if a.Model.Set {
				if models[a.Name], err = llm.FromConfig(a.Model, lopts...); err != nil {
					return rt, fmt.Errorf("agent %s: model: %w", a.Name, err)
				}
			}
		}
	}
	popts := []pipeline.Option{pipeline.WithDataDir(cfg.DataDir), pipeline.WithLogger(log)}
	if cfg.DataDir != "" && cfg.TaskLog.Enabled && !o.NoTaskLog {
		if rt.Log, err = tasklog.Open(ctx, cfg.DataDir, append(TaskLogOptions(cfg.TaskLog, log), o.TaskLog...)...); err != nil {
			return rt, &TaskLogError{Err: err}
		}
		popts = append(popts, pipeline.WithRecorder(rt.Log))
	}
	// Claude Code's hooks and the guardrails (docs/hooks.md): their
	// PostToolUse step innermost in the pipeline, their PreToolUse
	// decision in front of the policy gate below. Read at start: a
	// reload keeps them.
	hks, err := hooks.New(hooks.FromConfig(cfg))
	if err != nil {
		return rt, err
	}
	if hks.Active() {
		popts = append(popts, pipeline.WithMiddleware(hks.Middleware()))
	}
	if len(o.Middleware) > 0 {
		popts = append(popts, pipeline.WithMiddleware(o.Middleware...))
	}
	if cfg.DataDir != "" {
		if rt.Pins, err = pinsFor(cfg, rt); err != nil {
			return rt, err
		}
		popts = append(popts, pipeline.WithPinning(rt.Pins))
	}
	var mopts []manager.Option
	for _, src := range o.Sources {
		mopts = append(mopts, manager.WithSource(src, manager.ServerOptions{}))
	}
	for _, a := range cfg.Agents {
		if o.NoAgents {
			break
		}
		sa := agent.NewSubAgent(agentOptions(cfg, a, rt.programs))
		rt.subAgents = append(rt.subAgents, sa)
		// A sub-agent runs as long as its own turn limit takes; the
		// manager's default call timeout still bounds it, and it is
		// never retried.
		mopts = append(mopts, manager.WithSource(sa, manager.ServerOptions{Timeout: cfg.Timeout, Retry: manager.Retry{MaxAttempts: 1}}))
	}
	rt.sourceDeps = sourceDeps{tel: rt.Telemetry, vault: o.Vault, oauth: o.UpstreamOAuth, getenv: o.Getenv, perCaller: &perCallers{}, secretsURL: o.SecretsURL}
	if rt.Manager, err = newManager(cfg, log, rt.sourceDeps, append(mopts, o.ManagerOptions...)...); err != nil {
		return rt, err
	}
	rt.popts = popts
	popts = append(popts, pipeline.WithLimits(pipeline.Limits{MaxDepth: cfg.Limits.MaxDepth, MaxRecordBytes: int(cfg.Limits.MaxRecordBytes)}))
	if rt.Pipeline, err = pipeline.New(rt.Manager, append(pipeline.FromConfig(cfg.Pipeline), popts...)...); err != nil {
		return rt, err
	}
	if rt.Policy, err = policy.ForConfig(cfg); err != nil {
		return rt, err
	}
	if o.Mode != "" {
		if rt.Policy, err = rt.Policy.WithMode(o.Mode); err != nil {
			return rt, err
		}
	}
	rt.Gate = policy.NewGate(rt.Policy, gateOptions(cfg, o, log)...)
	sinks := o.Sinks
	switch {
	case o.NoEvents:
	case o.Events != nil:
		rt.Events = o.Events
	default:
		hubOpts := append([]stream.Option{stream.WithLogger(log)}, o.Hub...)
		if rt.Log != nil {
			hubOpts = append(hubOpts, stream.WithStore(rt.Log.StreamStore()))
		}
		if rt.Events, err = stream.NewHub(ctx, hubOpts...); err != nil {
			return rt, err
		}
		rt.ownEvents = true
	}
	if rt.Events != nil {
		sinks = append([]schedule.Sink{stream.SchedulerSink(rt.Events,
			stream.WithArgumentLimit(int(cfg.Limits.MaxEventBytes)), stream.WithResultLimit(int(cfg.Limits.MaxEventBytes)))}, sinks...)
	}
	var backend schedule.Backend = rt.Pipeline
	if o.Backend != nil {
		backend = o.Backend(rt)
	}
	var gate schedule.Gate = rt.Gate
	if hks.Active() {
		gate = hks.Gate(rt.Gate)
	}
	sopts := []schedule.Option{schedule.WithGate(gate), schedule.WithLogger(log), schedule.WithMaxDepth(cfg.Limits.MaxDepth),
		schedule.WithTracer(rt.Telemetry.Tracer())}
	switch len(sinks) {
	case 0:
	case 1:
		sopts = append(sopts, schedule.WithSink(sinks[0]))
	default:
		sopts = append(sopts, schedule.WithSink(fanOut(sinks)))
	}
	rt.Scheduler = schedule.New(backend, sopts...)
	rt.dispatcher = o.Dispatcher
	if rt.dispatcher == nil {
		rt.dispatcher = inProcess{rt}
	}
	if rt.Events == nil {
		// No agent runs without events to tell of its turns.
		return rt, nil
	}
	rt.agents = agent.Runtime{Model: rt.Model, Models: models, Calls: rt.Scheduler, Catalog: rt.Pipeline,
		Turns: rt.Pipeline, Events: rt.Events, Logger: log, Observer: o.AgentObserver, Tracer: rt.Telemetry.Tracer()}
	if o.Visibility != nil {
		rt.agents.Catalog = visibleCatalog{Catalog: rt.Pipeline, vis: o.Visibility}
		rt.agents.Calls = visibleCalls{Caller: rt.Scheduler, vis: o.Visibility, catalog: rt.Pipeline}
	}
	if rt.Log != nil {
		rt.agents.Log = rt.Log
	}
	for _, sa := range rt.subAgents {
		if err := sa.Bind(rt.agents); err != nil && agent.KindOf(err) != agent.ErrNoModel {
			return rt, err
		}
	}
	return rt, nil
}

// Agent returns the main agent of the configuration (its `agent:`
// section). It fails with an *agent.Error of kind no_model when no model
// is configured (or the runtime was opened with NoAgents or NoEvents).
func (rt *Runtime) Agent() (*agent.Agent, error) {
	return agent.New(rt.agents, agentOptions(rt.Config, rt.Config.Agent, rt.programs))
}

// agentOptions are the options of an agent of cfg: its section's, its
// programs bounded by the code_mode: section (at most programs of them
// at once, with the runtime's other agents') and run by its engine. Where
// there is no engine program, the agent offers the tools as without code
// mode (toolmux run --code-mode refuses to start, saying where it
// looked).
func agentOptions(cfg *config.Config, a config.Agent, programs *codemode.Programs) agent.Options {
	o := agent.FromConfig(a)
	o.CodeMode.Bounds = agent.CodeModeBounds(cfg.CodeMode)
	o.CodeMode.Bounds.Programs = programs
	if o.CodeMode.Mode == agent.CodeModeBeside || o.CodeMode.Mode == agent.CodeModeOnly {
		if path, err := codemode.FindEngine(o.CodeMode.Bounds.Engine); err != nil {
			o.CodeMode.Mode = agent.CodeModeOff
		} else {
			o.CodeMode.Bounds.Engine = path
		}
	}
	return o
}

// gateOptions are the policy gate's: who is asked, and, when the
// configuration says so (policy.persist) and came from a file, "always"
// answers saved to that file as rules.
func gateOptions(cfg *config.Config, o Options, log *slog.Logger) []policy.GateOption {
	opts := []policy.GateOption{policy.WithApprover(o.Approver), policy.WithConcurrentApprovals(o.ConcurrentApprovals)}
	if cfg.Policy.Persist && cfg.Path != "" {
		path := cfg.Path
		opts = append(opts,
			policy.WithPersist(func(rule policy.Rule) error { return policy.SaveRule(path, rule) }),
			policy.WithPersistAlways(true),
			policy.WithPersistError(func(rule policy.Rule, err error) {
				log.Warn("could not save the approval to the configuration", "rule", rule.Name, "file", path, "error", err)
			}))
	}
	return opts
}

// fanOut hands each scheduler event to every sink, in order.
type fanOut []schedule.Sink

func (f fanOut) Event(e schedule.Event) {
	for _, s := range f {
		s.Event(e)
	}
}

// AgentRuntime is what the runtime's agents run on, for building other
// agents with agent.New.
func (rt *Runtime) AgentRuntime() agent.Runtime { return rt.agents }

// Close ends the running batches, closes the event hub (flushing its
// events into the task log), every source and the task log.
func (rt *Runtime) Close(ctx context.Context) error {
	var errs []error
	if rt.Scheduler != nil {
		rt.Scheduler.Shutdown(ctx)
	}
	if rt.Events != nil && rt.ownEvents {
		errs = append(errs, rt.Events.Close(ctx))
	}
	if rt.Manager != nil {
		errs = append(errs, rt.Manager.Close())
	}
	if rt.Log != nil {
		errs = append(errs, rt.Log.Close())
	}
	if rt.ownTelemetry {
		// Last, so the spans of everything above are flushed.
		errs = append(errs, rt.Telemetry.Close(ctx))
	}
	return errors.Join(errs...)
}

// pinsFor returns the pins of cfg, kept in the data directory's pins/. Only
// the configured servers are pinned: the built-in tools and sub-agents are
// described by toolmux and its configuration, which a person changes. The
// ask policy puts its question through rt's gate, built after the pipeline.
func pinsFor(cfg *config.Config, rt *Runtime) (*pipeline.Pins, error) {
	servers := make(map[string]bool, len(cfg.Servers))
	for _, s := range cfg.Servers {
		servers[s.Name] = true
	}
	// An API's tools are as much the work of others as a server's: a new
	// spec may change what a tool says it does.
	for _, a := range cfg.OpenAPI {
		servers[a.Name] = true
	}
	return pipeline.NewPins(pipeline.PinningOptions{
		Dir:     filepath.Join(cfg.DataDir, "pins"),
		Policy:  cfg.Pinning.Policy,
		Servers: cfg.Pinning.Servers,
		Pinned:  func(server string) bool { return servers[server] },
		Ask: func(ctx context.Context, call tool.Call, def tool.Tool, question string) error {
			return rt.Gate.Approve(ctx, def, call, policy.Decision{Action: policy.Ask, Rule: "pinning", Message: question, Once: true})
		},
	})
}
