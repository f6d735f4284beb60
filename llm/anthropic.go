package llm

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
)

// Defaults of AnthropicConfig.
const (
	// DefaultAnthropicBaseURL is the Anthropic API.
	DefaultAnthropicBaseURL = "https://api.anthropic.com"
	// DefaultAnthropicMaxTokens is sent as max_tokens when none is
	// configured: the Messages API requires the field, unlike OpenAI's.
	DefaultAnthropicMaxTokens = 8192
	// DefaultAnthropicRequestTimeout bounds one attempt, stream included,
	// when the configuration sets no timeout: long enough for a long
	// answer, short enough that a stalled connection does not hang an
	// agent for good.
	DefaultAnthropicRequestTimeout = 10 * time.Minute
)

// anthThinkingCacheSize bounds how many assistant turns' thinking blocks
// an Anthropic keeps for replay (see Anthropic.thinking).
const anthThinkingCacheSize = 256

// AnthropicConfig configures NewAnthropic.
type AnthropicConfig struct {
	// BaseURL is the API's root, without /v1 (default
	// DefaultAnthropicBaseURL); a proxy or a compatible server goes here.
	BaseURL string
	// APIKey is sent as x-api-key. The environment is not consulted: the
	// configuration layer resolves ${ANTHROPIC_API_KEY}, so a key meant
	// for api.anthropic.com is never sent to another BaseURL by accident.
	APIKey string
	// Model is the model asked (required), e.g. "claude-sonnet-4-5";
	// Request.Model overrides it per request.
	Model string
	// Temperature and TopP are sent when not nil. With extended thinking
	// the API accepts neither a temperature nor a top_p below 0.95.
	Temperature *float64
	TopP        *float64
	// MaxTokens is max_tokens (default DefaultAnthropicMaxTokens, or
	// ThinkingBudget plus that when thinking is on, since the budget
	// counts against max_tokens).
	MaxTokens int
	// ThinkingBudget, when > 0, turns extended thinking on with this
	// many budget_tokens (the API wants at least 1024, and fewer than
	// MaxTokens). The thinking is streamed as Delta.Reasoning and kept in
	// Message.Reasoning.
	ThinkingBudget int
	// Extra sets further body fields on every request, each key an sjson
	// path ("metadata.user_id", "top_k"), for API features this type does
	// not name. They are applied last and win over the mapped fields.
	Extra map[string]any
	// RequestTimeout bounds each attempt, its whole stream included
	// (default DefaultAnthropicRequestTimeout). It running out fails the
	// request with KindTimeout, which is not retried: a model that took
	// that long would likely take as long again.
	RequestTimeout time.Duration
	// Retry is how 429, 529 (overloaded), 5xx and broken connections are
	// retried; the SDK's own retries are off so that this is the only one.
	Retry RetryPolicy
	// HTTPClient makes the requests (default http.DefaultClient).
	HTTPClient *http.Client
}

// Anthropic is a Model speaking the Anthropic Messages API. It is safe for
// concurrent use.
type Anthropic struct {
	client  anthropic.Client
	cfg     AnthropicConfig
	extra   []option.RequestOption
	timeout time.Duration

	// thinking keeps, by the id of its first tool call, the signed
	// thinking blocks of each assistant turn that called tools. With
	// extended thinking on, the API refuses a conversation whose last
	// assistant turn calls tools without its thinking blocks, unmodified;
	// Message carries the thinking text but not its signature, so the
	// provider remembers them and puts them back when the turn returns.
	mu            sync.Mutex
	thinking      map[string][]anthropic.ContentBlockParamUnion
	thinkingOrder []string
}

var _ Model = (*Anthropic)(nil)

// NewAnthropic returns a Model for the Anthropic Messages API. It fails
// when cfg.Model is empty or cfg.BaseURL is not an http(s) URL, so that a
// wrong configuration is reported at start rather than on the first turn.
func NewAnthropic(cfg AnthropicConfig) (*Anthropic, error) {
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, errors.New("llm: anthropic: Model is required (the model name, e.g. claude-sonnet-4-5)")
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultAnthropicBaseURL
	}
	if u, err := url.Parse(cfg.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("llm: anthropic: BaseURL %q is not an http(s) URL", cfg.BaseURL)
	}
	if cfg.ThinkingBudget < 0 {
		return nil, fmt.Errorf("llm: anthropic: ThinkingBudget %d is negative", cfg.ThinkingBudget)
	}
	if cfg.MaxTokens < 0 {
		return nil, fmt.Errorf("llm: anthropic: MaxTokens %d is negative", cfg.MaxTokens)
	}
	if cfg.MaxTokens == 0 {
		cfg.MaxTokens = DefaultAnthropicMaxTokens + cfg.ThinkingBudget
	}
	if cfg.ThinkingBudget > 0 && cfg.MaxTokens <= cfg.ThinkingBudget {
		return nil, fmt.Errorf("llm: anthropic: MaxTokens %d must exceed ThinkingBudget %d (the budget counts against max_tokens)", cfg.MaxTokens, cfg.ThinkingBudget)
	}
	timeout := cfg.RequestTimeout
	if timeout <= 0 {
		timeout = DefaultAnthropicRequestTimeout
	}

	opts := []option.RequestOption{
		// Credentials and base URL come from cfg only, never from
		// ANTHROPIC_* variables or profile files, so the configuration
		// file says everything about where requests go.
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(strings.TrimSuffix(cfg.BaseURL, "/") + "/"),
		// Retry owns retries: one policy for every provider, and each
		// attempt is visible (Delta.Attempt, Response.Attempts).
		option.WithMaxRetries(0),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}

	keys := make([]string, 0, len(cfg.Extra))
	for k := range cfg.Extra {
		keys = append(keys, k)
	}
	slices.Sort(keys) // a stable body, whatever the map order
	extra := make([]option.RequestOption, 0, len(keys))
	for _, k := range keys {
		extra = append(extra, option.WithJSONSet(k, cfg.Extra[k]))
	}

	return &Anthropic{
		client:   anthropic.NewClient(opts...),
		cfg:      cfg,
		extra:    extra,
		timeout:  timeout,
		thinking: map[string][]anthropic.ContentBlockParamUnion{},
	}, nil
}

// Complete asks the model for one turn, streaming when onDelta is not nil.
// Each attempt is retried per the configured RetryPolicy; a retried stream
// starts again, its deltas carrying the new attempt's number.
func (a *Anthropic) Complete(ctx context.Context, req Request, onDelta func(Delta)) (*Response, error) {
	params, err := a.params(req)
	if err != nil {
		return nil, err
	}
	return retryResponse(ctx, "anthropic", a.cfg.Retry, func(ctx context.Context, n int) (*Response, error) {
		return a.attempt(ctx, params, n, onDelta)
	})
}

// attempt makes one request, bounded by the per-attempt timeout.
func (a *Anthropic) attempt(ctx context.Context, params anthropic.MessageNewParams, n int, onDelta func(Delta)) (*Response, error) {
	actx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()

	opts := slices.Clip(a.extra)

	if onDelta == nil {
		// The timeout is ours (actx); naming it to the SDK also stops it
		// from refusing a large max_tokens without streaming.
		opts = append(opts, option.WithRequestTimeout(a.timeout))
		msg, err := a.client.Messages.New(actx, params, opts...)
		if err != nil {
			return nil, anthError(ctx, actx, err)
		}
		return a.response(msg)
	}

	stream := a.client.Messages.NewStreaming(actx, params, opts...)
	defer stream.Close()
	var (
		msg     anthropic.Message
		stopped bool
		// inputs is each tool_use block's input as streamed: Accumulate
		// replaces input that is not valid JSON by {}, and a ToolCall must
		// carry what the model really sent.
		inputs = map[int64]*strings.Builder{}
	)
	for stream.Next() {
		ev := stream.Current()
		if err := msg.Accumulate(ev); err != nil {
			return nil, &Error{Kind: KindInvalidResponse, Provider: "anthropic", Message: "stream: " + err.Error(), Err: err}
		}
		switch ev.Type {
		case "content_block_start":
			if ev.ContentBlock.Type == "tool_use" {
				inputs[ev.Index] = &strings.Builder{}
			}
		case "content_block_delta":
			switch ev.Delta.Type {
			case "text_delta":
				if ev.Delta.Text != "" {
					onDelta(Delta{Content: ev.Delta.Text, Attempt: n})
				}
			case "thinking_delta":
				if ev.Delta.Thinking != "" {
					onDelta(Delta{Reasoning: ev.Delta.Thinking, Attempt: n})
				}
			case "input_json_delta":
				if b := inputs[ev.Index]; b != nil {
					b.WriteString(ev.Delta.PartialJSON)
				}
			}
		case "message_stop":
			stopped = true
		}
	}
	if err := stream.Err(); err != nil {
		return nil, anthError(ctx, actx, err)
	}
	if ctx.Err() != nil || actx.Err() != nil {
		return nil, anthError(ctx, actx, actx.Err())
	}
	if !stopped {
		// The server closed a 200 stream before message_stop: the answer is
		// incomplete, and asking again may well get all of it.
		return nil, &Error{Kind: KindNetwork, Provider: "anthropic", Message: "stream ended before message_stop"}
	}
	for i := range msg.Content {
		if b := inputs[int64(i)]; b != nil && msg.Content[i].Type == "tool_use" && b.Len() > 0 {
			msg.Content[i].Input = json.RawMessage(b.String())
		}
	}
	return a.response(&msg)
}

// response converts the API's message, and remembers its thinking blocks
// for replay when it calls tools.
func (a *Anthropic) response(msg *anthropic.Message) (*Response, error) {
	if msg == nil {
		return nil, &Error{Kind: KindInvalidResponse, Provider: "anthropic", Message: "empty response"}
	}
	var text, reasoning strings.Builder
	var calls []ToolCall
	var signed []anthropic.ContentBlockParamUnion
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			// Blocks are joined as is: citations split one sentence into
			// several, and the streamed deltas show them joined the same way.
			text.WriteString(b.Text)
		case "thinking":
			reasoning.WriteString(b.Thinking)
			signed = append(signed, anthropic.NewThinkingBlock(b.Signature, b.Thinking))
		case "redacted_thinking":
			signed = append(signed, anthropic.NewRedactedThinkingBlock(b.Data))
		case "tool_use":
			args := string(b.Input)
			if args == "" {
				args = "{}"
			}
			calls = append(calls, ToolCall{ID: b.ID, Name: b.Name, Arguments: args})
		}
	}
	if len(calls) > 0 && len(signed) > 0 {
		a.rememberThinking(calls[0].ID, signed)
	}
	return &Response{
		Message: Message{
			Role:      RoleAssistant,
			Content:   text.String(),
			Reasoning: reasoning.String(),
			ToolCalls: calls,
		},
		StopReason: anthStopReason(msg.StopReason),
		Usage: Usage{
			// Cached prompt tokens are counted apart by Anthropic; the sum is
			// the prompt's size, which is what a context budget compares.
			InputTokens:  int(msg.Usage.InputTokens + msg.Usage.CacheCreationInputTokens + msg.Usage.CacheReadInputTokens),
			OutputTokens: int(msg.Usage.OutputTokens),
		},
		Model: msg.Model,
	}, nil
}

func (a *Anthropic) rememberThinking(id string, blocks []anthropic.ContentBlockParamUnion) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.thinking[id]; !ok {
		a.thinkingOrder = append(a.thinkingOrder, id)
	}
	a.thinking[id] = blocks
	for len(a.thinkingOrder) > anthThinkingCacheSize {
		delete(a.thinking, a.thinkingOrder[0])
		a.thinkingOrder = a.thinkingOrder[1:]
	}
}

func (a *Anthropic) recallThinking(id string) []anthropic.ContentBlockParamUnion {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.thinking[id]
}

// params maps a Request to the Messages API's parameters.
func (a *Anthropic) params(req Request) (anthropic.MessageNewParams, error) {
	p := anthropic.MessageNewParams{
		Model:     anthropic.Model(a.cfg.Model),
		MaxTokens: int64(a.cfg.MaxTokens),
	}
	if req.Model != "" {
		p.Model = anthropic.Model(req.Model)
	}
	if req.MaxTokens > 0 {
		p.MaxTokens = int64(req.MaxTokens)
	}
	if t := cmp.Or(req.Temperature, a.cfg.Temperature); t != nil {
		p.Temperature = anthropic.Float(*t)
	}
	if t := cmp.Or(req.TopP, a.cfg.TopP); t != nil {
		p.TopP = anthropic.Float(*t)
	}
	if a.cfg.ThinkingBudget > 0 {
		p.Thinking = anthropic.ThinkingConfigParamOfEnabled(int64(a.cfg.ThinkingBudget))
	}
	if req.System != "" {
		p.System = append(p.System, anthropic.TextBlockParam{Text: req.System})
	}

	for _, m := range req.Messages {
		var role anthropic.MessageParamRole
		var blocks []anthropic.ContentBlockParamUnion
		switch m.Role {
		case RoleSystem:
			// The API has no system role in messages: a system message
			// given there joins the system prompt.
			if m.Content != "" {
				p.System = append(p.System, anthropic.TextBlockParam{Text: m.Content})
			}
			continue
		case RoleUser:
			role = anthropic.MessageParamRoleUser
			if m.Content != "" { // the API refuses empty text blocks
				blocks = append(blocks, anthropic.NewTextBlock(m.Content))
			}
		case RoleAssistant:
			role = anthropic.MessageParamRoleAssistant
			if len(m.ToolCalls) > 0 {
				blocks = append(blocks, a.recallThinking(m.ToolCalls[0].ID)...)
			}
			if m.Content != "" {
				blocks = append(blocks, anthropic.NewTextBlock(m.Content))
			}
			for _, c := range m.ToolCalls {
				blocks = append(blocks, anthropic.NewToolUseBlock(c.ID, anthToolInput(c.Arguments), c.Name))
			}
		case RoleTool:
			// A tool result is a tool_result block of a user message.
			role = anthropic.MessageParamRoleUser
			r := anthropic.ToolResultBlockParam{ToolUseID: m.ToolCallID}
			if m.Content != "" {
				r.Content = []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: m.Content}}}
			}
			if m.IsError {
				r.IsError = anthropic.Bool(true)
			}
			blocks = append(blocks, anthropic.ContentBlockParamUnion{OfToolResult: &r})
		default:
			return p, &Error{Kind: KindBadRequest, Provider: "anthropic", Message: fmt.Sprintf("message role %q is not one of system, user, assistant, tool", m.Role)}
		}
		if len(blocks) == 0 {
			continue
		}
		// The API wants the roles to alternate, and all the results of one
		// turn's tool calls in the one user message that follows it: merge
		// consecutive messages of a role (tool results, then any user text,
		// which is the order the API asks for).
		if n := len(p.Messages); n > 0 && p.Messages[n-1].Role == role {
			p.Messages[n-1].Content = append(p.Messages[n-1].Content, blocks...)
			continue
		}
		p.Messages = append(p.Messages, anthropic.MessageParam{Role: role, Content: blocks})
	}

	for _, t := range req.Tools {
		tp := anthropic.ToolParam{Name: t.Name, InputSchema: anthToolSchema(t.Parameters)}
		if t.Description != "" {
			tp.Description = anthropic.String(t.Description)
		}
		p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: &tp})
	}
	// tool_choice is only meaningful, and only accepted, with tools.
	if len(req.Tools) > 0 {
		switch req.ToolChoice {
		case "":
		case ToolChoiceAuto:
			p.ToolChoice = anthropic.ToolChoiceUnionParam{OfAuto: &anthropic.ToolChoiceAutoParam{}}
		case ToolChoiceNone:
			p.ToolChoice = anthropic.ToolChoiceUnionParam{OfNone: &anthropic.ToolChoiceNoneParam{}}
		case ToolChoiceRequired:
			p.ToolChoice = anthropic.ToolChoiceUnionParam{OfAny: &anthropic.ToolChoiceAnyParam{}}
		default:
			return p, &Error{Kind: KindBadRequest, Provider: "anthropic", Message: fmt.Sprintf("tool choice %q is not one of auto, none, required", req.ToolChoice)}
		}
	}
	return p, nil
}

// anthToolInput is the input of a tool_use block replayed to the API,
// which must be a JSON object. Arguments that are one go as they are;
// empty ones (a call without arguments) as {}; anything else (JSON cut
// short, an array) as {"_raw": TEXT}, so that the API takes the turn and
// the model still sees what it sent, next to the tool's error about it.
func anthToolInput(args string) any {
	s := strings.TrimSpace(args)
	if s == "" {
		return json.RawMessage("{}")
	}
	if strings.HasPrefix(s, "{") && json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	return map[string]string{"_raw": args}
}

// anthToolSchema maps a JSON Schema to input_schema: properties and
// required in their fields, every other keyword passed through, and type
// always "object" as the API requires (a tool's arguments are an object).
func anthToolSchema(schema map[string]any) anthropic.ToolInputSchemaParam {
	var s anthropic.ToolInputSchemaParam
	for k, v := range schema {
		switch k {
		case "type":
		case "properties":
			s.Properties = v
		case "required":
			switch r := v.(type) {
			case []string:
				s.Required = r
			case []any:
				for _, x := range r {
					if name, ok := x.(string); ok {
						s.Required = append(s.Required, name)
					}
				}
			}
		default:
			if s.ExtraFields == nil {
				s.ExtraFields = map[string]any{}
			}
			s.ExtraFields[k] = v
		}
	}
	if s.Properties == nil {
		// A zero schema would be left out of the body, and the API
		// requires input_schema: a tool without parameters has none.
		s.Properties = map[string]any{}
	}
	return s
}

// anthStopReason maps the API's stop_reason.
func anthStopReason(r anthropic.StopReason) StopReason {
	switch r {
	case anthropic.StopReasonEndTurn, anthropic.StopReasonStopSequence:
		return StopEnd
	case anthropic.StopReasonToolUse:
		return StopToolCalls
	case anthropic.StopReasonMaxTokens, anthropic.StopReasonModelContextWindowExceeded:
		return StopLength
	case anthropic.StopReasonRefusal:
		return StopContentFilter
	}
	return StopOther
}

// anthErrorStatus is the HTTP status that goes with each error type, to
// classify an error event that arrives in a 200 stream as the same error
// would be had it come first.
var anthErrorStatus = map[string]int{
	"invalid_request_error": 400,
	"authentication_error":  401,
	"billing_error":         402,
	"permission_error":      403,
	"not_found_error":       404,
	"request_too_large":     413,
	"rate_limit_error":      429,
	"api_error":             500,
	"timeout_error":         504,
	"overloaded_error":      529,
}

// anthError turns a failed attempt into an *Error. ctx is the caller's,
// actx the attempt's (ctx plus the per-attempt timeout).
func anthError(ctx, actx context.Context, err error) *Error {
	e := &Error{Provider: "anthropic", Err: err}
	if ctx.Err() != nil {
		e.Kind, e.Message = KindCancelled, ctx.Err().Error()
		if !errors.Is(err, ctx.Err()) {
			e.Err = ctx.Err()
		}
		return e
	}
	var netErr net.Error
	if actx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()) {
		e.Kind, e.Message = KindTimeout, "no complete answer within the request timeout"
		if !errors.Is(err, context.DeadlineExceeded) {
			e.Err = errors.Join(context.DeadlineExceeded, err)
		}
		return e
	}

	if aerr, ok := errors.AsType[*anthropic.Error](err); ok {
		typ, msg := anthErrorBody(aerr.RawJSON())
		if typ == "" {
			typ = string(aerr.Type())
		}
		e.Message = strings.TrimPrefix(typ+": "+msg, ": ")
		status := aerr.StatusCode
		if aerr.Response != nil && aerr.Response.StatusCode >= 400 {
			status = aerr.Response.StatusCode
			e.Status = status
			e.RetryAfter = ParseRetryAfter(aerr.Response.Header, time.Now())
		} else {
			// An error event in a stream that had started well (status
			// 200): classify it by its type; an unknown one is most likely
			// transient, like the overloaded_error it usually is.
			e.Message = "error event mid-stream: " + e.Message
			if s, ok := anthErrorStatus[typ]; ok {
				status = s
			} else {
				status = 500
			}
		}
		e.Kind = KindForStatus(status, anthIsContextLength(status, typ, msg))
		if e.Message == "" {
			e.Message = http.StatusText(status)
		}
		return e
	}

	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &syntaxErr) || errors.As(err, &typeErr) {
		e.Kind, e.Message = KindInvalidResponse, err.Error()
		return e
	}
	// No answer, or one cut short (connection refused or reset, EOF in a
	// body or stream): asking again may work.
	e.Kind, e.Message = KindNetwork, err.Error()
	if errors.Is(err, io.ErrUnexpectedEOF) {
		e.Message = "response cut short: " + err.Error()
	}
	return e
}

// anthErrorBody reads {"type":"error","error":{"type":T,"message":M}}.
func anthErrorBody(raw string) (typ, msg string) {
	var body struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(raw), &body) != nil {
		return "", strings.TrimSpace(raw)
	}
	return body.Error.Type, body.Error.Message
}

// anthIsContextLength tells a conversation too long for the model from
// other bad requests, by the API's wording ("prompt is too long: N tokens
// > M maximum", "input length and `max_tokens` exceed context limit"). A
// 413 (request_too_large) counts too: it is cured the same way, by
// eliding older tool results.
func anthIsContextLength(status int, typ, msg string) bool {
	if status == http.StatusRequestEntityTooLarge || typ == "request_too_large" {
		return true
	}
	if status != http.StatusBadRequest {
		return false
	}
	m := strings.ToLower(msg)
	return strings.Contains(m, "prompt is too long") ||
		(strings.Contains(m, "exceed") && strings.Contains(m, "context"))
}
