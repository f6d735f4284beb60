package mcpsource_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/mcpsource"
)

// A server that speaks only the sessionless protocol (2026-07-28): the
// source's handshake at 2025-11-25 fails, and it connects again asking for
// 2026-07-28 (server/discover), then lists and calls as with any server.
func TestSourceModernOnlyServer(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "modern-only", Version: "1"}, &mcp.ServerOptions{SupportedProtocolVersions: []string{"2026-07-28"}})
	mcp.AddTool(s, &mcp.Tool{Name: "hello"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello from 2026"}}}, nil, nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(hs.Close)

	src, err := mcpsource.New(mcpsource.Config{Name: "m", Transport: mcpsource.StreamableHTTP, URL: hs.URL, ConnectTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tools, err := src.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools) != 1 || tools[0].Name != "hello" {
		t.Fatalf("tools: %+v", tools)
	}
	res, err := src.Call(ctx, "hello", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Content) != 1 || res.Content[0].Text != "hello from 2026" {
		t.Errorf("result: %+v", res)
	}
}
