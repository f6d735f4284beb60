// Package taskclient is a small client of MCP's tasks extension
// (io.modelcontextprotocol/tasks, SEP-2663) over raw HTTP, for tests: the
// SDKs toolmux has do not implement the extension. It speaks protocol
// 2026-07-28 without a session (every request carries its _meta and the
// Mcp-Method and Mcp-Name headers), or, with SessionID set, within a
// 2025-11-25 session the caller initialized.
package taskclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// Extension is the tasks extension's name.
const Extension = "io.modelcontextprotocol/tasks"

// Version is the protocol version the client speaks without a session.
const Version = "2026-07-28"

// Client makes requests of one MCP endpoint.
type Client struct {
	// URL is the endpoint (http://HOST/mcp).
	URL string
	// HTTP is the HTTP client; nil means http.DefaultClient.
	HTTP *http.Client
	// Token, when set, is sent as a bearer token.
	Token string
	// NoExtension leaves the extension out of the client's capabilities.
	NoExtension bool
	// Elicitation declares that the client can answer questions
	// (approvals come as input requests).
	Elicitation bool
	// SessionID, when set, sends the requests within that (2025-11-25)
	// session, with no 2026-07-28 _meta or headers.
	SessionID string
	// Header adds or replaces headers of every request (tests of the
	// checks of headers).
	Header http.Header

	next atomic.Int64
}

// Error is a JSON-RPC error answer, with the HTTP status it came with.
type Error struct {
	Status  int
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("JSON-RPC error %d (HTTP %d): %s", e.Code, e.Status, e.Message)
}

// Task is a task as tasks/get (DetailedTask) or a CreateTaskResult shows
// it; Raw is the whole result.
type Task struct {
	ResultType     string          `json:"resultType"`
	TaskID         string          `json:"taskId"`
	Status         string          `json:"status"`
	StatusMessage  string          `json:"statusMessage,omitempty"`
	CreatedAt      string          `json:"createdAt"`
	LastUpdatedAt  string          `json:"lastUpdatedAt"`
	TTLMs          *int64          `json:"ttlMs"`
	PollIntervalMs int64           `json:"pollIntervalMs"`
	Result         json.RawMessage `json:"result,omitempty"`
	Error          *Error          `json:"error,omitempty"`
	InputRequests  map[string]struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	} `json:"inputRequests,omitempty"`
	Raw json.RawMessage `json:"-"`
}

// Final reports whether the task has ended.
func (t *Task) Final() bool {
	return t.Status == "completed" || t.Status == "failed" || t.Status == "cancelled"
}

// ToolResult is the part of a tool result tests look at.
type ToolResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	IsError bool `json:"isError"`
}

// Text is the result's text parts, joined.
func (r *ToolResult) Text() string {
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

// ToolResult decodes the task's inlined result.
func (t *Task) ToolResult() (*ToolResult, error) {
	var r ToolResult
	err := json.Unmarshal(t.Result, &r)
	return &r, err
}

// Request sends one request and returns its result, or an *Error.
func (c *Client) Request(ctx context.Context, method string, params map[string]any, name string) (json.RawMessage, error) {
	if params == nil {
		params = map[string]any{}
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	if c.SessionID != "" {
		h.Set("Mcp-Session-Id", c.SessionID)
		h.Set("Mcp-Protocol-Version", "2025-11-25")
	} else {
		caps := map[string]any{}
		if !c.NoExtension {
			caps["extensions"] = map[string]any{Extension: map[string]any{}}
		}
		if c.Elicitation {
			caps["elicitation"] = map[string]any{}
		}
		meta, _ := params["_meta"].(map[string]any)
		m := map[string]any{"io.modelcontextprotocol/protocolVersion": Version,
			"io.modelcontextprotocol/clientCapabilities": caps,
			"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "toolmux-taskclient", "version": "1"}}
		for k, v := range meta {
			m[k] = v
		}
		params["_meta"] = m
		h.Set("Mcp-Protocol-Version", Version)
		h.Set("Mcp-Method", method)
		if name != "" {
			h.Set("Mcp-Name", name)
		}
	}
	if c.Token != "" {
		h.Set("Authorization", "Bearer "+c.Token)
	}
	for k, v := range c.Header {
		h[k] = v
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.next.Add(1), "method": method, "params": params})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = h
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// The answer is the last data line holding a response.
		var last []byte
		for _, line := range strings.Split(string(b), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok && (strings.Contains(d, `"result"`) || strings.Contains(d, `"error"`)) {
				last = []byte(d)
			}
		}
		b = last
	}
	var msg struct {
		Result json.RawMessage `json:"result"`
		Error  *Error          `json:"error"`
	}
	if err := json.Unmarshal(b, &msg); err != nil {
		return nil, fmt.Errorf("HTTP %d: not a JSON-RPC answer: %q", resp.StatusCode, b)
	}
	if msg.Error != nil {
		msg.Error.Status = resp.StatusCode
		return nil, msg.Error
	}
	return msg.Result, nil
}

// CallTool calls a tool: the answer is a CreateTaskResult (ResultType
// "task") or a tool result, in Raw with ResultType "complete".
func (c *Client) CallTool(ctx context.Context, name string, args map[string]any) (*Task, error) {
	raw, err := c.Request(ctx, "tools/call", map[string]any{"name": name, "arguments": args}, name)
	if err != nil {
		return nil, err
	}
	return decodeTask(raw)
}

func decodeTask(raw json.RawMessage) (*Task, error) {
	var t Task
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, err
	}
	t.Raw = raw
	if t.ResultType == "complete" && t.TaskID == "" {
		t.Result = raw
	}
	return &t, nil
}

// Get is tasks/get.
func (c *Client) Get(ctx context.Context, id string) (*Task, error) {
	raw, err := c.Request(ctx, "tasks/get", map[string]any{"taskId": id}, id)
	if err != nil {
		return nil, err
	}
	return decodeTask(raw)
}

// Update is tasks/update, answering input requests by key.
func (c *Client) Update(ctx context.Context, id string, responses map[string]any) error {
	raw, err := c.Request(ctx, "tasks/update", map[string]any{"taskId": id, "inputResponses": responses}, id)
	return ack(raw, err)
}

// Cancel is tasks/cancel.
func (c *Client) Cancel(ctx context.Context, id string) error {
	raw, err := c.Request(ctx, "tasks/cancel", map[string]any{"taskId": id}, id)
	return ack(raw, err)
}

func ack(raw json.RawMessage, err error) error {
	if err != nil {
		return err
	}
	var a map[string]any
	if err := json.Unmarshal(raw, &a); err != nil || a["resultType"] != "complete" || len(a) != 1 {
		return fmt.Errorf("not an empty ack: %s", raw)
	}
	return nil
}

// Poll gets the task until until says so (nil: until it is final),
// waiting the pollIntervalMs the server gave between polls.
func (c *Client) Poll(ctx context.Context, id string, until func(*Task) bool) (*Task, error) {
	if until == nil {
		until = (*Task).Final
	}
	for {
		t, err := c.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if until(t) {
			return t, nil
		}
		wait := time.Duration(t.PollIntervalMs) * time.Millisecond
		if wait <= 0 {
			wait = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return t, fmt.Errorf("task %s still %s: %w", id, t.Status, ctx.Err())
		case <-time.After(wait):
		}
	}
}
