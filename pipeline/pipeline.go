package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/tool"
)

// Backend is what the pipeline wraps: something that calls tools, finds
// their definitions and lists the catalog. *manager.Manager is one.
type Backend interface {
	Handler
	ToolLookup
	Tools(ctx context.Context) (*tool.Catalog, error)
}

// Option configures a Pipeline.
type Option func(*options)

type options struct {
	dataDir    string
	recorder   Recorder
	lowContext bool
	log        *slog.Logger
	lookupEnv  func(string) (string, bool)
	limits     Limits
}

// WithDataDir sets the directory where truncated outputs are saved in full
// (under spill/); without it, truncated outputs are not saved.
func WithDataDir(dir string) Option { return func(o *options) { o.dataDir = dir } }

// WithRecorder sets where every call's record goes (the task log).
func WithRecorder(r Recorder) Option { return func(o *options) { o.recorder = r } }

// WithLowContext turns low-context limits on (as TOOLMUX_LOW_CONTEXT=1 does).
func WithLowContext(on bool) Option { return func(o *options) { o.lowContext = on } }

// WithLogger sets the logger for internal errors.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithLookupEnv replaces os.LookupEnv for TOOLMUX_LOW_CONTEXT (tests).
func WithLookupEnv(f func(string) (string, bool)) Option {
	return func(o *options) { o.lookupEnv = f }
}

// Pipeline is the governed way to call tools: the configured chain of
// middlewares around a Backend. It is safe for concurrent use, and it
// offers the same Tools and Call as the manager, so the gateway and the
// agent use either.
type Pipeline struct {
	backend Backend
	chain   Handler
	refusal Handler // the record-side middlewares around a refusal
	dedupe  *Dedupe
	instr   *instructions
	order   []string
	limits  Limits
}

// New builds the chain cfg describes around b.
func New(b Backend, cfg config.Pipeline, opts ...Option) (*Pipeline, error) {
	o := options{log: slog.New(slog.DiscardHandler), lookupEnv: os.LookupEnv}
	for _, opt := range opts {
		opt(&o)
	}
	order := cfg.Order
	if order == nil {
		order = config.DefaultPipelineOrder
	}
	o.limits = o.limits.withDefaults()
	p := &Pipeline{backend: b, order: slices.Clone(order), limits: o.limits}
	if v, ok := o.lookupEnv("TOOLMUX_LOW_CONTEXT"); ok && v == "1" {
		o.lowContext = true
	}
	spill := ""
	if o.dataDir != "" {
		spill = filepath.Join(o.dataDir, "spill")
	}
	mws := make([]Middleware, 0, len(order))
	var after []Middleware
	for _, name := range order {
		mw, err := p.middleware(name, cfg, b, o, spill)
		if err != nil {
			return nil, fmt.Errorf("pipeline: %s: %w", name, err)
		}
		mws = append(mws, mw)
		if slices.Contains(refusalMiddlewares, name) {
			after = append(after, mw)
		}
	}
	p.chain = Chain(b, mws...)
	p.refusal = Chain(HandlerFunc(func(ctx context.Context, call tool.Call) *tool.Record {
		err, _ := ctx.Value(refusalKey{}).(*tool.Error)
		if err == nil {
			err = &tool.Error{Kind: tool.KindExecutionFailed, Message: "the call was refused without a reason"}
		}
		return refuse(call, err)
	}), after...)
	return p, nil
}

// refusalMiddlewares are the middlewares a refused call goes through: those
// that act on records (so it is recorded, guided and given a verdict), not
// those that act on arguments or make calls.
var refusalMiddlewares = []string{config.MiddlewareRecord, config.MiddlewareInstructions,
	config.MiddlewareTruncate, config.MiddlewareRollback}

type refusalKey struct{}

func (p *Pipeline) middleware(name string, cfg config.Pipeline, b Backend, o options, spill string) (Middleware, error) {
	switch name {
	case config.MiddlewareRecord:
		red, err := newRedactor(cfg.Redact)
		if err != nil {
			return nil, err
		}
		return newRecord(red, o.recorder, o.log, o.limits), nil
	case config.MiddlewareInstructions:
		in, err := newInstructions(cfg.Instructions)
		if err != nil {
			return nil, err
		}
		p.instr = in
		return in.middleware, nil
	case config.MiddlewareTruncate:
		t, err := newTruncator(cfg.Truncate, spill, o.lowContext)
		if err != nil {
			return nil, err
		}
		return t.middleware, nil
	case config.MiddlewareRollback:
		return newRollback(cfg.Rollback)
	case config.MiddlewareFallback:
		return newFallback(cfg.Fallbacks)
	case config.MiddlewareRepair:
		return newRepair(cfg.Repair, b)
	case config.MiddlewareValidate:
		return newValidate(cfg.Validate, b)
	case config.MiddlewareURLPolicy:
		return newURLPolicy(cfg.URLPolicy)
	case config.MiddlewareDedupe:
		d, err := NewDedupe(cfg.Dedupe)
		if err != nil {
			return nil, err
		}
		p.dedupe = d
		return d.Middleware, nil
	}
	return nil, fmt.Errorf("unknown middleware %q", name)
}

// Order returns the middleware names, outermost first.
func (p *Pipeline) Order() []string { return slices.Clone(p.order) }

// Call runs one call through the chain. It always returns a record.
// Arguments nested deeper than the limit are refused first
// (invalid_tool_params), before any middleware walks them; the refusal is
// recorded like any other, with the arguments cut at the limit.
func (p *Pipeline) Call(ctx context.Context, call tool.Call) *tool.Record {
	if err := tool.CheckDepth(call.Arguments, p.limits.MaxDepth); err != nil {
		err.Server, err.Tool = call.Server, call.Tool
		return p.Refuse(ctx, call, err)
	}
	return p.chain.Call(ctx, call)
}

// Refuse returns the record of a call refused before it reached the
// pipeline (by the scheduler: unknown tool, policy, approval, cancelled
// while queued). The call is not made, but it is recorded, masked, guided
// and given a rollback verdict like a call that failed, so no refusal goes
// missing from the task log. err is the refusal.
func (p *Pipeline) Refuse(ctx context.Context, call tool.Call, err *tool.Error) *tool.Record {
	if tool.Depth(call.Arguments, p.limits.MaxDepth) > p.limits.MaxDepth {
		// Nothing that records the refusal may walk the whole of them.
		call.Arguments = shallow(call.Arguments, p.limits.MaxDepth)
	}
	return p.refusal.Call(context.WithValue(ctx, refusalKey{}, err), call)
}

// Tools returns the backend's catalog.
func (p *Pipeline) Tools(ctx context.Context) (*tool.Catalog, error) { return p.backend.Tools(ctx) }

// Tool returns one tool's definition from the backend.
func (p *Pipeline) Tool(ctx context.Context, server, name string) (tool.Tool, error) {
	return p.backend.Tool(ctx, server, name)
}

// Commit tells the pipeline that the caller kept the turn it just ran in
// (task, session): its queries now count for duplicate detection.
func (p *Pipeline) Commit(task, session string) {
	if p.dedupe != nil {
		p.dedupe.Commit(task, session)
	}
}

// Discard tells the pipeline that the caller rolled the turn back: its
// queries are forgotten.
func (p *Pipeline) Discard(task, session string) {
	if p.dedupe != nil {
		p.dedupe.Discard(task, session)
	}
}

// EndTask releases what the pipeline remembers of a finished task.
func (p *Pipeline) EndTask(task string) {
	if p.dedupe != nil {
		p.dedupe.EndTask(task)
	}
	if p.instr != nil {
		p.instr.endTask(task)
	}
}
