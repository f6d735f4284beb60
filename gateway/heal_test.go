package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/tool"
)

// healing is a gateway as serve builds it (pipeline, scheduler, policy),
// over a manager that recovers its servers and tells the gateway when its
// catalog changed.
type healing struct {
	m   *manager.Manager
	url string // of the server, without a path
}

func serveHealing(t *testing.T, cfgs ...mcpsource.Config) *healing {
	t.Helper()
	var opts []manager.Option
	for _, cfg := range cfgs {
		src, err := mcpsource.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, manager.WithSource(src, manager.ServerOptions{
			Recovery: manager.Recovery{MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond},
			Retry:    manager.Retry{MaxAttempts: 1},
		}))
	}
	m, err := manager.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.New(m)
	if err != nil {
		t.Fatal(err)
	}
	engine, err := policy.New(policy.ModeYolo, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := schedule.New(p, schedule.WithGate(policy.NewGate(engine)))
	routes := make([]gateway.Route, len(cfgs))
	for i, c := range cfgs {
		routes[i] = gateway.Route{Server: c}
	}
	g := gateway.New(chain{p, s}, gateway.Options{Passthrough: routes})
	m.Recover(func(*tool.Catalog) { _ = g.Sync(context.Background()) })
	if _, err := m.Tools(context.Background()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(g.Mux("", gateway.Security{Loopback: true}))
	t.Cleanup(func() {
		g.Close()
		hs.Close()
		m.Close()
	})
	return &healing{m: m, url: hs.URL}
}

// client connects a go-sdk client to path, reporting tools/list_changed
// on changed.
func (h *healing) client(t *testing.T, path string, changed chan<- struct{}) (*mcp.ClientSession, error) {
	t.Helper()
	opts := &mcp.ClientOptions{}
	if changed != nil {
		opts.ToolListChangedHandler = func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "test"}, opts)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: h.url + path}, nil)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func TestToolsOfAServerThatIsDownAnswerServerUnavailableUntilItComesBack(t *testing.T) {
	flag := filepath.Join(t.TempDir(), "ready")
	fixture := testservers.Fixture(t)
	h := serveHealing(t,
		mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio, Command: fixture},
		mcpsource.Config{Name: "late", Transport: mcpsource.Stdio, Command: fixture, Args: []string{"-require", flag},
			MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond},
	)
	changed := make(chan struct{}, 1)
	cs, err := h.client(t, "/mcp", changed)
	if err != nil {
		t.Fatal(err)
	}
	if names := toolNames(t, cs); !slices.Contains(names, "fx__echo") || slices.Contains(names, "late__echo") {
		t.Fatalf("tools while late is down: %v", names)
	}

	// A tool of the server that is down: a refusal like any other, with
	// its kind and the server's stderr, never a bare "unknown tool".
	res := callTool(t, cs, "late__echo", map[string]any{"message": "early"})
	if !res.IsError || res.Meta["toolmux/error_kind"] != string(tool.KindServerUnavailable) {
		t.Fatalf("call of a server that is down: isError %v, meta %v, %q", res.IsError, res.Meta, testservers.ResultText(res))
	}
	if text := testservers.ResultText(res); !strings.Contains(text, flag+" is missing") {
		t.Errorf("the refusal does not quote the server's stderr: %q", text)
	}

	// A name of no server stays a protocol error, now with a kind and a
	// suggestion.
	_, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "fx__ecco"})
	var wire *jsonrpc.Error
	if !errors.As(err, &wire) || wire.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("unknown tool: %v", err)
	}
	var data struct{ Kind, Suggestion string }
	if err := json.Unmarshal(wire.Data, &data); err != nil || data.Kind != string(tool.KindToolNotRegistered) || data.Suggestion != "fx__echo" {
		t.Errorf("unknown tool data: %s (%v)", wire.Data, err)
	}

	// Its passthrough route cannot open a session with it either, and
	// says why.
	if _, err := h.client(t, "/servers/late/mcp", nil); err == nil || !strings.Contains(err.Error(), "is missing") {
		t.Errorf("passthrough to a server that is down: %v", err)
	}

	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// No request from the client: the server comes back by itself and
	// the client is told its tool list changed. (The client's first
	// listing registered the tools, which told it too: that notification
	// may come first.)
	timeout := time.After(30 * time.Second)
	for back := false; !back; {
		select {
		case <-changed:
			back = slices.Contains(toolNames(t, cs), "late__echo")
		case <-timeout:
			t.Fatalf("no tools/list_changed bringing late's tools: %v", toolNames(t, cs))
		}
	}
	if res := callTool(t, cs, "late__echo", map[string]any{"message": "on time"}); res.IsError || testservers.ResultText(res) != "Echo: on time" {
		t.Errorf("call after the server came back: %q", testservers.ResultText(res))
	}
	pt, err := h.client(t, "/servers/late/mcp", nil)
	if err != nil {
		t.Fatalf("passthrough after the server came back: %v", err)
	}
	if res := callTool(t, pt, "echo", map[string]any{"message": "through"}); res.IsError || testservers.ResultText(res) != "Echo: through" {
		t.Errorf("passthrough call: %q", testservers.ResultText(res))
	}
}

func TestWedgedServerBehindTheGatewayIsRestarted(t *testing.T) {
	h := serveHealing(t, mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio, Command: testservers.Fixture(t),
		MinBackoff: 10 * time.Millisecond, StopGrace: 500 * time.Millisecond,
		HealthCheck: mcpsource.HealthCheck{PingAfter: 200 * time.Millisecond, PingTimeout: 300 * time.Millisecond}})
	cs, err := h.client(t, "/mcp", nil)
	if err != nil {
		t.Fatal(err)
	}
	before := testservers.ResultText(callTool(t, cs, "fx__pid", nil))
	res := callTool(t, cs, "fx__wedge", nil)
	if !res.IsError || res.Meta["toolmux/error_kind"] != string(tool.KindServerUnavailable) || !strings.Contains(testservers.ResultText(res), "stopped answering") {
		t.Fatalf("the call in flight on the wedged server: %v %q", res.Meta, testservers.ResultText(res))
	}
	ok := testservers.Eventually(30*time.Second, func() bool {
		hs := h.m.Health()
		return hs[0].Restarts == 1 && hs[0].State == tool.StateReady
	})
	if !ok {
		t.Fatalf("the wedged server was not restarted: %+v", h.m.Health())
	}
	if after := testservers.ResultText(callTool(t, cs, "fx__pid", nil)); after == before {
		t.Errorf("the next call ran in the wedged process %s", before)
	}
}
