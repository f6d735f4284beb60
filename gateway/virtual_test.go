package gateway_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/internal/testservers"
)

// A virtual server serves the tools its patterns pick, renamed and
// redescribed as configured, each call reaching the Caller under the
// tool's own identity; a tool it does not pick is unknown there, while
// /mcp still has every tool; a virtual server may search too; an unknown
// name is a 404 that lists the configured ones.
func TestVirtualServers(t *testing.T) {
	a, _ := testservers.CatalogTool(0)
	b, _ := testservers.CatalogTool(1)
	other, _ := testservers.CatalogTool(900)
	prefix := a[:strings.IndexByte(a, '_')]
	c, url := catalogGateway(t, gateway.Options{Virtual: []gateway.Virtual{
		{Name: "small", Tools: []string{"fx/" + a, "fx/" + b},
			Rename:   map[string]string{"fx/" + a: "first"},
			Describe: map[string]string{"fx/" + b: "The second tool."}},
		{Name: "searching", Tools: []string{"fx/" + prefix + "_*"}, ToolSearch: gateway.ToolSearch{Enabled: true}},
	}})
	ctx := context.Background()
	cs := dialHTTP(t, url+"/virtual/small/mcp")
	var tools []*mcp.Tool
	for tl, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		tools = append(tools, tl)
	}
	if len(tools) != 2 || tools[0].Name != "first" || tools[1].Name != "fx__"+b || tools[1].Description != "The second tool." {
		t.Fatalf("listed %+v", tools)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "first", Arguments: map[string]any{"target": "v"}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != a+` done for "v"` {
		t.Fatalf("call of a renamed tool: %v %+v", err, res)
	}
	if got := c.seen(); !slices.Equal(got, []string{"fx/" + a}) {
		t.Errorf("the Caller saw %v", got)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__" + other}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
		t.Errorf("a tool the virtual server does not pick: %v", err)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__" + a}); err == nil {
		t.Errorf("a renamed tool is callable under its old name")
	}
	if res, err := dialHTTP(t, url+"/mcp").CallTool(ctx, &mcp.CallToolParams{Name: "fx__" + other}); err != nil || res.IsError {
		t.Errorf("/mcp: %v %+v", err, res)
	}

	ss := dialHTTP(t, url+"/virtual/searching/mcp")
	if got := listNames(t, ss); !slices.Equal(got, []string{"call_tool", "find_tools"}) {
		t.Errorf("a searching virtual server lists %v", got)
	}
	res, err = ss.CallTool(ctx, &mcp.CallToolParams{Name: "find_tools", Arguments: map[string]any{"query": other}})
	if err != nil {
		t.Fatal(err)
	}
	if names := found(t, res); slices.Contains(names, "fx__"+other) {
		t.Errorf("find_tools found a tool outside the virtual server: %v", names)
	}
	res, err = ss.CallTool(ctx, &mcp.CallToolParams{Name: "call_tool", Arguments: map[string]any{"name": "fx__" + b}})
	if err != nil || res.IsError {
		t.Errorf("call_tool on a virtual server: %v %+v", err, res)
	}

	resp, err := http.Get(url + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "Virtual server small: /virtual/small/mcp\n") {
		t.Errorf("the index:\n%s", body)
	}
	resp, err = http.Post(url+"/virtual/nope/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "searching, small") {
		t.Errorf("unknown virtual server: %d %s", resp.StatusCode, body)
	}
}
