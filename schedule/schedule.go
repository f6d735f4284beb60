// Package schedule runs the tool calls of one model turn, a batch: each call
// goes through the states validating → scheduled → [awaiting_approval →]
// executing → success | error | cancelled, every transition is reported to a
// Sink, read-only calls run in parallel and mutating calls in order, and the
// outcomes come back in the order the model issued the calls.
//
// The scheduler sits on top of the governance pipeline (or a bare manager):
// it decides when a call runs and whether it may, the pipeline decides how.
package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	callers "github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/tool"
)

// DefaultMaxParallel is how many calls of one batch run at the same time
// unless configured: more than a model's usual fan-out of searches and
// reads, so a turn's reads all start at once; MCP sessions multiplex calls,
// so this costs no extra processes.
const DefaultMaxParallel = 32

// Backend runs calls and knows the tools' definitions: *pipeline.Pipeline
// and *manager.Manager are both one.
type Backend interface {
	Call(ctx context.Context, call tool.Call) *tool.Record
	Tool(ctx context.Context, server, name string) (tool.Tool, error)
}

// Refuser is implemented by backends that must see calls the scheduler
// refuses without running them (unknown tool, policy denial, approval
// denied, cancelled while queued), so that such calls are recorded like any
// other: the pipeline records them and applies its verdicts.
type Refuser interface {
	Refuse(ctx context.Context, call tool.Call, err *tool.Error) *tool.Record
}

// Gate decides whether a call may run: nil to run it, or the error that
// refuses it (policy_violation, approval_denied, or the context's error).
// When the decision needs an approver, Gate calls asking with the message
// to show before it blocks, so the call is reported as awaiting_approval.
// *policy.Gate is one.
type Gate interface {
	Admit(ctx context.Context, t tool.Tool, call tool.Call, asking func(message string)) error
}

// ArgumentGate is a Gate that may change what it admits: the call's
// arguments (a PreToolUse hook's updatedInput, docs/hooks.md) and the
// context the call runs with (derived from the one it was given, carrying
// what the layers below must know of the admission: the notes of the hooks
// that judged it). The scheduler asks AdmitArguments instead of Admit when
// its gate has it. Nil arguments leave the call's as they were; the
// rewritten ones are checked below like any others (the pipeline's depth
// check, repair and validation).
type ArgumentGate interface {
	Gate
	AdmitArguments(ctx context.Context, t tool.Tool, call tool.Call, asking func(message string)) (context.Context, map[string]any, error)
}

// Option configures a Scheduler.
type Option func(*Scheduler)

// WithGate sets the policy gate; without one every call is admitted.
func WithGate(g Gate) Option { return func(s *Scheduler) { s.gate = g } }

// WithSink sets where events go; without one they are dropped.
func WithSink(k Sink) Option { return func(s *Scheduler) { s.sink = k } }

// WithTracer makes an execute_tool span of every call with t (see
// trace.go); nil, the default, makes none.
func WithTracer(t trace.Tracer) Option { return func(s *Scheduler) { s.tracer = t } }

// WithMaxParallel bounds how many calls of one batch execute at the same
// time (default DefaultMaxParallel; values below 1 keep the default).
func WithMaxParallel(n int) Option {
	return func(s *Scheduler) {
		if n > 0 {
			s.maxParallel = n
		}
	}
}

// WithMaxDepth sets the deepest nesting of a call's arguments admitted
// (limits.max_depth; default, and values below 1: tool.DefaultMaxDepth).
// A deeper call is refused with invalid_tool_params before its tool is
// looked up, so neither the policy's argument rules nor an approval prompt
// walk its arguments.
func WithMaxDepth(n int) Option {
	return func(s *Scheduler) { s.maxDepth = n }
}

// WithParallel replaces the rule deciding which calls may run alongside
// others. The default, ReadOnly, lets only tools that declare readOnlyHint
// run in parallel.
func WithParallel(f func(tool.Tool, tool.Call) bool) Option {
	return func(s *Scheduler) {
		if f != nil {
			s.parallel = f
		}
	}
}

// WithLogger sets the logger for panics caught in calls.
func WithLogger(l *slog.Logger) Option {
	return func(s *Scheduler) {
		if l != nil {
			s.log = l
		}
	}
}

// ReadOnly is the default parallelism rule: a call may run alongside others
// when its tool declares that it changes nothing. A tool that says nothing
// is assumed to mutate (the MCP default), so it runs alone, in order.
func ReadOnly(t tool.Tool, _ tool.Call) bool {
	return t.Annotations.ReadOnly != nil && *t.Annotations.ReadOnly
}

// Scheduler runs batches of calls. It is safe for concurrent use; the only
// state it keeps between batches is which of them still run, so that
// [Scheduler.Shutdown] can wait for them.
type Scheduler struct {
	backend     Backend
	gate        Gate
	sink        Sink
	maxParallel int
	maxDepth    int
	parallel    func(tool.Tool, tool.Call) bool
	log         *slog.Logger
	tracer      trace.Tracer // nil: no spans

	mu       sync.Mutex
	running  map[*Batch]struct{}
	stopping bool
	idle     chan struct{} // closed when stopping and nothing runs
}

// New returns a scheduler running calls through b.
func New(b Backend, opts ...Option) *Scheduler {
	s := &Scheduler{backend: b, maxParallel: DefaultMaxParallel, parallel: ReadOnly,
		log: slog.New(slog.DiscardHandler), running: map[*Batch]struct{}{}, idle: make(chan struct{})}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	return s
}

// Run runs calls as one batch and returns their outcomes in the order of
// calls. Cancelling ctx cancels every call not finished yet. The batch is
// admitted on the caller's goroutine, and its last call runs there too: a
// batch of one starts no goroutine.
func (s *Scheduler) Run(ctx context.Context, calls []tool.Call) []Outcome {
	b := s.newBatch(ctx, calls)
	b.process()
	return b.Wait()
}

// Call runs one call as a batch of its own and returns its record, so a
// Scheduler can stand wherever a single call is made (the gateway, the CLI)
// and those calls get the same validation, policy, approval and events.
func (s *Scheduler) Call(ctx context.Context, call tool.Call) *tool.Record {
	b := s.newBatch(ctx, []tool.Call{call})
	b.process()
	return b.entries[0].record
}

// Start starts a batch and returns at once; the batch runs until every
// call has ended. Cancelling ctx cancels the whole batch.
func (s *Scheduler) Start(ctx context.Context, calls []tool.Call) *Batch {
	b := s.newBatch(ctx, calls)
	go b.process()
	return b
}

// byIDAbove is the batch size from which calls are found by ID through a
// map rather than by looking at each.
const byIDAbove = 8

// newBatch prepares a batch of calls and registers it as running (unless
// the scheduler is stopping: then every call ends cancelled).
func (s *Scheduler) newBatch(ctx context.Context, calls []tool.Call) *Batch {
	bctx, cancel := context.WithCancelCause(ctx)
	b := &Batch{s: s, id: tool.NewID(), ctx: bctx, cancel: cancel, done: make(chan struct{})}
	if len(calls) == 1 {
		b.entries = b.one[:]
	} else {
		b.entries = make([]*entry, len(calls))
	}
	if len(calls) > s.maxParallel {
		// Fewer calls than slots never need one.
		b.slots = make(chan struct{}, s.maxParallel)
	}
	if len(calls) > byIDAbove {
		b.byID = make(map[string]*entry, len(calls))
	}
	// Who makes the calls (the gateway's or the API's caller), named on
	// each call so that its record and events name it.
	caller := callers.RefFrom(ctx)
	for i, c := range calls {
		if c.ID == "" {
			c.ID = tool.NewID()
		}
		if c.Caller == nil {
			c.Caller = caller
		}
		if c.Arguments == nil {
			c.Arguments = map[string]any{}
		}
		e := &entry{index: i, call: c}
		e.transitions = e.trbuf[:0]
		if len(calls) == 1 {
			// The call is the batch: cancelling one cancels the other,
			// with the same cause.
			e.ctx = bctx // e.cancel nil: cancel the batch
		} else {
			e.ctx, e.cancel = context.WithCancel(bctx)
			e.done = make(chan struct{})
		}
		b.entries[i] = e
		if b.byID != nil {
			if _, dup := b.byID[c.ID]; !dup {
				b.byID[c.ID] = e
			}
		}
	}
	s.mu.Lock()
	if s.stopping {
		// Every call ends cancelled, through the usual refusal path, so
		// it is still recorded and its client told why.
		cancel(ErrShuttingDown)
	} else {
		s.running[b] = struct{}{}
	}
	s.mu.Unlock()
	return b
}

// process runs the batch to its end: admission, the calls, then the
// batch's release.
func (b *Batch) process() {
	b.admit()
	b.wg.Wait()
	b.cancel(nil)
	s := b.s
	s.mu.Lock()
	delete(s.running, b)
	if s.stopping && len(s.running) == 0 {
		closeOnce(s.idle)
	}
	s.mu.Unlock()
	close(b.done)
}

// ErrShuttingDown is the cause of calls cancelled by [Scheduler.Shutdown]:
// their records say "cancelled: toolmux is shutting down".
var ErrShuttingDown = errors.New("toolmux is shutting down")

// DefaultCancelWait bounds how long [Scheduler.Shutdown] waits for the
// calls it cancelled to end: a backend that ignores cancellation must not
// hold up the shutdown forever.
const DefaultCancelWait = 5 * time.Second

// Shutdown stops the scheduler: batches started from now on end at once,
// every call cancelled with [ErrShuttingDown]; the running ones are given
// until ctx ends to finish, then cancelled with that cause. It returns
// once every batch has ended (or [DefaultCancelWait] after cancelling, if
// some backend ignores it), with the outcomes of the calls it cancelled
// (already recorded, like any call, when the backend records). Calling it
// again waits again and cancels nothing more.
func (s *Scheduler) Shutdown(ctx context.Context) []Outcome {
	s.mu.Lock()
	s.stopping = true
	if len(s.running) == 0 {
		closeOnce(s.idle)
	}
	s.mu.Unlock()
	select {
	case <-s.idle:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	batches := make([]*Batch, 0, len(s.running))
	for b := range s.running {
		batches = append(batches, b)
		b.cancel(ErrShuttingDown)
	}
	s.mu.Unlock()
	t := time.NewTimer(DefaultCancelWait)
	defer t.Stop()
	var out []Outcome
	for _, b := range batches {
		select {
		case <-b.done:
		case <-t.C:
			s.log.Error("calls still running after being cancelled for shutdown", "batch", b.id)
			return out
		}
		for _, o := range b.Wait() {
			if o.State == Cancelled && errors.Is(context.Cause(b.ctx), ErrShuttingDown) {
				out = append(out, o)
			}
		}
	}
	return out
}

func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}

// Batch is one running batch.
type Batch struct {
	s       *Scheduler
	id      string
	ctx     context.Context
	cancel  context.CancelCauseFunc
	entries []*entry
	one     [1]*entry         // entries' room for a batch of one
	byID    map[string]*entry // nil for small batches
	slots   chan struct{}     // nil when the batch is within max_parallel
	wg      sync.WaitGroup
	done    chan struct{}
}

// entry is one call of a batch. Its fields after done are written by one
// goroutine at a time: the admission loop, then the call's own goroutine,
// which it starts; Wait reads them after every goroutine has ended.
type entry struct {
	index  int
	call   tool.Call
	ctx    context.Context
	cancel context.CancelFunc // nil in a batch of one: the batch's
	done   chan struct{}      // closed when the call has ended; nil in a batch of one

	def         tool.Tool // what the call was admitted against; call.Definition points here
	exclusive   bool
	record      *tool.Record
	state       State
	transitions []Transition
	trbuf       [5]Transition // room for every state a call goes through
	span        trace.Span    // nil unless the scheduler traces
	approval    trace.Span    // the wait for an answer, while traced
	// answeredBy names who answered the call's approval question, once
	// an approver has said (tool.Answered).
	answeredBy atomic.Pointer[string]
}

// ID returns the batch's identifier, the Batch field of its events.
func (b *Batch) ID() string { return b.id }

// Cancel cancels every call of the batch that has not ended: queued calls
// end without running, running calls see their context cancelled.
func (b *Batch) Cancel() { b.cancel(nil) }

// CancelCall cancels one call by its ID, whatever its state; it reports
// whether the batch has a call with that ID.
func (b *Batch) CancelCall(id string) bool {
	e, ok := b.byID[id]
	if b.byID == nil {
		for _, c := range b.entries {
			if c.call.ID == id {
				e, ok = c, true
				break
			}
		}
	}
	if ok {
		b.cancelEntry(e)
	}
	return ok
}

// cancelEntry cancels one call: its own context, or in a batch of one the
// batch's.
func (b *Batch) cancelEntry(e *entry) {
	if e.cancel != nil {
		e.cancel()
	} else {
		b.cancel(nil)
	}
}

// Done is closed when every call of the batch has ended.
func (b *Batch) Done() <-chan struct{} { return b.done }

// Wait waits for every call to end and returns the outcomes in the order
// the calls were given.
func (b *Batch) Wait() []Outcome {
	<-b.done
	out := make([]Outcome, len(b.entries))
	for i, e := range b.entries {
		out[i] = Outcome{Call: e.call, Record: e.record, State: e.state, Transitions: e.transitions}
	}
	return out
}

// admit walks the calls in the model's order: validates each, asks the
// gate, and hands it to its own goroutine to wait for its turn and run
// (the last call runs on the admitting goroutine: nothing is left to
// admit). Admission is sequential so that approval prompts come in the
// model's order; earlier calls already run while later ones wait for an
// answer.
func (b *Batch) admit() {
	var lastExclusive *entry
	for i, e := range b.entries {
		if b.s.tracer != nil {
			b.startSpan(e)
		}
		b.enter(e, Validating, "")
		if e.ctx.Err() != nil {
			b.refuse(e, cancelled(e.call, context.Cause(e.ctx)))
			continue
		}
		if err := tool.CheckDepth(e.call.Arguments, b.s.maxDepth); err != nil {
			err.Server, err.Tool = e.call.Server, e.call.Tool
			b.refuse(e, err)
			continue
		}
		def, err := b.s.backend.Tool(e.ctx, e.call.Server, e.call.Tool)
		if err != nil {
			b.refuse(e, b.lookupError(e, err))
			continue
		}
		e.def = def
		e.call.Definition = &e.def
		e.exclusive = !b.s.parallel(def, e.call)
		b.enter(e, Scheduled, "")
		if g := b.s.gate; g != nil {
			actx := e.ctx
			if c := callers.From(e.ctx); c != nil {
				// Who asks and who answers are people only where
				// callers are known: without, the context is left as it
				// is (no cost).
				actx = tool.WithAnswered(actx, func(by string) { e.answeredBy.Store(&by) })
			}
			asking := func(msg string) {
				if e.span != nil && e.approval == nil {
					e.approval = b.approvalSpan(e)
				}
				b.enter(e, AwaitingApproval, msg)
			}
			var err error
			if ag, ok := g.(ArgumentGate); ok {
				var (
					rctx context.Context
					args map[string]any
				)
				rctx, args, err = ag.AdmitArguments(actx, def, e.call, asking)
				if err == nil {
					if rctx != nil {
						e.ctx = rctx
					}
					if args != nil {
						e.call.Arguments = args
					}
				}
			} else {
				err = g.Admit(actx, def, e.call, asking)
			}
			if e.approval != nil {
				endApproval(e.approval, err)
			}
			if err != nil {
				b.refuse(e, b.gateError(e, err))
				continue
			}
		}
		// An exclusive call waits for every earlier call; a parallel one
		// only for the last exclusive call before it.
		var deps []*entry
		if e.exclusive {
			deps = b.entries[:i]
		} else if lastExclusive != nil {
			deps = []*entry{lastExclusive}
		}
		if e.exclusive {
			lastExclusive = e
		}
		b.wg.Add(1)
		if i == len(b.entries)-1 {
			b.execute(e, deps)
		} else {
			go b.execute(e, deps)
		}
	}
}

// execute waits for e's turn and a free slot, then runs it.
func (b *Batch) execute(e *entry, deps []*entry) {
	defer b.wg.Done()
	for _, d := range deps {
		select {
		case <-d.done:
		case <-e.ctx.Done():
			b.refuse(e, cancelled(e.call, context.Cause(e.ctx)))
			return
		}
	}
	if b.slots != nil {
		select {
		case b.slots <- struct{}{}:
		case <-e.ctx.Done():
			b.refuse(e, cancelled(e.call, context.Cause(e.ctx)))
			return
		}
		defer func() { <-b.slots }()
	}
	if e.ctx.Err() != nil {
		b.refuse(e, cancelled(e.call, context.Cause(e.ctx)))
		return
	}
	b.enter(e, Executing, "")
	ctx := e.ctx
	if b.s.sink != nil {
		// The caller's own callbacks (a CLI spinner) keep getting what
		// they got before; the sink gets it too. They hold the call's
		// identity only, not the batch: a source may keep them a moment
		// after the call (a progress report can come just after the
		// result).
		s, id := b.s, b.identity(e)
		outerOut, outerProg := tool.OutputFrom(ctx), tool.ProgressFrom(ctx)
		ctx = tool.WithOutput(ctx, func(stream, chunk string) {
			if outerOut != nil {
				outerOut(stream, chunk)
			}
			s.emit(&id, Event{Type: EventOutput, Stream: stream, Chunk: chunk})
		})
		ctx = tool.WithProgress(ctx, func(p tool.Progress) {
			if outerProg != nil {
				outerProg(p)
			}
			s.emit(&id, Event{Type: EventProgress, Progress: &p})
		})
	}
	b.finish(e, b.run(ctx, e))
}

// run calls the backend, turning a panic or a missing record into an
// execution_failed record: a broken tool must not take the process down.
func (b *Batch) run(ctx context.Context, e *entry) (rec *tool.Record) {
	defer func() {
		if p := recover(); p != nil {
			b.s.log.Error("panic in tool call", "server", e.call.Server, "tool", e.call.Tool, "panic", p)
			rec = failed(e.call, &tool.Error{Kind: tool.KindExecutionFailed,
				Message: fmt.Sprintf("internal error while calling %s/%s: %v", e.call.Server, e.call.Tool, p),
				Detail:  string(debug.Stack())})
		}
	}()
	rec = b.s.backend.Call(ctx, e.call)
	if rec == nil {
		rec = failed(e.call, &tool.Error{Kind: tool.KindExecutionFailed, Message: "the call produced no record"})
	}
	return rec
}

// refuse ends e without running it: through the backend's Refuse when it
// has one, so the refusal is recorded like any call.
func (b *Batch) refuse(e *entry, err *tool.Error) {
	var rec *tool.Record
	if r, ok := b.s.backend.(Refuser); ok {
		func() {
			defer func() {
				if p := recover(); p != nil {
					b.s.log.Error("panic while recording a refused call", "server", e.call.Server, "tool", e.call.Tool, "panic", p)
					rec = nil
				}
			}()
			// The call's own context may be cancelled: recording must
			// still happen.
			rec = r.Refuse(context.WithoutCancel(e.ctx), e.call, err)
		}()
	}
	if rec == nil {
		rec = failed(e.call, err)
	}
	b.finish(e, rec)
}

// finish records e's outcome and reports its final state.
func (b *Batch) finish(e *entry, rec *tool.Record) {
	e.record = rec
	state, msg := Success, ""
	if rec.Error != nil {
		state, msg = Error, rec.Error.Message
		if rec.Error.Kind == tool.KindCancelled {
			state = Cancelled
		}
	}
	b.enter(e, state, msg)
	if e.span != nil {
		endSpan(e.span, rec)
	}
	b.cancelEntry(e)
	if e.done != nil {
		close(e.done)
	}
}

// enter moves e to state and emits the transition.
func (b *Batch) enter(e *entry, state State, msg string) {
	now := time.Now()
	var prev Transition
	if n := len(e.transitions); n > 0 {
		prev = e.transitions[n-1]
	}
	e.state = state
	e.transitions = append(e.transitions, Transition{State: state, Time: now})
	if b.s.sink == nil {
		return
	}
	ev := Event{Type: EventState, State: state, Message: msg, Time: now, Arguments: e.call.Arguments,
		Previous: prev.State, PreviousAt: prev.Time, FirstAt: e.transitions[0].Time}
	if prev.State == AwaitingApproval {
		if by := e.answeredBy.Load(); by != nil {
			ev.AnsweredBy = *by
		}
	}
	if state.Terminal() {
		ev.Record = e.record
	}
	b.emit(e, ev)
}

// identity is what names a call in its events.
type identity struct {
	batch, call, task, server, tool, caller string
	index                                   int
}

func (b *Batch) identity(e *entry) identity {
	return identity{batch: b.id, call: e.call.ID, task: e.call.Task, server: e.call.Server, tool: e.call.Tool,
		caller: e.call.Caller.String(), index: e.index}
}

// emit fills in the call's identity and hands ev to the sink.
func (b *Batch) emit(e *entry, ev Event) {
	id := b.identity(e)
	b.s.emit(&id, ev)
}

// emit fills in the identity of the call and hands ev to the sink.
func (s *Scheduler) emit(id *identity, ev Event) {
	sink := s.sink
	if sink == nil {
		return
	}
	ev.Batch, ev.Call, ev.Index = id.batch, id.call, id.index
	ev.Task, ev.Server, ev.Tool, ev.Caller = id.task, id.server, id.tool, id.caller
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("panic in event sink", "panic", p)
		}
	}()
	sink.Event(ev)
}

// lookupError is the error of a failed definition lookup: the context's
// when the call was cancelled meanwhile.
func (b *Batch) lookupError(e *entry, err error) *tool.Error {
	if e.ctx.Err() != nil {
		return cancelled(e.call, context.Cause(e.ctx))
	}
	te := tool.AsError(err)
	if te.Server == "" {
		te.Server = e.call.Server
	}
	if te.Tool == "" {
		te.Tool = e.call.Tool
	}
	return te
}

// gateError is the error of a refused admission.
func (b *Batch) gateError(e *entry, err error) *tool.Error {
	if e.ctx.Err() != nil {
		return cancelled(e.call, context.Cause(e.ctx))
	}
	if errors.Is(err, context.Canceled) {
		return cancelled(e.call, err)
	}
	return b.lookupError(e, err)
}

func cancelled(call tool.Call, cause error) *tool.Error {
	msg := fmt.Sprintf("call to %s/%s was cancelled before it ran", call.Server, call.Tool)
	if cause != nil && !errors.Is(cause, context.Canceled) {
		msg += ": " + cause.Error()
	}
	return &tool.Error{Kind: tool.KindCancelled, Server: call.Server, Tool: call.Tool, Message: msg}
}

// failed is the record of a call that produced none of its own.
func failed(call tool.Call, err *tool.Error) *tool.Record {
	return tool.Refused(&call, err)
}
