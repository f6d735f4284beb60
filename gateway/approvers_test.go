package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/api"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/stream"
)

// team is a gateway over the built-in tools of a directory, in default
// mode (a write asks), its approvals asked of the calling client by
// elicitation, else on the API's queue, behind MuxAuth with
// teamTokens; hub carries the calls' events.
type team struct {
	url   string
	dir   string
	queue *api.Approvals
	hub   *stream.Hub
}

func newTeam(t *testing.T, o api.ApprovalOptions, elicit gateway.ElicitApprover) *team {
	t.Helper()
	dir := t.TempDir()
	o.Timeout, o.Grace = time.Minute, -1
	queue := api.NewApprovals(&o)
	elicit.Timeout = time.Minute
	m, s, hub := builtinGoverned(t, dir, elicit, queue)
	g := gateway.New(governed{m, s}, gateway.Options{API: api.New(api.Options{Catalog: m, Caller: s, Approvals: queue, Events: hub})})
	srv := httptest.NewServer(g.MuxAuth(gateway.Auth{Verifier: teamTokens}, gateway.Security{Loopback: true}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		g.Close()
	})
	return &team{url: srv.URL, dir: dir, queue: queue, hub: hub}
}

// api makes a request of the API as the caller of token.
func (tm *team) api(t *testing.T, method, path, token, body string) (int, string) {
	t.Helper()
	return asCaller(t, method, tm.url+path, token, body)
}

// attach opens the page's event stream as the caller of token, which
// makes it an approver if it may answer, until the test ends.
func (tm *team) attach(t *testing.T, token string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, tm.url+"/api/events?approver=1", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
	})
	// The stream is open once its first line has come.
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
}

// pending lists the queue as the caller of token.
func (tm *team) pending(t *testing.T, token string) []api.Pending {
	t.Helper()
	code, body := tm.api(t, http.MethodGet, "/api/approvals", token, "")
	var out []api.Pending
	if err := json.Unmarshal([]byte(body), &out); code != http.StatusOK || err != nil {
		t.Fatalf("GET /api/approvals: %d %s", code, body)
	}
	return out
}

// write calls builtin__write_file as the caller of token, in the
// background, from a client without elicitation (the question goes to
// the queue); the result comes on the channel.
func (tm *team) write(t *testing.T, token, file string) <-chan *mcp.CallToolResult {
	t.Helper()
	cs := connectAs(t, tm.url+"/mcp", token, legacyProtocol)
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "builtin__write_file",
			Arguments: map[string]any{"path": file, "content": "x"}})
		if err != nil {
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
		}
		done <- res
	}()
	return done
}

// Approvals are answered by approvers only: a non-approver's answer is
// refused (403, kind forbidden) and the question waits on; one who may
// not even see it (another caller's) finds nothing there (404); an
// approver's answer runs the call. The queue lists every question for an
// approver, a caller's own for anyone else, saying who asked and whether
// the lister may answer; the call's events say who asked and who
// answered; only an approver's event stream makes an approver.
func TestApprovalsByApprovers(t *testing.T) {
	tm := newTeam(t, api.ApprovalOptions{}, gateway.ElicitApprover{})
	sub, err := tm.hub.Subscribe(context.Background(), stream.Filter{Names: []string{stream.EventApprovalRequest, stream.EventApprovalResolved}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	// A non-approver's page is no approver: alice's call is refused at
	// once, nobody who may answer being there.
	tm.attach(t, "bob-token")
	if res := <-tm.write(t, "alice-token", "a.txt"); !res.IsError || res.Meta["toolmux/error_kind"] != "approval_unavailable" ||
		!strings.Contains(testservers.ResultText(res), "a member of the approvers group") {
		t.Fatalf("with only a non-approver attached: %+v", res)
	}
	tm.attach(t, "ann-token")
	done := tm.write(t, "alice-token", "a.txt")
	var p api.Pending
	if !testservers.Eventually(10*time.Second, func() bool {
		ps := tm.pending(t, "ann-token")
		if len(ps) == 1 {
			p = ps[0]
		}
		return len(ps) == 1
	}) {
		t.Fatal("the call does not wait in the queue")
	}
	if p.Caller != "alice" || !p.CanAnswer {
		t.Errorf("ann's listing: %+v", p)
	}
	if ps := tm.pending(t, "alice-token"); len(ps) != 1 || ps[0].CanAnswer {
		t.Errorf("alice's listing of her own call: %+v", ps)
	}
	if ps := tm.pending(t, "bob-token"); len(ps) != 0 {
		t.Errorf("bob's listing: %+v", ps)
	}
	decide := func(token, decision string) (int, string) {
		return tm.api(t, http.MethodPost, "/api/approvals/"+p.ID, token, `{"decision":"`+decision+`"}`)
	}
	code, body := decide("alice-token", "once")
	var refusal struct {
		Error struct{ Kind, Message string }
	}
	if err := json.Unmarshal([]byte(body), &refusal); err != nil || code != http.StatusForbidden || refusal.Error.Kind != "forbidden" ||
		!strings.Contains(refusal.Error.Message, "approvers") {
		t.Errorf("alice answers her own call: %d %s", code, body)
	}
	if code, body := decide("bob-token", "once"); code != http.StatusNotFound {
		t.Errorf("bob answers alice's call: %d %s", code, body)
	}
	if len(tm.pending(t, "ann-token")) != 1 {
		t.Fatal("the call no longer waits after refused answers")
	}
	if code, body := decide("ann-token", "once"); code != http.StatusNoContent {
		t.Fatalf("ann answers: %d %s", code, body)
	}
	if res := <-done; res.IsError {
		t.Fatalf("the approved call: %+v", res)
	}
	// The events: who asked, and who answered.
	var asked, answered bool
	for !answered {
		select {
		case e := <-sub.Events():
			d, err := e.DecodeData()
			if err != nil {
				t.Fatal(err)
			}
			switch v := d.(type) {
			case *stream.ApprovalRequestData:
				asked = v.Caller == "alice"
			case *stream.ApprovalResolvedData:
				answered = true
				if v.Caller != "alice" || v.AnsweredBy != "ann" || v.Outcome != stream.OutcomeApproved {
					t.Errorf("approval_resolved: %+v", v)
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no approval_resolved event")
		}
	}
	if !asked {
		t.Error("approval_request does not name alice")
	}
}

// With self-approval off, the caller who made a call never answers it:
// its own client is not asked by elicitation (the question goes to the
// page), and its answer on the page is refused even when it is an
// approver; another approver's is taken. With it on (the default), a
// caller's own client answers its own call.
func TestSelfApproval(t *testing.T) {
	yes := &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "once"}}, nil
	}}
	connectElicit := func(t *testing.T, tm *team, token string) *mcp.ClientSession {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "self"}, yes).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: tm.url + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport(token)}},
			&mcp.ClientSessionOptions{ProtocolVersion: legacyProtocol})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	write := func(cs *mcp.ClientSession, file string) *mcp.CallToolResult {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "builtin__write_file",
			Arguments: map[string]any{"path": file, "content": "x"}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	on := newTeam(t, api.ApprovalOptions{}, gateway.ElicitApprover{})
	if res := write(connectElicit(t, on, "bob-token"), "b.txt"); res.IsError {
		t.Fatalf("bob approves his own call by elicitation: %+v", res)
	}

	off := newTeam(t, api.ApprovalOptions{NoSelfApproval: true}, gateway.ElicitApprover{NoSelfApproval: true})
	// Nobody else attached: refused at once, saying why.
	res := write(connectElicit(t, off, "bob-token"), "b.txt")
	if !res.IsError || res.Meta["toolmux/error_kind"] != "approval_unavailable" || !strings.Contains(testservers.ResultText(res), "self_approval") {
		t.Fatalf("bob's call with nobody else to ask: %+v", res)
	}
	// ann is an approver, but her own call waits for someone else.
	off.attach(t, "ann-token")
	if res := <-off.write(t, "ann-token", "a.txt"); !res.IsError || res.Meta["toolmux/error_kind"] != "approval_unavailable" {
		t.Fatalf("ann's call with only ann attached: %+v", res)
	}
	off.attach(t, "root-token")
	done := off.write(t, "ann-token", "a.txt")
	var id string
	if !testservers.Eventually(10*time.Second, func() bool {
		ps := off.pending(t, "ann-token")
		if len(ps) == 1 {
			id = ps[0].ID
			if ps[0].CanAnswer {
				t.Errorf("ann may answer her own call: %+v", ps[0])
			}
		}
		return id != ""
	}) {
		t.Fatal("ann's call does not wait")
	}
	if code, body := off.api(t, http.MethodPost, "/api/approvals/"+id, "ann-token", `{"decision":"once"}`); code != http.StatusForbidden || !strings.Contains(body, "self_approval") {
		t.Errorf("ann answers her own call: %d %s", code, body)
	}
	if code, body := off.api(t, http.MethodPost, "/api/approvals/"+id, "root-token", `{"decision":"once"}`); code != http.StatusNoContent {
		t.Fatalf("root answers: %d %s", code, body)
	}
	if res := <-done; res.IsError {
		t.Fatalf("ann's call approved by root: %+v", res)
	}
}
