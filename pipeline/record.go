package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/tool"
)

// Recorder receives the record of every call through the pipeline, exactly
// once, with secrets masked: the task log implements it. It must not block
// for long; it is called on the caller's goroutine.
type Recorder interface {
	Record(ctx context.Context, rec *tool.Record)
}

// RecorderFunc adapts a function to Recorder.
type RecorderFunc func(ctx context.Context, rec *tool.Record)

// Record calls f.
func (f RecorderFunc) Record(ctx context.Context, rec *tool.Record) { f(ctx, rec) }

// NewRecord returns the record middleware, outermost in DefaultOrder: it
// gives the call an id, turns a panic or a missing record below it into an
// execution_failed record, times the whole governed call, masks secrets
// (DefaultRedactKeys, the built-in token patterns and what redact adds),
// and hands the record to sink (nil: nowhere), cut to the limits. Whatever
// happens inside, every call yields exactly one record, and the record the
// sink gets is the one returned. log (nil: discarded) hears of panics.
func NewRecord(redact RedactOptions, sink Recorder, limits Limits, log *slog.Logger) (Middleware, error) {
	red, err := newRedactor(redact)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return newRecord(red, sink, log, limits.withDefaults()).middleware, nil
}

// recordStep is the record middleware's state.
type recordStep struct {
	red    *redactor
	sink   Recorder
	log    *slog.Logger
	limits Limits
}

func newRecord(red *redactor, sink Recorder, log *slog.Logger, limits Limits) *recordStep {
	return &recordStep{red: red, sink: sink, log: log, limits: limits}
}

func (r *recordStep) middleware(next Handler) Handler {
	return HandlerFunc(func(ctx context.Context, call tool.Call) *tool.Record {
		if call.ID == "" {
			call.ID = tool.NewID()
		}
		start := time.Now()
		return r.finish(ctx, call, protect(ctx, next, call, r.log), start)
	})
}

// after is the step a refused call goes through: it began when its record
// was made.
func (r *recordStep) after(ctx context.Context, call tool.Call, rec *tool.Record) *tool.Record {
	if call.ID == "" {
		call.ID = tool.NewID()
	}
	return r.finish(ctx, call, rec, rec.Started)
}

// finish completes the record of a call that began at start: ids, timing,
// name, secrets masked, cut to the limits, handed to the sink.
func (r *recordStep) finish(ctx context.Context, call tool.Call, rec *tool.Record, start time.Time) *tool.Record {
	rec.ID, rec.Task, rec.Session = call.ID, call.Task, call.Session
	// Who made the call: the scheduler names it on the call; a call
	// made on the pipeline directly is its context's caller.
	rec.Caller = call.Caller
	if rec.Caller == nil {
		rec.Caller = identity.RefFrom(ctx)
	}
	rec.Started, rec.Ended = start, time.Now()
	rec.Duration = rec.Ended.Sub(rec.Started)
	if rec.Name == "" {
		rec.Name = tool.ExposedName(call.Server, call.Tool)
	}
	// Masked first: a cut could split a secret so that its
	// pattern no longer matches.
	out := fitRecord(r.red.record(rec), r.limits)
	if r.sink != nil {
		r.sink.Record(ctx, out)
	}
	return out
}

// protect calls next, converting a panic or a nil record into a failed
// record, so one bad middleware or tool cannot take the process down.
func protect(ctx context.Context, next Handler, call tool.Call, log *slog.Logger) (rec *tool.Record) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("panic in tool call pipeline", "server", call.Server, "tool", call.Tool, "panic", p)
			rec = refuse(call, &tool.Error{Kind: tool.KindExecutionFailed,
				Message: fmt.Sprintf("internal error while calling %s/%s: %v", call.Server, call.Tool, p),
				Detail:  string(debug.Stack())})
		}
	}()
	rec = next.Call(ctx, call)
	if rec == nil {
		rec = refuse(call, &tool.Error{Kind: tool.KindExecutionFailed, Message: "the call produced no record"})
	}
	return rec
}
