package gateway_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/internal/testservers"
)

// legacyProtocol is the newest protocol with sessions: the go-sdk's
// client asks for 2026-07-28 unless told otherwise.
const legacyProtocol = "2025-11-25"

// connect2026 connects a client of protocol 2026-07-28 (no session: each
// request carries its _meta) named name to route.
func (a *approvalsGateway) connect2026(t *testing.T, name, route string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: name, Version: "2.0"}, opts).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: a.url + route}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("the client fell back to %s", v)
	}
	return cs
}

// A 2026-07-28 client is served on /mcp without falling back, beside a
// 2025-11-25 session; its calls belong to the task of its identity on the
// route (one task for all its calls), which ends after the idle timeout
// without a call, and is started again by the next call.
func TestSessionlessClientTask(t *testing.T) {
	a := newApprovalsGateway(t, time.Minute, 500*time.Millisecond)
	old := a.connectHTTP(t, "old", nil)
	cs := a.connect2026(t, "modern", "/mcp", nil)
	// A fresh params each time: the go-sdk's client writes its _meta into
	// the params it is given.
	list := func() *mcp.CallToolParams {
		return &mcp.CallToolParams{Name: "builtin__list_directory", Arguments: map[string]any{"path": "."}}
	}
	for _, c := range []*mcp.ClientSession{cs, cs, old} {
		res, err := c.CallTool(context.Background(), list())
		if err != nil || res.IsError {
			t.Fatalf("%v %+v", err, res)
		}
	}
	s, ok := a.sessions.session("modern")
	if !ok || !s.Sessionless || s.Route != "/mcp" || s.ClientVersion != "2.0" || s.Protocol != "2026-07-28" || s.Task == "" {
		t.Fatalf("task of the sessionless client: %+v %v", s, ok)
	}
	o, _ := a.sessions.session("old")
	if got := a.calls.all(); len(got) != 3 || got[0] != s.Task || got[1] != s.Task || got[2] != o.Task || o.Sessionless {
		t.Fatalf("the calls' tasks: %v, want %s %s %s", got, s.Task, s.Task, o.Task)
	}
	waitEnd(t, a.sessions, s.Task, gateway.EndIdle)
	if _, err := cs.CallTool(context.Background(), list()); err != nil {
		t.Fatal(err)
	}
	if got := a.calls.all(); got[3] == s.Task || got[3] == "" {
		t.Fatalf("a call after the task ended has task %q", got[3])
	}
	last := a.calls.all()[3]
	a.g.Close()
	waitEnd(t, a.sessions, last, gateway.EndShutdown)
}

// A 2026-07-28 client that declared elicitation is asked to approve a
// call by input_required (the go-sdk client answers and retries on its
// own); its answer decides; one that did not declare it is refused at
// once.
func TestSessionlessApproval(t *testing.T) {
	a := newApprovalsGateway(t, time.Minute, 0)
	var mu sync.Mutex
	var asked []string
	answer := "once"
	cs := a.connect2026(t, "asker", "/mcp", &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, r.Params.Message)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": answer}}, nil
		}})
	res, err := cs.CallTool(context.Background(), writeParams("a.txt"))
	if err != nil || res.IsError {
		t.Fatalf("%v %+v", err, res)
	}
	if len(asked) != 1 || !strings.Contains(asked[0], "approve the call to builtin/write_file") || !a.written("a.txt") {
		t.Fatalf("asked %q; written %v", asked, a.written("a.txt"))
	}
	mu.Lock()
	answer = "deny"
	mu.Unlock()
	res, err = cs.CallTool(context.Background(), writeParams("b.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || res.Meta["toolmux/error_kind"] != "approval_denied" || a.written("b.txt") || len(asked) != 2 {
		t.Fatalf("a denied call: %+v; asked %d", res, len(asked))
	}

	plain := a.connect2026(t, "plain", "/mcp", nil)
	res, err = plain.CallTool(context.Background(), writeParams("c.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || res.Meta["toolmux/error_kind"] != "approval_denied" || !strings.Contains(testservers.ResultText(res), "--yes") || a.written("c.txt") {
		t.Fatalf("a client without elicitation: %+v", res)
	}
}
