package gateway_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
)

func nestedArg(depth int) any {
	var v any = "x"
	for range depth - 1 {
		v = []any{v}
	}
	return v
}

// What an MCP client gets for arguments nested too deep, on /mcp and on a
// passthrough route: past the gateway's limit, an error result of kind
// invalid_tool_params naming the limit, the call not made; past the
// go-sdk's own limit on a whole message (1000 levels), the request is
// refused before it is read, and the client's error says why.
func TestDeepArgumentsOverMCP(t *testing.T) {
	src, err := mcpsource.New(mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio, Command: testservers.Fixture(t)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	g := gateway.New(m, gateway.Options{MaxDepth: 10, Passthrough: []gateway.Route{{Server: mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio, Command: testservers.Fixture(t)}}}})
	defer g.Close()
	hs := httptest.NewServer(g.Mux("", gateway.Security{Loopback: true}))
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, route := range []struct{ path, tool string }{{"/mcp", "fx__echo"}, {"/servers/fx/mcp", "echo"}} {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "t"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL + route.path}, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: route.tool, Arguments: map[string]any{"message": nestedArg(11)}})
		if err != nil {
			t.Fatalf("%s: %v", route.path, err)
		}
		text := res.Content[0].(*mcp.TextContent).Text
		if !res.IsError || res.Meta["toolmux/error_kind"] != "invalid_tool_params" || !strings.Contains(text, "10 levels") {
			t.Errorf("%s: %v %q", route.path, res.Meta, text)
		}
		res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: route.tool, Arguments: map[string]any{"message": "fine"}})
		if err != nil || res.IsError {
			t.Errorf("%s: a shallow call failed: %v %+v", route.path, err, res)
		}
		_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: route.tool, Arguments: map[string]any{"message": nestedArg(1200)}})
		if err == nil || !strings.Contains(err.Error(), "invalid_tool_params") || !strings.Contains(err.Error(), "1000 levels") ||
			!strings.Contains(err.Error(), "limits.max_depth") {
			t.Errorf("%s: past the go-sdk's limit: %v", route.path, err)
		}
		// The session outlives the refusal.
		if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: route.tool, Arguments: map[string]any{"message": "again"}}); err != nil || res.IsError {
			t.Errorf("%s: after the refusal: %v", route.path, err)
		}
		cs.Close()
	}
}
