package llm

import (
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

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/respjson"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"
)

// DefaultOpenAIBaseURL is the base URL used when OpenAIConfig.BaseURL is
// empty: OpenAI's own API.
const DefaultOpenAIBaseURL = "https://api.openai.com/v1"

// DefaultOpenAIRequestTimeout bounds one attempt when
// OpenAIConfig.RequestTimeout is zero. It is long because a streamed answer
// of a reasoning model can legitimately take minutes.
const DefaultOpenAIRequestTimeout = 10 * time.Minute

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
	cfg     OpenAIConfig
	svc     openai.ChatCompletionService
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
	opts := []option.RequestOption{
		option.WithBaseURL(cfg.BaseURL),
		// Retries are ours (Retry), so that they follow the policy, count
		// in Attempts and restart a stream consistently.
		option.WithMaxRetries(0),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	return &OpenAI{
		cfg: cfg,
		// The chat service alone, not openai.NewClient: the client would
		// pick up OPENAI_API_KEY, OPENAI_BASE_URL and other variables from
		// the environment, and send an OpenAI key to whatever server
		// BaseURL names.
		svc:                 openai.NewChatCompletionService(opts...),
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
	return retryResponse(ctx, "openai", o.cfg.Retry, func(ctx context.Context, n int) (*Response, error) {
		return o.attempt(ctx, params, n, onDelta)
	})
}

// errOAIAttemptTimeout is the cause of an attempt's context when its own
// timeout ran out, so that it can be told from the caller's context ending.
var errOAIAttemptTimeout = errors.New("llm: openai: request timeout")

// oaiHTTP records the HTTP answer of an attempt as it goes through the
// SDK: the SDK turns some error bodies ({"error": "text"}, as Ollama
// sends) into a JSON error that has lost the status, so classification
// works from what the wire said instead.
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

func (h *oaiHTTP) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	res, err := next(req)
	if err != nil || res == nil {
		return res, err
	}
	h.status, h.header = res.StatusCode, res.Header
	if res.StatusCode >= 400 && res.Body != nil {
		b, rerr := io.ReadAll(io.LimitReader(res.Body, oaiMaxErrorBody))
		_ = res.Body.Close()
		h.body = b
		res.Body = io.NopCloser(bytes.NewReader(b))
		if rerr != nil {
			return nil, rerr
		}
	} else if res.Body != nil {
		res.Body = &oaiBody{ReadCloser: res.Body, h: h}
	}
	return res, nil
}

// attempt makes one request. n is its number, from 1.
func (o *OpenAI) attempt(ctx context.Context, params openai.ChatCompletionNewParams, n int, onDelta func(Delta)) (*Response, error) {
	actx, cancel := context.WithTimeoutCause(ctx, o.timeout, errOAIAttemptTimeout)
	defer cancel()
	var h oaiHTTP
	mw := option.WithMiddleware(h.middleware)
	if onDelta == nil {
		cc, err := o.svc.New(actx, params, mw)
		if err != nil {
			return nil, oaiError(ctx, actx, &h, err)
		}
		return o.response(cc, params)
	}
	stream := o.svc.NewStreaming(actx, params, mw)
	defer stream.Close()
	var acc oaiStream
	for stream.Next() {
		chunk := stream.Current()
		if d, ok := acc.add(&chunk); ok {
			d.Attempt = n
			onDelta(d)
		}
	}
	if err := stream.Err(); err != nil {
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

// params maps a Request to the chat completion parameters.
func (o *OpenAI) params(req Request, stream bool) (openai.ChatCompletionNewParams, error) {
	var p openai.ChatCompletionNewParams
	p.Model = shared.ChatModel(cmp.Or(req.Model, o.cfg.Model))
	if req.System != "" {
		p.Messages = append(p.Messages, openai.SystemMessage(req.System))
	}
	for i, m := range req.Messages {
		mp, err := oaiMessage(m)
		if err != nil {
			return p, &Error{Kind: KindBadRequest, Provider: "openai", Message: fmt.Sprintf("message %d: %v", i, err)}
		}
		p.Messages = append(p.Messages, mp)
	}
	for _, t := range req.Tools {
		fd := shared.FunctionDefinitionParam{Name: t.Name, Parameters: shared.FunctionParameters(t.Parameters)}
		if t.Description != "" {
			fd.Description = openai.String(t.Description)
		}
		if fd.Parameters == nil {
			// Some servers' chat templates index the schema without
			// checking that it is there.
			fd.Parameters = shared.FunctionParameters{"type": "object", "properties": map[string]any{}}
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(fd))
	}
	switch req.ToolChoice {
	case "":
	case ToolChoiceAuto, ToolChoiceNone, ToolChoiceRequired:
		// OpenAI refuses tool_choice without tools; with none there is
		// nothing to choose anyway.
		if len(p.Tools) > 0 {
			p.ToolChoice.OfAuto = openai.String(string(req.ToolChoice))
		}
	default:
		return p, &Error{Kind: KindBadRequest, Provider: "openai", Message: fmt.Sprintf("unknown tool choice %q", req.ToolChoice)}
	}
	if t := cmp.Or(req.Temperature, o.cfg.Temperature); t != nil {
		p.Temperature = openai.Float(*t)
	}
	if t := cmp.Or(req.TopP, o.cfg.TopP); t != nil {
		p.TopP = openai.Float(*t)
	}
	if mt := cmp.Or(req.MaxTokens, o.cfg.MaxTokens); mt > 0 {
		if o.maxCompletionTokens {
			p.MaxCompletionTokens = openai.Int(int64(mt))
		} else {
			p.MaxTokens = openai.Int(int64(mt))
		}
	}
	if stream {
		// Usage comes in a last chunk only when asked for. The SDK sets
		// "stream": true itself.
		p.StreamOptions.IncludeUsage = openai.Bool(true)
	}
	if len(o.cfg.Extra) > 0 {
		p.SetExtraFields(o.cfg.Extra)
	}
	return p, nil
}

// oaiMessage maps one message. Reasoning is not sent back: the API has no
// field for it, and the servers that return it do not want it again.
func oaiMessage(m Message) (openai.ChatCompletionMessageParamUnion, error) {
	switch m.Role {
	case RoleSystem:
		return openai.SystemMessage(m.Content), nil
	case RoleUser:
		return openai.UserMessage(m.Content), nil
	case RoleTool:
		if m.ToolCallID == "" {
			return openai.ChatCompletionMessageParamUnion{}, errors.New("tool message without tool_call_id")
		}
		return openai.ToolMessage(m.Content, m.ToolCallID), nil
	case RoleAssistant:
		var a openai.ChatCompletionAssistantMessageParam
		// content may be omitted when there are tool calls, and some
		// servers render an empty string as an empty turn.
		if m.Content != "" || len(m.ToolCalls) == 0 {
			a.Content.OfString = openai.String(m.Content)
		}
		for _, tc := range m.ToolCalls {
			args := tc.Arguments
			if strings.TrimSpace(args) == "" {
				// Chat templates (vLLM, Ollama) parse the arguments back
				// to JSON; "" is not JSON, {} is the call with none.
				args = "{}"
			}
			a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID:       tc.ID,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: args},
				},
			})
		}
		return openai.ChatCompletionMessageParamUnion{OfAssistant: &a}, nil
	}
	return openai.ChatCompletionMessageParamUnion{}, fmt.Errorf("unknown role %q", m.Role)
}

// response maps a non-streamed answer.
func (o *OpenAI) response(cc *openai.ChatCompletion, params openai.ChatCompletionNewParams) (*Response, error) {
	if len(cc.Choices) == 0 {
		// OpenRouter, among others, answers 200 with an error object when
		// the upstream provider failed.
		if f, ok := cc.JSON.ExtraFields["error"]; ok && f.Raw() != "" && f.Raw() != "null" {
			return nil, oaiEventError([]byte(`{"error":` + f.Raw() + `}`))
		}
		return nil, &Error{Kind: KindInvalidResponse, Provider: "openai", Status: http.StatusOK, Message: "the answer has no choices"}
	}
	c := cc.Choices[0]
	msg := Message{
		Role:      RoleAssistant,
		Content:   c.Message.Content,
		Reasoning: oaiReasoning(c.Message.JSON.ExtraFields),
	}
	if msg.Content == "" {
		// A refusal is the answer's text as far as the agent is
		// concerned: it must see it to react to it.
		msg.Content = c.Message.Refusal
	}
	for _, tc := range c.Message.ToolCalls {
		call := ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments}
		if tc.Type == "custom" {
			call.Name, call.Arguments = tc.Custom.Name, tc.Custom.Input
		}
		msg.ToolCalls = append(msg.ToolCalls, call)
	}
	oaiFillIDs(msg.ToolCalls)
	return &Response{
		Message:    msg,
		StopReason: oaiStopReason(c.FinishReason, len(msg.ToolCalls) > 0),
		Usage:      Usage{InputTokens: int(cc.Usage.PromptTokens), OutputTokens: int(cc.Usage.CompletionTokens)},
		Model:      cmp.Or(cc.Model, string(params.Model)),
	}, nil
}

// oaiReasoning reads the reasoning text servers add to a message or delta
// outside the OpenAI schema: reasoning_content (DeepSeek, vLLM, Qwen,
// llama.cpp) or reasoning (OpenRouter, Ollama, newer vLLM). The first
// non-empty one wins, so a server sending both does not double the text.
func oaiReasoning(extra map[string]respjson.Field) string {
	for _, k := range [...]string{"reasoning_content", "reasoning"} {
		f, ok := extra[k]
		if !ok {
			continue
		}
		var s string
		if json.Unmarshal([]byte(f.Raw()), &s) == nil && s != "" {
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
func (s *oaiStream) add(c *openai.ChatCompletionChunk) (Delta, bool) {
	if c.Model != "" {
		s.model = c.Model
	}
	if c.JSON.Usage.Valid() {
		s.usage = Usage{InputTokens: int(c.Usage.PromptTokens), OutputTokens: int(c.Usage.CompletionTokens)}
	}
	var d Delta
	for _, ch := range c.Choices {
		if ch.Index != 0 { // only one choice is asked for (n = 1)
			continue
		}
		if r := oaiReasoning(ch.Delta.JSON.ExtraFields); r != "" {
			d.Reasoning += r
		}
		d.Content += ch.Delta.Content + ch.Delta.Refusal
		for _, tc := range ch.Delta.ToolCalls {
			s.calls.add(tc.Index, tc.JSON.Index.Valid(), tc.ID, tc.Function.Name, tc.Function.Arguments)
		}
		if ch.FinishReason != "" {
			s.finish = ch.FinishReason
		}
	}
	s.content.WriteString(d.Content)
	s.reasoning.WriteString(d.Reasoning)
	return d, d.Content != "" || d.Reasoning != ""
}

func (s *oaiStream) response(params openai.ChatCompletionNewParams) *Response {
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
		Model:      cmp.Or(s.model, string(params.Model)),
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
	if se, ok := errors.AsType[*ssestream.StreamError](err); ok {
		e := oaiEventError(se.Event.Data)
		e.Status = h.status
		return e
	}
	if ae, ok := errors.AsType[*openai.Error](err); ok && ae.StatusCode >= 400 {
		// Only when the middleware did not see the answer (a custom
		// transport short-circuiting it).
		var hdr http.Header
		if ae.Response != nil {
			hdr = ae.Response.Header
		}
		return oaiStatusError(ae.StatusCode, hdr, []byte(`{"error":`+cmp.Or(ae.RawJSON(), "null")+`}`), err)
	}
	if _, ok := errors.AsType[net.Error](err); ok || h.status == 0 || h.readErr != nil {
		// No answer, or one cut short: the connection, not the request,
		// failed.
		return &Error{Kind: KindNetwork, Provider: "openai", Status: h.status, Message: err.Error(), Err: err}
	}
	// An answer read whole that the SDK could not decode.
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
