package gateway_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/builtin"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/tool"
)

// governed is what toolmux serve puts behind the gateway: the manager's
// catalog, calls through the scheduler and its policy gate.
type governed struct {
	*manager.Manager
	s *schedule.Scheduler
}

func (g governed) Call(ctx context.Context, call tool.Call) *tool.Record { return g.s.Call(ctx, call) }

// connectGoverned serves the built-in tools of dir in default approval
// mode with approvals asked through elicitation, and connects a client
// whose elicitation handler is answer (nil: a client without elicitation).
func connectGoverned(t *testing.T, dir string, answer func(*mcp.ElicitRequest) *mcp.ElicitResult) *mcp.ClientSession {
	t.Helper()
	src, err := builtin.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	engine, err := policy.New(policy.ModeDefault, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := schedule.New(m, schedule.WithGate(policy.NewGate(engine, policy.WithApprover(gateway.ElicitApprover{}))))
	g := gateway.New(governed{m, s}, gateway.Options{})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := g.Server().Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := &mcp.ClientOptions{}
	if answer != nil {
		opts.ElicitationHandler = func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return answer(r), nil
		}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, opts).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Close()
		m.Close()
	})
	return cs
}

func write(t *testing.T, cs *mcp.ClientSession, name string) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "builtin__write_file",
		Arguments: map[string]any{"path": name, "content": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A call that needs approval is put to the client's user through
// elicitation; "once" runs it and asks again next time, "always for this
// tool" stops the asking, "deny" refuses it.
func TestApprovalThroughElicitation(t *testing.T) {
	dir := t.TempDir()
	var asked atomic.Int32
	var next atomic.Value
	next.Store("once")
	cs := connectGoverned(t, dir, func(r *mcp.ElicitRequest) *mcp.ElicitResult {
		asked.Add(1)
		if !strings.Contains(r.Params.Message, "builtin/write_file") || !strings.Contains(r.Params.Message, `"path"`) {
			t.Errorf("the question does not show the call: %q", r.Params.Message)
		}
		d := next.Load().(string)
		if d == "decline" {
			return &mcp.ElicitResult{Action: "decline"}
		}
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": d}}
	})

	if res := write(t, cs, "a.txt"); res.IsError {
		t.Fatalf("approved once: %s", testservers.ResultText(res))
	}
	next.Store("decline")
	if res := write(t, cs, "b.txt"); !res.IsError || !strings.Contains(testservers.ResultText(res), "denied") {
		t.Fatalf("declined: %v %s", res.IsError, testservers.ResultText(res))
	}
	if _, err := os.Stat(filepath.Join(dir, "b.txt")); !os.IsNotExist(err) {
		t.Fatal("a declined call ran")
	}
	next.Store("always_tool")
	if res := write(t, cs, "c.txt"); res.IsError {
		t.Fatalf("approved always: %s", testservers.ResultText(res))
	}
	before := asked.Load()
	if res := write(t, cs, "d.txt"); res.IsError || asked.Load() != before {
		t.Fatalf("after always: asked again (%d → %d), %s", before, asked.Load(), testservers.ResultText(res))
	}
	for _, f := range []string{"a.txt", "c.txt", "d.txt"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s not written: %v", f, err)
		}
	}
	// Read-only tools are never asked about.
	before = asked.Load()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "builtin__read_file", Arguments: map[string]any{"path": "a.txt"}})
	if err != nil || res.IsError || asked.Load() != before {
		t.Fatalf("read: %v %v asked %d→%d", err, res, before, asked.Load())
	}
}

// A client that cannot show a question gets a refusal that says how to
// allow the call, and nothing runs.
func TestApprovalWithoutElicitation(t *testing.T) {
	dir := t.TempDir()
	cs := connectGoverned(t, dir, nil)
	res := write(t, cs, "a.txt")
	if !res.IsError || !strings.Contains(testservers.ResultText(res), "approval_unavailable") || !strings.Contains(testservers.ResultText(res), "--yes") {
		t.Fatalf("got %v %s", res.IsError, testservers.ResultText(res))
	}
	if _, err := os.Stat(filepath.Join(dir, "a.txt")); !os.IsNotExist(err) {
		t.Fatal("an unapproved call ran")
	}
}
