package gateway_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
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

// A call that needs approval is put to the client's user, in both eras
// (2025-11-25: elicitation/create on the call's stream; 2026-07-28: an
// input_required answer the go-sdk's client answers by retrying the
// call): "once" runs it and asks again next time, the form's "deny"
// refuses it as the user's no, "always for this tool" stops the asking;
// read-only tools are never asked about.
func TestApprovalThroughElicitation(t *testing.T) {
	inEachEra(t, func(t *testing.T, era string) {
		a := newApprovalsGateway(t, time.Minute, 0)
		var asked atomic.Int32
		var next atomic.Value
		next.Store("once")
		cs := a.connectIn(t, era, "asker", &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked.Add(1)
			if !strings.Contains(r.Params.Message, "approve the call to builtin/write_file") || !strings.Contains(r.Params.Message, `"path"`) {
				t.Errorf("the question does not show the call: %q", r.Params.Message)
			}
			d := next.Load().(string)
			if d == "decline" {
				return &mcp.ElicitResult{Action: "decline"}, nil
			}
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": d}}, nil
		}})
		write := func(name string) *mcp.CallToolResult {
			t.Helper()
			res, err := cs.CallTool(context.Background(), writeParams(name))
			if err != nil {
				t.Fatal(err)
			}
			return res
		}

		if res := write("a.txt"); res.IsError || asked.Load() != 1 {
			t.Fatalf("approved once: asked %d, %s", asked.Load(), testservers.ResultText(res))
		}
		next.Store("deny")
		if res := write("b.txt"); !res.IsError || res.Meta["toolmux/error_kind"] != "approval_denied" || !strings.Contains(testservers.ResultText(res), "denied") {
			t.Fatalf("denied: %v %s", res.Meta, testservers.ResultText(res))
		}
		// A decline refuses the call in both eras. Whose no it is differs
		// (docs/gateway.md, Headless clients): a 2026-07-28 client's
		// answer comes with its retried request, untimed, and is the
		// user's; a session's decline within 250 ms of the question is
		// taken for a headless client's, and goes on to the page (none is
		// open here: approval_unavailable), a slower one is the user's.
		// Which of the two a loaded machine gives here is a matter of
		// timing; cmd/toolmux's TestServeHeadlessClientAnswers pins the
		// heuristic.
		next.Store("decline")
		res := write("c.txt")
		kind := res.Meta["toolmux/error_kind"]
		if !res.IsError || era == "2026-07-28" && kind != "approval_denied" ||
			era == legacyProtocol && kind != "approval_denied" && kind != "approval_unavailable" {
			t.Fatalf("declined: %v %s", res.Meta, testservers.ResultText(res))
		}
		for _, f := range []string{"b.txt", "c.txt"} {
			if a.written(f) {
				t.Fatalf("a refused call ran (%s)", f)
			}
		}
		next.Store("always_tool")
		if res := write("d.txt"); res.IsError {
			t.Fatalf("approved always: %s", testservers.ResultText(res))
		}
		before := asked.Load()
		if res := write("e.txt"); res.IsError || asked.Load() != before {
			t.Fatalf("after always: asked again (%d → %d), %s", before, asked.Load(), testservers.ResultText(res))
		}
		for _, f := range []string{"a.txt", "d.txt", "e.txt"} {
			if !a.written(f) {
				t.Errorf("%s not written", f)
			}
		}
		// Read-only tools are never asked about.
		before = asked.Load()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "builtin__read_file", Arguments: map[string]any{"path": "a.txt"}})
		if err != nil || res.IsError || asked.Load() != before {
			t.Fatalf("read: %v %v asked %d→%d", err, res, before, asked.Load())
		}
	})
}
