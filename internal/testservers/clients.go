package testservers

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ResultText joins the text parts of an MCP tool result.
func ResultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// AttachApprover opens the event stream of the toolmux API at base (an
// http://host:port URL) as an approver, as the web page does, until
// detach or the end of the test: approval questions are then put to the
// API's queue instead of being refused. The caller waits until the
// gateway counts it (its queue, or GET /api/info).
func AttachApprover(tb testing.TB, base string) (detach func()) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/events?approver=1", nil)
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		tb.Fatalf("the event stream: %s", resp.Status)
	}
	detach = func() {
		cancel()
		resp.Body.Close()
	}
	tb.Cleanup(detach)
	return detach
}

// Listen posts a subscriptions/listen for tool list changes, with
// JSON-RPC id id, to the MCP endpoint url: of protocol 2026-07-28 from a
// client named client (its _meta and headers), or, when header names an
// Mcp-Session-Id, within that session of protocol 2025-11-25. header adds
// or replaces headers. An answer that is a stream is returned once the
// server's acknowledgement has been read from it (the caller closes it;
// cancelling ctx ends it too); any other answer is returned unread.
func Listen(ctx context.Context, url string, id int64, client string, header map[string]string) (*http.Response, error) {
	params := map[string]any{"notifications": map[string]any{"toolsListChanged": true}}
	h := map[string]string{"Mcp-Protocol-Version": "2025-11-25"}
	if header["Mcp-Session-Id"] == "" {
		params["_meta"] = map[string]any{
			"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
			"io.modelcontextprotocol/clientCapabilities": map[string]any{},
			"io.modelcontextprotocol/clientInfo":         map[string]any{"name": client, "version": "1"},
		}
		h = map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "subscriptions/listen"}
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": params})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range h {
		req.Header.Set(k, v)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp, err
	}
	// Open once the server acknowledged the subscription: the stream's
	// first message.
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			resp.Body.Close()
			return nil, fmt.Errorf("the listen stream ended before its acknowledgement: %w", err)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			if !strings.Contains(data, "notifications/subscriptions/acknowledged") {
				resp.Body.Close()
				return nil, fmt.Errorf("the listen stream began with %s, not its acknowledgement", data)
			}
			return resp, nil
		}
	}
}
