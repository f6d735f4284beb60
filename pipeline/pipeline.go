package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"

	"github.com/toolmux/toolmux/tool"
)

// Backend is what the pipeline wraps: something that calls tools, finds
// their definitions and lists the catalog. *manager.Manager is one.
type Backend interface {
	Handler
	ToolLookup
	Tools(ctx context.Context) (*tool.Catalog, error)
}

// Pipeline is the governed way to call tools: the configured chain of
// middlewares around a Backend. It is safe for concurrent use, and it
// offers the same Tools and Call as the manager, so the gateway and the
// agent use either.
type Pipeline struct {
	backend Backend
	// cur is the chain the options built, swapped whole by Reconfigure: a
	// call runs through the chain it started in.
	cur atomic.Pointer[chain]
}

// chain is one build of the middlewares.
type chain struct {
	chain  Handler
	after  []afterFunc // the steps after the call, outermost first
	record int         // the record step's index in after; -1 without it
	log    *slog.Logger
	dedupe *Dedupe
	instr  *Instructions
	pins   *Pins // nil without pinning
	order  []string
	limits Limits
	// maxArgs is validate.max_argument_bytes, whether or not validate
	// is in the order (MaxArgumentBytes).
	maxArgs int64
}

// New builds the chain the options describe around b: the built-in
// middlewares of WithOrder (else DefaultOrder), each configured by its
// option (With...; zero values mean the defaults), then the caller's own
// (WithMiddleware). FromConfig gives the options of a configuration file's
// `pipeline:` section.
func New(b Backend, opts ...Option) (*Pipeline, error) {
	c, err := build(b, opts)
	if err != nil {
		return nil, err
	}
	p := &Pipeline{backend: b}
	p.cur.Store(c)
	return p, nil
}

// Reconfigure builds the chain opts describe around the same backend and
// uses it for the calls that start from now on (a reloaded
// configuration); calls running finish in the chain they started in. What
// the chain remembers per task (first uses, duplicate queries) starts
// afresh. On error the chain in use stays.
func (p *Pipeline) Reconfigure(opts ...Option) error {
	apply, err := p.Prepare(opts...)
	if err != nil {
		return err
	}
	apply()
	return nil
}

// Prepare builds the chain opts describe, as Reconfigure does, and returns
// the function that puts it in use: a caller that changes other parts at
// the same moment (a reload) builds everything that can fail first.
func (p *Pipeline) Prepare(opts ...Option) (apply func(), err error) {
	c, err := build(p.backend, opts)
	if err != nil {
		return nil, err
	}
	return func() { p.cur.Store(c) }, nil
}

// build makes the chain of opts around b.
func build(b Backend, opts []Option) (*chain, error) {
	o := options{log: slog.New(slog.DiscardHandler), lookupEnv: os.LookupEnv}
	for _, opt := range opts {
		opt(&o)
	}
	order := o.order
	if !o.orderSet {
		order = DefaultOrder()
	}
	o.limits = o.limits.withDefaults()
	p := &chain{order: slices.Clone(order), limits: o.limits, record: -1, log: o.log, pins: o.pins, maxArgs: o.validate.MaxArgumentBytes}
	if p.maxArgs <= 0 {
		p.maxArgs = DefaultMaxArgumentBytes
	}
	if v, ok := o.lookupEnv("TOOLMUX_LOW_CONTEXT"); ok && v == "1" {
		o.lowContext = true
	}
	spill := ""
	if o.dataDir != "" {
		spill = filepath.Join(o.dataDir, "spill")
	}
	mws := make([]Middleware, 0, len(order)+len(o.extra)+1)
	pinning := o.pins != nil
	for _, name := range order {
		if pinning && slices.Contains([]string{NameRepair, NameValidate, NameURLPolicy, NameDedupe, NamePII}, name) {
			mws, pinning = append(mws, o.pins.Middleware(b)), false
		}
		mw, after, err := p.middleware(name, b, o, spill)
		if err != nil {
			return nil, fmt.Errorf("pipeline: %s: %w", name, err)
		}
		mws = append(mws, mw)
		if after != nil {
			if name == NameRecord {
				p.record = len(p.after)
			}
			p.after = append(p.after, after)
		}
	}
	if pinning {
		mws = append(mws, o.pins.Middleware(b))
	}
	p.chain = Chain(b, append(mws, o.extra...)...)
	return p, nil
}

// middleware builds the built-in middleware name and, for those that act
// on records (record, instructions, truncate, rollback), its step after the
// call, which a refused call goes through too.
func (p *chain) middleware(name string, b Backend, o options, spill string) (Middleware, afterFunc, error) {
	switch name {
	case NameRecord:
		red, err := newRedactor(o.redact)
		if err != nil {
			return nil, nil, err
		}
		r := newRecord(red, o.recorder, o.log, o.limits)
		return r.middleware, r.after, nil
	case NameInstructions:
		in, err := NewInstructions(o.instructions)
		if err != nil {
			return nil, nil, err
		}
		p.instr = in
		return in.Middleware, in.after, nil
	case NameTruncate:
		t, err := newTruncator(o.truncate, spill, o.lowContext)
		if err != nil {
			return nil, nil, err
		}
		return t.middleware, t.after, nil
	case NameRollback:
		step, err := newRollback(o.rollback)
		if err != nil {
			return nil, nil, err
		}
		return afterMiddleware(step), step, nil
	}
	var mw Middleware
	var err error
	switch name {
	case NameFallback:
		mw, err = NewFallback(o.fallbacks)
	case NameRepair:
		mw, err = NewRepair(o.repair, b)
	case NameValidate:
		mw, err = NewValidate(o.validate, b)
	case NameURLPolicy:
		mw, err = NewURLPolicy(o.urlPolicy)
	case NamePII:
		mw, err = NewPII(o.pii)
	case NameDedupe:
		var d *Dedupe
		if d, err = NewDedupe(o.dedupe); err == nil {
			p.dedupe, mw = d, d.Middleware
		}
	default:
		err = fmt.Errorf("unknown middleware %q", name)
	}
	return mw, nil, err
}

// MaxArgumentBytes returns the bound on the JSON size of a call's
// arguments of the chain in use (validate.max_argument_bytes). What
// receives calls from outside (the gateway) holds the arguments it reads
// to it before decoding them, whether or not the validate middleware is
// in the order: arguments over it are not worth the memory of decoding.
func (p *Pipeline) MaxArgumentBytes() int64 { return p.cur.Load().maxArgs }

// Order returns the middleware names, outermost first.
func (p *Pipeline) Order() []string { return slices.Clone(p.cur.Load().order) }

// Call runs one call through the chain. It always returns a record.
// Arguments nested deeper than the limit are refused first
// (invalid_tool_params), before any middleware walks them; the refusal is
// recorded like any other, with the arguments cut at the limit.
func (p *Pipeline) Call(ctx context.Context, call tool.Call) *tool.Record {
	return p.cur.Load().call(ctx, call)
}

func (p *chain) call(ctx context.Context, call tool.Call) *tool.Record {
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
	return p.cur.Load().Refuse(ctx, call, err)
}

// Refuse is Pipeline.Refuse in this chain.
func (p *chain) Refuse(ctx context.Context, call tool.Call, err *tool.Error) *tool.Record {
	if tool.Depth(call.Arguments, p.limits.MaxDepth) > p.limits.MaxDepth {
		// Nothing that records the refusal may walk the whole of them.
		call.Arguments = shallow(call.Arguments, p.limits.MaxDepth)
	}
	rec := refuse(call, err)
	if p.record < 0 {
		return p.out(ctx, call, rec, 0, len(p.after))
	}
	// As for a call, a panic below the record step becomes a record. Each
	// step runs once, those below the record step and then it and those
	// above it: a step run twice would, say, note its verdict twice.
	rec = protect(ctx, HandlerFunc(func(ctx context.Context, call tool.Call) *tool.Record {
		return p.out(ctx, call, rec, p.record+1, len(p.after))
	}), call, p.log)
	return p.out(ctx, call, rec, 0, p.record+1)
}

// out takes rec through the steps after the call at indexes from to to
// (excluded), innermost first, as a call that failed at the bottom of the
// chain would go through them.
func (p *chain) out(ctx context.Context, call tool.Call, rec *tool.Record, from, to int) *tool.Record {
	for i := to - 1; i >= from; i-- {
		rec = p.after[i](ctx, call, rec)
	}
	return rec
}

// Tools returns the backend's catalog as a model may be shown it: with
// pinning (WithPinning), a tool held because its server changed its
// definition is listed with the pinned one (Pins.Shown). This is what
// every listing for a model or an MCP client reads (the gateway's routes,
// the agents' offers, the API's /api/tools); the backend's own catalog is
// what the servers present, for a person reviewing the changes
// (/api/pins), and Tool what a call is checked against.
func (p *Pipeline) Tools(ctx context.Context) (*tool.Catalog, error) {
	cat, err := p.backend.Tools(ctx)
	if err != nil {
		return cat, err
	}
	return p.cur.Load().pins.Shown(cat), nil
}

// Tool returns one tool's definition from the backend, as its server
// presents it: a call is admitted against it, and the pins check it.
func (p *Pipeline) Tool(ctx context.Context, server, name string) (tool.Tool, error) {
	return p.backend.Tool(ctx, server, name)
}

// Commit tells the pipeline that the caller kept the turn it just ran in
// (task, session): its queries now count for duplicate detection.
func (p *Pipeline) Commit(task, session string) {
	if p := p.cur.Load(); p.dedupe != nil {
		p.dedupe.Commit(task, session)
	}
}

// Discard tells the pipeline that the caller rolled the turn back: its
// queries are forgotten.
func (p *Pipeline) Discard(task, session string) {
	if p := p.cur.Load(); p.dedupe != nil {
		p.dedupe.Discard(task, session)
	}
}

// EndTask releases what the pipeline remembers of a finished task.
func (p *Pipeline) EndTask(task string) {
	c := p.cur.Load()
	if c.dedupe != nil {
		c.dedupe.EndTask(task)
	}
	if c.instr != nil {
		c.instr.EndTask(task)
	}
}
