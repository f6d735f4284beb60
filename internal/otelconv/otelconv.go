// Package otelconv holds what toolmux's traced packages share of
// OpenTelemetry: the attribute keys of the GenAI and MCP semantic
// conventions (written out because the semconv packages of otel v1.47.0
// do not have the MCP ones yet) and toolmux's own, and the carrier of
// trace context in an MCP request's params._meta. docs/operations.md
// lists which span carries which attribute.
package otelconv

import "go.opentelemetry.io/otel/attribute"

// Attribute keys.
const (
	GenAIOperationName = attribute.Key("gen_ai.operation.name")
	GenAIToolName      = attribute.Key("gen_ai.tool.name")
	GenAIToolCallID    = attribute.Key("gen_ai.tool.call.id")
	GenAIToolType      = attribute.Key("gen_ai.tool.type")
	GenAIAgentName     = attribute.Key("gen_ai.agent.name")
	GenAIRequestModel  = attribute.Key("gen_ai.request.model")
	GenAIResponseModel = attribute.Key("gen_ai.response.model")
	GenAIProviderName  = attribute.Key("gen_ai.provider.name")
	GenAIInputTokens   = attribute.Key("gen_ai.usage.input_tokens")
	GenAIOutputTokens  = attribute.Key("gen_ai.usage.output_tokens")
	GenAIConversation  = attribute.Key("gen_ai.conversation.id")

	MCPMethodName    = attribute.Key("mcp.method.name")
	MCPSessionID     = attribute.Key("mcp.session.id")
	JSONRPCRequestID = attribute.Key("jsonrpc.request.id")
	NetworkTransport = attribute.Key("network.transport")
	ServerAddress    = attribute.Key("server.address")
	ErrorType        = attribute.Key("error.type")
	// EndUserID is who made the request: the caller's key
	// (identity.Caller.Key), never a credential.
	EndUserID = attribute.Key("enduser.id")

	Server   = attribute.Key("toolmux.server")
	Task     = attribute.Key("toolmux.task.id")
	Attempts = attribute.Key("toolmux.attempts")
	Outcome  = attribute.Key("toolmux.outcome.kind")
	Layer    = attribute.Key("toolmux.layer")
	Turns    = attribute.Key("toolmux.agent.turns")
	Status   = attribute.Key("toolmux.agent.status")
)

// Values of gen_ai.operation.name.
const (
	OpExecuteTool = "execute_tool"
	OpInvokeAgent = "invoke_agent"
	OpChat        = "chat"
)

// MetaCarrier carries trace context in an MCP request's params._meta,
// where the 2026-07-28 specification puts traceparent, tracestate and
// baggage (string values; anything else there is not trace context).
type MetaCarrier map[string]any

// Get returns the string value of key.
func (m MetaCarrier) Get(key string) string {
	s, _ := m[key].(string)
	return s
}

// Set sets key.
func (m MetaCarrier) Set(key, value string) { m[key] = value }

// Keys returns the keys.
func (m MetaCarrier) Keys() []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
