package schedule_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/tool"
)

// TestTraceSpans: with a tracer, a call through the real fixture has an
// execute_tool span, a child of the caller's span, with the call's
// identity, attempts and outcome; the approval wait is a child span of
// it; each note of a layer that changed the call is an event; a refused
// call's span says why. Without one, nothing is traced (the other tests).
func TestTraceSpans(t *testing.T) {
	m, _ := fixture(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	noting := func(next pipeline.Handler) pipeline.Handler {
		return pipeline.HandlerFunc(func(ctx context.Context, call tool.Call) *tool.Record {
			r := next.Call(ctx, call)
			r.Note("repair", "renamed msg to message", nil)
			return r
		})
	}
	p, err := pipeline.New(m, pipeline.WithMiddleware(noting))
	if err != nil {
		t.Fatal(err)
	}
	gate := gateFunc(func(ctx context.Context, def tool.Tool, call tool.Call, asking func(string)) error {
		if call.Tool == "echo" {
			asking("allow echo?")
			return nil
		}
		return &tool.Error{Kind: tool.KindPolicyViolation, Message: "denied by a rule"}
	})
	s := schedule.New(p, schedule.WithGate(gate), schedule.WithTracer(tp.Tracer("test")))
	ctx, parent := tp.Tracer("test").Start(context.Background(), "turn")
	out := s.Run(ctx, []tool.Call{
		{ID: "c1", Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "hi"}},
		{ID: "c2", Server: "fx", Tool: "big", Arguments: map[string]any{"size": 1}},
	})
	parent.End()
	if out[0].Record.Error != nil || out[1].Record.Error == nil {
		t.Fatalf("outcomes: %+v %+v", out[0].Record, out[1].Record)
	}
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, sp := range rec.Ended() {
		spans[sp.Name()] = sp
	}
	echo, big, wait := spans["execute_tool echo"], spans["execute_tool big"], spans["await_approval echo"]
	if echo == nil || big == nil || wait == nil {
		t.Fatalf("spans: %v", spans)
	}
	for _, sp := range []sdktrace.ReadOnlySpan{echo, big} {
		if sp.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("%s is not a child of the caller's span", sp.Name())
		}
	}
	if wait.Parent().SpanID() != echo.SpanContext().SpanID() {
		t.Error("the approval wait is not a child of the call's span")
	}
	attrs := func(sp sdktrace.ReadOnlySpan) map[string]string {
		out := map[string]string{}
		for _, kv := range sp.Attributes() {
			out[string(kv.Key)] = kv.Value.Emit()
		}
		return out
	}
	a := attrs(echo)
	for k, v := range map[string]string{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "echo", "gen_ai.tool.call.id": "c1",
		"toolmux.server": "fx", "toolmux.attempts": "1", "toolmux.outcome.kind": "success"} {
		if a[k] != v {
			t.Errorf("echo span %s = %q, want %q", k, a[k], v)
		}
	}
	if ev := echo.Events(); len(ev) != 1 || ev[0].Name != "repair" {
		t.Errorf("echo span events: %+v", ev)
	}
	if b := attrs(big); b["toolmux.outcome.kind"] != "policy_violation" || b["error.type"] != "policy_violation" || big.Status().Code.String() != "Error" {
		t.Errorf("refused call's span: %v %v", b, big.Status())
	}
	if echo.SpanKind() != trace.SpanKindInternal {
		t.Errorf("kind %v", echo.SpanKind())
	}
}
