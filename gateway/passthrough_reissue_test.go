package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/mcpsource"
)

// A 2026-07-28 client's call of a tool that is not idempotent, on a route
// whose server has sessions (2025-11-25) and asks the client a question
// during the call, goes through the window of re-issued requests and still
// works: the gateway's approval (input_required), then the server's
// question (the call parked upstream), each answered by a retry carrying
// inputResponses, are retries, not re-issues: the call ran once and the
// client got its result.
func TestPassthroughParkedCallThroughReissueWindow(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "legacy-only", Version: "1"}, &mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}})
	var started, ended atomic.Int32
	type none struct{}
	mcp.AddTool(s, &mcp.Tool{Name: "ask_write"}, func(ctx context.Context, req *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
		started.Add(1)
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "your name?", RequestedSchema: map[string]any{
			"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}})
		if err != nil {
			return nil, nil, err
		}
		ended.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "wrote for " + res.Content["name"].(string)}}}, nil, nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(hs.Close)

	pt := servePassthrough(t, mcpsource.Config{Name: "l", Transport: mcpsource.StreamableHTTP, URL: hs.URL})
	ev := &events{}
	cs := dialWith(t, &mcp.StreamableClientTransport{Endpoint: pt.url}, ev, "modern-test", modern)
	approvalAnswer.Store("once")
	if got := callText(t, cs, "ask_write"); got != "wrote for Ada" {
		t.Errorf("ask_write: %q", got)
	}
	if !ev.read(func(e *events) bool {
		return len(e.asked) == 2 && strings.HasPrefix(e.asked[0], "toolmux: approve") && e.asked[1] == "your name?"
	}) {
		t.Errorf("asked: %q", ev.asked)
	}
	if started.Load() != 1 || ended.Load() != 1 {
		t.Errorf("the tool started %d times and ended %d times, want once", started.Load(), ended.Load())
	}
	if st := pt.g.ReissueStats(); st.Answered != 0 {
		t.Errorf("retries were taken for re-issues: %+v", st)
	}
}
