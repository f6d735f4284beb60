package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/internal/testservers"
)

// toolmux serve gives every configured MCP server a passthrough route:
// the server's tools under their own names, denied ones hidden, calls
// governed; the built-in tools have none.
func TestServePassthrough(t *testing.T) {
	t.Parallel()
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

// A passthrough route serves as many client sessions as its server's
// passthrough.max_sessions: one more is refused with 503, Retry-After and
// a JSON-RPC error that a real client (the MCP Inspector, on the
// TypeScript SDK) shows, naming the key to raise; serve says so on stderr
// and in its index; a session that ends makes room.
func TestServePassthroughSessionLimit(t *testing.T) {
	t.Parallel()
	inspector := testservers.NodeBin(t, "mcp-inspector")
	cfg := fmt.Sprintf(`passthrough:
  idle_timeout: 10m
servers:
  fx:
    command: %s
    trust: true
    passthrough: {max_sessions: 1}
`, testservers.Fixture(t))
	addr, stderr := serveGatewayLog(t, workspace(t, cfg))
	route := "http://" + addr + "/servers/fx/mcp"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A client with a session (2025-11-25): one of the sessionless
	// protocol holds no session to end.
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: route},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	req, _ := http.NewRequest(http.MethodPost, route, strings.NewReader(
		`{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var answer struct {
		ID    int `json:"id"`
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	const limited = "server fx has its limit of 1 passthrough sessions open; end one (idle sessions end after 10m) or raise servers.fx.passthrough.max_sessions"
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "30" ||
		json.Unmarshal(body, &answer) != nil || answer.ID != 7 || answer.Error.Code != gateway.CodeSessionLimit ||
		!strings.Contains(answer.Error.Message, limited) {
		t.Errorf("%d (Retry-After %q) %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}

	out, err := inspect(t, inspector, route, "--method", "tools/list")
	if err == nil || !strings.Contains(out, limited) {
		t.Errorf("the inspector: %v\n%s", err, out)
	}
	if !testservers.Eventually(10*time.Second, func() bool {
		return strings.Contains(stderr.String(), "toolmux: passthrough to fx refused a client session: 1 of 1 sessions open (servers.fx.passthrough.max_sessions)")
	}) {
		t.Errorf("stderr:\n%s", stderr.String())
	}
	resp, err = http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	index, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(index), "/servers/fx/mcp (1 of 1 sessions open, ") {
		t.Errorf("index:\n%s", index)
	}

	// The session ends, its process is reaped, and the next client is
	// served.
	cs.Close()
	var last string
	if !testservers.Eventually(20*time.Second, func() bool {
		last, err = inspect(t, inspector, route, "--method", "tools/list")
		return err == nil
	}) || !strings.Contains(last, `"echo"`) {
		t.Errorf("after the session ended: %v\n%s", err, last)
	}
}
