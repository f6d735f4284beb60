package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/otelconv"
)

// The gateway's server spans, after the MCP semantic conventions: one per
// request, named "{mcp.method.name} {target}" (the tool, prompt or
// resource it is about, when it names one), kind server, whose parent is
// the trace context the client sent: in the request's params._meta
// (traceparent, tracestate, baggage, as the 2026-07-28 specification puts
// them) or, failing that, in the HTTP request's headers. The call's
// execute_tool span (the scheduler's) is its child.
var (
	keyMethod    = otelconv.MCPMethodName
	keySession   = otelconv.MCPSessionID
	keyRequestID = otelconv.JSONRPCRequestID
	keyToolName  = otelconv.GenAIToolName
	keyErrorType = otelconv.ErrorType
	keyTransport = otelconv.NetworkTransport
	keyEndUser   = otelconv.EndUserID
)

// traceMiddleware makes the span of each request the go-sdk serves (every
// one but the tools/call the gateway answers itself, lean.go).
func (g *Gateway) traceMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
		var meta map[string]any
		var target string
		// A request without params (tools/list, ping) has a typed nil
		// here, whose GetMeta would dereference it.
		if p := req.GetParams(); p != nil && !reflect.ValueOf(p).IsNil() {
			meta = p.GetMeta()
			switch p := p.(type) {
			case *mcp.CallToolParamsRaw:
				target = p.Name
			case *mcp.GetPromptParams:
				target = p.Name
			case *mcp.ReadResourceParams:
				target = p.URI
			}
		}
		var header http.Header
		if x := req.GetExtra(); x != nil {
			header = x.Header
		}
		sid := ""
		if ss, ok := req.GetSession().(*mcp.ServerSession); ok {
			sid = ss.ID()
		}
		ctx, sp := g.startSpan(ctx, method, target, meta, header, sid, nil)
		defer func() { endSpan(sp, err) }()
		return next(ctx, method, req)
	}
}

// startSpan starts the server span of one request.
func (g *Gateway) startSpan(ctx context.Context, method, target string, meta map[string]any, header http.Header, sid string, id json.RawMessage) (context.Context, trace.Span) {
	ctx = extract(ctx, g.prop, meta, header)
	name := method
	if target != "" {
		name += " " + target
	}
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, keyMethod.String(method))
	if method == "tools/call" && target != "" {
		attrs = append(attrs, keyToolName.String(target))
	}
	if sid != "" {
		attrs = append(attrs, keySession.String(sid))
	}
	if header != nil {
		attrs = append(attrs, keyTransport.String("tcp"))
	} else {
		attrs = append(attrs, keyTransport.String("pipe"))
	}
	if len(id) > 0 {
		attrs = append(attrs, keyRequestID.String(string(id)))
	}
	if c := identity.From(ctx); c != nil {
		attrs = append(attrs, keyEndUser.String(c.Key()))
	}
	return g.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
}

// endSpan ends a request's span; a JSON-RPC error is its error.type (a
// tool's failure is an isError result, the execute_tool span's to tell).
func endSpan(sp trace.Span, err error) {
	if err != nil {
		var wire *jsonrpc.Error
		if errors.As(err, &wire) {
			sp.SetAttributes(keyErrorType.Int64(wire.Code))
		} else {
			sp.SetAttributes(keyErrorType.String("_OTHER"))
		}
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}

// extract returns ctx with the client's trace context: from _meta when it
// holds a traceparent, else from the HTTP headers.
func extract(ctx context.Context, prop propagation.TextMapPropagator, meta map[string]any, header http.Header) context.Context {
	if prop == nil {
		return ctx
	}
	if _, ok := meta["traceparent"].(string); ok {
		return prop.Extract(ctx, otelconv.MetaCarrier(meta))
	}
	if header != nil {
		return prop.Extract(ctx, propagation.HeaderCarrier(header))
	}
	return ctx
}
