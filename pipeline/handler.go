// Package pipeline governs tool calls: a chain of middlewares around the
// manager, each doing one job — recording, just-in-time instructions,
// truncation, rollback verdicts, fallbacks, argument repair, schema
// validation, URL policy, duplicate detection, personal data (pii) — and
// the caller's own (WithMiddleware). The package owns its options and
// their defaults (New, With...); FromConfig reads them from the
// `pipeline:` section of the configuration.
//
// A middleware never hides what it did: each one notes its actions on the
// call's record (tool.Record.Notes), so a record shows the repairs made, the
// rule that blocked a call, the fallback taken, the truncation and its spill
// file, and the rollback verdict.
package pipeline

import (
	"context"

	"github.com/toolmux/toolmux/tool"
)

// Handler runs a tool call and returns its record. A failed call is a record
// with Error set; a Handler never returns nil. *manager.Manager is the
// innermost Handler.
type Handler interface {
	Call(ctx context.Context, call tool.Call) *tool.Record
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, call tool.Call) *tool.Record

// Call calls f.
func (f HandlerFunc) Call(ctx context.Context, call tool.Call) *tool.Record { return f(ctx, call) }

// Middleware wraps a Handler with one governance feature.
type Middleware func(next Handler) Handler

// Chain wraps h in mws, the first outermost: Chain(h, a, b) calls a, which
// calls b, which calls h.
func Chain(h Handler, mws ...Middleware) Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// ToolLookup finds a tool's definition; *manager.Manager implements it. The
// error is the one a call would get (unknown tool, denied tool, ...).
type ToolLookup interface {
	Tool(ctx context.Context, server, name string) (tool.Tool, error)
}

// definition returns the definition of the tool call calls: the one it
// was admitted against when it carries it, else the one tools finds.
func definition(ctx context.Context, tools ToolLookup, call *tool.Call) (*tool.Tool, error) {
	if d := call.Def(); d != nil {
		return d, nil
	}
	t, err := tools.Tool(ctx, call.Server, call.Tool)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// refuse returns the record of a call a middleware stopped before it reached
// the tool.
func refuse(call tool.Call, err *tool.Error) *tool.Record {
	if err.Server == "" {
		err.Server = call.Server
	}
	if err.Tool == "" {
		err.Tool = call.Tool
	}
	return tool.Refused(&call, err)
}

// afterFunc is what a middleware that acts on records does once the call
// below it has answered: it completes rec (or returns a record in its
// place). The pipeline runs the same steps on the record of a call refused
// before the chain (Refuse), so calls and refusals share one way out.
type afterFunc func(ctx context.Context, call tool.Call, rec *tool.Record) *tool.Record

// afterMiddleware makes a middleware of a step after the call.
func afterMiddleware(step afterFunc) Middleware {
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, call tool.Call) *tool.Record {
			return step(ctx, call, next.Call(ctx, call))
		})
	}
}
