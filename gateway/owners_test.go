package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/api"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/taskclient"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tasklog"
)

// ownersRig is a gateway with callers: the fixture's task jobs on /mcp,
// MCP tasks and the calls' records in a task log of a directory, the API
// with its approval queue (calls of fx/slow_compute whose label begins
// with "ask" wait there), every route behind MuxAuth. Its callers:
// ann, with two tokens of one issuer ("ann-1", "ann-2": one caller);
// bob, an API key (bobKey); root, in group admin ("root").
type ownersRig struct {
	url       string
	log       *tasklog.Log
	approvals *api.Approvals
	close     func()
}

const ownersAudience = "toolmux-owners-test"

var bobKey = identity.NewKeySecret()

func ownersAuth() gateway.Auth {
	ann := func() *identity.Caller {
		return &identity.Caller{Subject: "u-ann", Name: "ann", Issuer: "https://idp.example", Method: identity.MethodJWT,
			Audience: []string{ownersAudience}}
	}
	return gateway.Auth{Audiences: []string{ownersAudience}, Verifier: identity.Verifiers{
		identity.NewKeys(identity.Key{Name: "bob", Groups: []string{"dev"}, Hash: identity.HashKey(bobKey)}),
		tokens{
			"ann-1": ann(),
			"ann-2": ann(),
			"root": {Subject: "u-root", Name: "root", Issuer: "https://idp.example", Groups: []string{gateway.AdminGroup},
				Method: identity.MethodJWT, Audience: []string{ownersAudience}},
		},
	}}
}

func newOwnersRig(t *testing.T, dir string) *ownersRig {
	t.Helper()
	ctx := context.Background()
	m := taskJobs(t)
	log, err := tasklog.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.New(m, pipeline.WithRecorder(log))
	if err != nil {
		t.Fatal(err)
	}
	engine, err := policy.New(policy.ModeDefault, []policy.Rule{{Name: "ask", Tools: []string{"fx/slow_compute"},
		Args: map[string]string{"label": "^ask"}, Action: policy.Ask}, {Name: "rest", Tools: []string{"fx/*"}, Action: policy.Allow}})
	if err != nil {
		t.Fatal(err)
	}
	hub, err := stream.NewHub(ctx, stream.WithStore(log.StreamStore()), stream.WithHeartbeat(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	approvals := api.NewApprovals(&api.ApprovalOptions{Timeout: time.Minute})
	s := schedule.New(p, schedule.WithGate(policy.NewGate(engine, policy.WithApprover(policy.FirstOf(approvals)), policy.WithConcurrentApprovals(true))),
		schedule.WithSink(stream.SchedulerSink(hub)))
	g := gateway.New(gateway.Scheduled{Catalog: p, Calls: s}, gateway.Options{
		API:     api.New(api.Options{Catalog: p, Caller: s, Log: log, Approvals: approvals, Events: hub}),
		Tasks:   gateway.Tasks{Store: log, Threshold: 200 * time.Millisecond},
		Virtual: []gateway.Virtual{{Name: "v", Tools: []string{"fx/*"}}},
		Passthrough: []gateway.Route{{Server: mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio, Command: testservers.Fixture(t),
			Args: []string{"-task-jobs"}}}}})
	srv := httptest.NewServer(g.MuxAuth(ownersAuth(), gateway.Security{Loopback: true}))
	var once sync.Once
	rig := &ownersRig{url: srv.URL, log: log, approvals: approvals, close: func() {
		once.Do(func() {
			srv.CloseClientConnections()
			srv.Close()
			g.Close()
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_ = hub.Close(cctx)
			m.Close()
			log.Close()
		})
	}}
	t.Cleanup(rig.close)
	return rig
}

// client is a tasks client of /mcp with token (protocol 2026-07-28, no
// session).
func (rig *ownersRig) client(token string) *taskclient.Client {
	return &taskclient.Client{URL: rig.url + "/mcp", Token: token}
}

// session opens a 2025-11-25 session of route ("" for /mcp) declaring
// the tasks extension with token, and returns a tasks client within it.
func (rig *ownersRig) session(t *testing.T, ctx context.Context, token string, route ...string) *taskclient.Client {
	t.Helper()
	url := rig.url + "/mcp"
	if len(route) > 0 {
		url = rig.url + route[0]
	}
	caps := &mcp.ClientCapabilities{}
	caps.AddExtension(taskclient.Extension, map[string]any{})
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "tasks"}, &mcp.ClientOptions{Capabilities: caps}).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerTransport(token)}},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return &taskclient.Client{URL: url, Token: token, SessionID: cs.ID()}
}

// send makes a request of the rig as the caller of token.
func (rig *ownersRig) send(t *testing.T, ctx context.Context, method, path, token, body string, header ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, method, rig.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// apiDo makes a request of the API as the caller of token: the status
// and the body.
func (rig *ownersRig) apiDo(t *testing.T, method, path, token, body string) (int, []byte) {
	t.Helper()
	resp := rig.send(t, context.Background(), method, path, token, body)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// ids lists the "id" of each object of an API listing.
func ids(t *testing.T, b []byte) []string {
	t.Helper()
	var list []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	var out []string
	for _, x := range list {
		out = append(out, x.ID)
	}
	slices.Sort(out)
	return out
}

func sorted(s ...string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// unknownMCPTask is an id no task has.
const unknownMCPTask = "mcptask-00000000000000000000000000000000"

// sameAsUnknown reports whether err, the answer to a request about task
// id, is the answer to the same request about a task that does not
// exist (wantErr), the id aside.
func sameAsUnknown(err, unknown error, id string) bool {
	var e, u *taskclient.Error
	if !errors.As(err, &e) || !errors.As(unknown, &u) {
		return false
	}
	return e.Status == u.Status && e.Code == u.Code && strings.ReplaceAll(e.Message, id, unknownMCPTask) == u.Message
}

// MCP tasks, and the task log's tasks, belong to their caller: in both
// protocol eras another caller reading, answering or cancelling one gets
// the answer an unknown id gets, and cancels nothing; the same caller
// with another token, and a member of admin, get it; the API lists each
// caller's own (admin: all) and answers another's as unknown (404); a
// call's record names its caller; a call into another's task is refused
// as not found; and all of it holds after the gateway restarts on the
// same task log.
func TestOwnership(t *testing.T) {
	dir := t.TempDir()
	rig := newOwnersRig(t, dir)
	ctx := pollCtx(t)
	ann, ann2, bob, root := rig.client("ann-1"), rig.client("ann-2"), rig.client(bobKey), rig.client("root")
	annS, bobS := rig.session(t, ctx, "ann-1"), rig.session(t, ctx, bobKey)
	create := func(c *taskclient.Client, label string) string {
		t.Helper()
		got, err := c.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 1.5, "label": label})
		if err != nil || got.ResultType != "task" || got.TaskID == "" {
			t.Fatalf("%s: %+v %v", label, got, err)
		}
		return got.TaskID
	}
	annTask, annSessTask := create(ann, "ann"), create(annS, "ann-session")
	bobTask, bobSessTask := create(bob, "bob"), create(bobS, "bob-session")

	// Another caller, in either era, about the other's tasks of either
	// era: as unknown, and nothing happens to them.
	for _, c := range []struct {
		name   string
		client *taskclient.Client
		others []string
	}{{"bob", bob, []string{annTask, annSessTask}}, {"bob's session", bobS, []string{annTask, annSessTask}},
		{"ann", ann, []string{bobTask, bobSessTask}}, {"ann's session", annS, []string{bobTask}}} {
		_, unknownGet := c.client.Get(ctx, unknownMCPTask)
		unknownUpdate := c.client.Update(ctx, unknownMCPTask, map[string]any{"k": map[string]any{"action": "accept"}})
		unknownCancel := c.client.Cancel(ctx, unknownMCPTask)
		if unknownGet == nil || unknownUpdate == nil || unknownCancel == nil {
			t.Fatalf("%s: an unknown task answered: %v %v %v", c.name, unknownGet, unknownUpdate, unknownCancel)
		}
		for _, id := range c.others {
			if got, err := c.client.Get(ctx, id); !sameAsUnknown(err, unknownGet, id) {
				t.Errorf("%s: tasks/get of another's task: %+v %v, want as unknown (%v)", c.name, got, err, unknownGet)
			}
			if err := c.client.Update(ctx, id, map[string]any{"k": map[string]any{"action": "accept"}}); !sameAsUnknown(err, unknownUpdate, id) {
				t.Errorf("%s: tasks/update of another's task: %v, want as unknown (%v)", c.name, err, unknownUpdate)
			}
			if err := c.client.Cancel(ctx, id); !sameAsUnknown(err, unknownCancel, id) {
				t.Errorf("%s: tasks/cancel of another's task: %v, want as unknown (%v)", c.name, err, unknownCancel)
			}
		}
	}
	// Its caller, with another token too, and admin, see it.
	for _, c := range []struct {
		name   string
		client *taskclient.Client
		id     string
	}{{"ann", ann, annSessTask}, {"ann's other token", ann2, annTask}, {"ann's session", annS, annTask},
		{"root", root, bobTask}, {"root", root, annSessTask}} {
		if got, err := c.client.Get(ctx, c.id); err != nil || got.TaskID != c.id {
			t.Errorf("%s: tasks/get: %+v %v", c.name, got, err)
		}
	}
	for _, id := range []string{annTask, annSessTask, bobTask, bobSessTask} {
		if done, err := root.Poll(ctx, id, nil); err != nil || done.Status != "completed" {
			t.Fatalf("task %s, cancelled by another caller: %+v %v", id, done, err)
		}
	}

	// Task-log tasks: a call through the API is a task of its caller's,
	// its record naming the caller; a call into another's task is not
	// found.
	apiCall := func(token, body string) (int, string) {
		t.Helper()
		code, b := rig.apiDo(t, http.MethodPost, "/api/tools/fx/greet/call", token, body)
		var rec struct {
			Task   string         `json:"task"`
			Caller *identity.Ref  `json:"caller"`
			Error  map[string]any `json:"error"`
		}
		_ = json.Unmarshal(b, &rec)
		if code == http.StatusOK && (rec.Caller == nil || rec.Caller.Name == "") {
			t.Errorf("a call's record names no caller: %s", b)
		}
		return code, rec.Task
	}
	code, annAPITask := apiCall("ann-1", `{"arguments": {"name": "Ann"}}`)
	if code != http.StatusOK || annAPITask == "" {
		t.Fatalf("ann's API call: %d %q", code, annAPITask)
	}
	code, bobAPITask := apiCall(bobKey, `{"arguments": {"name": "Bob"}}`)
	if code != http.StatusOK {
		t.Fatalf("bob's API call: %d", code)
	}
	if code, b := rig.apiDo(t, http.MethodPost, "/api/tools/fx/greet/call", bobKey, `{"arguments": {"name": "Bob"}, "task": "`+annAPITask+`"}`); code != http.StatusNotFound || !strings.Contains(string(b), `"not_found"`) {
		t.Errorf("bob's call into ann's task: %d %s", code, b)
	}
	if code, _ := apiCall("ann-2", `{"arguments": {"name": "Ann"}, "task": "`+annAPITask+`"}`); code != http.StatusOK {
		t.Errorf("ann's call into her own task: %d", code)
	}

	check := func(rig *ownersRig) {
		t.Helper()
		// The gateway's tasks of the 2026-07-28 clients (their calls'
		// records made them) and of the API calls, per caller.
		tasksOf := map[string][]string{}
		for _, token := range []string{"ann-1", bobKey, "root"} {
			code, b := rig.apiDo(t, http.MethodGet, "/api/tasks", token, "")
			if code != http.StatusOK {
				t.Fatalf("/api/tasks: %d %s", code, b)
			}
			tasksOf[token] = ids(t, b)
		}
		if !slices.Contains(tasksOf["ann-1"], annAPITask) || slices.Contains(tasksOf["ann-1"], bobAPITask) ||
			!slices.Contains(tasksOf[bobKey], bobAPITask) || slices.Contains(tasksOf[bobKey], annAPITask) ||
			len(tasksOf["root"]) != len(tasksOf["ann-1"])+len(tasksOf[bobKey]) {
			t.Errorf("/api/tasks per caller: %v", tasksOf)
		}
		code, unknown := rig.apiDo(t, http.MethodGet, "/api/tasks/nope", bobKey, "")
		code2, foreign := rig.apiDo(t, http.MethodGet, "/api/tasks/"+annAPITask, bobKey, "")
		if code != http.StatusNotFound || code2 != code || strings.ReplaceAll(string(foreign), annAPITask, "nope") != string(unknown) {
			t.Errorf("bob reading ann's task: %d %s; an unknown one: %d %s", code2, foreign, code, unknown)
		}
		var d tasklog.TaskDetail
		code, b := rig.apiDo(t, http.MethodGet, "/api/tasks/"+annAPITask, "ann-2", "")
		if err := json.Unmarshal(b, &d); code != http.StatusOK || err != nil || d.Caller == nil || d.Caller.Name != "ann" || len(d.Calls) != 2 ||
			d.Calls[0].Caller == nil || d.Calls[0].Caller.Name != "ann" || d.Calls[0].Caller.Key != "https://idp.example u-ann" {
			t.Errorf("ann's task: %d %s", code, b)
		}
		if code, _ := rig.apiDo(t, http.MethodGet, "/api/tasks/"+bobAPITask, "root", ""); code != http.StatusOK {
			t.Errorf("root reading bob's task: %d", code)
		}
		// MCP tasks.
		for token, want := range map[string][]string{"ann-2": {annTask, annSessTask}, bobKey: {bobTask, bobSessTask},
			"root": {annTask, annSessTask, bobTask, bobSessTask}} {
			code, b := rig.apiDo(t, http.MethodGet, "/api/mcp-tasks", token, "")
			if got := ids(t, b); code != http.StatusOK || !slices.Equal(got, sorted(want...)) {
				t.Errorf("/api/mcp-tasks as %.8s: %d %v, want %v", token, code, got, sorted(want...))
			}
		}
		code, unknown = rig.apiDo(t, http.MethodGet, "/api/mcp-tasks/"+unknownMCPTask, "ann-1", "")
		code2, foreign = rig.apiDo(t, http.MethodGet, "/api/mcp-tasks/"+bobTask, "ann-1", "")
		if code != http.StatusNotFound || code2 != code || strings.ReplaceAll(string(foreign), bobTask, unknownMCPTask) != string(unknown) {
			t.Errorf("ann reading bob's MCP task: %d %s; an unknown one: %d %s", code2, foreign, code, unknown)
		}
		var mt tasklog.MCPTask
		code, b = rig.apiDo(t, http.MethodGet, "/api/mcp-tasks/"+annSessTask, "ann-1", "")
		if err := json.Unmarshal(b, &mt); code != http.StatusOK || err != nil || mt.Caller == nil || mt.Caller.Name != "ann" {
			t.Errorf("ann's MCP task: %d %s", code, b)
		}
		ctx := pollCtx(t)
		if got, err := rig.client("ann-2").Get(ctx, annTask); err != nil || got.Status != "completed" {
			t.Errorf("ann's task by tasks/get: %+v %v", got, err)
		}
		_, unknownGet := rig.client(bobKey).Get(ctx, unknownMCPTask)
		if got, err := rig.client(bobKey).Get(ctx, annTask); !sameAsUnknown(err, unknownGet, annTask) {
			t.Errorf("bob's tasks/get of ann's task: %+v %v", got, err)
		}
	}
	check(rig)
	// The gateway restarts on the same task log: ownership was kept
	// with the tasks.
	rig.close()
	check(newOwnersRig(t, dir))
}

// A session is its opener's, on every HTTP route: another caller naming
// it is answered as for a session that does not exist; its opener, with
// another token too, goes on using it.
func TestSessionOfAnotherCaller(t *testing.T) {
	rig := newOwnersRig(t, t.TempDir())
	ctx := pollCtx(t)
	for _, route := range []string{"/mcp", "/virtual/v/mcp", "/servers/fx/mcp"} {
		annS := rig.session(t, ctx, "ann-1", route)
		// A request of the session: tools/list, answered by the route.
		list := func(token, sid, method string) (int, string) {
			body := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
			if method != http.MethodPost {
				body = ""
			}
			resp := rig.send(t, context.Background(), method, route, token, body, "Accept", "application/json, text/event-stream",
				"Mcp-Session-Id", sid, "Mcp-Protocol-Version", "2025-11-25")
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, strings.TrimSpace(string(b))
		}
		if code, body := list("ann-2", annS.SessionID, http.MethodPost); code != http.StatusOK || !strings.Contains(body, `"tools"`) {
			t.Fatalf("%s: ann's session with her other token: %d %s", route, code, body)
		}
		for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
			code, body := list(bobKey, annS.SessionID, method)
			ucode, ubody := list(bobKey, "no-such-session", method)
			if code != http.StatusNotFound || code != ucode || body != ubody {
				t.Errorf("%s: %s of ann's session by bob: %d %s; of none: %d %s", route, method, code, body, ucode, ubody)
			}
		}
		// Ann's session still works for her.
		if code, body := list("ann-1", annS.SessionID, http.MethodPost); code != http.StatusOK || !strings.Contains(body, `"tools"`) {
			t.Errorf("%s: ann's session after bob's tries: %d %s", route, code, body)
		}
	}
}

// The approval queue shows each caller its own calls' questions, a member
// of admin every one, and another's question is not found to answer.
func TestApprovalQueueOfCallers(t *testing.T) {
	rig := newOwnersRig(t, t.TempDir())
	detach := rig.approvals.Attach()
	defer detach()
	ctx := pollCtx(t)
	done := make(chan error, 2)
	for _, c := range []struct{ token, label string }{{"ann-1", "ask-ann"}, {bobKey, "ask-bob"}} {
		cl := rig.client(c.token)
		cl.NoExtension = true // an ordinary call: it waits for the answer
		go func() {
			got, err := cl.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 0.1, "label": c.label})
			if err == nil {
				if r, _ := got.ToolResult(); r.IsError || !strings.Contains(r.Text(), "computed "+c.label) {
					err = errors.New(string(got.Raw))
				}
			}
			done <- err
		}()
	}
	var all []api.Pending
	if !testservers.Eventually(20*time.Second, func() bool {
		_, b := rig.apiDo(t, http.MethodGet, "/api/approvals", "root", "")
		all = nil
		_ = json.Unmarshal(b, &all)
		return len(all) == 2
	}) {
		t.Fatalf("root sees %+v", all)
	}
	mine := func(token string) []api.Pending {
		_, b := rig.apiDo(t, http.MethodGet, "/api/approvals", token, "")
		var l []api.Pending
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		return l
	}
	annQ, bobQ := mine("ann-2"), mine(bobKey)
	if len(annQ) != 1 || annQ[0].Caller != "ann" || annQ[0].Arguments["label"] != "ask-ann" || len(bobQ) != 1 || bobQ[0].Caller != "bob" {
		t.Fatalf("ann sees %+v, bob %+v", annQ, bobQ)
	}
	ucode, unknown := rig.apiDo(t, http.MethodPost, "/api/approvals/nope", bobKey, `{"decision": "once"}`)
	code, foreign := rig.apiDo(t, http.MethodPost, "/api/approvals/"+annQ[0].ID, bobKey, `{"decision": "once"}`)
	if ucode != http.StatusNotFound || code != ucode || string(foreign) != string(unknown) {
		t.Errorf("bob answering ann's question: %d %s; an unknown one: %d %s", code, foreign, ucode, unknown)
	}
	if len(mine("ann-1")) != 1 {
		t.Fatal("bob's answer took ann's question")
	}
	for _, p := range all {
		if code, b := rig.apiDo(t, http.MethodPost, "/api/approvals/"+p.ID, "root", `{"decision": "once"}`); code != http.StatusNoContent {
			t.Fatalf("root's answer: %d %s", code, b)
		}
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	// Answered: another's question is still not found, not gone.
	if code, b := rig.apiDo(t, http.MethodPost, "/api/approvals/"+annQ[0].ID, bobKey, `{"decision": "once"}`); code != http.StatusNotFound || string(b) != string(unknown) {
		t.Errorf("bob answering ann's answered question: %d %s", code, b)
	}
	if code, _ := rig.apiDo(t, http.MethodPost, "/api/approvals/"+annQ[0].ID, "ann-1", `{"decision": "once"}`); code != http.StatusGone {
		t.Errorf("ann answering her answered question: %d", code)
	}
}

// streamTasks reads the event stream as the caller of token from its
// beginning (every event the hub holds) until its first heartbeat (it
// came to the end of them), and returns the tasks of the events it got,
// and the names of the callers their tool_state events name.
func (rig *ownersRig) streamTasks(t *testing.T, token string) (tasks, callers map[string]bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp := rig.send(t, ctx, http.MethodGet, "/api/events", token, "", "Last-Event-ID", "0")
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/api/events: %s", resp.Status)
	}
	tasks, callers = map[string]bool{}, map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var e struct {
			Event string `json:"event"`
			Task  string `json:"task"`
			Data  struct {
				Caller string `json:"caller"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		if e.Event == stream.EventHeartbeat {
			return tasks, callers
		}
		tasks[e.Task] = true
		if e.Event == stream.EventToolState {
			callers[e.Data.Caller] = true
		}
	}
	t.Fatalf("the stream ended without a heartbeat: %v", sc.Err())
	return nil, nil
}

// The event stream shows a caller the events of its own tasks only, a
// member of admin every one; the calls' events name their caller.
func TestEventStreamOfCallers(t *testing.T) {
	rig := newOwnersRig(t, t.TempDir())
	var annTask, bobTask string
	for _, c := range []struct {
		token string
		task  *string
	}{{"ann-1", &annTask}, {bobKey, &bobTask}} {
		code, b := rig.apiDo(t, http.MethodPost, "/api/tools/fx/greet/call", c.token, `{"arguments": {"name": "x"}}`)
		var rec struct{ Task string }
		if err := json.Unmarshal(b, &rec); code != http.StatusOK || err != nil || rec.Task == "" {
			t.Fatalf("a call: %d %s", code, b)
		}
		*c.task = rec.Task
	}
	tasks, callers := rig.streamTasks(t, "ann-2")
	if !tasks[annTask] || len(tasks) != 1 || !callers["ann"] || len(callers) != 1 {
		t.Errorf("ann's stream: tasks %v (hers: %s), callers %v", tasks, annTask, callers)
	}
	tasks, callers = rig.streamTasks(t, "root")
	if !tasks[annTask] || !tasks[bobTask] || !callers["ann"] || !callers["bob"] {
		t.Errorf("root's stream: tasks %v, callers %v", tasks, callers)
	}
}
