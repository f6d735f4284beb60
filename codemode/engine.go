//go:build toolmux_codemode

package codemode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/dop251/goja"

	"github.com/toolmux/toolmux/tool"
)

// Built is whether this build runs programs (built with the
// toolmux_codemode tag).
const Built = true

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
