package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/agent"
	"github.com/toolmux/toolmux/api"
	"github.com/toolmux/toolmux/codemode"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/metrics"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tool"
)

// exitInterrupted is the exit status of a run stopped by SIGINT/SIGTERM,
// the shell's convention for a process ended by SIGINT.
const exitInterrupted = 130

// runFlags are the flags of `toolmux run`.
type runFlags struct {
	model, baseURL, apiKey, provider string
	maxTurns                         int
	maxTurnsSet                      bool
	approvalTimeout                  time.Duration
	json                             bool
	serve                            string
	metrics                          bool
	token                            string
	tokenSet                         bool
	// codeMode, when set, is the main agent's code mode (agent.code_mode).
	codeMode string
	// fleet: with --nats, the run is submitted to a fleet.
	fleet fleetFlags
}

func (a *app) runCommand() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run TASK",
		Short: "Run an agent on a task with the configured tools",
		Long: `Run the configured agent (the agent: section, or the defaults) on TASK with
every configured tool, and print its final answer. The model comes from the
model: section of the configuration; --model, --base-url and --api-key
override it, and OPENAI_API_KEY, OPENAI_BASE_URL (ANTHROPIC_API_KEY with
--provider anthropic) fill in what neither gives.

  toolmux run --model qwen3:8b --base-url http://localhost:11434/v1 "Summarise README.md"

Progress goes to stderr: each model turn and each tool call with its state
and time. A call the policy asks about is put to you on the terminal (or
refused with a message saying how to allow it, when stdin is not a
terminal; --yes approves them). With --json, stdout gets every event as a
JSON line and then the result. With --serve ADDR, the web UI shows the run
live at http://ADDR/ and takes approvals.

Exit status: 0 with an answer, 1 when the run failed (model error), 2 for
usage errors (no model configured), 130 when interrupted. The run is
recorded in the task log (toolmux logs).`,
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return usageError("say what the agent should do: toolmux run \"TASK\"")
			case len(args) > 1:
				return usageError("the task must be one argument: quote it, as in toolmux run %q", strings.Join(args, " "))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			f.maxTurnsSet = cmd.Flags().Changed("max-turns")
			f.tokenSet = cmd.Flags().Changed("token")
			return a.runTask(cmd.Context(), strings.TrimSpace(args[0]), f)
		},
	}
	cmd.Flags().StringVar(&f.model, "model", "", "model name (overrides model.model)")
	cmd.Flags().StringVar(&f.baseURL, "base-url", "", "API base URL, e.g. http://localhost:11434/v1 (default: model.base_url, $OPENAI_BASE_URL)")
	cmd.Flags().StringVar(&f.apiKey, "api-key", "", "API key (default: model.api_key, $OPENAI_API_KEY or $ANTHROPIC_API_KEY)")
	cmd.Flags().StringVar(&f.provider, "provider", "", "openai (any OpenAI-compatible server) or anthropic (default: model.provider, else openai)")
	cmd.Flags().IntVar(&f.maxTurns, "max-turns", 0, "most turns before the agent must answer (default: agent.max_turns, 20)")
	cmd.Flags().BoolVar(&f.json, "json", false, "write the events as JSON lines to stdout, then the result")
	cmd.Flags().StringVar(&f.serve, "serve", "", "also serve the web UI and API for the run at ADDR (e.g. 127.0.0.1:8931)")
	cmd.Flags().DurationVar(&f.approvalTimeout, "approval-timeout", api.DefaultApprovalTimeout, "with --serve, how long a call waits for an answer on the page before it is refused")
	cmd.Flags().StringVar(&f.token, "token", "", "bearer token for --serve beyond loopback (default $TOOLMUX_TOKEN)")
	cmd.Flags().BoolVar(&f.metrics, "metrics", false, "with --serve, also serve Prometheus metrics of the run (turns, rollbacks, tokens, calls) at /metrics (see docs/operations.md)")
	cmd.Flags().StringVar(&f.codeMode, "code-mode", "", "offer the model run_code, a JavaScript program whose tool calls are each governed: only (instead of the tools; --code-mode alone) or beside the tools, off (overrides agent.code_mode; docs/codemode.md)")
	cmd.Flags().Lookup("code-mode").NoOptDefVal = config.AgentCodeModeOnly
	f.fleet.add(cmd)
	return cmd
}

// resolveModel applies the flags and the environment to the model
// section; it reports whether a model is configured.
func resolveModel(m config.Model, f runFlags, env func(string) string) (config.Model, error) {
	if f.provider != "" {
		if f.provider != config.ProviderOpenAI && f.provider != config.ProviderAnthropic {
			return m, usageError("--provider %q: want openai or anthropic", f.provider)
		}
		m.Provider = f.provider
	}
	if f.model != "" {
		m.Set, m.Name = true, f.model
	}
	if f.baseURL != "" {
		m.BaseURL = f.baseURL
	}
	if f.apiKey != "" {
		m.APIKey = f.apiKey
	}
	if m.Provider == "" {
		m.Provider = config.ProviderOpenAI
	}
	if m.Provider == config.ProviderAnthropic {
		if m.APIKey == "" {
			m.APIKey = env("ANTHROPIC_API_KEY")
		}
	} else {
		if m.APIKey == "" {
			m.APIKey = env("OPENAI_API_KEY")
		}
		if m.BaseURL == "" {
			m.BaseURL = env("OPENAI_BASE_URL")
		}
	}
	if !m.Set || m.Name == "" {
		return m, usageError(`no model is configured. Name one:
  toolmux run --model qwen3:8b --base-url http://localhost:11434/v1 TASK   (Ollama; vLLM: http://localhost:8000/v1)
  OPENAI_API_KEY=... toolmux run --model gpt-4.1 TASK
  or a model: section in toolmux.yaml (docs/config.md, "Models and agents")`)
	}
	return m, nil
}

func (a *app) runTask(ctx context.Context, task string, f runFlags) error {
	if task == "" {
		return usageError("the task is empty")
	}
	if f.fleet.url != "" {
		if f.serve != "" || f.model != "" || f.baseURL != "" || f.apiKey != "" || f.provider != "" || f.maxTurnsSet || f.codeMode != "" {
			return usageError("with --nats the run is the fleet's workers' (their configuration's model and limits): leave out --serve, --model, --base-url, --api-key, --provider, --max-turns and --code-mode")
		}
		return a.runOnFleet(ctx, task, f)
	}
	if f.maxTurnsSet && f.maxTurns < 1 {
		return usageError("--max-turns must be at least 1, not %d (leave it out for agent.max_turns)", f.maxTurns)
	}
	cfg, err := a.loadConfig()
	if err != nil {
		return err
	}
	if cfg.Model, err = resolveModel(cfg.Model, f, os.Getenv); err != nil {
		return err
	}
	if f.maxTurns > 0 {
		cfg.Agent.MaxTurns = f.maxTurns
	}
	if f.codeMode != "" {
		switch f.codeMode {
		case config.AgentCodeModeOff, config.AgentCodeModeBeside, config.AgentCodeModeOnly:
		default:
			return usageError("--code-mode=%s: want only, beside or off", f.codeMode)
		}
		if f.codeMode != config.AgentCodeModeOff {
			if _, err := codemode.FindEngine(cfg.CodeMode.Engine); err != nil {
				return usageError("--code-mode: %v (docs/codemode.md)", err)
			}
		}
		cfg.Agent.CodeMode = f.codeMode
	}
	cfg.DataDir = a.resolveDataDir(cfg)
	var mode policy.Mode
	if a.approvalMode != "" {
		if mode, err = policy.ParseMode(a.approvalMode); err != nil {
			return usageError("--approval-mode: %v", err)
		}
	}
	token, err := a.resolveToken(f.token, f.tokenSet)
	if err != nil {
		return err
	}
	if f.serve != "" {
		if err := checkAddr(f.serve); err != nil {
			return err
		}
	}
	if f.metrics && f.serve == "" {
		return usageError("--metrics needs --serve ADDR: the metrics are served there, at /metrics")
	}
	if f.serve != "" && !gateway.IsLoopback(f.serve) && token == "" && !guardedByConfig(cfg) {
		return usageError("refusing to serve on %s without a token: set --token or TOOLMUX_TOKEN, or auth.issuers in the configuration (docs/identity.md), or use 127.0.0.1", f.serve)
	}
	// Approvals: the terminal when there is one (stdin is free: the task
	// is an argument), else the web UI with --serve, else nobody.
	approver := a.approver(true)
	var approvals *api.Approvals
	if f.serve != "" {
		// The person was told to open the page: a call waits for them
		// (at most the approval timeout) even before the page is open.
		approvals = api.NewApprovals(&api.ApprovalOptions{Expect: true, Timeout: f.approvalTimeout})
		if approver == nil {
			approver = approvals
		} else {
			approver = policy.FirstOf(approver, approvals)
		}
	}
	opts := toolmux.Options{Logger: a.logger(), Mode: mode, Approver: approver, Getenv: os.Getenv,
		ConcurrentApprovals: f.serve != "", Hub: []stream.Option{stream.WithBuffer(1 << 14)}}
	var mx *metrics.Metrics
	if f.metrics {
		mx = metrics.New()
		opts.Sinks, opts.AgentObserver = []schedule.Sink{mx}, mx
	}
	rt, err := toolmux.Open(ctx, cfg, opts)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
		defer cancel()
		rt.Close(cctx)
	}()
	// The main agent is checked now (no model configured, say), before
	// anything is served; the task runs through the runtime's dispatcher.
	if _, err := rt.Agent(); err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	id := tool.NewID()
	var page *runPage
	if f.serve != "" {
		page = &runPage{info: api.RunInfo{Task: id, AfterEvent: rt.Events.Stats().LastID}}
		stop, err := a.serveRun(ctx, f.serve, token, rt, approvals, page, mx)
		if err != nil {
			return err
		}
		defer stop()
	}
	sub, err := rt.Events.Subscribe(ctx, stream.Filter{Task: id}, stream.Live)
	if err != nil {
		return &exitError{code: exitInternal, err: err}
	}
	var out eventWriter
	if f.json {
		out = &jsonEvents{w: a.stdout}
	} else {
		asking := ""
		if page != nil && !a.yes && a.approver(true) == nil {
			asking = page.url
		}
		out = newProgress(a.stderr, a.verbose, asking)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range sub.Events() {
			out.event(e)
			if e.Name == stream.EventEndOfWorkflow {
				return
			}
		}
	}()
	res, runErr := rt.Run(ctx, toolmux.Task{ID: id, Input: task, Metadata: map[string]any{"model": cfg.Model.Name, "provider": cfg.Model.Provider}})
	// The workflow's last event ends the printing; a hub closed early
	// (it is not) would end it too.
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	sub.Close()
	out.finish(res, runErr)
	if !f.json && runErr == nil {
		fmt.Fprintln(a.stdout, res.Answer)
	}
	if page != nil && ctx.Err() == nil {
		// The page keeps showing the run, ended, until the person is
		// done with it.
		page.end()
		fmt.Fprintf(a.stderr, "toolmux: the run has ended; its page stays at %s until you press Ctrl-C\n", page.url)
		<-ctx.Done()
	}
	switch {
	case runErr == nil:
		return nil
	case agent.KindOf(runErr) == agent.ErrCancelled:
		return &exitError{code: exitInterrupted, err: errors.New("interrupted; the task log records the run as cancelled")}
	default:
		return &exitError{code: exitFailed, err: runErr}
	}
}

// runPage is what the page of run --serve is told of the run.
type runPage struct {
	url string

	mu   sync.Mutex
	info api.RunInfo
}

func (p *runPage) get() *api.RunInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	in := p.info
	return &in
}

func (p *runPage) end() {
	p.mu.Lock()
	p.info.Ended = true
	p.mu.Unlock()
}

// serveRun serves the web UI and the API of the run; stop ends it.
func (a *app) serveRun(ctx context.Context, addr, token string, rt *toolmux.Runtime, approvals *api.Approvals, page *runPage, mx *metrics.Metrics) (stop func(), err error) {
	ln, err := listen(addr)
	if err != nil {
		return nil, err
	}
	page.url = pageURL(ln.Addr())
	approvals.SetWhere(page.url)
	gopts := gateway.Options{Version: versionString(), Logger: a.logger(),
		Sessions: sessionTasks(rt.Log, a.logger()), Tracer: rt.Telemetry.Tracer(), Propagator: rt.Telemetry.Propagator(),
		API: api.New(api.Options{Catalog: rt.Pipeline, Caller: rt.Scheduler, Health: rt.Manager.Health, Pins: rt.Pins, Presented: rt.Manager, Policy: rt.Policy,
			Approvals: approvals, Log: rt.Log, Events: rt.Events, Version: versionString(), Run: page.get})}
	if mx != nil {
		gopts.Metrics = mx.Handler()
	}
	g := gateway.New(gateway.Scheduled{Catalog: rt.Pipeline, Calls: rt.Scheduler}, gopts)
	if mx != nil {
		mx.Watch(metricSources(rt, g, approvals, nil))
	}
	sa, err := a.withIssuers(ctx, rt.Config, gateway.TokenAuth(token), token, nil)
	if err == nil {
		err = checkPageResource(rt.Config, gateway.IsLoopback(addr))
	}
	if err != nil {
		ln.Close()
		g.Close()
		return nil, err
	}
	stopHTTP := serveBeside(ctx, ln, g.MuxAuth(sa.auth, gateway.Security{Loopback: gateway.IsLoopback(addr)}))
	fmt.Fprintf(a.stderr, "toolmux: watch the run at %s\n", page.url)
	return func() {
		stopHTTP()
		g.Close()
	}, nil
}

// eventWriter shows a run's events.
type eventWriter interface {
	event(e stream.Event)
	finish(res *agent.Result, err error)
}

// jsonEvents writes each event as one JSON line, then the result.
type jsonEvents struct{ w io.Writer }

func (j *jsonEvents) event(e stream.Event) {
	b, err := json.Marshal(e)
	if err == nil {
		j.w.Write(append(b, '\n'))
	}
}

func (j *jsonEvents) finish(res *agent.Result, err error) {
	line := map[string]any{"event": "result", "data": res}
	if err != nil {
		line["error"] = map[string]any{"kind": agent.KindOf(err), "message": err.Error()}
	}
	b, _ := json.Marshal(line)
	j.w.Write(append(b, '\n'))
}

// progress shows a run for a person: each agent, model turn and tool call
// as a line on stderr, with a spinner and the elapsed time while something
// runs (on a terminal).
type progress struct {
	w       io.Writer
	tty     bool
	verbose bool

	mu      sync.Mutex
	spin    *spinner
	turns   map[string]int // agent name -> model turns
	started map[string]time.Time
	waiting bool // an approval question is on the terminal
	// asking is where approvals are answered when it is not the
	// terminal (the web page of --serve); "" when the terminal asks by
	// itself, or --yes answers at once, and a line would only mislead.
	asking string
}

func newProgress(w io.Writer, verbose bool, asking string) *progress {
	p := &progress{w: w, verbose: verbose, asking: asking, turns: map[string]int{}, started: map[string]time.Time{}}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.tty = true
	}
	return p
}

func (p *progress) line(format string, args ...any) {
	if p.spin != nil {
		p.spin.stop()
		p.spin = nil
	}
	fmt.Fprintf(p.w, format+"\n", args...)
}

func (p *progress) spinning(label string) {
	if p.spin != nil {
		p.spin.stop()
	}
	p.spin = nil
	if p.tty && !p.waiting {
		p.spin = startSpinner(p.w, label)
	}
}

func (p *progress) event(e stream.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, _ := e.DecodeData()
	switch d := v.(type) {
	case *stream.AgentData:
		if e.Name == stream.EventStartOfAgent {
			p.line("● %s started", d.DisplayName)
		} else {
			p.line("● %s finished", d.DisplayName)
		}
	case *stream.LLMData:
		if e.Name == stream.EventStartOfLLM {
			p.turns[d.AgentName]++
			p.started["llm:"+d.AgentName] = e.Time
			p.spinning(fmt.Sprintf("%s: thinking (model call %d)", d.DisplayName, p.turns[d.AgentName]))
		} else {
			took := e.Time.Sub(p.started["llm:"+d.AgentName])
			p.line("  %s: model call %d (%s)", d.DisplayName, p.turns[d.AgentName], took.Round(time.Millisecond))
		}
	case *stream.ToolStateData:
		name := d.Server + "/" + d.Tool
		switch d.State {
		case "executing":
			p.line("  → %s", name)
			p.spinning(name + " running")
		case "awaiting_approval":
			p.waiting = true
			if p.asking != "" {
				p.line("  ? %s waits for approval at %s", name, p.asking)
			}
		case "success":
			p.line("  ✓ %s (%s)", name, ms(d.TotalMS))
		case "error", "cancelled":
			p.line("  ✗ %s: %s: %s (%s)", name, d.Kind, oneLine(d.Message, 160), ms(d.TotalMS))
		}
	case *stream.ApprovalResolvedData:
		p.waiting = false
	case *stream.ErrorData:
		// The run's own error (show_error): said once, as the command's
		// error after the summary line, not here too.
	case *stream.ToolCallData:
		if d.ToolName == "find_tools" && p.verbose {
			p.line("  ⌕ find_tools")
		}
	}
}

func (p *progress) finish(res *agent.Result, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.spin != nil {
		p.spin.stop()
		p.spin = nil
	}
	if res == nil {
		return
	}
	for _, n := range res.Notes {
		fmt.Fprintf(p.w, "  note: %s\n", n)
	}
	status := string(res.Status)
	switch {
	case agent.KindOf(err) == agent.ErrCancelled:
		status = "cancelled"
	case err != nil:
		status = "failed"
	}
	fmt.Fprintf(p.w, "● %s after %s, %s, %s, %s (task %s)\n", status, plural(res.Turns, "turn"), plural(res.Calls, "tool call"),
		plural(res.Rollbacks, "rollback"), res.Duration.Round(time.Millisecond), res.Task)
}

func ms(v float64) string {
	return (time.Duration(v * float64(time.Millisecond))).Round(time.Millisecond).String()
}
