package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/llm"
)

// The OpenAI provider is tested against oaiServer, an OpenAI-compatible
// server that records each request it gets and replays a scripted answer
// for it, streamed (SSE) or not, or fails as scripted.

// oaiStep is the scripted answer to one request.
type oaiStep struct {
	Status int               // default 200
	Header map[string]string // added to the answer
	Body   string            // the JSON answer (not streamed) or error body
	// Chunks, when not nil, make a streamed answer: each is sent as
	// "data: CHUNK", then "data: [DONE]" unless NoDone.
	Chunks []string
	NoDone bool
	// Abort drops the connection after the chunks (a stream cut short);
	// Hang waits, after the chunks if any, until the client gives up.
	Abort, Hang bool
}

// oaiReq is a request as the server got it.
type oaiReq struct {
	At     time.Time
	Header http.Header
	Body   map[string]any
}

type oaiServer struct {
	t     *testing.T
	srv   *httptest.Server
	mu    sync.Mutex
	steps []oaiStep
	reqs  []oaiReq
	// left counts the requests of a Hang step whose client went away
	// (rather than the server giving up on it).
	left atomic.Int32
}

func oaiServe(t *testing.T, steps ...oaiStep) *oaiServer {
	t.Helper()
	s := &oaiServer{t: t, steps: steps}
	s.srv = httptest.NewServer(http.HandlerFunc(s.handle))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *oaiServer) handle(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		s.t.Errorf("server: reading the request: %v", err)
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		s.t.Errorf("server: got %s %s, want POST /v1/chat/completions", r.Method, r.URL.Path)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		s.t.Errorf("server: Content-Type %q", ct)
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		s.t.Errorf("server: request body is not a JSON object: %v: %s", err, raw)
	}
	s.mu.Lock()
	n := len(s.reqs)
	s.reqs = append(s.reqs, oaiReq{At: at, Header: r.Header.Clone(), Body: body})
	var step oaiStep
	ok := n < len(s.steps)
	if ok {
		step = s.steps[n]
	}
	s.mu.Unlock()
	if !ok {
		s.t.Errorf("server: unexpected request %d", n+1)
		http.Error(w, `{"error":{"message":"unexpected request"}}`, http.StatusTeapot)
		return
	}
	oaiAnswer(w, r, step)
	// Before the handler returns, which ends the request's context too.
	if step.Hang && r.Context().Err() != nil {
		s.left.Add(1)
	}
}

func oaiAnswer(w http.ResponseWriter, r *http.Request, step oaiStep) {
	for k, v := range step.Header {
		w.Header().Set(k, v)
	}
	if step.Chunks == nil {
		if step.Hang {
			oaiHang(r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(oaiOr(step.Status, http.StatusOK))
		_, _ = io.WriteString(w, step.Body)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(oaiOr(step.Status, http.StatusOK))
	for _, c := range step.Chunks {
		_, _ = fmt.Fprintf(w, "data: %s\n\n", c)
		w.(http.Flusher).Flush()
	}
	switch {
	case step.Abort:
		panic(http.ErrAbortHandler) // closes the connection mid-stream
	case step.Hang:
		oaiHang(r)
	case !step.NoDone:
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}
}

// oaiHang waits for the client to go away (bounded, so that a broken test
// cannot hang the suite).
func oaiHang(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(20 * time.Second):
	}
}

func oaiOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// wentAway waits for the client to have gone away from a Hang step: it
// gave up on the request, which ended there and then.
func (s *oaiServer) wentAway(t *testing.T) {
	t.Helper()
	if !testservers.Eventually(30*time.Second, func() bool { return s.left.Load() == 1 }) {
		t.Error("the client did not go away from the hanging request")
	}
}

func (s *oaiServer) requests() []oaiReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]oaiReq(nil), s.reqs...)
}

// oaiFast retries at once, so that tests measure the waits they mean to.
var oaiFast = llm.RetryPolicy{MaxAttempts: 4, InitialBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}

// oaiModel returns a provider talking to s, with cfg's settings.
func oaiModel(t *testing.T, s *oaiServer, cfg llm.OpenAIConfig) *llm.OpenAI {
	t.Helper()
	cfg.BaseURL = s.srv.URL + "/v1"
	cfg.HTTPClient = s.srv.Client()
	if cfg.Model == "" {
		cfg.Model = "test-model"
	}
	if cfg.Retry == (llm.RetryPolicy{}) {
		cfg.Retry = oaiFast
	}
	m, err := llm.NewOpenAI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// oaiJSON marshals v; the tests' literals always marshal.
func oaiJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// oaiCompletion is a non-streamed answer with one choice.
func oaiCompletion(msg map[string]any, finish string) string {
	msg["role"] = "assistant"
	return oaiJSON(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "served-model",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}},
		"usage":   map[string]any{"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
	})
}

// oaiChunk is a streamed chunk whose only choice carries delta (and
// finish, when not "").
func oaiChunk(delta map[string]any, finish string) string {
	var f any
	if finish != "" {
		f = finish
	}
	return oaiJSON(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "served-model",
		"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": f}},
	})
}

func oaiText(s string) string { return oaiChunk(map[string]any{"content": s}, "") }

func oaiFinish(reason string) string { return oaiChunk(map[string]any{}, reason) }

// oaiUsage is the last chunk when usage is asked for: no choices.
func oaiUsage(in, out int) string {
	return oaiJSON(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "served-model",
		"choices": []any{}, "usage": map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out},
	})
}

// oaiToolFrag is a streamed tool call fragment; id and name are sent when
// not "" (the first fragment of a call).
func oaiToolFrag(index int, id, name, args string) map[string]any {
	f := map[string]any{"index": index, "function": map[string]any{"arguments": args}}
	if id != "" {
		f["id"], f["type"] = id, "function"
	}
	if name != "" {
		f["function"].(map[string]any)["name"] = name
	}
	return f
}

func oaiTools(frags ...map[string]any) string {
	l := make([]any, len(frags))
	for i, f := range frags {
		l[i] = f
	}
	return oaiChunk(map[string]any{"tool_calls": l}, "")
}

// oaiDeltas collects the deltas of a streamed answer.
type oaiDeltas struct{ got []llm.Delta }

func (d *oaiDeltas) add(x llm.Delta) { d.got = append(d.got, x) }

// oaiSame fails unless got and want are the same JSON value.
func oaiSame(t *testing.T, what string, got any, wantJSON string) {
	t.Helper()
	var want any
	if err := json.Unmarshal([]byte(wantJSON), &want); err != nil {
		t.Fatalf("%s: bad want: %v", what, err)
	}
	var g any
	if err := json.Unmarshal([]byte(oaiJSON(got)), &g); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, want) {
		t.Errorf("%s:\n got %s\nwant %s", what, oaiJSON(g), oaiJSON(want))
	}
}

func oaiErr(t *testing.T, err error) *llm.Error {
	t.Helper()
	e, ok := errors.AsType[*llm.Error](err)
	if !ok {
		t.Fatalf("error %T %v, want *llm.Error", err, err)
	}
	if e.Provider != "openai" {
		t.Errorf("Provider %q", e.Provider)
	}
	return e
}

var oaiHi = llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}

func TestOpenAIPlainAnswer(t *testing.T) {
	// The key must come from the config only: an OpenAI key in the
	// environment must not go to another server.
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	s := oaiServe(t, oaiStep{Body: oaiCompletion(map[string]any{"content": "Hello!"}, "stop")})
	m := oaiModel(t, s, llm.OpenAIConfig{})
	resp, err := m.Complete(context.Background(), oaiHi, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := llm.Message{Role: llm.RoleAssistant, Content: "Hello!"}
	if !reflect.DeepEqual(resp.Message, want) {
		t.Errorf("message %+v, want %+v", resp.Message, want)
	}
	if resp.StopReason != llm.StopEnd || resp.Usage != (llm.Usage{InputTokens: 12, OutputTokens: 5}) ||
		resp.Model != "served-model" || resp.Attempts != 1 || resp.Duration <= 0 {
		t.Errorf("response %+v", resp)
	}
	reqs := s.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	if a := reqs[0].Header.Get("Authorization"); a != "" {
		t.Errorf("Authorization %q sent without an APIKey", a)
	}
	oaiSame(t, "body", reqs[0].Body, `{"model":"test-model","messages":[{"role":"user","content":"hi"}]}`)
}

func TestOpenAIRequestMapping(t *testing.T) {
	s := oaiServe(t, oaiStep{Body: oaiCompletion(map[string]any{"content": "ok"}, "stop")})
	temp, topP := 0.2, 0.9
	m := oaiModel(t, s, llm.OpenAIConfig{
		APIKey: "sk-test", Temperature: &temp, TopP: &topP, MaxTokens: 100,
		Extra: map[string]any{"top_k": 20, "chat_template_kwargs": map[string]any{"enable_thinking": false}},
	})
	reqTemp := 0.5
	req := llm.Request{
		Model:  "override-model",
		System: "Be brief.",
		Messages: []llm.Message{
			{Role: llm.RoleUser, Content: "What is in /tmp?"},
			{Role: llm.RoleAssistant, Reasoning: "not sent back", ToolCalls: []llm.ToolCall{
				{ID: "call_1", Name: "list_dir", Arguments: `{"path":"/tmp"}`},
				{ID: "call_2", Name: "whoami", Arguments: ""},
			}},
			{Role: llm.RoleTool, ToolCallID: "call_1", Name: "list_dir", Content: "a.txt\nb.txt"},
			{Role: llm.RoleTool, ToolCallID: "call_2", Name: "whoami", Content: "error: denied", IsError: true},
			{Role: llm.RoleAssistant, Content: "Two files."},
			{Role: llm.RoleUser, Content: "Thanks"},
		},
		Tools: []llm.Tool{
			{Name: "list_dir", Description: "List a directory", Parameters: map[string]any{
				"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}, "required": []any{"path"},
			}},
			{Name: "whoami"},
		},
		ToolChoice:  llm.ToolChoiceRequired,
		Temperature: &reqTemp,
		MaxTokens:   50,
	}
	if _, err := m.Complete(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	r := s.requests()[0]
	if a := r.Header.Get("Authorization"); a != "Bearer sk-test" {
		t.Errorf("Authorization %q", a)
	}
	oaiSame(t, "body", r.Body, `{
		"model": "override-model",
		"messages": [
			{"role": "system", "content": "Be brief."},
			{"role": "user", "content": "What is in /tmp?"},
			{"role": "assistant", "tool_calls": [
				{"id": "call_1", "type": "function", "function": {"name": "list_dir", "arguments": "{\"path\":\"/tmp\"}"}},
				{"id": "call_2", "type": "function", "function": {"name": "whoami", "arguments": "{}"}}
			]},
			{"role": "tool", "tool_call_id": "call_1", "content": "a.txt\nb.txt"},
			{"role": "tool", "tool_call_id": "call_2", "content": "error: denied"},
			{"role": "assistant", "content": "Two files."},
			{"role": "user", "content": "Thanks"}
		],
		"tools": [
			{"type": "function", "function": {"name": "list_dir", "description": "List a directory",
				"parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
			{"type": "function", "function": {"name": "whoami", "parameters": {"type": "object", "properties": {}}}}
		],
		"tool_choice": "required",
		"temperature": 0.5,
		"top_p": 0.9,
		"max_tokens": 50,
		"top_k": 20,
		"chat_template_kwargs": {"enable_thinking": false}
	}`)
}

func TestOpenAIToolChoiceWithoutTools(t *testing.T) {
	// OpenAI refuses tool_choice without tools: it is left out.
	s := oaiServe(t, oaiStep{Body: oaiCompletion(map[string]any{"content": "ok"}, "stop")})
	req := oaiHi
	req.ToolChoice = llm.ToolChoiceNone
	if _, err := oaiModel(t, s, llm.OpenAIConfig{}).Complete(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.requests()[0].Body["tool_choice"]; ok {
		t.Error("tool_choice sent without tools")
	}
}

func TestOpenAIBadRequestNotSent(t *testing.T) {
	s := oaiServe(t)
	m := oaiModel(t, s, llm.OpenAIConfig{})
	for name, req := range map[string]llm.Request{
		"role":        {Messages: []llm.Message{{Role: "robot", Content: "x"}}},
		"tool choice": {Messages: oaiHi.Messages, Tools: []llm.Tool{{Name: "t"}}, ToolChoice: "sometimes"},
		"tool result": {Messages: []llm.Message{{Role: llm.RoleTool, Content: "x"}}},
	} {
		_, err := m.Complete(context.Background(), req, nil)
		if e := oaiErr(t, err); e.Kind != llm.KindBadRequest {
			t.Errorf("%s: %v", name, err)
		}
	}
	if n := len(s.requests()); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

// oaiRedirect sends every request to the test server, whatever its URL.
type oaiRedirect struct{ to *httptest.Server }

func (r oaiRedirect) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.URL.Scheme, req.URL.Host, req.Host = "http", r.to.Listener.Addr().String(), ""
	return r.to.Client().Transport.RoundTrip(req)
}

func TestOpenAIDefaultsToOpenAI(t *testing.T) {
	// With no BaseURL the request goes to OpenAI, which wants
	// max_completion_tokens rather than max_tokens.
	s := oaiServe(t, oaiStep{Body: oaiCompletion(map[string]any{"content": "ok"}, "stop")})
	var host string
	m, err := llm.NewOpenAI(llm.OpenAIConfig{
		Model: "gpt-test", MaxTokens: 64, Retry: oaiFast,
		HTTPClient: &http.Client{Transport: oaiHostRecorder{&host, oaiRedirect{s.srv}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Complete(context.Background(), oaiHi, nil); err != nil {
		t.Fatal(err)
	}
	if host != "api.openai.com" {
		t.Errorf("request went to %q", host)
	}
	b := s.requests()[0].Body
	if b["max_completion_tokens"] != 64.0 || b["max_tokens"] != nil {
		t.Errorf("body %v", b)
	}
}

type oaiHostRecorder struct {
	host *string
	next http.RoundTripper
}

func (h oaiHostRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	*h.host = req.URL.Host
	return h.next.RoundTrip(req)
}

func TestNewOpenAIValidates(t *testing.T) {
	if _, err := llm.NewOpenAI(llm.OpenAIConfig{}); err == nil || !strings.Contains(err.Error(), "Model") {
		t.Errorf("no model: %v", err)
	}
	if _, err := llm.NewOpenAI(llm.OpenAIConfig{Model: "m", BaseURL: "localhost:8000/v1"}); err == nil || !strings.Contains(err.Error(), "BaseURL") {
		t.Errorf("bad base URL: %v", err)
	}
}

var oaiTwoCalls = []llm.ToolCall{
	{ID: "call_a", Name: "read_file", Arguments: `{"path":"/etc/hosts","limit":10}`},
	{ID: "call_b", Name: "web_search", Arguments: `{"query":"gömböc \"shape\"","n":3}`},
}

func TestOpenAIParallelToolCalls(t *testing.T) {
	s := oaiServe(t, oaiStep{Body: oaiCompletion(map[string]any{"content": nil, "tool_calls": []any{
		map[string]any{"id": "call_a", "type": "function", "function": map[string]any{"name": "read_file", "arguments": oaiTwoCalls[0].Arguments}},
		map[string]any{"id": "call_b", "type": "function", "function": map[string]any{"name": "web_search", "arguments": oaiTwoCalls[1].Arguments}},
	}}, "tool_calls")})
	resp, err := oaiModel(t, s, llm.OpenAIConfig{}).Complete(context.Background(), oaiHi, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(resp.Message.ToolCalls, oaiTwoCalls) || resp.StopReason != llm.StopToolCalls || resp.Message.Content != "" {
		t.Errorf("response %+v", resp)
	}
}

func TestOpenAIStreamParallelToolCalls(t *testing.T) {
	// Arguments in many pieces, the two calls interleaved, sometimes two
	// fragments in one chunk.
	s := oaiServe(t, oaiStep{Chunks: []string{
		oaiChunk(map[string]any{"role": "assistant", "content": ""}, ""),
		oaiText("Let me look."),
		oaiTools(oaiToolFrag(0, "call_a", "read_file", "")),
		oaiTools(oaiToolFrag(0, "", "", `{"pa`)),
		oaiTools(oaiToolFrag(1, "call_b", "web_search", `{"qu`)),
		oaiTools(oaiToolFrag(0, "", "", `th":"/etc`), oaiToolFrag(1, "", "", `ery":"gö`)),
		oaiTools(oaiToolFrag(1, "", "", `mböc \"shape\"",`)),
		oaiTools(oaiToolFrag(0, "", "", `/hosts","limit":10}`)),
		oaiTools(oaiToolFrag(1, "", "", `"n":3}`)),
		oaiFinish("tool_calls"),
		oaiUsage(30, 20),
	}})
	var d oaiDeltas
	resp, err := oaiModel(t, s, llm.OpenAIConfig{}).Complete(context.Background(), oaiHi, d.add)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(resp.Message.ToolCalls, oaiTwoCalls) {
		t.Errorf("tool calls\n got %+v\nwant %+v", resp.Message.ToolCalls, oaiTwoCalls)
	}
	if resp.Message.Content != "Let me look." || resp.StopReason != llm.StopToolCalls ||
		resp.Usage != (llm.Usage{InputTokens: 30, OutputTokens: 20}) || resp.Model != "served-model" || resp.Attempts != 1 {
		t.Errorf("response %+v", resp)
	}
	if want := []llm.Delta{{Content: "Let me look.", Attempt: 1}}; !reflect.DeepEqual(d.got, want) {
		t.Errorf("deltas %+v, want %+v", d.got, want)
	}
	b := s.requests()[0].Body
	if b["stream"] != true || !reflect.DeepEqual(b["stream_options"], map[string]any{"include_usage": true}) {
		t.Errorf("stream fields: %v %v", b["stream"], b["stream_options"])
	}
}

func TestOpenAIStreamDeltasInOrder(t *testing.T) {
	pieces := []string{"The", " answer", " is", " 4", "2", ".", " ✓"}
	chunks := []string{oaiChunk(map[string]any{"role": "assistant"}, "")}
	for _, p := range pieces {
		chunks = append(chunks, oaiText(p))
	}
	chunks = append(chunks, oaiFinish("length"))
	s := oaiServe(t, oaiStep{Chunks: chunks})
	var d oaiDeltas
	resp, err := oaiModel(t, s, llm.OpenAIConfig{}).Complete(context.Background(), oaiHi, d.add)
	if err != nil {
		t.Fatal(err)
	}
	var want []llm.Delta
	for _, p := range pieces {
		want = append(want, llm.Delta{Content: p, Attempt: 1})
	}
	if !reflect.DeepEqual(d.got, want) {
		t.Errorf("deltas %+v", d.got)
	}
	if resp.Message.Content != strings.Join(pieces, "") || resp.StopReason != llm.StopLength {
		t.Errorf("response %+v", resp)
	}
}

func TestOpenAIReasoning(t *testing.T) {
	for _, field := range []string{"reasoning_content", "reasoning"} {
		t.Run(field+"/stream", func(t *testing.T) {
			s := oaiServe(t, oaiStep{Chunks: []string{
				oaiChunk(map[string]any{"role": "assistant", field: "Two plus"}, ""),
				oaiChunk(map[string]any{field: " two."}, ""),
				oaiChunk(map[string]any{field: nil, "content": "4"}, ""),
				oaiFinish("stop"),
			}})
			var d oaiDeltas
			resp, err := oaiModel(t, s, llm.OpenAIConfig{}).Complete(context.Background(), oaiHi, d.add)
			if err != nil {
				t.Fatal(err)
			}
			want := []llm.Delta{{Reasoning: "Two plus", Attempt: 1}, {Reasoning: " two.", Attempt: 1}, {Content: "4", Attempt: 1}}
			if !reflect.DeepEqual(d.got, want) {
				t.Errorf("deltas %+v", d.got)
			}
			if resp.Message.Reasoning != "Two plus two." || resp.Message.Content != "4" {
				t.Errorf("message %+v", resp.Message)
			}
		})
		t.Run(field+"/whole", func(t *testing.T) {
			s := oaiServe(t, oaiStep{Body: oaiCompletion(map[string]any{"content": "4", field: "Two plus two."}, "stop")})
			resp, err := oaiModel(t, s, llm.OpenAIConfig{}).Complete(context.Background(), oaiHi, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Message.Reasoning != "Two plus two." || resp.Message.Content != "4" {
				t.Errorf("message %+v", resp.Message)
			}
		})
	}
}

func TestOpenAIRetryAfter(t *testing.T) {
	s := oaiServe(t,
		oaiStep{Status: 429, Header: map[string]string{"Retry-After": "1"},
			Body: `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`},
		oaiStep{Body: oaiCompletion(map[string]any{"content": "ok"}, "stop")},
	)
	resp, err := oaiModel(t, s, llm.OpenAIConfig{}).Complete(context.Background(), oaiHi, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Attempts != 2 || resp.Message.Content != "ok" {
		t.Errorf("response %+v", resp)
	}
	reqs := s.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	// The backoff is a millisecond: only Retry-After explains a longer wait.
	if gap := reqs[1].At.Sub(reqs[0].At); gap < time.Second {
		t.Errorf("retried after %v, before the server's Retry-After of 1s", gap)
	}
}

func TestOpenAIServerErrorsRetried(t *testing.T) {
	busy := oaiStep{Status: 503, Body: `{"error":{"message":"overloaded"}}`}
	s := oaiServe(t, busy, busy, oaiStep{Body: oaiCompletion(map[string]any{"content": "ok"}, "stop")})
	resp, err := oaiModel(t, s, llm.OpenAIConfig{}).Complete(context.Background(), oaiHi, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Attempts != 3 || len(s.requests()) != 3 {
		t.Errorf("attempts %d, requests %d", resp.Attempts, len(s.requests()))
	}
}

func TestOpenAIAttemptsExhausted(t *testing.T) {
	fail := oaiStep{Status: 500, Body: `{"error":{"message":"internal error"}}`}
	s := oaiServe(t, fail, fail, fail)
	policy := oaiFast
	policy.MaxAttempts = 3
	_, err := oaiModel(t, s, llm.OpenAIConfig{Retry: policy}).Complete(context.Background(), oaiHi, nil)
	e := oaiErr(t, err)
	if e.Kind != llm.KindServer || e.Status != 500 || e.Attempts != 3 || e.Message != "internal error" {
		t.Errorf("error %+v", e)
	}
	if n := len(s.requests()); n != 3 {
		t.Errorf("%d requests", n)
	}
}

func TestOpenAIErrorKinds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		kind   llm.Kind
		msg    string // in the error's message
	}{
		{"bad request", 400, `{"error":{"message":"Invalid schema for function 'x'","type":"invalid_request_error","param":"tools[0]","code":null}}`, llm.KindBadRequest, "Invalid schema"},
		{"unknown model", 404, `{"error":{"message":"The model 'nope' does not exist","code":"model_not_found"}}`, llm.KindBadRequest, "does not exist"},
		{"bad key", 401, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`, llm.KindAuth, "Incorrect API key"},
		{"forbidden", 403, `{"error":{"message":"not allowed"}}`, llm.KindAuth, "not allowed"},
		{"openai context", 400, `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, llm.KindContextLength, "maximum context length"},
		{"openai context code only", 400, `{"error":{"message":"too long","code":"context_length_exceeded"}}`, llm.KindContextLength, "too long"},
		{"vllm context", 400, `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`, llm.KindContextLength, "4096"},
		{"vllm new context", 400, `{"error":{"message":"This model's maximum context length is 2048 tokens. However, your request has 8 input tokens plus 2045 'max_tokens'. Please reduce one or the other. (parameter=input_tokens, max_tokens, value=(8, 2045))","type":"BadRequestError","param":"input_tokens, max_tokens","code":400}}`, llm.KindContextLength, "2048"},
		{"vllm decoder prompt", 400, `{"error":{"message":"The decoder prompt (length 9254) is longer than the maximum model length of 4096. Make sure that max_model_len is no smaller than the number of text tokens.","type":"BadRequestError","code":400}}`, llm.KindContextLength, "decoder prompt"},
		{"ollama context", 400, `{"error":{"message":"the input length exceeds the context length","type":"invalid_request_error","param":null,"code":null}}`, llm.KindContextLength, "exceeds the context length"},
		{"ollama native context", 500, `{"error":"the input length exceeds the context length"}`, llm.KindContextLength, "exceeds the context length"},
		{"llama.cpp context", 400, `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}`, llm.KindContextLength, "context size"},
		{"proxied anthropic", 400, `{"error":{"message":"prompt is too long: 210000 tokens > 200000 maximum","code":400}}`, llm.KindContextLength, "prompt is too long"},
		// "too many tokens" in a 429 is a per-minute budget, not the context.
		{"token rate", 429, `{"error":{"message":"Too many tokens per minute, please slow down","code":"rate_limit_exceeded"}}`, llm.KindRateLimited, "per minute"},
		{"not json", 400, `<html>Bad Request</html>`, llm.KindBadRequest, "<html>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := oaiServe(t, oaiStep{Status: tc.status, Body: tc.body})
			policy := oaiFast
			if tc.status == 429 {
				policy.MaxAttempts = 1
			}
			_, err := oaiModel(t, s, llm.OpenAIConfig{Retry: policy}).Complete(context.Background(), oaiHi, nil)
			e := oaiErr(t, err)
			if e.Kind != tc.kind || e.Status != tc.status || !strings.Contains(e.Message, tc.msg) {
				t.Errorf("error %+v, want kind %s with %q", e, tc.kind, tc.msg)
			}
			if n := len(s.requests()); n != 1 || e.Attempts != 1 {
				t.Errorf("%d requests, %d attempts: not retryable", n, e.Attempts)
			}
		})
	}
}

func TestOpenAIInvalidAnswerNotRetried(t *testing.T) {
	for name, body := range map[string]string{
		"not json":   `{"choices": [`,
		"no choices": `{"id":"x","object":"chat.completion","choices":[]}`,
	} {
		t.Run(name, func(t *testing.T) {
			s := oaiServe(t, oaiStep{Body: body})
			_, err := oaiModel(t, s, llm.OpenAIConfig{}).Complete(context.Background(), oaiHi, nil)
			if e := oaiErr(t, err); e.Kind != llm.KindInvalidResponse || e.Attempts != 1 {
				t.Errorf("error %+v", e)
			}
		})
	}
}

func TestOpenAIErrorInsideAnswer(t *testing.T) {
	// OpenRouter reports an upstream failure as an error object in a 200
	// answer, or as an SSE event mid-stream; its code is an HTTP status.
	t.Run("whole", func(t *testing.T) {
		s := oaiServe(t,
			oaiStep{Body: `{"error":{"message":"Provider returned error","code":502}}`},
			oaiStep{Body: oaiCompletion(map[string]any{"content": "ok"}, "stop")},
		)
		resp, err := oaiModel(t, s, llm.OpenAIConfig{}).Complete(context.Background(), oaiHi, nil)
		if err != nil || resp.Attempts != 2 {
			t.Fatalf("%+v %v", resp, err)
		}
	})
	t.Run("stream retried", func(t *testing.T) {
		s := oaiServe(t,
			oaiStep{Chunks: []string{oaiText("Hal"), `{"error":{"message":"Provider disconnected","code":502}}`}},
			oaiStep{Chunks: []string{oaiText("Hello"), oaiFinish("stop")}},
		)
		var d oaiDeltas
		resp, err := oaiModel(t, s, llm.OpenAIConfig{}).Complete(context.Background(), oaiHi, d.add)
		if err != nil {
			t.Fatal(err)
		}
		want := []llm.Delta{{Content: "Hal", Attempt: 1}, {Content: "Hello", Attempt: 2}}
		if resp.Message.Content != "Hello" || resp.Attempts != 2 || !reflect.DeepEqual(d.got, want) {
			t.Errorf("response %+v, deltas %+v", resp, d.got)
		}
	})
	t.Run("stream context length", func(t *testing.T) {
		s := oaiServe(t, oaiStep{Chunks: []string{`{"error":{"message":"This model's maximum context length is 8192 tokens","code":400}}`}})
		_, err := oaiModel(t, s, llm.OpenAIConfig{}).Complete(context.Background(), oaiHi, func(llm.Delta) {})
		if e := oaiErr(t, err); e.Kind != llm.KindContextLength || e.Attempts != 1 {
			t.Errorf("error %+v", e)
		}
	})
}

func TestOpenAIStreamCutShort(t *testing.T) {
	full := oaiStep{Chunks: []string{oaiText("Hel"), oaiText("lo"), oaiFinish("stop"), oaiUsage(3, 2)}}
	for name, cut := range map[string]oaiStep{
		// The connection dropped in the middle of the stream.
		"dropped": {Chunks: []string{oaiText("Hel")}, Abort: true},
		// The stream ended cleanly but without its last chunk or [DONE].
		"ended early": {Chunks: []string{oaiText("Hel")}, NoDone: true},
	} {
		t.Run(name, func(t *testing.T) {
			s := oaiServe(t, cut, full)
			var d oaiDeltas
			resp, err := oaiModel(t, s, llm.OpenAIConfig{}).Complete(context.Background(), oaiHi, d.add)
			if err != nil {
				t.Fatal(err)
			}
			want := []llm.Delta{{Content: "Hel", Attempt: 1}, {Content: "Hel", Attempt: 2}, {Content: "lo", Attempt: 2}}
			if !reflect.DeepEqual(d.got, want) {
				t.Errorf("deltas %+v", d.got)
			}
			// The answer is the second attempt's alone.
			if resp.Message.Content != "Hello" || resp.Attempts != 2 || resp.Usage.OutputTokens != 2 {
				t.Errorf("response %+v", resp)
			}
		})
	}
}

func TestOpenAIConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	policy := oaiFast
	policy.MaxAttempts = 2
	m, err := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: "http://" + addr + "/v1", Model: "m", Retry: policy})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Complete(context.Background(), oaiHi, nil)
	if e := oaiErr(t, err); e.Kind != llm.KindNetwork || e.Attempts != 2 || e.Status != 0 {
		t.Errorf("error %+v", e)
	}
}

func TestOpenAICancelMidStream(t *testing.T) {
	s := oaiServe(t, oaiStep{Chunks: []string{oaiText("Thinking")}, Hang: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var deltas int
	_, err := oaiModel(t, s, llm.OpenAIConfig{}).Complete(ctx, oaiHi, func(llm.Delta) {
		deltas++
		cancel()
	})
	if deltas != 1 {
		t.Fatalf("%d deltas before the hang, want 1", deltas)
	}
	if e := oaiErr(t, err); e.Kind != llm.KindCancelled || !errors.Is(err, context.Canceled) {
		t.Errorf("error %+v", e)
	}
	s.wentAway(t)
	if n := len(s.requests()); n != 1 {
		t.Errorf("%d requests", n)
	}
}

func TestOpenAICancelWhileWaitingToRetry(t *testing.T) {
	s := oaiServe(t, oaiStep{Status: 429, Header: map[string]string{"Retry-After": "30"}, Body: `{"error":{"message":"slow down"}}`})
	// Long enough for the 429 to arrive on a loaded machine, far shorter
	// than the 30 s the retry would wait.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := oaiModel(t, s, llm.OpenAIConfig{}).Complete(ctx, oaiHi, nil)
	// A wait that did not end with the context would end in a second
	// attempt: one says the cancellation ended it.
	if e := oaiErr(t, err); e.Kind != llm.KindCancelled || e.Attempts != 1 || !strings.Contains(e.Message, "slow down") {
		t.Errorf("error %+v", e)
	}
	if n := len(s.requests()); n != 1 {
		t.Errorf("%d requests", n)
	}
}

func TestOpenAIAttemptTimeout(t *testing.T) {
	for name, step := range map[string]oaiStep{
		"no answer":  {Hang: true},
		"mid-stream": {Chunks: []string{oaiText("So")}, Hang: true},
	} {
		t.Run(name, func(t *testing.T) {
			s := oaiServe(t, step)
			start := time.Now()
			var onDelta func(llm.Delta)
			if step.Chunks != nil {
				onDelta = func(llm.Delta) {}
			}
			_, err := oaiModel(t, s, llm.OpenAIConfig{RequestTimeout: 200 * time.Millisecond}).Complete(context.Background(), oaiHi, onDelta)
			if e := oaiErr(t, err); e.Kind != llm.KindTimeout || e.Attempts != 1 {
				t.Errorf("error %+v", e)
			}
			// Not before its time (a timer never fires early), and by
			// going away from the request.
			if d := time.Since(start); d < 200*time.Millisecond {
				t.Errorf("returned after %v", d)
			}
			s.wentAway(t)
			if n := len(s.requests()); n != 1 {
				t.Errorf("%d requests", n)
			}
		})
	}
}

func TestOpenAIStreamToolCallsWithoutIndex(t *testing.T) {
	// Some servers send each call whole and without an index, or every
	// call at index 0; the ids tell the calls apart.
	noIndex := func(id, name, args string) map[string]any {
		f := oaiToolFrag(0, id, name, args)
		delete(f, "index")
		return f
	}
	for name, chunks := range map[string][]string{
		"no index": {
			oaiTools(noIndex("call_a", "read_file", oaiTwoCalls[0].Arguments)),
			oaiTools(noIndex("call_b", "web_search", oaiTwoCalls[1].Arguments[:5])),
			oaiTools(noIndex("", "", oaiTwoCalls[1].Arguments[5:])),
			oaiFinish("tool_calls"),
		},
		"all at index 0": {
			oaiTools(oaiToolFrag(0, "call_a", "read_file", oaiTwoCalls[0].Arguments)),
			oaiTools(oaiToolFrag(0, "call_b", "web_search", oaiTwoCalls[1].Arguments)),
			oaiFinish("stop"), // and a finish reason that ignores the calls
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := oaiServe(t, oaiStep{Chunks: chunks})
			resp, err := oaiModel(t, s, llm.OpenAIConfig{}).Complete(context.Background(), oaiHi, func(llm.Delta) {})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(resp.Message.ToolCalls, oaiTwoCalls) || resp.StopReason != llm.StopToolCalls {
				t.Errorf("response %+v", resp)
			}
		})
	}
}

func TestOpenAIStopReasons(t *testing.T) {
	for finish, want := range map[string]llm.StopReason{
		"stop": llm.StopEnd, "length": llm.StopLength, "content_filter": llm.StopContentFilter,
		"tool_calls": llm.StopToolCalls, "function_call": llm.StopToolCalls, "eos": llm.StopOther,
	} {
		s := oaiServe(t, oaiStep{Body: oaiCompletion(map[string]any{"content": "x"}, finish)})
		resp, err := oaiModel(t, s, llm.OpenAIConfig{}).Complete(context.Background(), oaiHi, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StopReason != want {
			t.Errorf("%s: %s, want %s", finish, resp.StopReason, want)
		}
	}
}

// FuzzOpenAIStream checks the reassembly of streamed tool calls: two calls
// whose arguments are cut at random places and interleaved at random come
// back exactly. It also serves raw, as a stream and as a whole answer: the
// provider must not panic, and fails, if it does, with an *llm.Error.
func FuzzOpenAIStream(f *testing.F) {
	f.Add(`{"path":"/tmp"}`, `{"q":"x"}`, uint64(1), []byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\n"))
	f.Add(``, `{"a":[1,2,{"b":"é"}]}`, uint64(7), []byte(`{"choices":[{"message":{"tool_calls":[{"function":{"arguments":"{"}}]},"finish_reason":"tool_calls"}]}`))
	f.Add(`{"deep":`, `{}`, uint64(42), []byte("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":-5,\"function\":{\"arguments\":\"x\"}},{\"id\":\"z\"}]}}]}\n\ndata: [DONE]\n\n"))
	f.Add(`"`, `\u0000`, uint64(3), []byte("data: {\"error\":\"boom\"}\n\n"))

	var body atomic.Pointer[oaiFuzzBody]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		b := body.Load()
		w.Header().Set("Content-Type", b.contentType)
		_, _ = w.Write(b.data)
	}))
	defer srv.Close()
	m, err := llm.NewOpenAI(llm.OpenAIConfig{
		BaseURL: srv.URL + "/v1", Model: "m", HTTPClient: srv.Client(),
		RequestTimeout: 10 * time.Second, Retry: llm.RetryPolicy{MaxAttempts: 1},
	})
	if err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, args0, args1 string, seed uint64, raw []byte) {
		args := []string{strings.ToValidUTF8(args0, ""), strings.ToValidUTF8(args1, "")}
		want := []llm.ToolCall{{ID: "call_0", Name: "f0", Arguments: args[0]}, {ID: "call_1", Name: "f1", Arguments: args[1]}}
		body.Store(&oaiFuzzBody{"text/event-stream", oaiFuzzStream(args, rand.New(rand.NewPCG(seed, ^seed)))})
		resp, err := m.Complete(context.Background(), oaiHi, func(llm.Delta) {})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(resp.Message.ToolCalls, want) {
			t.Fatalf("tool calls\n got %q\nwant %q", resp.Message.ToolCalls, want)
		}

		for _, ct := range []string{"text/event-stream", "application/json"} {
			body.Store(&oaiFuzzBody{ct, raw})
			var onDelta func(llm.Delta)
			if ct == "text/event-stream" {
				onDelta = func(d llm.Delta) {
					if d.Attempt != 1 {
						t.Errorf("delta %+v", d)
					}
				}
			}
			resp, err := m.Complete(context.Background(), oaiHi, onDelta)
			if err != nil {
				if llm.KindOf(err) == "" {
					t.Fatalf("%s: error %T %v is not an *llm.Error", ct, err, err)
				}
			} else if resp == nil {
				t.Fatalf("%s: no response and no error", ct)
			}
		}
	})
}

type oaiFuzzBody struct {
	contentType string
	data        []byte
}

// oaiFuzzStream streams two tool calls with the given arguments, each cut
// in pieces at random rune boundaries, the pieces of both calls
// interleaved at random, sometimes two in one chunk.
func oaiFuzzStream(args []string, r *rand.Rand) []byte {
	frags := make([][]map[string]any, len(args))
	for i, a := range args {
		var pieces []string
		start := 0
		for j := range a {
			if j > start && r.IntN(3) == 0 {
				pieces = append(pieces, a[start:j])
				start = j
			}
		}
		pieces = append(pieces, a[start:])
		for k, p := range pieces {
			id, name := "", ""
			if k == 0 {
				id, name = fmt.Sprintf("call_%d", i), fmt.Sprintf("f%d", i)
			}
			frags[i] = append(frags[i], oaiToolFrag(i, id, name, p))
		}
	}
	var sb strings.Builder
	for len(frags[0])+len(frags[1]) > 0 {
		var chunk []map[string]any
		for n := 1 + r.IntN(2); n > 0 && len(frags[0])+len(frags[1]) > 0; n-- {
			i := r.IntN(2)
			if len(frags[i]) == 0 {
				i = 1 - i
			}
			chunk = append(chunk, frags[i][0])
			frags[i] = frags[i][1:]
		}
		fmt.Fprintf(&sb, "data: %s\n\n", oaiTools(chunk...))
	}
	fmt.Fprintf(&sb, "data: %s\n\ndata: [DONE]\n\n", oaiFinish("tool_calls"))
	if !utf8.ValidString(sb.String()) {
		panic("invalid stream")
	}
	return []byte(sb.String())
}
