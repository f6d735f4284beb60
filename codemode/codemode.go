// Package codemode runs a short JavaScript program that calls tools as
// functions, instead of one model turn per tool call: the program loops,
// filters and returns only what matters. It runs in goja, a JavaScript
// engine written in Go, in a runtime of its own per program with nothing of
// the host in it: no require, fetch, process, filesystem, network or
// timers, only the tools object and a console whose lines are returned
// beside the result.
//
// Every call a program makes goes through the Caller its runner is given,
// which the gateway and the agent satisfy with their governed path (the
// scheduler, the policy and its approvals, the pipeline, the task log):
// code reaches no tool around toolmux's governance.
//
// A program is bounded by Options, set by configuration, never by the
// program: its wall time, its calls, its output (result and console) and
// the memory it makes the process hold (see Options.MaxMemoryBytes for
// what that bound really measures). A program that throws, loops or passes
// a bound ends with an *Error whose Kind names why.
package codemode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/dop251/goja"

	"github.com/toolmux/toolmux/tool"
)

// Caller makes one governed call of a tool by the name the program gave
// (an exposed name, server__tool). The record is the call's, as any
// caller's: its result, or its error with a kind.
type Caller interface {
	Call(ctx context.Context, name string, args map[string]any) *tool.Record
}

// Defaults of Options' zero values.
const (
	DefaultTimeout        = 30 * time.Second
	DefaultMaxCalls       = 50
	DefaultMaxOutputBytes = 64 << 10
	DefaultMaxMemoryBytes = 64 << 20
)

// Options bound a program. Zero values take the defaults above.
type Options struct {
	// Timeout bounds the program's wall time, its tool calls included:
	// past it the engine is interrupted and a call in flight cancelled.
	Timeout time.Duration
	// MaxCalls bounds the tool calls of one program; the call one past it
	// ends the program.
	MaxCalls int
	// MaxOutputBytes bounds the result (its JSON) and the console's lines
	// together.
	MaxOutputBytes int
	// MaxMemoryBytes bounds the growth of the process's heap while the
	// program runs. goja has no heap of its own to limit: this is the Go
	// runtime's count of heap bytes in objects (runtime/metrics
	// /memory/classes/heap/objects:bytes), read every few milliseconds;
	// once it exceeds the count at the start by more than the bound, a
	// garbage collection is forced and, if the growth remains past the
	// bound, the program is interrupted. It is the process's heap, not the
	// program's alone: other work of the process that grows the heap
	// while the program runs counts against it too, and a program can
	// allocate up to the bound plus what it allocates between two reads.
	MaxMemoryBytes int64
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxCalls <= 0 {
		o.MaxCalls = DefaultMaxCalls
	}
	if o.MaxOutputBytes <= 0 {
		o.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if o.MaxMemoryBytes <= 0 {
		o.MaxMemoryBytes = DefaultMaxMemoryBytes
	}
	return o
}

// Kind says why a program failed.
type Kind string

// The kinds of Error.
const (
	// KindSyntax: the program does not parse.
	KindSyntax Kind = "syntax_error"
	// KindThrown: the program threw (or rejected) and did not catch it;
	// Error.ToolKind is the tool error's kind when it was a failed call.
	KindThrown Kind = "thrown"
	// KindTimeout, KindMaxCalls, KindMaxOutput, KindMaxMemory: the
	// program passed a bound (Error.Bound names its configuration key).
	KindTimeout   Kind = "timeout"
	KindMaxCalls  Kind = "max_calls"
	KindMaxOutput Kind = "max_output_bytes"
	KindMaxMemory Kind = "max_memory_bytes"
	// KindCancelled: the caller's context ended the program.
	KindCancelled Kind = "cancelled"
	// KindResult: the program returned what has no JSON form.
	KindResult Kind = "bad_result"
)

// Error is why a program failed.
type Error struct {
	Kind Kind
	// Bound names the configuration key of the bound passed (timeout,
	// max_calls, max_output_bytes, max_memory_bytes), and Limit its value
	// (milliseconds for the timeout).
	Bound string
	Limit int64
	// ToolKind is the kind of the failed tool call the program let
	// through, for KindThrown.
	ToolKind tool.Kind
	Message  string
}

func (e *Error) Error() string {
	if e.Bound != "" {
		return fmt.Sprintf("code mode: the program passed its %s bound (%d): %s", e.Bound, e.Limit, e.Message)
	}
	return "code mode: " + string(e.Kind) + ": " + e.Message
}

// KindOf returns the kind of the *Error in err's chain, "" for none.
func KindOf(err error) Kind {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Kind
	}
	return ""
}

// Result is what a program gave: the JSON of the value it returned (null
// for none), its console lines, and how many calls it made.
type Result struct {
	Value   json.RawMessage `json:"result"`
	Console []string        `json:"console,omitempty"`
	Calls   int             `json:"calls"`
}

// Runner runs programs against a catalog's tools through a Caller.
type Runner struct {
	caller Caller
	opts   Options
}

// New returns a runner calling through c, bounded by o.
func New(c Caller, o Options) *Runner { return &Runner{caller: c, opts: o.withDefaults()} }

// Options returns the runner's bounds, defaults applied.
func (r *Runner) Options() Options { return r.opts }

// Run runs code, the body of an async function, with a typed function for
// each of names (the exposed names of the tools the caller sees) beside
// tools.call. The Result is never nil: a failed program's console and
// calls are in it too.
func (r *Runner) Run(ctx context.Context, code string, names []string) (*Result, error) {
	res := &Result{}
	// The body sits on the wrapper's first line, so that the engine's
	// line numbers are the program's.
	prog, err := goja.Compile("program", "(async function() {"+code+"\n})()", true)
	if err != nil {
		return res, &Error{Kind: KindSyntax, Message: err.Error()}
	}
	ctx, cancel := context.WithTimeoutCause(ctx, r.opts.Timeout, errTimeUp)
	defer cancel()
	vm := goja.New()
	vm.SetMaxCallStackSize(1000)
	run := &program{r: r, ctx: ctx, vm: vm, res: res}
	// Taken before the program runs: it may replace JSON.stringify in
	// its own runtime, not the one that serialises its result.
	run.stringify, _ = goja.AssertFunction(vm.Get("JSON").ToObject(vm).Get("stringify"))
	run.install(names)

	// The bounds that no call of the program sees: time and memory.
	stopTime := context.AfterFunc(ctx, run.ended)
	defer stopTime()
	stopMem := watchMemory(r.opts.MaxMemoryBytes, func(grown int64) {
		run.stop(&Error{Kind: KindMaxMemory, Bound: "max_memory_bytes", Limit: r.opts.MaxMemoryBytes,
			Message: fmt.Sprintf("the heap grew by %d bytes", grown)})
	})
	defer stopMem()

	v, err := vm.RunProgram(prog)
	if err == nil {
		err = run.settled(v)
	}
	if err != nil {
		return res, run.failure(err)
	}
	run.mu.Lock()
	stopped := run.stopped
	run.mu.Unlock()
	if stopped != nil {
		// A bound passed as the program ended, before the engine
		// looked at its interruption.
		return res, stopped
	}
	if len(res.Value)+run.console > r.opts.MaxOutputBytes {
		return res, run.outputError()
	}
	return res, nil
}

// errTimeUp is the cause of a program's context ending at its timeout
// (and not at its caller's deadline).
var errTimeUp = errors.New("code mode: the program ran out of time")

// program is one run's state.
type program struct {
	r         *Runner
	ctx       context.Context
	vm        *goja.Runtime
	stringify goja.Callable
	res       *Result
	console   int // bytes of console lines

	mu      sync.Mutex
	stopped *Error // the bound that interrupted the engine first
}

// ended stops the program whose context ended: at its timeout, or by
// its caller.
func (p *program) ended() {
	if context.Cause(p.ctx) == errTimeUp {
		p.stop(&Error{Kind: KindTimeout, Bound: "timeout", Limit: p.r.opts.Timeout.Milliseconds(), Message: "the program ran out of time"})
		return
	}
	p.stop(&Error{Kind: KindCancelled, Message: "the program's caller went away"})
}

// stop interrupts the engine for e, the first reason given winning.
func (p *program) stop(e *Error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped == nil {
		p.stopped = e
		p.vm.Interrupt(e)
	}
}

func (p *program) outputError() *Error {
	return &Error{Kind: KindMaxOutput, Bound: "max_output_bytes", Limit: int64(p.r.opts.MaxOutputBytes),
		Message: "the result and the console are larger than that"}
}

// settled reads the async function's promise: a value returned, or what
// it was rejected with.
func (p *program) settled(v goja.Value) error {
	// The engine has run every job queued: a promise still pending waits
	// for what never comes (no timers, no I/O).
	pr, ok := v.Export().(*goja.Promise)
	if !ok {
		return &Error{Kind: KindResult, Message: "the program did not run as an async function"}
	}
	switch pr.State() {
	case goja.PromiseStateFulfilled:
		out := pr.Result()
		if out == nil || goja.IsUndefined(out) {
			p.res.Value = json.RawMessage("null")
			return nil
		}
		s, err := p.json(out)
		if err != nil {
			return err
		}
		if s == "" {
			return &Error{Kind: KindResult, Message: "the program's result has no JSON form"}
		}
		p.res.Value = json.RawMessage(s)
		return nil
	case goja.PromiseStateRejected:
		return p.thrown(pr.Result())
	default:
		return &Error{Kind: KindResult, Message: "the program awaits a promise nothing settles"}
	}
}

// thrown is the Error of a value the program threw and did not catch.
func (p *program) thrown(v goja.Value) *Error {
	e := &Error{Kind: KindThrown, Message: v.String()}
	if o, ok := v.(*goja.Object); ok {
		if k := o.Get("kind"); k != nil && !goja.IsUndefined(k) {
			e.ToolKind = tool.Kind(k.String())
		}
	}
	return e
}

// failure is the Error of a run that ended in err: the bound that
// stopped it, if one did (the program may have seen a call fail for it
// before the engine stopped).
func (p *program) failure(err error) error {
	p.mu.Lock()
	stopped := p.stopped
	p.mu.Unlock()
	if stopped != nil {
		return stopped
	}
	if ie, ok := errors.AsType[*goja.InterruptedError](err); ok {
		if e, ok := ie.Value().(*Error); ok {
			return e
		}
	}
	if ex, ok := errors.AsType[*goja.Exception](err); ok {
		return p.thrown(ex.Value())
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e
	}
	return &Error{Kind: KindThrown, Message: err.Error()}
}

// install puts the program's API in its runtime: tools (call and a
// function per tool) and console. Everything else of the host stays out:
// goja's runtime has no require, fetch, process or timers of its own.
func (p *program) install(names []string) {
	tools := p.vm.NewObject()
	_ = tools.Set("call", func(call goja.FunctionCall) goja.Value {
		name := call.Argument(0)
		if goja.IsUndefined(name) || goja.IsNull(name) {
			panic(p.vm.NewTypeError("tools.call needs the name of a tool"))
		}
		return p.call(name.String(), call.Argument(1))
	})
	for _, n := range names {
		if n == "call" {
			continue // reachable by tools.call("call", ...)
		}
		_ = tools.Set(n, func(call goja.FunctionCall) goja.Value { return p.call(n, call.Argument(0)) })
	}
	_ = p.vm.Set("tools", tools)
	console := p.vm.NewObject()
	for _, level := range []string{"log", "info", "warn", "error", "debug"} {
		prefix := ""
		if level != "log" && level != "info" {
			prefix = level + ": "
		}
		_ = console.Set(level, func(call goja.FunctionCall) goja.Value {
			p.log(prefix, call.Arguments)
			return goja.Undefined()
		})
	}
	_ = p.vm.Set("console", console)
}

// log adds a console line; one past the output bound ends the program.
func (p *program) log(prefix string, args []goja.Value) {
	var b strings.Builder
	b.WriteString(prefix)
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		if s, ok := a.Export().(string); ok {
			b.WriteString(s)
		} else if j, err := p.json(a); err == nil && j != "" {
			b.WriteString(j)
		} else {
			b.WriteString(a.String())
		}
	}
	p.console += b.Len() + 1
	if p.console > p.r.opts.MaxOutputBytes {
		p.stop(p.outputError())
		return
	}
	p.res.Console = append(p.res.Console, b.String())
}

// call makes one governed call and returns its promise: settled already,
// since the call is made on the engine's goroutine (a program's calls run
// one after another).
func (p *program) call(name string, arg goja.Value) goja.Value {
	promise, resolve, reject := p.vm.NewPromise()
	if p.res.Calls >= p.r.opts.MaxCalls {
		p.stop(&Error{Kind: KindMaxCalls, Bound: "max_calls", Limit: int64(p.r.opts.MaxCalls),
			Message: fmt.Sprintf("call %d (%s) is one too many", p.res.Calls+1, name)})
		_ = reject(p.vm.NewTypeError("max_calls"))
		return p.vm.ToValue(promise)
	}
	args, err := p.arguments(arg)
	if err != nil {
		_ = reject(p.toolError(&tool.Error{Kind: tool.KindInvalidParams, Tool: name, Message: err.Error()}))
		return p.vm.ToValue(promise)
	}
	p.res.Calls++
	rec := p.r.caller.Call(p.ctx, name, args)
	if p.ctx.Err() != nil {
		// The call ended with the program's time: the program ends
		// here rather than see it fail.
		p.ended()
	}
	if e := callError(name, rec); e != nil {
		_ = reject(p.toolError(e))
	} else {
		_ = resolve(p.vm.ToValue(value(rec.Result)))
	}
	return p.vm.ToValue(promise)
}

// json is JSON.stringify(v), "" for a value it leaves out (undefined, a
// function); an error for one it throws on (a cycle, a BigInt), or the
// interruption of a bound.
func (p *program) json(v goja.Value) (string, error) {
	out, err := p.stringify(goja.Undefined(), v)
	if err != nil {
		if e := p.failure(err); KindOf(e) != KindThrown {
			return "", e
		}
		return "", &Error{Kind: KindResult, Message: "no JSON form: " + err.Error()}
	}
	if goja.IsUndefined(out) {
		return "", nil
	}
	return out.String(), nil
}

// arguments turns the program's argument object into JSON values.
func (p *program) arguments(v goja.Value) (map[string]any, error) {
	if v == nil || goja.IsUndefined(v) || goja.IsNull(v) {
		return map[string]any{}, nil
	}
	if _, ok := v.(*goja.Object); !ok {
		return nil, errors.New("a tool's arguments must be an object")
	}
	s, err := p.json(v)
	if err != nil {
		return nil, fmt.Errorf("the arguments have no JSON form: %v", err)
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(s), &args); err != nil || args == nil {
		return nil, errors.New("a tool's arguments must be an object")
	}
	return args, nil
}

// callError is the error of a failed call, nil for a good one.
func callError(name string, rec *tool.Record) *tool.Error {
	switch {
	case rec == nil:
		return &tool.Error{Kind: tool.KindExecutionFailed, Tool: name, Message: "the call gave no record"}
	case rec.Error != nil:
		return rec.Error
	case rec.Result != nil && rec.Result.IsError:
		return &tool.Error{Kind: tool.KindToolError, Tool: name, Message: text(rec.Result)}
	}
	return nil
}

// toolError is a JavaScript Error for a failed call, with the tool
// error's kind, server and tool beside its message.
func (p *program) toolError(e *tool.Error) goja.Value {
	o, err := p.vm.New(p.vm.Get("Error"), p.vm.ToValue(e.Message))
	if err != nil {
		return p.vm.ToValue(e.Message)
	}
	_ = o.Set("kind", string(e.Kind))
	_ = o.Set("server", e.Server)
	_ = o.Set("tool", e.Tool)
	return o
}

// value is what a call gives the program: the structured content when
// the tool has it, else its text.
func value(r *tool.Result) any {
	if r == nil {
		return nil
	}
	if r.Structured != nil {
		// Through JSON, so that the program sees plain objects whatever
		// Go type the result was decoded into.
		if b, err := json.Marshal(r.Structured); err == nil {
			var v any
			if json.Unmarshal(b, &v) == nil {
				return v
			}
		}
	}
	return text(r)
}

func text(r *tool.Result) string {
	var b strings.Builder
	for _, c := range r.Content {
		if c.Type == "text" {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(c.Text)
		}
	}
	return b.String()
}
