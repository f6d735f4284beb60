// Package llmtest serves scripted language models over HTTP for tests and
// benchmarks: an OpenAI-compatible chat completions endpoint and an
// Anthropic Messages endpoint that answer each request with the next reply
// of a script, streamed or not as the request asks, and record every
// request. The model is the one thing toolmux's tests cannot run for real;
// everything else (the HTTP, the providers' SDKs, the agent, the tools)
// is real.
package llmtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Call is a tool call a scripted reply makes.
type Call struct {
	Name string
	// Args is the arguments' JSON text, sent as is (it may be broken on
	// purpose).
	Args string
}

// Reply is one scripted answer.
type Reply struct {
	Content   string
	Reasoning string
	Calls     []Call
	// Finish overrides the finish reason ("stop", "tool_calls", "length",
	// "content_filter"); default: tool_calls when there are calls.
	Finish string
	// Status, when not 0 or 200, answers with this HTTP status and Body
	// (a JSON error by default), and RetryAfter as the Retry-After header.
	Status     int
	Body       string
	RetryAfter string
	// Delay is waited before answering (a slow model; ends early when the
	// request is cancelled).
	Delay time.Duration
}

// Request is one request the server received, decoded.
type Request struct {
	// Messages are the request's messages as JSON objects (for Anthropic,
	// with the system prompt in System).
	Messages []map[string]any
	System   string
	// Tools are the names of the tools offered, in order.
	Tools      []string
	ToolChoice any
	Stream     bool
	Raw        map[string]any
	// Header is the request's HTTP header (the API key's header, the
	// client's identification).
	Header http.Header
	// Bytes is the size of the request's body as sent.
	Bytes int
}

// Text is every message's text content joined, for assertions on what the
// model was shown.
func (r Request) Text() string {
	var b strings.Builder
	for _, m := range r.Messages {
		switch c := m["content"].(type) {
		case string:
			b.WriteString(c)
		case []any:
			for _, p := range c {
				if pm, ok := p.(map[string]any); ok {
					if t, ok := pm["text"].(string); ok {
						b.WriteString(t)
					}
					if t, ok := pm["content"].(string); ok {
						b.WriteString(t)
					}
					if parts, ok := pm["content"].([]any); ok {
						for _, q := range parts {
							if qm, ok := q.(map[string]any); ok {
								if t, ok := qm["text"].(string); ok {
									b.WriteString(t)
								}
							}
						}
					}
				}
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Dialogue is what a request's conversation holds, for scripts that
// answer by where the conversation is: the first user message (the task),
// how many assistant messages there are (the turns so far), and the text
// of each tool result, in order.
func (r Request) Dialogue() (task string, assistants int, results []string) {
	for _, m := range r.Messages {
		c, _ := m["content"].(string)
		switch m["role"] {
		case "user":
			if task == "" {
				task = c
			}
		case "assistant":
			assistants++
		case "tool":
			results = append(results, c)
		}
	}
	return task, assistants, results
}

// Script chooses the reply to a request: the n-th request (from 0).
type Script func(n int, req Request) Reply

// Replies is a script that answers with replies in order; past the end it
// answers "script exhausted" with status 500, which a test notices.
func Replies(replies ...Reply) Script {
	return func(n int, _ Request) Reply {
		if n < len(replies) {
			return replies[n]
		}
		return Reply{Status: 500, Body: `{"error":{"message":"llmtest: script exhausted","type":"server_error"}}`}
	}
}

// Server is a scripted model server.
type Server struct {
	*httptest.Server
	anthropic bool
	script    Script

	mu   sync.Mutex
	reqs []Request
}

// OpenAI starts an OpenAI-compatible server; its base URL is URL + "/v1".
func OpenAI(t testing.TB, script Script) *Server {
	return start(t, script, false)
}

// Anthropic starts an Anthropic-compatible server at URL.
func Anthropic(t testing.TB, script Script) *Server {
	return start(t, script, true)
}

func start(t testing.TB, script Script, anthropic bool) *Server {
	s := &Server{anthropic: anthropic, script: script}
	s.Server = httptest.NewServer(http.HandlerFunc(s.handle))
	t.Cleanup(s.Close)
	return s
}

// BaseURL is the URL a provider is configured with.
func (s *Server) BaseURL() string {
	if s.anthropic {
		return s.URL
	}
	return s.URL + "/v1"
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	want := "/v1/chat/completions"
	if s.anthropic {
		want = "/v1/messages"
	}
	if r.URL.Path != want {
		http.Error(w, `{"error":{"message":"no route `+r.URL.Path+`"}}`, http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var raw map[string]any
	if err := json.Unmarshal(body, &raw); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	req := decode(raw, s.anthropic)
	req.Header = r.Header.Clone()
	req.Bytes = len(body)
	s.mu.Lock()
	n := len(s.reqs)
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	reply := s.script(n, req)
	if reply.Delay > 0 {
		select {
		case <-time.After(reply.Delay):
		case <-r.Context().Done():
			return
		}
	}
	if reply.Status != 0 && reply.Status != http.StatusOK {
		if reply.RetryAfter != "" {
			w.Header().Set("Retry-After", reply.RetryAfter)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(reply.Status)
		b := reply.Body
		if b == "" {
			b = fmt.Sprintf(`{"type":"error","error":{"type":"api_error","message":"scripted status %d"}}`, reply.Status)
		}
		io.WriteString(w, b)
		return
	}
	if s.anthropic {
		anthropicAnswer(w, req, reply, n)
	} else {
		openAIAnswer(w, req, reply, n)
	}
}

func decode(raw map[string]any, anthropic bool) Request {
	req := Request{Raw: raw, ToolChoice: raw["tool_choice"]}
	req.Stream, _ = raw["stream"].(bool)
	if msgs, ok := raw["messages"].([]any); ok {
		for _, m := range msgs {
			if mm, ok := m.(map[string]any); ok {
				req.Messages = append(req.Messages, mm)
			}
		}
	}
	switch sys := raw["system"].(type) {
	case string:
		req.System = sys
	case []any:
		for _, p := range sys {
			if pm, ok := p.(map[string]any); ok {
				t, _ := pm["text"].(string)
				req.System += t
			}
		}
	}
	if !anthropic && len(req.Messages) > 0 && req.Messages[0]["role"] == "system" {
		req.System, _ = req.Messages[0]["content"].(string)
	}
	if tools, ok := raw["tools"].([]any); ok {
		for _, t := range tools {
			tm, _ := t.(map[string]any)
			if f, ok := tm["function"].(map[string]any); ok {
				name, _ := f["name"].(string)
				req.Tools = append(req.Tools, name)
			} else if name, ok := tm["name"].(string); ok {
				req.Tools = append(req.Tools, name)
			}
		}
	}
	return req
}

func finish(reply Reply) string {
	if reply.Finish != "" {
		return reply.Finish
	}
	if len(reply.Calls) > 0 {
		return "tool_calls"
	}
	return "stop"
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func openAIAnswer(w http.ResponseWriter, req Request, reply Reply, n int) {
	id := fmt.Sprintf("chatcmpl-%d", n)
	usage := map[string]any{"prompt_tokens": 10 * (n + 1), "completion_tokens": 5, "total_tokens": 10*(n+1) + 5}
	if !req.Stream {
		msg := map[string]any{"role": "assistant", "content": reply.Content}
		if reply.Reasoning != "" {
			msg["reasoning_content"] = reply.Reasoning
		}
		if len(reply.Calls) > 0 {
			var calls []any
			for i, c := range reply.Calls {
				calls = append(calls, map[string]any{"id": fmt.Sprintf("call_%d_%d", n, i), "type": "function",
					"function": map[string]any{"name": c.Name, "arguments": c.Args}})
			}
			msg["tool_calls"] = calls
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, mustJSON(map[string]any{"id": id, "object": "chat.completion", "created": 1, "model": "scripted",
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish(reply)}}, "usage": usage}))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl, _ := w.(http.Flusher)
	chunk := func(delta map[string]any, fin any, extra map[string]any) {
		c := map[string]any{"id": id, "object": "chat.completion.chunk", "created": 1, "model": "scripted",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": fin}}}
		for k, v := range extra {
			c[k] = v
		}
		fmt.Fprintf(w, "data: %s\n\n", mustJSON(c))
		if fl != nil {
			fl.Flush()
		}
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil, nil)
	if reply.Reasoning != "" {
		chunk(map[string]any{"reasoning_content": reply.Reasoning}, nil, nil)
	}
	for _, piece := range pieces(reply.Content) {
		chunk(map[string]any{"content": piece}, nil, nil)
	}
	for i, c := range reply.Calls {
		callID := fmt.Sprintf("call_%d_%d", n, i)
		chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": callID, "type": "function",
			"function": map[string]any{"name": c.Name, "arguments": ""}}}}, nil, nil)
		for _, piece := range pieces(c.Args) {
			chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": piece}}}}, nil, nil)
		}
	}
	chunk(map[string]any{}, finish(reply), nil)
	fmt.Fprintf(w, "data: %s\n\n", mustJSON(map[string]any{"id": id, "object": "chat.completion.chunk", "created": 1,
		"model": "scripted", "choices": []any{}, "usage": usage}))
	io.WriteString(w, "data: [DONE]\n\n")
}

// pieces cuts s into a few parts, as a streaming server would.
func pieces(s string) []string {
	if s == "" {
		return nil
	}
	var out []string
	size := max(len(s)/3, 1)
	for len(s) > 0 {
		n := min(size, len(s))
		// Keep UTF-8 sequences whole.
		for n < len(s) && s[n]&0xC0 == 0x80 {
			n++
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

func anthropicAnswer(w http.ResponseWriter, req Request, reply Reply, n int) {
	stop := "end_turn"
	switch finish(reply) {
	case "tool_calls":
		stop = "tool_use"
	case "length":
		stop = "max_tokens"
	case "content_filter":
		stop = "refusal"
	}
	var blocks []map[string]any
	if reply.Reasoning != "" {
		blocks = append(blocks, map[string]any{"type": "thinking", "thinking": reply.Reasoning, "signature": "sig"})
	}
	if reply.Content != "" {
		blocks = append(blocks, map[string]any{"type": "text", "text": reply.Content})
	}
	for i, c := range reply.Calls {
		var input any = map[string]any{}
		if err := json.Unmarshal([]byte(c.Args), &input); err != nil {
			input = map[string]any{}
		}
		blocks = append(blocks, map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_%d_%d", n, i), "name": c.Name, "input": input, "raw": c.Args})
	}
	usage := map[string]any{"input_tokens": 10 * (n + 1), "output_tokens": 5}
	if !req.Stream {
		for _, b := range blocks {
			delete(b, "raw")
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, mustJSON(map[string]any{"id": fmt.Sprintf("msg_%d", n), "type": "message", "role": "assistant",
			"model": "scripted", "content": blocks, "stop_reason": stop, "usage": usage}))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl, _ := w.(http.Flusher)
	event := func(name string, data map[string]any) {
		data["type"] = name
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, mustJSON(data))
		if fl != nil {
			fl.Flush()
		}
	}
	event("message_start", map[string]any{"message": map[string]any{"id": fmt.Sprintf("msg_%d", n), "type": "message",
		"role": "assistant", "model": "scripted", "content": []any{}, "stop_reason": nil,
		"usage": map[string]any{"input_tokens": 10 * (n + 1), "output_tokens": 0}}})
	for i, b := range blocks {
		switch b["type"] {
		case "thinking":
			event("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "thinking", "thinking": ""}})
			event("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "thinking_delta", "thinking": b["thinking"]}})
			event("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "signature_delta", "signature": "sig"}})
		case "text":
			event("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			for _, p := range pieces(b["text"].(string)) {
				event("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "text_delta", "text": p}})
			}
		case "tool_use":
			event("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}})
			for _, p := range pieces(b["raw"].(string)) {
				event("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": p}})
			}
		}
		event("content_block_stop", map[string]any{"index": i})
	}
	event("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop}, "usage": map[string]any{"output_tokens": 5}})
	event("message_stop", map[string]any{})
}
