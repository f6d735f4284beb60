package llm

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The chat completions API is spoken here over net/http, without an SDK:
// the one endpoint, its JSON and its SSE framing are small, while the SDKs
// are not (openai-go v3 was a third of the binary and of a first build's
// compile time, for the one service used), and every behaviour that
// matters (retries, tool-call reassembly, what servers other than OpenAI
// send: reasoning fields, vendor fields, error shapes) was ours already.
// The types below hold only the fields read or sent.

// DefaultOpenAIBaseURL is the base URL used when OpenAIConfig.BaseURL is
// empty: OpenAI's own API.
const DefaultOpenAIBaseURL = "https://api.openai.com/v1"

// DefaultOpenAIRequestTimeout bounds one attempt when
// OpenAIConfig.RequestTimeout is zero. It is long because a streamed answer
// of a reasoning model can legitimately take minutes.
const DefaultOpenAIRequestTimeout = 10 * time.Minute

// oaiMaxEvent caps one SSE line of a streamed answer (32 MiB, as the
// openai-go SDK did): a chunk is a few hundred bytes, but a server may send
// a tool call's arguments whole in one.
const oaiMaxEvent = bufio.MaxScanTokenSize << 9

// oaiMaxErrorBody caps how much of an error answer is read: enough for any
// JSON error a server sends, not enough for a misbehaving proxy to make us
// buffer an endless page.
const oaiMaxErrorBody = 1 << 20

// OpenAIConfig configures an OpenAI-compatible chat completions provider.
type OpenAIConfig struct {
	// BaseURL is the API root, up to and including the version
	// ("http://localhost:8000/v1" for vLLM, "http://localhost:11434/v1" for
	// Ollama, "https://openrouter.ai/api/v1"). Default DefaultOpenAIBaseURL.
	BaseURL string
	// APIKey is sent as a bearer token; empty sends none (a local server).
	// It is never read from the environment here: a key meant for OpenAI
	// must not leak to another base URL by accident.
	APIKey string
	// Model is the model asked when a Request does not name one. Required.
	Model string
	// Temperature, TopP and MaxTokens are sent with every request unless
	// the Request overrides them (nil, 0: the server's default).
	Temperature *float64
	TopP        *float64
	MaxTokens   int
	// Extra holds vendor fields merged into every request body at its top
	// level, overriding fields of the same name: top_k, repetition_penalty,
	// chat_template_kwargs (vLLM), options (Ollama), provider (OpenRouter),
	// reasoning_effort...
	Extra map[string]any
	// RequestTimeout bounds each attempt, a whole streamed answer included
	// (default DefaultOpenAIRequestTimeout).
	RequestTimeout time.Duration
	// Retry is how failed requests are retried (see RetryPolicy).
	Retry RetryPolicy
	// HTTPClient makes the requests (default http.DefaultClient). Its own
	// Timeout, if any, applies on top of RequestTimeout.
	HTTPClient *http.Client
}

// OpenAI is a Model speaking the OpenAI chat completions API, as OpenAI,
// vLLM, Ollama, OpenRouter, DeepSeek, Qwen and others serve it. It is safe
// for concurrent use.
type OpenAI struct {
	cfg OpenAIConfig
	// url is the chat completions endpoint, client what sends to it.
	url     string
	client  *http.Client
	timeout time.Duration
	// maxCompletionTokens: OpenAI itself deprecated max_tokens and refuses
	// it for its reasoning models, while the compatible servers know
	// max_tokens best; so the field depends on who we talk to.
	maxCompletionTokens bool
}

var _ Model = (*OpenAI)(nil)

// NewOpenAI returns an OpenAI-compatible provider. It fails when Model is
// empty or BaseURL is not an http(s) URL.
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, errors.New("llm: openai: Model is required (the model name the server knows, e.g. gpt-4.1 or Qwen/Qwen3-8B)")
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultOpenAIBaseURL
	}
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("llm: openai: BaseURL %q is not an http(s) URL", cfg.BaseURL)
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultOpenAIRequestTimeout
	}
	if cfg.Extra != nil {
		cfg.Extra = maps.Clone(cfg.Extra) // the caller may reuse its map; ours is read by every request
	}
	// Nothing is read from the environment (OPENAI_API_KEY,
	// OPENAI_BASE_URL): an OpenAI key must not go to whatever server
	// BaseURL names.
	return &OpenAI{
		cfg:                 cfg,
		url:                 strings.TrimRight(cfg.BaseURL, "/") + "/chat/completions",
		client:              cmp.Or(cfg.HTTPClient, http.DefaultClient),
		timeout:             cfg.RequestTimeout,
		maxCompletionTokens: strings.EqualFold(u.Hostname(), "api.openai.com"),
	}, nil
}

// Complete asks the model for one turn; see Model. Each attempt has its own
// timeout; a failed one that may succeed again (429, 5xx, a connection
// lost, a stream cut short) is retried from scratch as cfg.Retry says, and
// the deltas of the new attempt carry its number.
func (o *OpenAI) Complete(ctx context.Context, req Request, onDelta func(Delta)) (*Response, error) {
	params, err := o.params(req, onDelta != nil)
	if err != nil {
		return nil, err
	}
	body, err := params.encode(o.cfg.Extra)
	if err != nil {
		return nil, &Error{Kind: KindBadRequest, Provider: "openai", Message: err.Error(), Err: err}
	}
	return retryResponse(ctx, "openai", o.cfg.Retry, func(ctx context.Context, n int) (*Response, error) {
		return o.attempt(ctx, params, body, n, onDelta)
	})
}

// errOAIAttemptTimeout is the cause of an attempt's context when its own
// timeout ran out, so that it can be told from the caller's context ending.
var errOAIAttemptTimeout = errors.New("llm: openai: request timeout")

// oaiHTTP records the HTTP answer of an attempt, which classification
// works from.
type oaiHTTP struct {
	status int
	header http.Header
	body   []byte // error answers only
	// readErr is the error reading the answer's body met, if any: the
	// answer was cut short, which is worth another try, while an answer
	// read whole that cannot be understood is not.
	readErr error
}

// oaiBody records the read errors of an answer's body into h.
type oaiBody struct {
	io.ReadCloser
	h *oaiHTTP
}

func (b *oaiBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && b.h.readErr == nil {
		b.h.readErr = err
	}
	return n, err
}

// oaiStatusFailure is the error of an attempt answered with an HTTP error
// status; the status, header and body are in the attempt's oaiHTTP.
type oaiStatusFailure struct{ status int }

func (e *oaiStatusFailure) Error() string {
	return fmt.Sprintf("%d %s", e.status, http.StatusText(e.status))
}

// send posts body and records the answer in h. An error answer's body is
// read (bounded) into h and closed; otherwise the caller reads and closes
// the body, whose read errors are recorded too.
func (o *OpenAI) send(ctx context.Context, body []byte, h *oaiHTTP) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if o.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+o.cfg.APIKey)
	}
	res, err := o.client.Do(req)
	if err != nil {
		return nil, err
	}
	h.status, h.header = res.StatusCode, res.Header
	if res.StatusCode >= 400 {
		b, rerr := io.ReadAll(io.LimitReader(res.Body, oaiMaxErrorBody))
		_ = res.Body.Close()
		h.body = b
		if rerr != nil {
			return nil, rerr
		}
		return nil, &oaiStatusFailure{status: res.StatusCode}
	}
	res.Body = &oaiBody{ReadCloser: res.Body, h: h}
	return res, nil
}

// attempt makes one request, params encoded as body. n is its number,
// from 1.
func (o *OpenAI) attempt(ctx context.Context, params *oaiRequest, body []byte, n int, onDelta func(Delta)) (*Response, error) {
	actx, cancel := context.WithTimeoutCause(ctx, o.timeout, errOAIAttemptTimeout)
	defer cancel()
	var h oaiHTTP
	res, err := o.send(actx, body, &h)
	if err != nil {
		return nil, oaiError(ctx, actx, &h, err)
	}
	defer res.Body.Close()
	if onDelta == nil {
		var cc oaiCompletion
		b, err := io.ReadAll(res.Body)
		if err == nil {
			err = json.Unmarshal(b, &cc)
		}
		if err != nil {
			return nil, oaiError(ctx, actx, &h, err)
		}
		return o.response(&cc, params)
	}
	var acc oaiStream
	if err := oaiEvents(res.Body, func(data []byte) error {
		var chunk oaiChunk
		if err := json.Unmarshal(data, &chunk); err != nil {
			return err
		}
		if chunk.Error != nil {
			return &oaiStreamError{data: data}
		}
		if d, ok := acc.add(&chunk); ok {
			d.Attempt = n
			onDelta(d)
		}
		return nil
	}); err != nil {
		return nil, oaiError(ctx, actx, &h, err)
	}
	if acc.finish == "" {
		// Without [DONE] telling apart a complete stream, the finish
		// reason does: every server sends one in the last choice chunk.
		return nil, &Error{Kind: KindNetwork, Provider: "openai", Status: h.status,
			Message: "the stream ended before the answer was complete"}
	}
	return acc.response(params), nil
}

// oaiStreamError is an event {"error": ...} in a streamed answer.
type oaiStreamError struct{ data []byte }

func (e *oaiStreamError) Error() string { return "error event in the stream: " + string(e.data) }

// oaiEvents reads the SSE events of r and calls f with the data of each,
// until "[DONE]", the end of r, or an error of f. The event names are
// ignored (the API sends none), as are comments and other fields.
func oaiEvents(r io.Reader, f func(data []byte) error) error {
	scn := bufio.NewScanner(r)
	scn.Buffer(nil, oaiMaxEvent)
	var data []byte
	for scn.Scan() {
		line := scn.Bytes()
		if len(line) == 0 {
			// A blank line dispatches the event; several data lines are
			// one event's data, joined by newlines.
			if len(data) == 0 {
				continue
			}
			if bytes.HasPrefix(data, []byte("[DONE]")) {
				return nil
			}
			if err := f(data); err != nil {
				return err
			}
			data = data[:0]
			continue
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		if string(name) != "data" {
			continue
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if len(data) > 0 {
			data = append(data, '\n')
		}
		data = append(data, value...)
	}
	return scn.Err()
}

// oaiRequest is the body of a chat completion request.
type oaiRequest struct {
	Model               string            `json:"model"`
	Messages            []oaiMessageParam `json:"messages"`
	Tools               []oaiToolParam    `json:"tools,omitempty"`
	ToolChoice          string            `json:"tool_choice,omitempty"`
	Temperature         *float64          `json:"temperature,omitempty"`
	TopP                *float64          `json:"top_p,omitempty"`
	MaxTokens           int               `json:"max_tokens,omitempty"`
	MaxCompletionTokens int               `json:"max_completion_tokens,omitempty"`
	Stream              bool              `json:"stream,omitempty"`
	StreamOptions       *oaiStreamOptions `json:"stream_options,omitempty"`
}

type oaiStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type oaiMessageParam struct {
	Role string `json:"role"`
	// Content is left out of an assistant turn that only calls tools.
	Content    *string         `json:"content,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	ToolCalls  []oaiToolCallIO `json:"tool_calls,omitempty"`
}

// oaiToolCallIO is a tool call as sent back in a conversation and as read
// from an answer (Custom: OpenAI's custom tools, whose input is free text).
type oaiToolCallIO struct {
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
	Custom *struct {
		Name  string `json:"name"`
		Input string `json:"input"`
	} `json:"custom,omitempty"`
}

type oaiToolParam struct {
	Type     string `json:"type"`
	Function struct {
		Name        string         `json:"name"`
		Description string         `json:"description,omitempty"`
		Parameters  map[string]any `json:"parameters"`
	} `json:"function"`
}

// encode returns the request's JSON with extra's fields merged at the top
// level, overriding those of the same name.
func (p *oaiRequest) encode(extra map[string]any) ([]byte, error) {
	b, err := json.Marshal(p)
	if err != nil || len(extra) == 0 {
		return b, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k, v := range extra {
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("extra field %q: %w", k, err)
		}
		m[k] = raw
	}
	return json.Marshal(m)
}

// oaiCompletion is a non-streamed answer. Error is there when a server
// answers 200 with an error object instead of choices (OpenRouter).
type oaiCompletion struct {
	Model   string `json:"model"`
	Choices []struct {
		Message      oaiAnswerMessage `json:"message"`
		FinishReason string           `json:"finish_reason"`
	} `json:"choices"`
	Usage oaiUsage        `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// oaiAnswerMessage is a message or a streamed delta of one. Reasoning
// comes outside the OpenAI schema: reasoning_content (DeepSeek, vLLM,
// Qwen, llama.cpp) or reasoning (OpenRouter, Ollama, newer vLLM).
type oaiAnswerMessage struct {
	Content          oaiContent      `json:"content"`
	Refusal          string          `json:"refusal"`
	ReasoningContent json.RawMessage `json:"reasoning_content"`
	Reasoning        json.RawMessage `json:"reasoning"`
	ToolCalls        []oaiToolCallIO `json:"tool_calls"`
}

// oaiContent is an answer's content: a string in OpenAI's schema, which some
// compatible servers (Mistral's, some vLLM versions) write as an array of
// content parts instead; the text parts are taken, in order, and the rest
// (images, which a chat answer does not carry) left out.
type oaiContent string

func (t *oaiContent) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '[' {
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(b, &parts); err != nil {
			return err
		}
		var sb strings.Builder
		for _, p := range parts {
			if p.Type == "text" {
				sb.WriteString(p.Text)
			}
		}
		*t = oaiContent(sb.String())
		return nil
	}
	var s *string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if s != nil {
		*t = oaiContent(*s)
	}
	return nil
}

type oaiUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

// oaiChunk is one event of a streamed answer. Usage is nil but in the
// last one; a tool call fragment's Index is nil when a server leaves it
// out.
type oaiChunk struct {
	Model   string `json:"model"`
	Choices []struct {
		Index int64 `json:"index"`
		Delta struct {
			oaiAnswerMessage
			ToolCalls []struct {
				Index    *int64 `json:"index"`
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *oaiUsage       `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// params maps a Request to the chat completion parameters.
func (o *OpenAI) params(req Request, stream bool) (*oaiRequest, error) {
	p := &oaiRequest{Model: cmp.Or(req.Model, o.cfg.Model)}
	if req.System != "" {
		p.Messages = append(p.Messages, oaiMessageParam{Role: "system", Content: &req.System})
	}
	for i, m := range req.Messages {
		mp, err := oaiMessage(m)
		if err != nil {
			return p, &Error{Kind: KindBadRequest, Provider: "openai", Message: fmt.Sprintf("message %d: %v", i, err)}
		}
		p.Messages = append(p.Messages, mp)
	}
	for _, t := range req.Tools {
		tp := oaiToolParam{Type: "function"}
		tp.Function.Name, tp.Function.Description, tp.Function.Parameters = t.Name, t.Description, t.Parameters
		if tp.Function.Parameters == nil {
			// Some servers' chat templates index the schema without
			// checking that it is there.
			tp.Function.Parameters = map[string]any{"type": "object", "properties": map[string]any{}}
		}
		p.Tools = append(p.Tools, tp)
	}
	switch req.ToolChoice {
	case "":
	case ToolChoiceAuto, ToolChoiceNone, ToolChoiceRequired:
		// OpenAI refuses tool_choice without tools; with none there is
		// nothing to choose anyway.
		if len(p.Tools) > 0 {
			p.ToolChoice = string(req.ToolChoice)
		}
	default:
		return p, &Error{Kind: KindBadRequest, Provider: "openai", Message: fmt.Sprintf("unknown tool choice %q", req.ToolChoice)}
	}
	if t := cmp.Or(req.Temperature, o.cfg.Temperature); t != nil {
		p.Temperature = t
	}
	if t := cmp.Or(req.TopP, o.cfg.TopP); t != nil {
		p.TopP = t
	}
	if mt := cmp.Or(req.MaxTokens, o.cfg.MaxTokens); mt > 0 {
		if o.maxCompletionTokens {
			p.MaxCompletionTokens = mt
		} else {
			p.MaxTokens = mt
		}
	}
	if stream {
		// Usage comes in a last chunk only when asked for.
		p.Stream, p.StreamOptions = true, &oaiStreamOptions{IncludeUsage: true}
	}
	return p, nil
}

// oaiMessage maps one message. Reasoning is not sent back: the API has no
// field for it, and the servers that return it do not want it again.
func oaiMessage(m Message) (oaiMessageParam, error) {
	switch m.Role {
	case RoleSystem, RoleUser:
		return oaiMessageParam{Role: string(m.Role), Content: &m.Content}, nil
	case RoleTool:
		if m.ToolCallID == "" {
			return oaiMessageParam{}, errors.New("tool message without tool_call_id")
		}
		return oaiMessageParam{Role: "tool", Content: &m.Content, ToolCallID: m.ToolCallID}, nil
	case RoleAssistant:
		a := oaiMessageParam{Role: "assistant"}
		// content may be omitted when there are tool calls, and some
		// servers render an empty string as an empty turn.
		if m.Content != "" || len(m.ToolCalls) == 0 {
			a.Content = &m.Content
		}
		for _, tc := range m.ToolCalls {
			c := oaiToolCallIO{ID: tc.ID, Type: "function"}
			c.Function.Name, c.Function.Arguments = tc.Name, tc.Arguments
			if strings.TrimSpace(c.Function.Arguments) == "" {
				// Chat templates (vLLM, Ollama) parse the arguments back
				// to JSON; "" is not JSON, {} is the call with none.
				c.Function.Arguments = "{}"
			}
			a.ToolCalls = append(a.ToolCalls, c)
		}
		return a, nil
	}
	return oaiMessageParam{}, fmt.Errorf("unknown role %q", m.Role)
}

// response maps a non-streamed answer.
func (o *OpenAI) response(cc *oaiCompletion, params *oaiRequest) (*Response, error) {
	if len(cc.Choices) == 0 {
		// OpenRouter, among others, answers 200 with an error object when
		// the upstream provider failed.
		if len(cc.Error) > 0 && string(cc.Error) != "null" {
			return nil, oaiEventError([]byte(`{"error":` + string(cc.Error) + `}`))
		}
		return nil, &Error{Kind: KindInvalidResponse, Provider: "openai", Status: http.StatusOK, Message: "the answer has no choices"}
	}
	c := cc.Choices[0]
	msg := Message{
		Role:      RoleAssistant,
		Content:   string(c.Message.Content),
		Reasoning: oaiReasoning(&c.Message),
	}
	if msg.Content == "" {
		// A refusal is the answer's text as far as the agent is
		// concerned: it must see it to react to it.
		msg.Content = c.Message.Refusal
	}
	for _, tc := range c.Message.ToolCalls {
		call := ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments}
		if tc.Type == "custom" && tc.Custom != nil {
			call.Name, call.Arguments = tc.Custom.Name, tc.Custom.Input
		}
		msg.ToolCalls = append(msg.ToolCalls, call)
	}
	oaiFillIDs(msg.ToolCalls)
	return &Response{
		Message:    msg,
		StopReason: oaiStopReason(c.FinishReason, len(msg.ToolCalls) > 0),
		Usage:      Usage{InputTokens: int(cc.Usage.PromptTokens), OutputTokens: int(cc.Usage.CompletionTokens)},
		Model:      cmp.Or(cc.Model, params.Model),
	}, nil
}

// oaiReasoning reads the reasoning text servers add to a message or delta
// outside the OpenAI schema (see oaiAnswerMessage). The first non-empty
// one wins, so a server sending both does not double the text; a field
// that is not a string is ignored.
func oaiReasoning(m *oaiAnswerMessage) string {
	for _, raw := range [...]json.RawMessage{m.ReasoningContent, m.Reasoning} {
		var s string
		if len(raw) > 0 && json.Unmarshal(raw, &s) == nil && s != "" {
			return s
		}
	}
	return ""
}

// oaiStopReason maps finish_reason. Some servers (Ollama, some vLLM tool
// parsers) say "stop" although they return tool calls; the calls are what
// the agent must act on.
func oaiStopReason(r string, toolCalls bool) StopReason {
	switch r {
	case "tool_calls", "function_call":
		return StopToolCalls
	case "stop":
		if toolCalls {
			return StopToolCalls
		}
		return StopEnd
	case "length":
		return StopLength
	case "content_filter":
		return StopContentFilter
	}
	return StopOther
}

// oaiFillIDs gives an id to calls that came without one (some local
// servers omit it): the tool result must name the call it answers.
func oaiFillIDs(calls []ToolCall) {
	for i := range calls {
		if calls[i].ID == "" {
			calls[i].ID = fmt.Sprintf("call_%016x", rand.Uint64())
		}
	}
}

// oaiStream accumulates a streamed answer.
type oaiStream struct {
	content, reasoning strings.Builder
	calls              oaiToolCalls
	finish             string
	model              string
	usage              Usage
}

// add takes one chunk and returns the text it adds, if any.
func (s *oaiStream) add(c *oaiChunk) (Delta, bool) {
	if c.Model != "" {
		s.model = c.Model
	}
	if c.Usage != nil {
		s.usage = Usage{InputTokens: int(c.Usage.PromptTokens), OutputTokens: int(c.Usage.CompletionTokens)}
	}
	var d Delta
	for _, ch := range c.Choices {
		if ch.Index != 0 { // only one choice is asked for (n = 1)
			continue
		}
		if r := oaiReasoning(&ch.Delta.oaiAnswerMessage); r != "" {
			d.Reasoning += r
		}
		d.Content += string(ch.Delta.Content) + ch.Delta.Refusal
		for _, tc := range ch.Delta.ToolCalls {
			var index int64
			if tc.Index != nil {
				index = *tc.Index
			}
			s.calls.add(index, tc.Index != nil, tc.ID, tc.Function.Name, tc.Function.Arguments)
		}
		if ch.FinishReason != "" {
			s.finish = ch.FinishReason
		}
	}
	s.content.WriteString(d.Content)
	s.reasoning.WriteString(d.Reasoning)
	return d, d.Content != "" || d.Reasoning != ""
}

func (s *oaiStream) response(params *oaiRequest) *Response {
	calls := s.calls.result()
	oaiFillIDs(calls)
	return &Response{
		Message: Message{
			Role:      RoleAssistant,
			Content:   s.content.String(),
			Reasoning: s.reasoning.String(),
			ToolCalls: calls,
		},
		StopReason: oaiStopReason(s.finish, len(calls) > 0),
		Usage:      s.usage,
		Model:      cmp.Or(s.model, params.Model),
	}
}

// oaiToolCalls reassembles streamed tool calls. The API sends each call as
// fragments keyed by index: the first with id and name, the arguments
// split over many, the fragments of parallel calls interleaved. Servers
// stray from that in two known ways, handled here: no index at all (each
// call whole, or an id starting each call), and every call at index 0,
// told apart by their ids.
type oaiToolCalls struct {
	calls []oaiCall
	at    map[int64]int // index → calls position of the call it continues
	next  int64         // index given to a call that came without one
}

type oaiCall struct {
	index    int64
	id, name string
	args     []byte
}

func (a *oaiToolCalls) add(index int64, hasIndex bool, id, name, args string) {
	if a.at == nil {
		a.at = map[int64]int{}
	}
	if !hasIndex {
		// Continue the last call unless this fragment starts a new one.
		if len(a.calls) > 0 && (id == "" || id == a.calls[len(a.calls)-1].id) {
			index = a.calls[len(a.calls)-1].index
		} else {
			index = a.next
		}
	}
	pos, ok := a.at[index]
	if ok && id != "" && a.calls[pos].id != "" && a.calls[pos].id != id {
		ok = false // a new call reusing the index
	}
	if !ok {
		a.calls = append(a.calls, oaiCall{index: index})
		pos = len(a.calls) - 1
		a.at[index] = pos
		a.next = max(a.next, index+1)
	}
	c := &a.calls[pos]
	if c.id == "" {
		c.id = id
	}
	if c.name == "" {
		// The name comes whole in one fragment; servers that repeat it in
		// later ones must not have it doubled.
		c.name = name
	}
	c.args = append(c.args, args...)
}

// result returns the calls in index order (their order in the answer),
// calls sharing an index in the order they came.
func (a *oaiToolCalls) result() []ToolCall {
	if len(a.calls) == 0 {
		return nil
	}
	order := make([]int, len(a.calls))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int {
		return cmp.Compare(a.calls[i].index, a.calls[j].index)
	})
	out := make([]ToolCall, 0, len(a.calls))
	for _, i := range order {
		c := &a.calls[i]
		out = append(out, ToolCall{ID: c.id, Name: c.name, Arguments: string(c.args)})
	}
	return out
}

// oaiError classifies a failed attempt. ctx is the caller's context, actx
// the attempt's, h what the server answered.
func oaiError(ctx, actx context.Context, h *oaiHTTP, err error) *Error {
	switch {
	case ctx.Err() != nil:
		return &Error{Kind: KindCancelled, Provider: "openai", Message: context.Cause(ctx).Error(), Err: context.Cause(ctx)}
	case errors.Is(context.Cause(actx), errOAIAttemptTimeout):
		return &Error{Kind: KindTimeout, Provider: "openai", Status: h.status, Message: "no complete answer within the request timeout", Err: err}
	case h.status >= 400:
		return oaiStatusError(h.status, h.header, h.body, err)
	}
	if se, ok := errors.AsType[*oaiStreamError](err); ok {
		e := oaiEventError(se.data)
		e.Status = h.status
		return e
	}
	if _, ok := errors.AsType[net.Error](err); ok || h.status == 0 || h.readErr != nil {
		// No answer, or one cut short: the connection, not the request,
		// failed.
		return &Error{Kind: KindNetwork, Provider: "openai", Status: h.status, Message: err.Error(), Err: err}
	}
	// An answer read whole that could not be decoded.
	return &Error{Kind: KindInvalidResponse, Provider: "openai", Status: h.status, Message: err.Error(), Err: err}
}

// oaiStatusError classifies an HTTP error answer.
func oaiStatusError(status int, h http.Header, body []byte, err error) *Error {
	code, msg := oaiErrorBody(body)
	e := &Error{
		Kind:     KindForStatus(status, status != http.StatusTooManyRequests && oaiIsContextLength(code, msg)),
		Provider: "openai",
		Status:   status,
		Message:  msg,
		Err:      err,
	}
	if h != nil {
		e.RetryAfter = ParseRetryAfter(h, time.Now())
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	return e
}

// oaiEventError classifies an error sent inside a 200 answer: an SSE event
// {"error": {...}} mid-stream, or a non-streamed body with no choices.
// Its code may be an HTTP status (OpenRouter, vLLM); without one the
// server failed along the way, which is worth another try.
func oaiEventError(data []byte) *Error {
	code, msg := oaiErrorBody(data)
	e := &Error{Provider: "openai", Message: cmp.Or(msg, "error in the answer")}
	status, _ := strconv.Atoi(code)
	switch {
	case status >= 400 && status < 600:
		e.Kind = KindForStatus(status, status != http.StatusTooManyRequests && oaiIsContextLength(code, msg))
	case oaiIsContextLength(code, msg):
		e.Kind = KindContextLength
	default:
		e.Kind = KindServer
	}
	return e
}

// oaiErrorBody reads the code and message of an error body, in the shapes
// servers send: {"error": {"message", "code"}} (OpenAI, new vLLM, Ollama,
// OpenRouter), {"message", "code"} at the top (older vLLM), {"error":
// "text"} (Ollama's native errors), or anything else, quoted as is.
func oaiErrorBody(body []byte) (code, msg string) {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message json.RawMessage `json:"message"`
		Detail  json.RawMessage `json:"detail"`
		Code    json.RawMessage `json:"code"`
		Type    json.RawMessage `json:"type"`
	}
	if json.Unmarshal(body, &v) != nil {
		return "", oaiTrim(string(bytes.TrimSpace(body)))
	}
	if len(v.Error) > 0 && v.Error[0] == '{' {
		return oaiErrorBody(v.Error)
	}
	msg = cmp.Or(oaiText(v.Error), cmp.Or(oaiText(v.Message), oaiText(v.Detail)))
	code = cmp.Or(oaiText(v.Code), oaiText(v.Type))
	if msg == "" && code == "" {
		msg = oaiTrim(string(bytes.TrimSpace(body)))
	}
	return code, oaiTrim(msg)
}

// oaiText returns a JSON string's or number's text, "" for anything else.
func oaiText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	return ""
}

func oaiTrim(s string) string {
	const limit = 2000
	if len(s) > limit {
		return strings.ToValidUTF8(s[:limit], "") + "…"
	}
	return s
}

// oaiContextPhrases are how servers say a conversation is too long, in
// lower case: OpenAI and OpenRouter ("This model's maximum context length
// is N tokens"), vLLM (the same, or "The decoder prompt (length N) is
// longer than the maximum model length of M"), Ollama ("the input length
// exceeds the context length"), llama.cpp ("exceeds the available context
// size"), Anthropic behind a proxy ("prompt is too long"), and others.
var oaiContextPhrases = []string{
	"context length",
	"context_length",
	"context window",
	"context size",
	"exceed_context_size",
	"maximum model length",
	"max_model_len",
	"too many tokens",
	"prompt is too long",
	"prompt too long",
	"prompt_too_long",
	"input is too long",
	"reduce the length of the messages",
}

// oaiIsContextLength reports whether an error's code or message says the
// conversation is too long. Callers leave 429 out: "too many tokens" there
// is a tokens-per-minute limit.
func oaiIsContextLength(code, msg string) bool {
	s := strings.ToLower(code + "\n" + msg)
	for _, p := range oaiContextPhrases {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}
