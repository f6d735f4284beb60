package pipeline

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/toolmux/toolmux/internal/toolglob"
	"github.com/toolmux/toolmux/tool"
)

type fallbackEntry struct {
	tools          []toolglob.Pattern
	on             []tool.Kind
	server, target string
	args           map[string]string // target argument <- source argument; nil: pass all
}

// NewFallback returns the middleware that, when a call fails with one of a
// fallback's error kinds, calls the fallback's target instead — through the
// rest of the chain, so the target's arguments are repaired, validated and
// policed like any call. Triggers are error kinds, never error text.
func NewFallback(cfg []Fallback) (Middleware, error) {
	entries := make([]fallbackEntry, 0, len(cfg))
	for i, f := range cfg {
		tools, err := toolglob.ParseAll(f.Tools, true)
		if err != nil {
			return nil, fmt.Errorf("fallback %d: %w", i, err)
		}
		server, target, ok := strings.Cut(f.Target, "/")
		if !ok || server == "" || target == "" {
			return nil, fmt.Errorf("fallback %d: target %q is not server/tool", i, f.Target)
		}
		e := fallbackEntry{tools: tools, server: server, target: target, args: f.Arguments}
		for _, k := range f.On {
			e.on = append(e.on, tool.Kind(k))
		}
		entries = append(entries, e)
	}
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, call tool.Call) *tool.Record {
			rec := next.Call(ctx, call)
			if rec.Error == nil || ctx.Err() != nil {
				return rec
			}
			var failures []string
			for _, e := range entries {
				if !e.applies(rec) {
					continue
				}
				args, missing := e.arguments(rec.Arguments)
				if missing != "" {
					rec.Note("fallback", fmt.Sprintf("skipped %s/%s: the call has no argument %q to give it", e.server, e.target, missing), nil)
					continue
				}
				fb := next.Call(ctx, tool.Call{ID: call.ID, Task: call.Task, Session: call.Session, Server: e.server, Tool: e.target, Arguments: args})
				if fb.Error == nil {
					return answered(rec, fb)
				}
				failures = append(failures, fmt.Sprintf("%s/%s (%s: %s)", e.server, e.target, fb.Error.Kind, fb.Error.Message))
				rec.Note("fallback", fmt.Sprintf("fallback %s/%s failed too (%s)", e.server, e.target, fb.Error.Kind),
					map[string]any{"target": e.server + "/" + e.target, "error_kind": string(fb.Error.Kind)})
				if ctx.Err() != nil {
					break
				}
			}
			if len(failures) > 0 {
				primary := rec.Error
				rec.Error = &tool.Error{Kind: tool.KindFallbackFailed, Server: rec.Server, Tool: rec.Tool, Err: primary,
					Message: fmt.Sprintf("%s/%s failed (%s: %s), and so did its fallbacks: %s",
						rec.Server, rec.Tool, primary.Kind, primary.Message, strings.Join(failures, "; "))}
			}
			return rec
		})
	}, nil
}

func (e fallbackEntry) applies(rec *tool.Record) bool {
	if !slices.Contains(e.on, rec.Error.Kind) {
		return false
	}
	_, ok := toolglob.Any(e.tools, rec.Server, rec.Tool)
	return ok
}

// arguments builds the target's arguments from the failed call's (as sent,
// after repair), returning the name of a mapped argument the call lacks.
func (e fallbackEntry) arguments(src map[string]any) (map[string]any, string) {
	if e.args == nil {
		return cloneArgs(src), ""
	}
	out := make(map[string]any, len(e.args))
	for to, from := range e.args {
		v, ok := src[from]
		if !ok {
			return nil, from
		}
		out[to] = cloneValue(v)
	}
	return out, ""
}

// answered makes the record of a call that a fallback answered: the call
// the model made, with the target's result, and notes saying what happened.
func answered(rec, fb *tool.Record) *tool.Record {
	primary := rec.Error
	out := *rec
	out.Result, out.Error = fb.Result, nil
	out.Attempts += fb.Attempts
	out.Notes = slices.Clone(rec.Notes)
	out.Note("fallback", fmt.Sprintf("%s/%s failed (%s); answered by %s/%s", rec.Server, rec.Tool, primary.Kind, fb.Server, fb.Tool),
		map[string]any{"target": fb.Server + "/" + fb.Tool, "primary_error_kind": string(primary.Kind), "primary_error": primary.Message, "target_arguments": fb.Arguments})
	for _, n := range fb.Notes {
		n.Message = fb.Server + "/" + fb.Tool + ": " + n.Message
		out.Notes = append(out.Notes, n)
	}
	return &out
}
