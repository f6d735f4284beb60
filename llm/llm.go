// Package llm is toolmux's view of a language model: one interface, Model,
// over chat-style providers with native tool calling, and the types a
// conversation is made of. NewOpenAI speaks the OpenAI-compatible chat
// completions API (OpenAI, vLLM, Ollama, OpenRouter, DeepSeek, Qwen...),
// NewAnthropic the Anthropic Messages API.
//
// The agent (package agent) depends on Model only, so a test can drive it
// with any implementation; the providers themselves are tested against
// scripted HTTP servers that replay a conversation.
//
// Every provider streams when asked (token deltas to a callback, tool calls
// reassembled from their fragments), retries rate limits and server errors
// with backoff honouring Retry-After ([Retry]), bounds each request with a
// timeout, and reports failures as *[Error] with a [Kind], so that a
// context that grew too long can be told from a refused key.
package llm

import (
	"context"
	"time"
)

// Role is who a message is from.
type Role string

// The roles of a conversation.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	// RoleTool is a tool's result, answering the assistant's tool call
	// with the same ToolCallID.
	RoleTool Role = "tool"
)

// Message is one message of a conversation.
type Message struct {
	Role    Role   `json:"role"`
	Content string `json:"content,omitempty"`
	// Reasoning is the model's reasoning text, when the provider returns
	// it apart from the answer (reasoning_content, thinking blocks). It is
	// kept for the record and not sent back.
	Reasoning string `json:"reasoning,omitempty"`
	// ToolCalls are the calls an assistant message asks for.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID and Name identify the call a RoleTool message answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	Name       string `json:"name,omitempty"`
	// IsError marks a RoleTool message that reports a failure (Anthropic's
	// is_error; others see it in the text).
	IsError bool `json:"is_error,omitempty"`
}

// ToolCall is one call the model asks for.
type ToolCall struct {
	// ID is the provider's id of the call; the tool result carries it back.
	ID   string `json:"id"`
	Name string `json:"name"`
	// Arguments is the JSON text the model produced, as it produced it:
	// repairing it is the pipeline's job, and a record should show what
	// the model really sent.
	Arguments string `json:"arguments"`
}

// Tool is a tool offered to the model.
type Tool struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Parameters is the JSON Schema of the arguments (an object schema).
	Parameters map[string]any `json:"parameters,omitempty"`
}

// ToolChoice says whether the model may, must or must not call tools.
type ToolChoice string

// The tool choices every provider supports.
const (
	ToolChoiceAuto     ToolChoice = "auto"
	ToolChoiceNone     ToolChoice = "none"
	ToolChoiceRequired ToolChoice = "required"
)

// Request is one turn asked of a model.
type Request struct {
	// Model overrides the provider's configured model for this request.
	Model string
	// System is the system prompt, kept apart from Messages because not
	// every API takes it as a message.
	System   string
	Messages []Message
	Tools    []Tool
	// ToolChoice is "" (the provider's default, auto when tools are
	// given), or one of the ToolChoice constants.
	ToolChoice ToolChoice
	// Temperature, TopP and MaxTokens override the provider's options
	// when set (nil, 0: keep them).
	Temperature *float64
	TopP        *float64
	MaxTokens   int
}

// StopReason is why the model stopped.
type StopReason string

// The stop reasons providers map theirs to.
const (
	StopEnd           StopReason = "stop"       // a complete answer
	StopToolCalls     StopReason = "tool_calls" // it asks for tool calls
	StopLength        StopReason = "length"     // it hit the token limit
	StopContentFilter StopReason = "content_filter"
	StopOther         StopReason = "other"
)

// Usage counts the tokens of a request.
type Usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// Response is a model's answer to one Request.
type Response struct {
	// Message is the assistant message: text, reasoning, tool calls.
	Message    Message    `json:"message"`
	StopReason StopReason `json:"stop_reason"`
	Usage      Usage      `json:"usage"`
	// Model is the model that answered, as the provider names it.
	Model string `json:"model,omitempty"`
	// Attempts counts the HTTP requests made, retries included.
	Attempts int           `json:"attempts"`
	Duration time.Duration `json:"duration"`
}

// Delta is a piece of a streamed answer.
type Delta struct {
	// Content and Reasoning are text to append to the answer and to the
	// reasoning.
	Content   string
	Reasoning string
	// Attempt is the request the delta belongs to (1 for the first). A
	// retried request starts the answer again, so a consumer showing the
	// text clears it when Attempt changes.
	Attempt int
}

// Model is a language model: Complete asks it for one turn. When onDelta
// is not nil the answer is streamed and onDelta is called with each piece
// of text as it arrives, from the calling goroutine's point of view in
// order; the Response is the whole answer, reassembled. Complete returns
// an *Error on failure.
type Model interface {
	Complete(ctx context.Context, req Request, onDelta func(Delta)) (*Response, error)
}
