package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmux/toolmux/llm"
)

// The tests below run the provider against anthServer, a scripted
// Anthropic-compatible server: each request is checked (headers, body)
// and answered by the next scripted step, as JSON or as an SSE stream.

const anthKey = "test-key"

// anthStep is one scripted answer.
type anthStep struct {
	// check asserts on the request (optional).
	check func(t *testing.T, r anthReq)
	// status is the HTTP status (default 200), header extra headers.
	status int
	header map[string]string
	// body is a JSON answer; events, when not nil, an SSE stream instead.
	body   string
	events []string
	// hang waits, after the events if any, until the client goes away.
	hang bool
}

// anthReq is a request as the server saw it.
type anthReq struct {
	at     time.Time
	header http.Header
	body   map[string]any
}

type anthServer struct {
	t     *testing.T
	srv   *httptest.Server
	mu    sync.Mutex
	steps []anthStep
	reqs  []anthReq
}

func anthNewServer(t *testing.T, steps ...anthStep) *anthServer {
	t.Helper()
	s := &anthServer{t: t, steps: steps}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() {
		s.srv.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.steps) > 0 {
			t.Errorf("%d scripted answers were not asked for", len(s.steps))
		}
	})
	return s
}

func (s *anthServer) serve(w http.ResponseWriter, r *http.Request) {
	t := s.t
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		t.Errorf("request %s %s, want POST /v1/messages", r.Method, r.URL.Path)
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	if got := r.Header.Get("X-Api-Key"); got != anthKey {
		t.Errorf("x-api-key = %q, want %q", got, anthKey)
	}
	if got := r.Header.Get("Anthropic-Version"); got != "2023-06-01" {
		t.Errorf("anthropic-version = %q, want 2023-06-01", got)
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		t.Errorf("reading the request: %v", err)
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Errorf("request body is not JSON: %v: %s", err, raw)
	}
	req := anthReq{at: time.Now(), header: r.Header.Clone(), body: body}

	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	if len(s.steps) == 0 {
		s.mu.Unlock()
		t.Errorf("unexpected request %d: %s", len(s.reqs), raw)
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, anthErrBody("invalid_request_error", "no more scripted answers"))
		return
	}
	step := s.steps[0]
	s.steps = s.steps[1:]
	s.mu.Unlock()

	if step.check != nil {
		step.check(t, req)
	}
	hang := func() {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
			t.Errorf("the client did not go away")
		}
	}
	if step.hang && step.events == nil {
		hang()
		return
	}
	for k, v := range step.header {
		w.Header().Set(k, v)
	}
	status := step.status
	if status == 0 {
		status = http.StatusOK
	}
	if step.events == nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, step.body)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(status)
	f := w.(http.Flusher)
	f.Flush()
	for _, ev := range step.events {
		io.WriteString(w, ev)
		f.Flush()
	}
	if step.hang {
		hang()
	}
}

func (s *anthServer) requests() []anthReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]anthReq(nil), s.reqs...)
}

// anthModel returns a provider talking to s, with fast retries.
func (s *anthServer) anthModel(t *testing.T, edit func(*llm.AnthropicConfig)) *llm.Anthropic {
	t.Helper()
	cfg := llm.AnthropicConfig{
		BaseURL:    s.srv.URL,
		APIKey:     anthKey,
		Model:      "claude-test",
		HTTPClient: s.srv.Client(),
		Retry:      llm.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond},
	}
	if edit != nil {
		edit(&cfg)
	}
	m, err := llm.NewAnthropic(cfg)
	if err != nil {
		t.Fatalf("NewAnthropic: %v", err)
	}
	return m
}

// SSE events, built from maps so that the JSON is always well formed.

func anthSSE(typ string, data map[string]any) string {
	data["type"] = typ
	b, err := json.Marshal(data)
	if err != nil {
		panic(err)
	}
	return "event: " + typ + "\ndata: " + string(b) + "\n\n"
}

func anthMsgStart(inputTokens int) string {
	return anthSSE("message_start", map[string]any{"message": map[string]any{
		"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": inputTokens, "output_tokens": 1},
	}})
}

func anthBlockStart(i int, block map[string]any) string {
	return anthSSE("content_block_start", map[string]any{"index": i, "content_block": block})
}

func anthTextStart(i int) string {
	return anthBlockStart(i, map[string]any{"type": "text", "text": ""})
}

func anthThinkingStart(i int) string {
	return anthBlockStart(i, map[string]any{"type": "thinking", "thinking": "", "signature": ""})
}

func anthToolStart(i int, id, name string) string {
	return anthBlockStart(i, map[string]any{"type": "tool_use", "id": id, "name": name, "input": map[string]any{}})
}

func anthDelta(i int, delta map[string]any) string {
	return anthSSE("content_block_delta", map[string]any{"index": i, "delta": delta})
}

func anthTextDelta(i int, s string) string {
	return anthDelta(i, map[string]any{"type": "text_delta", "text": s})
}

func anthThinkingDelta(i int, s string) string {
	return anthDelta(i, map[string]any{"type": "thinking_delta", "thinking": s})
}

func anthSignatureDelta(i int, s string) string {
	return anthDelta(i, map[string]any{"type": "signature_delta", "signature": s})
}

func anthJSONDelta(i int, s string) string {
	return anthDelta(i, map[string]any{"type": "input_json_delta", "partial_json": s})
}

func anthBlockStop(i int) string {
	return anthSSE("content_block_stop", map[string]any{"index": i})
}

func anthMsgDelta(stop string, outputTokens int) string {
	return anthSSE("message_delta", map[string]any{
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": outputTokens},
	})
}

func anthMsgStop() string { return anthSSE("message_stop", map[string]any{}) }

func anthPing() string { return anthSSE("ping", map[string]any{}) }

func anthErrEvent(typ, msg string) string {
	return "event: error\ndata: " + anthErrBody(typ, msg) + "\n\n"
}

func anthErrBody(typ, msg string) string {
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
	return string(b)
}

// anthTextStream is a whole streamed answer of one text block, each part
// one text_delta.
func anthTextStream(parts ...string) []string {
	ev := []string{anthMsgStart(10), anthTextStart(0)}
	for _, p := range parts {
		ev = append(ev, anthTextDelta(0, p))
	}
	return append(ev, anthBlockStop(0), anthMsgDelta("end_turn", 5), anthMsgStop())
}

// anthJSONAnswer is a non-streamed answer of one text block.
func anthJSONAnswer(text, stop string) string {
	b, _ := json.Marshal(map[string]any{
		"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
		"content":     []any{map[string]any{"type": "text", "text": text}},
		"stop_reason": stop, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": 12, "output_tokens": 4},
	})
	return string(b)
}

// anthSplit cuts s into pieces of 1, 2, 3, 5, 1, 2... runes, as a server
// streaming tool arguments might.
func anthSplit(s string) []string {
	var out []string
	r := []rune(s)
	sizes := []int{1, 2, 3, 5}
	for i, k := 0, 0; i < len(r); k++ {
		n := min(sizes[k%len(sizes)], len(r)-i)
		out = append(out, string(r[i:i+n]))
		i += n
	}
	return out
}

// anthJSONEqual compares a decoded JSON value with the JSON text want.
func anthJSONEqual(t *testing.T, what string, got any, want string) {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want for %s: %v", what, err)
	}
	if !reflect.DeepEqual(got, w) {
		g, _ := json.Marshal(got)
		t.Errorf("%s =\n  %s\nwant\n  %s", what, g, want)
	}
}

// anthErr asserts that err is an *llm.Error of kind k from the provider.
func anthErr(t *testing.T, err error, k llm.Kind) *llm.Error {
	t.Helper()
	e, ok := errors.AsType[*llm.Error](err)
	if !ok {
		t.Fatalf("error %v (%T) is not an *llm.Error", err, err)
	}
	if e.Kind != k || e.Provider != "anthropic" {
		t.Fatalf("error %v: kind %q provider %q, want %q anthropic", err, e.Kind, e.Provider, k)
	}
	return e
}

func anthPtr[T any](v T) *T { return &v }

func TestAnthropicPlainAnswer(t *testing.T) {
	s := anthNewServer(t, anthStep{
		check: func(t *testing.T, r anthReq) {
			anthJSONEqual(t, "request", r.body, `{
				"model": "claude-test",
				"max_tokens": 8192,
				"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
			}`)
		},
		body: `{"id":"msg_1","type":"message","role":"assistant","model":"claude-test-20250101",
			"content":[{"type":"text","text":"Hello"},{"type":"text","text":", world"}],
			"stop_reason":"end_turn","stop_sequence":null,
			"usage":{"input_tokens":12,"output_tokens":4,"cache_read_input_tokens":100,"cache_creation_input_tokens":3}}`,
	})
	m := s.anthModel(t, nil)
	resp, err := m.Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "Hi"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := llm.Message{Role: llm.RoleAssistant, Content: "Hello, world"}
	if !reflect.DeepEqual(resp.Message, want) {
		t.Errorf("message = %+v, want %+v", resp.Message, want)
	}
	if resp.StopReason != llm.StopEnd || resp.Model != "claude-test-20250101" || resp.Attempts != 1 || resp.Duration <= 0 {
		t.Errorf("response = %+v", resp)
	}
	// Cached prompt tokens count as input: the prompt is that long.
	if resp.Usage != (llm.Usage{InputTokens: 115, OutputTokens: 4}) {
		t.Errorf("usage = %+v", resp.Usage)
	}
}

func TestAnthropicRequestMapping(t *testing.T) {
	s := anthNewServer(t, anthStep{
		check: func(t *testing.T, r anthReq) {
			anthJSONEqual(t, "request", r.body, `{
				"model": "claude-override",
				"max_tokens": 1234,
				"temperature": 0.2,
				"top_p": 0.9,
				"top_k": 5,
				"metadata": {"user_id": "u-1"},
				"system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Answer in French."}],
				"tool_choice": {"type": "any"},
				"tools": [
					{"name": "weather", "description": "Current weather.",
					 "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
					                  "required": ["city"], "additionalProperties": false}},
					{"name": "clock", "input_schema": {"type": "object", "properties": {}}}
				],
				"messages": [
					{"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?"}]},
					{"role": "assistant", "content": [
						{"type": "text", "text": "Checking both."},
						{"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}},
						{"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {"_raw": "{\"city\": \"Ro"}},
						{"type": "tool_use", "id": "toolu_3", "name": "clock", "input": {}}
					]},
					{"role": "user", "content": [
						{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18C, sunny"}]},
						{"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "arguments are not JSON"}], "is_error": true},
						{"type": "tool_result", "tool_use_id": "toolu_3"},
						{"type": "text", "text": "And tomorrow?"}
					]}
				]
			}`)
		},
		body: anthJSONAnswer("Demain aussi.", "end_turn"),
	})
	m := s.anthModel(t, func(c *llm.AnthropicConfig) {
		c.Temperature = anthPtr(0.7)
		c.TopP = anthPtr(0.9)
		c.MaxTokens = 2000
		c.Extra = map[string]any{"top_k": 5, "metadata.user_id": "u-1"}
	})
	req := llm.Request{
		Model:  "claude-override",
		System: "Be brief.",
		Messages: []llm.Message{
			{Role: llm.RoleSystem, Content: "Answer in French."},
			{Role: llm.RoleUser, Content: "Weather in Paris and Rome?"},
			{Role: llm.RoleAssistant, Content: "Checking both.", Reasoning: "not sent back", ToolCalls: []llm.ToolCall{
				{ID: "toolu_1", Name: "weather", Arguments: `{"city":"Paris"}`},
				{ID: "toolu_2", Name: "weather", Arguments: `{"city": "Ro`},
				{ID: "toolu_3", Name: "clock", Arguments: ``},
			}},
			{Role: llm.RoleTool, ToolCallID: "toolu_1", Name: "weather", Content: "18C, sunny"},
			{Role: llm.RoleTool, ToolCallID: "toolu_2", Name: "weather", Content: "arguments are not JSON", IsError: true},
			{Role: llm.RoleTool, ToolCallID: "toolu_3", Name: "clock"},
			{Role: llm.RoleUser, Content: "And tomorrow?"},
		},
		Tools: []llm.Tool{
			{Name: "weather", Description: "Current weather.", Parameters: map[string]any{
				"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}},
				"required": []any{"city"}, "additionalProperties": false,
			}},
			{Name: "clock"},
		},
		ToolChoice:  llm.ToolChoiceRequired,
		Temperature: anthPtr(0.2),
		MaxTokens:   1234,
	}
	resp, err := m.Complete(t.Context(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "Demain aussi." {
		t.Errorf("content = %q", resp.Message.Content)
	}
}

func TestAnthropicToolChoice(t *testing.T) {
	choices := map[llm.ToolChoice]string{
		llm.ToolChoiceAuto:     `{"type": "auto"}`,
		llm.ToolChoiceNone:     `{"type": "none"}`,
		llm.ToolChoiceRequired: `{"type": "any"}`,
	}
	for choice, want := range choices {
		t.Run(string(choice), func(t *testing.T) {
			s := anthNewServer(t, anthStep{
				check: func(t *testing.T, r anthReq) { anthJSONEqual(t, "tool_choice", r.body["tool_choice"], want) },
				body:  anthJSONAnswer("ok", "end_turn"),
			})
			_, err := s.anthModel(t, nil).Complete(t.Context(), llm.Request{
				Messages:   []llm.Message{{Role: llm.RoleUser, Content: "Hi"}},
				Tools:      []llm.Tool{{Name: "clock"}},
				ToolChoice: choice,
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("unknown", func(t *testing.T) {
		s := anthNewServer(t)
		_, err := s.anthModel(t, nil).Complete(t.Context(), llm.Request{
			Messages:   []llm.Message{{Role: llm.RoleUser, Content: "Hi"}},
			Tools:      []llm.Tool{{Name: "clock"}},
			ToolChoice: "sometimes",
		}, nil)
		anthErr(t, err, llm.KindBadRequest)
	})
}

func TestAnthropicStopReasons(t *testing.T) {
	want := map[string]llm.StopReason{
		"end_turn":      llm.StopEnd,
		"stop_sequence": llm.StopEnd,
		"tool_use":      llm.StopToolCalls,
		"max_tokens":    llm.StopLength,
		"refusal":       llm.StopContentFilter,
		"pause_turn":    llm.StopOther,
	}
	for reason, stop := range want {
		s := anthNewServer(t, anthStep{body: anthJSONAnswer("x", reason)})
		resp, err := s.anthModel(t, nil).Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "Hi"}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StopReason != stop {
			t.Errorf("stop_reason %s → %q, want %q", reason, resp.StopReason, stop)
		}
	}
}

func TestAnthropicStreamParallelToolCalls(t *testing.T) {
	argsA := `{"city": "Paris", "units": "metric"}`
	argsB := `{"city":"Rome","days":[1,2,3],"note":"späť \"quoted\" {}"}`
	events := []string{
		anthMsgStart(50), anthPing(),
		anthThinkingStart(0), anthThinkingDelta(0, "The user wants "), anthThinkingDelta(0, "two cities."),
		anthSignatureDelta(0, "sig-1"), anthBlockStop(0),
		anthTextStart(1), anthTextDelta(1, "Checking "), anthTextDelta(1, "both."), anthBlockStop(1),
		anthToolStart(2, "toolu_a", "weather"),
	}
	for _, p := range anthSplit(argsA) {
		events = append(events, anthJSONDelta(2, p))
	}
	events = append(events, anthBlockStop(2), anthPing(), anthToolStart(3, "toolu_b", "forecast"))
	for _, p := range anthSplit(argsB) {
		events = append(events, anthJSONDelta(3, p))
	}
	events = append(events, anthBlockStop(3), anthMsgDelta("tool_use", 77), anthMsgStop())

	s := anthNewServer(t,
		anthStep{
			check: func(t *testing.T, r anthReq) {
				if r.body["stream"] != true {
					t.Errorf("stream = %v, want true", r.body["stream"])
				}
				anthJSONEqual(t, "thinking", r.body["thinking"], `{"type": "enabled", "budget_tokens": 2048}`)
				anthJSONEqual(t, "max_tokens", r.body["max_tokens"], `10240`)
			},
			events: events,
		},
		// The next turn sends the results back: the signed thinking block
		// must lead the assistant turn again, as the API requires.
		anthStep{
			check: func(t *testing.T, r anthReq) {
				anthJSONEqual(t, "messages", r.body["messages"], `[
					{"role": "user", "content": [{"type": "text", "text": "Weather in Paris, forecast for Rome?"}]},
					{"role": "assistant", "content": [
						{"type": "thinking", "thinking": "The user wants two cities.", "signature": "sig-1"},
						{"type": "text", "text": "Checking both."},
						{"type": "tool_use", "id": "toolu_a", "name": "weather", "input": {"city": "Paris", "units": "metric"}},
						{"type": "tool_use", "id": "toolu_b", "name": "forecast", "input": {"city": "Rome", "days": [1, 2, 3], "note": "späť \"quoted\" {}"}}
					]},
					{"role": "user", "content": [
						{"type": "tool_result", "tool_use_id": "toolu_a", "content": [{"type": "text", "text": "18C"}]},
						{"type": "tool_result", "tool_use_id": "toolu_b", "content": [{"type": "text", "text": "rain"}]}
					]}
				]`)
			},
			body: anthJSONAnswer("Sunny in Paris, rain in Rome.", "end_turn"),
		},
	)
	m := s.anthModel(t, func(c *llm.AnthropicConfig) { c.ThinkingBudget = 2048 })
	user := llm.Message{Role: llm.RoleUser, Content: "Weather in Paris, forecast for Rome?"}
	var deltas []llm.Delta
	resp, err := m.Complete(t.Context(), llm.Request{
		Messages: []llm.Message{user},
		Tools:    []llm.Tool{{Name: "weather"}, {Name: "forecast"}},
	}, func(d llm.Delta) { deltas = append(deltas, d) })
	if err != nil {
		t.Fatal(err)
	}
	wantDeltas := []llm.Delta{
		{Reasoning: "The user wants ", Attempt: 1},
		{Reasoning: "two cities.", Attempt: 1},
		{Content: "Checking ", Attempt: 1},
		{Content: "both.", Attempt: 1},
	}
	if !reflect.DeepEqual(deltas, wantDeltas) {
		t.Errorf("deltas = %+v\nwant %+v", deltas, wantDeltas)
	}
	wantMsg := llm.Message{
		Role:      llm.RoleAssistant,
		Content:   "Checking both.",
		Reasoning: "The user wants two cities.",
		ToolCalls: []llm.ToolCall{
			{ID: "toolu_a", Name: "weather", Arguments: argsA},
			{ID: "toolu_b", Name: "forecast", Arguments: argsB},
		},
	}
	if !reflect.DeepEqual(resp.Message, wantMsg) {
		t.Errorf("message = %+v\nwant %+v", resp.Message, wantMsg)
	}
	if resp.StopReason != llm.StopToolCalls || resp.Usage != (llm.Usage{InputTokens: 50, OutputTokens: 77}) || resp.Attempts != 1 || resp.Model != "claude-test" {
		t.Errorf("response = %+v", resp)
	}

	resp, err = m.Complete(t.Context(), llm.Request{Messages: []llm.Message{
		user, resp.Message,
		{Role: llm.RoleTool, ToolCallID: "toolu_a", Content: "18C"},
		{Role: llm.RoleTool, ToolCallID: "toolu_b", Content: "rain"},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "Sunny in Paris, rain in Rome." {
		t.Errorf("content = %q", resp.Message.Content)
	}
}

// A tool call cut off by max_tokens keeps its arguments as the model sent
// them (not valid JSON), for the pipeline to repair or report.
func TestAnthropicStreamToolArgumentsKeptAsSent(t *testing.T) {
	s := anthNewServer(t, anthStep{events: []string{
		anthMsgStart(10), anthToolStart(0, "toolu_x", "write_file"),
		anthJSONDelta(0, `{"path": "a.txt", `), anthJSONDelta(0, `"content": "Lorem ip`),
		anthBlockStop(0), anthMsgDelta("max_tokens", 4096), anthMsgStop(),
	}})
	resp, err := s.anthModel(t, nil).Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "Write"}}}, func(llm.Delta) {})
	if err != nil {
		t.Fatal(err)
	}
	want := []llm.ToolCall{{ID: "toolu_x", Name: "write_file", Arguments: `{"path": "a.txt", "content": "Lorem ip`}}
	if !reflect.DeepEqual(resp.Message.ToolCalls, want) || resp.StopReason != llm.StopLength {
		t.Errorf("response = %+v", resp)
	}
}

func TestAnthropicRetry429RetryAfter(t *testing.T) {
	const wait = 300 * time.Millisecond
	s := anthNewServer(t,
		anthStep{status: 429, header: map[string]string{"Retry-After": "0.3"}, body: anthErrBody("rate_limit_error", "slow down")},
		anthStep{body: anthJSONAnswer("done", "end_turn")},
	)
	// The backoff alone would retry after a millisecond or so.
	resp, err := s.anthModel(t, nil).Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "Hi"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Attempts != 2 || resp.Message.Content != "done" {
		t.Errorf("response = %+v", resp)
	}
	reqs := s.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	if gap := reqs[1].at.Sub(reqs[0].at); gap < wait {
		t.Errorf("second request came %v after the first, want ≥ %v (Retry-After)", gap, wait)
	}
}

func TestAnthropicRetryOverloaded529(t *testing.T) {
	s := anthNewServer(t,
		anthStep{status: 529, body: anthErrBody("overloaded_error", "Overloaded")},
		anthStep{events: anthTextStream("Hello ", "again")},
	)
	var deltas []llm.Delta
	resp, err := s.anthModel(t, nil).Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "Hi"}}},
		func(d llm.Delta) { deltas = append(deltas, d) })
	if err != nil {
		t.Fatal(err)
	}
	if resp.Attempts != 2 || resp.Message.Content != "Hello again" {
		t.Errorf("response = %+v", resp)
	}
	want := []llm.Delta{{Content: "Hello ", Attempt: 2}, {Content: "again", Attempt: 2}}
	if !reflect.DeepEqual(deltas, want) {
		t.Errorf("deltas = %+v, want %+v", deltas, want)
	}
}

func TestAnthropicErrorsNotRetried(t *testing.T) {
	cases := []struct {
		name   string
		status int
		typ    string
		msg    string
		kind   llm.Kind
	}{
		{"bad request", 400, "invalid_request_error", "tools.0.input_schema: JSON schema is invalid", llm.KindBadRequest},
		{"auth", 401, "authentication_error", "invalid x-api-key", llm.KindAuth},
		{"permission", 403, "permission_error", "not allowed", llm.KindAuth},
		{"prompt too long", 400, "invalid_request_error", "prompt is too long: 215000 tokens > 200000 maximum", llm.KindContextLength},
		{"exceeds context", 400, "invalid_request_error", "input length and `max_tokens` exceed context limit: 190000 + 20000 > 200000, decrease input length or `max_tokens` and try again", llm.KindContextLength},
		{"request too large", 413, "request_too_large", "Request exceeds the maximum allowed number of bytes.", llm.KindContextLength},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := anthNewServer(t, anthStep{status: c.status, body: anthErrBody(c.typ, c.msg)})
			_, err := s.anthModel(t, nil).Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "Hi"}}}, nil)
			e := anthErr(t, err, c.kind)
			if e.Status != c.status || e.Attempts != 1 || e.Retryable() || !strings.Contains(e.Message, c.msg) {
				t.Errorf("error = %+v", e)
			}
			if n := len(s.requests()); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
		})
	}
}

func TestAnthropicStreamErrorEventRetried(t *testing.T) {
	s := anthNewServer(t,
		anthStep{events: []string{anthMsgStart(10), anthTextStart(0), anthTextDelta(0, "partial"), anthErrEvent("overloaded_error", "Overloaded")}},
		anthStep{events: anthTextStream("Hello ", "there")},
	)
	var deltas []llm.Delta
	resp, err := s.anthModel(t, nil).Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "Hi"}}},
		func(d llm.Delta) { deltas = append(deltas, d) })
	if err != nil {
		t.Fatal(err)
	}
	want := []llm.Delta{{Content: "partial", Attempt: 1}, {Content: "Hello ", Attempt: 2}, {Content: "there", Attempt: 2}}
	if !reflect.DeepEqual(deltas, want) {
		t.Errorf("deltas = %+v, want %+v", deltas, want)
	}
	if resp.Attempts != 2 || resp.Message.Content != "Hello there" {
		t.Errorf("response = %+v", resp)
	}
}

func TestAnthropicStreamErrorEventGivesUp(t *testing.T) {
	var steps []anthStep
	for range 3 {
		steps = append(steps, anthStep{events: []string{anthMsgStart(10), anthErrEvent("overloaded_error", "Overloaded")}})
	}
	s := anthNewServer(t, steps...)
	_, err := s.anthModel(t, nil).Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "Hi"}}}, func(llm.Delta) {})
	e := anthErr(t, err, llm.KindServer)
	if e.Attempts != 3 || !strings.Contains(e.Message, "Overloaded") {
		t.Errorf("error = %+v", e)
	}
}

func TestAnthropicStreamCutShortRetried(t *testing.T) {
	s := anthNewServer(t,
		// The connection ends cleanly, but before message_stop.
		anthStep{events: []string{anthMsgStart(10), anthTextStart(0), anthTextDelta(0, "par")}},
		anthStep{events: anthTextStream("full")},
	)
	var deltas []llm.Delta
	resp, err := s.anthModel(t, nil).Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "Hi"}}},
		func(d llm.Delta) { deltas = append(deltas, d) })
	if err != nil {
		t.Fatal(err)
	}
	want := []llm.Delta{{Content: "par", Attempt: 1}, {Content: "full", Attempt: 2}}
	if !reflect.DeepEqual(deltas, want) || resp.Attempts != 2 || resp.Message.Content != "full" {
		t.Errorf("deltas = %+v, response = %+v", deltas, resp)
	}
}

func TestAnthropicNetworkError(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	m, err := llm.NewAnthropic(llm.AnthropicConfig{
		BaseURL: url, APIKey: anthKey, Model: "claude-test",
		Retry: llm.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "Hi"}}}, nil)
	if e := anthErr(t, err, llm.KindNetwork); e.Attempts != 2 || e.Status != 0 {
		t.Errorf("error = %+v", e)
	}
}

func TestAnthropicCancelMidStream(t *testing.T) {
	s := anthNewServer(t, anthStep{
		events: []string{anthMsgStart(10), anthTextStart(0), anthTextDelta(0, "Let me think")},
		hang:   true,
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var deltas []llm.Delta
	_, err := s.anthModel(t, nil).Complete(ctx, llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "Hi"}}},
		func(d llm.Delta) { deltas = append(deltas, d); cancel() })
	e := anthErr(t, err, llm.KindCancelled)
	if !errors.Is(err, context.Canceled) || e.Attempts != 1 {
		t.Errorf("error = %+v", e)
	}
	if len(deltas) != 1 || len(s.requests()) != 1 {
		t.Errorf("deltas = %+v, %d requests", deltas, len(s.requests()))
	}
	// The server's hang fails the test unless the client goes away.
}

func TestAnthropicCancelledBetweenAttempts(t *testing.T) {
	s := anthNewServer(t, anthStep{status: 429, header: map[string]string{"Retry-After": "30"}, body: anthErrBody("rate_limit_error", "slow down")})
	// Long enough for the 429 to arrive on a loaded machine, far shorter
	// than the 30 s the retry would wait; a wait that did not end with
	// the context would end in a second attempt.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, err := s.anthModel(t, nil).Complete(ctx, llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "Hi"}}}, nil)
	if e := anthErr(t, err, llm.KindCancelled); e.Attempts != 1 || !strings.Contains(e.Message, "rate_limited") {
		t.Errorf("error = %+v", e)
	}
}

func TestAnthropicTimeout(t *testing.T) {
	const timeout = 150 * time.Millisecond
	t.Run("waiting for the answer", func(t *testing.T) {
		s := anthNewServer(t, anthStep{hang: true})
		start := time.Now()
		_, err := s.anthModel(t, func(c *llm.AnthropicConfig) { c.RequestTimeout = timeout }).
			Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "Hi"}}}, nil)
		e := anthErr(t, err, llm.KindTimeout)
		if e.Attempts != 1 || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error = %+v", e)
		}
		// Not before its time (a timer never fires early); the server's
		// hang fails the test unless the client goes away.
		if d := time.Since(start); d < timeout {
			t.Errorf("returned after %v, before its %v", d, timeout)
		}
	})
	t.Run("mid-stream", func(t *testing.T) {
		s := anthNewServer(t, anthStep{events: []string{anthMsgStart(10), anthTextStart(0), anthTextDelta(0, "slow")}, hang: true})
		var deltas []llm.Delta
		_, err := s.anthModel(t, func(c *llm.AnthropicConfig) { c.RequestTimeout = timeout }).
			Complete(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "Hi"}}}, func(d llm.Delta) { deltas = append(deltas, d) })
		if e := anthErr(t, err, llm.KindTimeout); e.Attempts != 1 {
			t.Errorf("error = %+v", e)
		}
		if len(deltas) != 1 {
			t.Errorf("deltas = %+v", deltas)
		}
	})
}

func TestAnthropicConfigValidation(t *testing.T) {
	cases := []struct {
		cfg  llm.AnthropicConfig
		want string
	}{
		{llm.AnthropicConfig{APIKey: "k"}, "Model"},
		{llm.AnthropicConfig{Model: "m", BaseURL: "api.anthropic.com"}, "BaseURL"},
		{llm.AnthropicConfig{Model: "m", ThinkingBudget: 4096, MaxTokens: 4000}, "MaxTokens"},
	}
	for _, c := range cases {
		if _, err := llm.NewAnthropic(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewAnthropic(%+v) = %v, want an error naming %s", c.cfg, err, c.want)
		}
	}
	if _, err := llm.NewAnthropic(llm.AnthropicConfig{Model: "m"}); err != nil {
		t.Errorf("defaults: %v", err)
	}
}
