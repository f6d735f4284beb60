package testservers

import (
	"context"
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
