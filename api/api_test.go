package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolmux/toolmux/api"
	"github.com/toolmux/toolmux/builtin"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture is the whole serving stack over the built-in tools of a
// workspace: manager, pipeline recording into a real task log, policy in
// default mode asking through the API's queue, scheduler publishing to a
// hub persisted in the log, and the API on a real HTTP server.
type fixture struct {
	url       string
	workspace string
	log       *tasklog.Log
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	return newFixtureWith(t, &api.ApprovalOptions{Timeout: time.Minute})
}

// newFixtureWith is newFixture with the approval queue's options.
func newFixtureWith(t *testing.T, ao *api.ApprovalOptions) fixture {
	t.Helper()
	ctx := context.Background()
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("alpha\nbeta\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := builtin.New(ws)
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{Transport: "builtin"}))
	if err != nil {
		t.Fatal(err)
	}
	log, err := tasklog.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// An MCP task, as the gateway keeps one, for /api/mcp-tasks.
	if err := log.PutMCPTask(ctx, tasklog.MCPTask{ID: "mcptask-demo", Status: tasklog.MCPCompleted, Route: "/mcp",
		Tool: "builtin__read_file", Server: "builtin", ServerTool: "read_file", Session: "demo", Call: "06h02dq0vhj957n7p1t38nxn8c",
		Result: json.RawMessage(`{"content":[{"type":"text","text":"alpha"}]}`)}); err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.New(m, pipeline.WithRecorder(log))
	if err != nil {
		t.Fatal(err)
	}
	engine, err := policy.New(policy.ModeDefault, nil)
	if err != nil {
		t.Fatal(err)
	}
	hub, err := stream.NewHub(ctx, stream.WithStore(log.StreamStore()), stream.WithHeartbeat(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	approvals := api.NewApprovals(ao)
	s := schedule.New(p, schedule.WithGate(policy.NewGate(engine, policy.WithApprover(policy.FirstOf(approvals)))),
		schedule.WithSink(stream.SchedulerSink(hub)))
	srv := httptest.NewServer(api.New(api.Options{Catalog: p, Caller: s, Health: m.Health, Policy: engine,
		Approvals: approvals, Log: log, Events: hub, Version: "test"}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = hub.Close(cctx)
		_ = m.Close()
		_ = log.Close()
	})
	return fixture{url: srv.URL, workspace: ws, log: log}
}

// attach opens the event stream as an approver (as the web page does)
// until detach, or the end of the test.
func (f fixture) attach(t *testing.T) (detach func()) {
	t.Helper()
	detach = testservers.AttachApprover(t, f.url)
	if !testservers.Eventually(10*time.Second, func() bool {
		var in api.Info
		f.get(t, "/api/info", &in)
		return in.Approvers > 0
	}) {
		t.Fatal("the approver never showed in /api/info")
	}
	return detach
}

func (f fixture) get(t *testing.T, path string, v any) int {
	t.Helper()
	resp, err := http.Get(f.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	return resp.StatusCode
}

func (f fixture) post(t *testing.T, path, body string, v any) int {
	t.Helper()
	resp, err := http.Post(f.url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if v != nil && len(b) > 0 {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("POST %s: %v\n%s", path, err, b)
		}
	}
	return resp.StatusCode
}

type apiErr struct {
	Error struct{ Kind, Message string } `json:"error"`
}

func TestServersToolsAndCalls(t *testing.T) {
	f := newFixture(t)
	var health []tool.ServerHealth
	if code := f.get(t, "/api/servers", &health); code != 200 || len(health) != 1 || health[0].Name != "builtin" {
		t.Fatalf("servers: %d %+v", code, health)
	}
	var tools []struct{ Name, Approval string }
	if code := f.get(t, "/api/tools", &tools); code != 200 {
		t.Fatalf("tools: %d", code)
	}
	approval := map[string]string{}
	for _, x := range tools {
		approval[x.Name] = x.Approval
	}
	if approval["builtin__read_file"] != "allow" || approval["builtin__shell"] != "ask" {
		t.Errorf("approval per tool: %v", approval)
	}

	var rec tool.Record
	if code := f.post(t, "/api/tools/builtin/read_file/call", `{"arguments": {"path": "notes.txt"}, "task": "t-1"}`, &rec); code != 200 ||
		rec.Result == nil || !strings.Contains(rec.Result.Text(), "beta") || rec.Task != "t-1" {
		t.Fatalf("call: %d %+v", code, rec)
	}
	rec = tool.Record{}
	if code := f.post(t, "/api/tools/builtin/read_fiel/call", `{"arguments": {}}`, &rec); code != 404 ||
		rec.Error == nil || rec.Error.Kind != tool.KindToolNotRegistered || rec.Error.Suggestion == "" {
		t.Fatalf("unknown tool: %d %+v", code, rec.Error)
	}
	var e apiErr
	if code := f.post(t, "/api/tools/builtin/read_file/call", `{"args": {}}`, &e); code != 400 || e.Error.Kind != "bad_request" || !strings.Contains(e.Error.Message, "arguments") {
		t.Fatalf("bad body: %d %+v", code, e)
	}
	e = apiErr{}
	huge := `{"arguments": {"path": "` + strings.Repeat("x", 17<<20) + `"}}`
	if code := f.post(t, "/api/tools/builtin/read_file/call", huge, &e); code != 413 || e.Error.Kind != "too_large" {
		t.Fatalf("a body over 16 MiB: %d %+v", code, e)
	}
	e = apiErr{}
	if code := f.get(t, "/api/nothing", &e); code != 404 || e.Error.Kind != "not_found" {
		t.Fatalf("unknown route: %d %+v", code, e)
	}

	// The calls are in the task log.
	var tasks []tasklog.TaskSummary
	if code := f.get(t, "/api/tasks", &tasks); code != 200 {
		t.Fatalf("tasks: %d", code)
	}
	found := false
	for _, tk := range tasks {
		found = found || (tk.ID == "t-1" && tk.Calls == 1)
	}
	if !found {
		t.Fatalf("task t-1 with one call not listed: %+v", tasks)
	}
	var detail struct {
		ID    string `json:"id"`
		Calls []json.RawMessage
	}
	if code := f.get(t, "/api/tasks/t-1", &detail); code != 200 || detail.ID != "t-1" || len(detail.Calls) != 1 {
		t.Fatalf("task detail: %d %+v", code, detail)
	}
	if code := f.get(t, "/api/tasks/nope", nil); code != 404 {
		t.Fatalf("unknown task: %d", code)
	}
}

// A call that needs approval waits in the queue until it is answered
// through the API; "deny" refuses it.
func TestApprovalThroughTheAPI(t *testing.T) {
	f := newFixture(t)
	f.attach(t)
	for _, tc := range []struct {
		decision string
		status   int
		ran      bool
	}{
		{"once", 200, true},
		{"deny", 403, false},
	} {
		t.Run(tc.decision, func(t *testing.T) {
			file := "made-" + tc.decision + ".txt"
			done := make(chan int, 1)
			var rec tool.Record
			go func() {
				done <- f.post(t, "/api/tools/builtin/shell/call", `{"arguments": {"command": "touch `+file+`"}}`, &rec)
			}()
			var pending []api.Pending
			if !testservers.Eventually(30*time.Second, func() bool {
				pending = nil
				f.get(t, "/api/approvals", &pending)
				return len(pending) == 1
			}) {
				t.Fatalf("no pending approval: %+v", pending)
			}
			if p := pending[0]; p.Server != "builtin" || p.Tool != "shell" || p.Arguments["command"] != "touch "+file {
				t.Errorf("pending: %+v", p)
			}
			var e apiErr
			if code := f.post(t, "/api/approvals/"+pending[0].ID, `{"decision": "sometimes"}`, &e); code != 400 {
				t.Errorf("bad decision: %d %+v", code, e)
			}
			if code := f.post(t, "/api/approvals/"+pending[0].ID, `{"decision": "`+tc.decision+`"}`, nil); code != 204 {
				t.Fatalf("decide: %d", code)
			}
			if code := <-done; code != tc.status {
				t.Fatalf("call ended %d, want %d: %+v", code, tc.status, rec.Error)
			}
			if code := f.post(t, "/api/approvals/"+pending[0].ID, `{"decision": "once"}`, nil); code != 410 {
				t.Errorf("a second answer: %d", code)
			}
			_, err := os.Stat(filepath.Join(f.workspace, file))
			if ran := err == nil; ran != tc.ran {
				t.Errorf("ran %v, want %v", ran, tc.ran)
			}
		})
	}
}

// The event stream shows a call's states as it runs.
func TestEventsStream(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.url+"/api/events?task=ev-task", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
	if code := f.post(t, "/api/tools/builtin/read_file/call", `{"arguments": {"path": "notes.txt"}, "task": "ev-task"}`, nil); code != 200 {
		t.Fatalf("call: %d", code)
	}
	dec := stream.NewDecoder(resp.Body)
	var states []string
	for {
		ev, err := dec.NextEvent()
		if err != nil {
			t.Fatalf("stream ended after %v: %v", states, err)
		}
		if ev.Name != stream.EventToolState {
			continue
		}
		var d struct{ State string }
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatal(err)
		}
		states = append(states, d.State)
		if d.State == "success" {
			break
		}
	}
	if got := strings.Join(states, " "); got != "validating scheduled executing success" {
		t.Fatalf("states %q", got)
	}
}

// Arguments nested past the limit are answered 400 invalid_tool_params,
// naming the limit, with a small answer and no call made; an answer is
// indented only while it is small, so that a large one is not multiplied
// by its nesting.
func TestCallDepthAndAnswerSize(t *testing.T) {
	f := newFixture(t)
	for _, depth := range []int{65, 9000} {
		body := `{"arguments": {"path": ` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}, "task": "deep"}`
		resp, err := http.Post(f.url+"/api/tools/builtin/read_file/call", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e apiErr
		if err := json.Unmarshal(b, &e); err != nil || resp.StatusCode != 400 || e.Error.Kind != string(tool.KindInvalidParams) ||
			!strings.Contains(e.Error.Message, "64 levels") || len(b) > 1024 {
			t.Errorf("depth %d: %d %s", depth, resp.StatusCode, b[:min(len(b), 300)])
		}
	}
	if code := f.get(t, "/api/tasks/deep", nil); code != 404 {
		t.Errorf("a refused request made a task: %d", code)
	}
	// 64 levels are accepted (and refused by the schema, a record).
	body := `{"arguments": {"path": ` + strings.Repeat("[", 63) + strings.Repeat("]", 63) + `}}`
	var rec tool.Record
	if code := f.post(t, "/api/tools/builtin/read_file/call", body, &rec); code != 422 || rec.Error == nil {
		t.Errorf("64 levels: %d %+v", code, rec.Error)
	}

	small, err := http.Post(f.url+"/api/tools/builtin/read_file/call", "application/json", strings.NewReader(`{"arguments": {"path": "notes.txt"}}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(small.Body)
	small.Body.Close()
	if !strings.Contains(string(b), "\n  \"id\": ") {
		t.Errorf("a small answer is not indented: %.100s", b)
	}
	big := `{"arguments": {"command": "x", "list": [` + strings.Repeat(`[[[[[[[[[[1]]]]]]]]]],`, 20000) + `1]}}`
	resp, err := http.Post(f.url+"/api/tools/builtin/glob/call", "application/json", strings.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if len(b) > 2*len(big) || strings.Contains(string(b), "\n  ") {
		t.Errorf("a large answer is %d bytes for a %d-byte request, indented: %v", len(b), len(big), strings.Contains(string(b), "\n  "))
	}
}

// A listing's limit is bounded by the server: /api/tasks and
// /api/mcp-tasks take 1 to 1000, one more (or anything not a positive
// integer) is a 400 bad_request naming the bound; at the bound, the
// listing is served.
func TestListLimitBounded(t *testing.T) {
	f := newFixture(t)
	for _, path := range []string{"/api/tasks", "/api/mcp-tasks"} {
		var list []map[string]any
		if code := f.get(t, path+"?limit=1000", &list); code != http.StatusOK {
			t.Errorf("%s?limit=1000: %d", path, code)
		}
		if code := f.get(t, path, &list); code != http.StatusOK {
			t.Errorf("%s: %d", path, code)
		}
		for _, limit := range []string{"1001", "0", "-1", "ten", "99999999999999999999"} {
			var e struct {
				Error struct{ Kind, Message string }
			}
			if code := f.get(t, path+"?limit="+limit, &e); code != http.StatusBadRequest || e.Error.Kind != "bad_request" ||
				!strings.Contains(e.Error.Message, "from 1 to 1000") {
				t.Errorf("%s?limit=%s: %d %+v", path, limit, code, e)
			}
		}
	}
}
