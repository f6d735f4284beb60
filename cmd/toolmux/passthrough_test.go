package main_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// toolmux serve gives every configured MCP server a passthrough route:
// the server's tools under their own names, denied ones hidden, calls
// governed; the built-in tools have none.
func TestServePassthrough(t *testing.T) {
	addr := serveGateway(t, workspace(t, fixtureConfig(t)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/servers/fx/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if name := cs.InitializeResult().ServerInfo.Name; name != "fixture" {
		t.Errorf("serverInfo: %q", name)
	}
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	if !slices.Contains(names, "echo") || slices.Contains(names, "pid") {
		t.Errorf("tools: %v", names)
	}
	out, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "passed through"}})
	if err != nil || out.IsError || out.Content[0].(*mcp.TextContent).Text != "Echo: passed through" {
		t.Errorf("echo: %v %+v", err, out)
	}

	resp, err := http.Get("http://" + addr + "/servers/builtin/mcp")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "/mcp only") {
		t.Errorf("built-in tools: %d %s", resp.StatusCode, body)
	}

	_, err = mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/servers/broken/mcp"}, nil)
	if err == nil || !strings.Contains(err.Error(), "FIXTURE_API_KEY") {
		t.Errorf("a server that dies at start: %v", err)
	}
}
