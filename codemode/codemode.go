// Package codemode runs a short JavaScript program that calls tools as
// functions, instead of one model turn per tool call: the program loops,
// filters and returns only what matters. The program runs in a process of
// its own, the toolmux-codemode program (package jsengine: goja, a
// JavaScript engine written in Go, in a runtime with nothing of the host in
// it: no require, fetch, process, filesystem, network or timers, only the
// tools object and a console whose lines are returned beside the result).
// The engine asks this package's Runner for each call over its stdin and
// stdout; nothing of toolmux is in its process but the program.
//
// Every call a program makes goes through the Caller its runner is given,
// which the gateway and the agent satisfy with their governed path (the
// scheduler, the policy and its approvals, the pipeline, the task log):
// code reaches no tool around toolmux's governance.
//
// A program is bounded by Options, set by configuration, never by the
// program: its wall time, its calls, its output (result and console) and
// the memory its engine's process holds. A program that throws, loops or passes
// a bound ends with an *Error whose Kind names why.
package codemode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

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
	DefaultMaxPrograms    = 8
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
	// MaxMemoryBytes bounds the growth of the engine process's heap
	// while the program runs: the Go runtime's count of heap bytes in
	// objects (runtime/metrics /memory/classes/heap/objects:bytes), read
	// every few milliseconds; once it exceeds the count at the start by
	// more than the bound, a garbage collection is forced and, if the
	// growth remains past the bound, the program is interrupted. The
	// process runs the program alone, so its heap is the program's; a
	// program can allocate up to the bound plus what it allocates between
	// two reads. It also bounds each line the engine writes (a call's
	// arguments, the end): one longer ends the program.
	MaxMemoryBytes int64
	// Engine is the path of the toolmux-codemode program; "" finds it
	// (FindEngine).
	Engine string
	// Programs, when set, bounds the programs running at once, each an
	// engine process, across every runner given the same Programs (a
	// gateway's, a runtime's agents'); nil bounds none.
	Programs *Programs
}

// Programs bounds the programs that run at once: each is a process, and a
// program one past the bound is refused (KindMaxPrograms) rather than
// start one more.
type Programs struct{ slots chan struct{} }

// NewPrograms returns a bound of max programs at once (DefaultMaxPrograms
// for max <= 0).
func NewPrograms(max int) *Programs {
	if max <= 0 {
		max = DefaultMaxPrograms
	}
	return &Programs{slots: make(chan struct{}, max)}
}

// Max is the bound.
func (p *Programs) Max() int { return cap(p.slots) }

// take takes a place, false when none is free; release gives it back.
func (p *Programs) take() bool {
	select {
	case p.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

func (p *Programs) release() { <-p.slots }

// WithDefaults returns o with the defaults in place of its zero values:
// the bounds a runner applies.
func (o Options) WithDefaults() Options {
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
	// KindMaxPrograms: as many programs as Options.Programs allows were
	// running; this one was not started.
	KindMaxPrograms Kind = "max_programs"
	// KindCancelled: the caller's context ended the program.
	KindCancelled Kind = "cancelled"
	// KindResult: the program returned what has no JSON form.
	KindResult Kind = "bad_result"
	// KindUnavailable: the engine program (toolmux-codemode) is not
	// installed, or could not be started.
	KindUnavailable Kind = "unavailable"
	// KindEngine: the engine process failed (it exited without ending
	// the program, or wrote what is not the protocol).
	KindEngine Kind = "engine_failed"
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

// Runner runs programs against a catalog's tools through a Caller, each
// in an engine process of its own.
type Runner struct {
	caller Caller
	opts   Options
}

// New returns a runner calling through c, bounded by o.
func New(c Caller, o Options) *Runner { return &Runner{caller: c, opts: o.WithDefaults()} }

// Outcome is what a program sees of a call's record: the structured
// content when the tool has it, else its text; or the error its promise
// is rejected with, for a call that failed or a result marked an error.
func Outcome(name string, rec *tool.Record) (any, *tool.Error) {
	b, e := outcomeJSON(name, rec)
	if e != nil {
		return nil, e
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, &tool.Error{Kind: tool.KindExecutionFailed, Tool: name, Message: "the result has no JSON form: " + err.Error()}
	}
	return v, nil
}

// outcomeJSON is Outcome's value as JSON: structured content through
// JSON, so that the program sees plain objects whatever Go type the
// result was decoded into.
func outcomeJSON(name string, rec *tool.Record) (json.RawMessage, *tool.Error) {
	switch {
	case rec == nil:
		return nil, &tool.Error{Kind: tool.KindExecutionFailed, Tool: name, Message: "the call gave no record"}
	case rec.Error != nil:
		return nil, rec.Error
	case rec.Result == nil:
		return json.RawMessage("null"), nil
	case rec.Result.IsError:
		return nil, &tool.Error{Kind: tool.KindToolError, Tool: name, Message: text(rec.Result)}
	}
	if rec.Result.Structured != nil {
		if b, err := json.Marshal(rec.Result.Structured); err == nil {
			return b, nil
		}
	}
	b, _ := json.Marshal(text(rec.Result))
	return b, nil
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

// Answer is how a program's outcome is handed back to whoever asked for
// it (the gateway's client, the agent's model): structured content
// {"result", "console", "calls"}, or {"error": {"kind", "message",
// "bound", "limit", "tool_kind"}, "console", "calls"} for a failed
// program, and a text of the result's JSON (or the error) then the
// console. res is what Run returned, err its error.
func Answer(res *Result, err error) (structured json.RawMessage, text string) {
	body := map[string]any{"calls": res.Calls}
	if len(res.Console) > 0 {
		body["console"] = res.Console
	}
	var t strings.Builder
	if err != nil {
		fail := map[string]any{"kind": string(KindOf(err)), "message": err.Error()}
		if e, ok := errors.AsType[*Error](err); ok {
			if e.Bound != "" {
				fail["bound"], fail["limit"] = e.Bound, e.Limit
			}
			if e.ToolKind != "" {
				fail["tool_kind"] = string(e.ToolKind)
			}
		}
		body["error"] = fail
		t.WriteString(err.Error())
	} else {
		body["result"] = res.Value
		t.Write(res.Value)
	}
	if len(res.Console) > 0 {
		fmt.Fprintf(&t, "\n\nconsole:\n%s", strings.Join(res.Console, "\n"))
	}
	b, jerr := json.Marshal(body)
	if jerr != nil {
		// Only a result that is not JSON gets here, which Run never
		// returns: say so rather than hand back nothing.
		b, _ = json.Marshal(map[string]any{"calls": res.Calls, "error": map[string]any{"kind": string(KindResult), "message": jerr.Error()}})
	}
	return b, t.String()
}

// ToolKind is the tool error kind of a failed program, for its record:
// the kind of the failed call it let through, timeout for its time,
// cancelled when its caller went away, execution_failed for the rest.
func ToolKind(err error) tool.Kind {
	e, ok := errors.AsType[*Error](err)
	switch {
	case !ok:
		return tool.KindExecutionFailed
	case e.ToolKind != "":
		return e.ToolKind
	case e.Kind == KindTimeout:
		return tool.KindTimeout
	case e.Kind == KindCancelled:
		return tool.KindCancelled
	}
	return tool.KindExecutionFailed
}
