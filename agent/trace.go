package agent

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolmux/toolmux/internal/otelconv"
	"github.com/toolmux/toolmux/llm"
)

// The spans of a run, after the OpenTelemetry GenAI semantic
// conventions: invoke_agent {agent} for the whole run, chat {model} for
// each request to the model (its token usage), and the turn's calls'
// execute_tool spans (the scheduler's) beside them, all children of the
// run's span. The model's HTTP requests carry the chat span's context
// when the runtime gives the model a tracing client
// (llm.WithHTTPClient).

func (a *Agent) startRunSpan(ctx context.Context, task string) (context.Context, trace.Span) {
	return a.rt.Tracer.Start(ctx, otelconv.OpInvokeAgent+" "+a.cfg.Name, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(otelconv.GenAIOperationName.String(otelconv.OpInvokeAgent), otelconv.GenAIAgentName.String(a.cfg.Name),
			otelconv.GenAIConversation.String(task), otelconv.Task.String(task)))
}

func endRunSpan(sp trace.Span, res *Result, err error) {
	if res != nil {
		sp.SetAttributes(otelconv.GenAIInputTokens.Int(res.Usage.InputTokens), otelconv.GenAIOutputTokens.Int(res.Usage.OutputTokens),
			otelconv.Turns.Int(res.Turns), otelconv.Status.String(string(res.Status)))
	}
	if err != nil {
		kind := string(KindOf(err))
		if kind == "" {
			kind = "_OTHER"
		}
		sp.SetAttributes(otelconv.ErrorType.String(kind))
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}

func (a *Agent) startChatSpan(ctx context.Context, req llm.Request) (context.Context, trace.Span) {
	model := req.Model
	attrs := []attribute.KeyValue{otelconv.GenAIOperationName.String(otelconv.OpChat), otelconv.GenAIAgentName.String(a.cfg.Name)}
	if d, ok := a.model.(llm.Described); ok {
		provider, configured := d.Describe()
		attrs = append(attrs, otelconv.GenAIProviderName.String(provider))
		if model == "" {
			model = configured
		}
	}
	name := otelconv.OpChat
	if model != "" {
		name += " " + model
		attrs = append(attrs, otelconv.GenAIRequestModel.String(model))
	}
	return a.rt.Tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

func endChatSpan(sp trace.Span, resp *llm.Response, err error) {
	if resp != nil {
		sp.SetAttributes(otelconv.GenAIInputTokens.Int(resp.Usage.InputTokens), otelconv.GenAIOutputTokens.Int(resp.Usage.OutputTokens))
		if resp.Model != "" {
			sp.SetAttributes(otelconv.GenAIResponseModel.String(resp.Model))
		}
	}
	if err != nil {
		kind := string(llm.KindOf(err))
		if kind == "" {
			kind = "_OTHER"
		}
		sp.SetAttributes(otelconv.ErrorType.String(kind))
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}

// runSub runs a sub-agent's subtask, in an invoke_agent span of its own
// (a child of the call's execute_tool span) when tracing.
func (a *Agent) runSub(ctx context.Context, task, session, subtask string) (res *Result, err error) {
	if a.rt.Tracer != nil {
		var sp trace.Span
		ctx, sp = a.startRunSpan(ctx, task)
		defer func() { endRunSpan(sp, res, err) }()
	}
	return a.run(ctx, task, session, subtask, false)
}
