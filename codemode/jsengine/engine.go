// Package jsengine runs code mode's programs in goja, a JavaScript engine
// written in Go, in a runtime of its own per program with nothing of the
// host in it: no require, fetch, process, filesystem, network or timers,
// only the tools object and a console whose lines are returned beside the
// result.
//
// toolmux runs it in a process of its own, the toolmux-codemode program
// (Serve), and not in the gateway's: goja's reflection keeps the linker
// from dropping unused methods, which would cost the toolmux binary a
// third of its size (docs/codemode.md, "The engine and the binary"), and
// a process of its own gives a program a heap of its own to bound. A
// library may call Run in its own process instead.
package jsengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/dop251/goja"

	"github.com/toolmux/toolmux/codemode"
	"github.com/toolmux/toolmux/tool"
)

// CallFunc makes one governed call of a tool by the name the program gave
// and returns what the program sees (codemode.Outcome): a value that has
// a JSON form, or the error its promise is rejected with.
type CallFunc func(ctx context.Context, name string, args map[string]any) (any, *tool.Error)

// Run runs code, the body of an async function, with a typed function for
// each of names (the exposed names of the tools the caller sees) beside
// tools.call, bounded by o (its zero values taking codemode's defaults).
// The Result is never nil: a failed program's console and calls are in it
// too.
func Run(ctx context.Context, code string, names []string, call CallFunc, o codemode.Options) (*codemode.Result, error) {
	o = o.WithDefaults()
	res := &codemode.Result{}
	// The body sits on the wrapper's first line, so that the engine's
	// line numbers are the program's.
	prog, err := goja.Compile("program", "(async function() {"+code+"\n})()", true)
	if err != nil {
		return res, &codemode.Error{Kind: codemode.KindSyntax, Message: err.Error()}
	}
	ctx, cancel := context.WithTimeoutCause(ctx, o.Timeout, errTimeUp)
	defer cancel()
	vm := goja.New()
	vm.SetMaxCallStackSize(1000)
	run := &program{opts: o, callFn: call, ctx: ctx, vm: vm, res: res}
	// Taken before the program runs: it may replace JSON.stringify in
	// its own runtime, not the one that serialises its result.
	run.stringify, _ = goja.AssertFunction(vm.Get("JSON").ToObject(vm).Get("stringify"))
	run.install(names)

	// The bounds that no call of the program sees: time and memory.
	stopTime := context.AfterFunc(ctx, run.ended)
	defer stopTime()
	stopMem := watchMemory(o.MaxMemoryBytes, func(grown int64) {
		run.stop(&codemode.Error{Kind: codemode.KindMaxMemory, Bound: "max_memory_bytes", Limit: o.MaxMemoryBytes,
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
	if len(res.Value)+run.console > o.MaxOutputBytes {
		return res, run.outputError()
	}
	return res, nil
}

// errTimeUp is the cause of a program's context ending at its timeout
// (and not at its caller's deadline).
var errTimeUp = errors.New("code mode: the program ran out of time")

// program is one run's state.
type program struct {
	opts      codemode.Options
	callFn    CallFunc
	ctx       context.Context
	vm        *goja.Runtime
	stringify goja.Callable
	res       *codemode.Result
	console   int // bytes of console lines

	mu      sync.Mutex
	stopped *codemode.Error // the bound that interrupted the engine first
}

// ended stops the program whose context ended: at its timeout, or by
// its caller.
func (p *program) ended() {
	if context.Cause(p.ctx) == errTimeUp {
		p.stop(&codemode.Error{Kind: codemode.KindTimeout, Bound: "timeout", Limit: p.opts.Timeout.Milliseconds(), Message: "the program ran out of time"})
		return
	}
	p.stop(&codemode.Error{Kind: codemode.KindCancelled, Message: "the program's caller went away"})
}

// stop interrupts the engine for e, the first reason given winning.
func (p *program) stop(e *codemode.Error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped == nil {
		p.stopped = e
		p.vm.Interrupt(e)
	}
}

func (p *program) outputError() *codemode.Error {
	return &codemode.Error{Kind: codemode.KindMaxOutput, Bound: "max_output_bytes", Limit: int64(p.opts.MaxOutputBytes),
		Message: "the result and the console are larger than that"}
}

// settled reads the async function's promise: a value returned, or what
// it was rejected with.
func (p *program) settled(v goja.Value) error {
	// The engine has run every job queued: a promise still pending waits
	// for what never comes (no timers, no I/O).
	pr, ok := v.Export().(*goja.Promise)
	if !ok {
		return &codemode.Error{Kind: codemode.KindResult, Message: "the program did not run as an async function"}
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
			return &codemode.Error{Kind: codemode.KindResult, Message: "the program's result has no JSON form"}
		}
		p.res.Value = json.RawMessage(s)
		return nil
	case goja.PromiseStateRejected:
		return p.thrown(pr.Result())
	default:
		return &codemode.Error{Kind: codemode.KindResult, Message: "the program awaits a promise nothing settles"}
	}
}

// thrown is the Error of a value the program threw and did not catch.
func (p *program) thrown(v goja.Value) *codemode.Error {
	e := &codemode.Error{Kind: codemode.KindThrown, Message: v.String()}
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
		if e, ok := ie.Value().(*codemode.Error); ok {
			return e
		}
	}
	if ex, ok := errors.AsType[*goja.Exception](err); ok {
		return p.thrown(ex.Value())
	}
	if e, ok := errors.AsType[*codemode.Error](err); ok {
		return e
	}
	return &codemode.Error{Kind: codemode.KindThrown, Message: err.Error()}
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
	if p.console > p.opts.MaxOutputBytes {
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
	if p.res.Calls >= p.opts.MaxCalls {
		p.stop(&codemode.Error{Kind: codemode.KindMaxCalls, Bound: "max_calls", Limit: int64(p.opts.MaxCalls),
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
	v, terr := p.callFn(p.ctx, name, args)
	if p.ctx.Err() != nil {
		// The call ended with the program's time: the program ends
		// here rather than see it fail.
		p.ended()
	}
	if terr != nil {
		_ = reject(p.toolError(terr))
	} else {
		_ = resolve(p.vm.ToValue(v))
	}
	return p.vm.ToValue(promise)
}

// json is JSON.stringify(v), "" for a value it leaves out (undefined, a
// function); an error for one it throws on (a cycle, a BigInt), or the
// interruption of a bound.
func (p *program) json(v goja.Value) (string, error) {
	out, err := p.stringify(goja.Undefined(), v)
	if err != nil {
		if e := p.failure(err); codemode.KindOf(e) != codemode.KindThrown {
			return "", e
		}
		return "", &codemode.Error{Kind: codemode.KindResult, Message: "no JSON form: " + err.Error()}
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
