package mcpsource_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/tool"
)

// A Conn to a stdio server is one process of its own, which Close stops.
func TestDialStdio(t *testing.T) {
	cfg := mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio, Command: testservers.Fixture(t), StopGrace: time.Second}
	conn, err := mcpsource.Dial(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t"}, nil).Connect(ctx, conn.Transport(), nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "pid"})
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(res.Content[0].(*mcp.TextContent).Text)
	if err != nil {
		t.Fatal(err)
	}
	cs.Close()
	conn.Close()
	select {
	case <-conn.Exited():
	default:
		t.Error("Close returned before the process was reaped")
	}
	if !testservers.ProcessGone(pid) {
		t.Errorf("process %d outlived Close", pid)
	}
	if d := conn.Describe(); !strings.Contains(d, "server fx") {
		t.Errorf("Describe: %q", d)
	}
}

func TestDialRefusesBadConfig(t *testing.T) {
	if _, err := mcpsource.Dial(mcpsource.Config{Name: "x", Transport: mcpsource.Stdio}); err == nil {
		t.Error("a stdio server without a command was accepted")
	}
	_, err := mcpsource.Dial(mcpsource.Config{Name: "x", Transport: mcpsource.Stdio, Command: "/nonexistent/server"})
	if tool.KindOf(err) != tool.KindServerUnavailable || !errors.Is(err, tool.ErrNotSent) {
		t.Errorf("missing command: %v", err)
	}
}

// A context from WithCallFunc makes the source call through the function
// (the source's own session is never opened), and its failures are
// classified as the source's own would be.
func TestWithCallFunc(t *testing.T) {
	s := fixture(t)
	var got *mcp.CallToolParams
	fn := func(_ context.Context, p *mcp.CallToolParams) (*tool.Result, error) {
		got = p
		switch p.Name {
		case "refused":
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "no"}
		case "broken":
			return nil, errors.New("connection reset")
		}
		return &tool.Result{Content: []tool.Content{{Type: tool.ContentText, Text: "via fn"}}, Structured: map[string]any{"n": 1.0}}, nil
	}
	ctx := mcpsource.WithCallFunc(context.Background(), "fx", fn)
	r, err := s.Call(ctx, "echo", map[string]any{"message": "x"})
	if err != nil || r.Content[0].Text != "via fn" || r.Structured.(map[string]any)["n"] != 1.0 || got.Arguments.(map[string]any)["message"] != "x" {
		t.Fatalf("%v %+v %+v", err, r, got)
	}
	if _, err := s.Call(ctx, "refused", nil); tool.KindOf(err) != tool.KindInvalidParams {
		t.Errorf("the server's answer: %v", err)
	}
	if _, err := s.Call(ctx, "broken", nil); tool.KindOf(err) != tool.KindServerUnavailable {
		t.Errorf("a broken session: %v", err)
	}
	if h := s.Health(); h.PID != 0 || h.Restarts != 0 || h.Error != "" {
		t.Errorf("the source's own session was used or blamed: %+v", h)
	}
	// Another server's function is not this source's.
	r, err = s.Call(mcpsource.WithCallFunc(context.Background(), "other", fn), "echo", map[string]any{"message": "own"})
	if err != nil || r.Content[0].Text != "Echo: own" {
		t.Errorf("own session: %v %+v", err, r)
	}
}
