package schedule_test

import (
	"context"
	"testing"

	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/tool"
)

// rewriter is an ArgumentGate that replaces the message of every echo
// and hands the call's context a value.
type rewriter struct{ gate }

type rewriterKey struct{}

func (r *rewriter) AdmitArguments(ctx context.Context, t tool.Tool, call tool.Call, asking func(string)) (context.Context, map[string]any, error) {
	if err := r.Admit(ctx, t, call, asking); err != nil {
		return ctx, nil, err
	}
	return context.WithValue(ctx, rewriterKey{}, "admitted"), map[string]any{"message": "rewritten"}, nil
}

// seen is a Backend that keeps the context value the gate left.
type seen struct {
	schedule.Backend
	value any
}

func (s *seen) Call(ctx context.Context, call tool.Call) *tool.Record {
	s.value = ctx.Value(rewriterKey{})
	return s.Backend.Call(ctx, call)
}

// An ArgumentGate's arguments are the ones the call is made with (and the
// outcome reports), its context the one the backend gets; the caller's
// arguments are left as they were. A call it denies never runs.
func TestArgumentGate(t *testing.T) {
	m, _ := fixture(t)
	b := &seen{Backend: m}
	s := schedule.New(b, schedule.WithGate(&rewriter{gate{deny: map[string]bool{"span_write": true}}}))
	args := map[string]any{"message": "original"}
	out := s.Run(context.Background(), []tool.Call{{Server: "fx", Tool: "echo", Arguments: args}})
	if out[0].State != schedule.Success || out[0].Record.Result.Summary() != "Echo: rewritten" || b.value != "admitted" {
		t.Fatalf("admitted: %s %+v, value %v", out[0].State, out[0].Record.Result, b.value)
	}
	if args["message"] != "original" {
		t.Errorf("the caller's arguments changed: %v", args)
	}
	b.value = nil
	out = s.Run(context.Background(), []tool.Call{spanCall("span_write", 1)})
	if out[0].State != schedule.Error || tool.KindOf(out[0].Record.Err()) != tool.KindPolicyViolation || b.value != nil {
		t.Fatalf("denied: %s %v", out[0].State, out[0].Record.Err())
	}
}
