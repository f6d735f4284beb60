package mcpsource

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolmux/toolmux/internal/otelconv"
	"github.com/toolmux/toolmux/tool"
)

// The client span of a tools/call to the server, after the MCP semantic
// conventions: "tools/call {tool}", kind client, a child of the call's
// execute_tool span. Its trace context goes to the server in the
// request's params._meta (traceparent, tracestate, baggage: where the
// 2026-07-28 specification puts them, and where servers of earlier
// versions find them too) and, over HTTP, in the request's headers
// (headerTransport).

func (s *Source) startSpan(ctx context.Context, params *mcp.CallToolParams) (context.Context, trace.Span) {
	transport := "pipe"
	if s.cfg.Transport != Stdio {
		transport = "tcp"
	}
	attrs := []attribute.KeyValue{otelconv.MCPMethodName.String("tools/call"), otelconv.GenAIToolName.String(params.Name),
		otelconv.Server.String(s.cfg.Name), otelconv.NetworkTransport.String(transport)}
	if s.cfg.URL != "" {
		attrs = append(attrs, otelconv.ServerAddress.String(s.cfg.URL))
	}
	ctx, sp := s.cfg.Tracer.Start(ctx, "tools/call "+params.Name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	if s.cfg.Propagator != nil {
		meta := params.Meta
		if meta == nil {
			meta = mcp.Meta{}
		}
		s.cfg.Propagator.Inject(ctx, otelconv.MetaCarrier(meta))
		params.Meta = meta
	}
	return ctx, sp
}

func endSpan(sp trace.Span, err error) {
	if err != nil {
		kind := string(tool.KindOf(err))
		if kind == "" {
			kind = "_OTHER"
		}
		sp.SetAttributes(otelconv.ErrorType.String(kind))
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}
