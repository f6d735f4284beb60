package schedule

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolmux/toolmux/internal/otelconv"
	"github.com/toolmux/toolmux/tool"
)

// The spans of a call, following the OpenTelemetry GenAI semantic
// conventions (docs/operations.md): execute_tool {tool} from the call's
// admission to its outcome, a child for the wait for an approval, and an
// event for each layer that changed the call (the record's notes). The
// keys are internal/otelconv's.
var (
	keyOperation = otelconv.GenAIOperationName
	keyToolName  = otelconv.GenAIToolName
	keyCallID    = otelconv.GenAIToolCallID
	keyToolType  = otelconv.GenAIToolType
	keyServer    = otelconv.Server
	keyTask      = otelconv.Task
	keyAttempts  = otelconv.Attempts
	keyOutcome   = otelconv.Outcome
	keyErrorType = otelconv.ErrorType
	keyLayer     = otelconv.Layer
	keyEndUser   = otelconv.EndUserID
)

// startSpan starts e's execute_tool span, a child of whatever span the
// batch's context holds (the gateway's request, the agent's turn), and
// makes e's context carry it, so the layers below (the upstream request)
// are its children.
func (b *Batch) startSpan(e *entry) {
	attrs := []attribute.KeyValue{keyOperation.String(otelconv.OpExecuteTool), keyToolName.String(e.call.Tool),
		keyCallID.String(e.call.ID), keyToolType.String("extension"), keyServer.String(e.call.Server)}
	if e.call.Task != "" {
		attrs = append(attrs, keyTask.String(e.call.Task))
	}
	if c := e.call.Caller; c != nil {
		attrs = append(attrs, keyEndUser.String(c.Key))
	}
	e.ctx, e.span = b.s.tracer.Start(e.ctx, "execute_tool "+e.call.Tool,
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
}

// approvalSpan starts the span of e's wait for an answer.
func (b *Batch) approvalSpan(e *entry) trace.Span {
	_, sp := b.s.tracer.Start(e.ctx, "await_approval "+e.call.Tool,
		trace.WithAttributes(keyToolName.String(e.call.Tool), keyCallID.String(e.call.ID)))
	return sp
}

// endApproval ends an approval wait with the gate's verdict.
func endApproval(sp trace.Span, err error) {
	if err != nil {
		kind := tool.KindOf(err)
		if kind == "" {
			kind = tool.KindApprovalDenied
		}
		sp.SetAttributes(keyOutcome.String(string(kind)))
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}

// endSpan ends a call's span with its record: attempts, outcome kind,
// and the notes of the layers that changed it.
func endSpan(sp trace.Span, rec *tool.Record) {
	sp.SetAttributes(keyAttempts.Int(rec.Attempts))
	for _, n := range rec.Notes {
		sp.AddEvent(n.Layer, trace.WithAttributes(keyLayer.String(n.Layer), attribute.String("message", n.Message)))
	}
	if rec.Error != nil {
		sp.SetAttributes(keyOutcome.String(string(rec.Error.Kind)), keyErrorType.String(string(rec.Error.Kind)))
		sp.SetStatus(codes.Error, rec.Error.Message)
	} else {
		sp.SetAttributes(keyOutcome.String("success"))
	}
	sp.End()
}
