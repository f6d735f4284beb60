package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/api"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/internal/taskclient"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/tasklog"
)

// tasksGateway serves the fixture's task jobs on /mcp with MCP tasks on,
// kept in a task log of dir; calls of fx/slow_compute with label "ask"
// need approval, asked by elicitation.
func tasksGateway(t *testing.T, dir string, o gateway.Tasks, approver ...policy.Approver) (url string, log *tasklog.Log, g *gateway.Gateway) {
	t.Helper()
	return tasksGatewayWith(t, dir, gateway.Options{Tasks: o}, approver...)
}

// taskJobs is a manager of the fixture server with its task jobs, as
// server fx; the caller closes it.
func taskJobs(t *testing.T) *manager.Manager {
	t.Helper()
	src, err := mcpsource.New(mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio, Command: testservers.Fixture(t), Args: []string{"-task-jobs"}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// tasksGatewayWith is tasksGateway with the gateway's other options.
func tasksGatewayWith(t *testing.T, dir string, opts gateway.Options, approver ...policy.Approver) (url string, log *tasklog.Log, g *gateway.Gateway) {
	t.Helper()
	o := opts.Tasks
	m := taskJobs(t)
	var err error
	engine, err := policy.New(policy.ModeDefault, []policy.Rule{{Name: "ask", Tools: []string{"fx/slow_compute"},
		Args: map[string]string{"label": "^ask"}, Action: policy.Ask}, {Name: "rest", Tools: []string{"fx/*"}, Action: policy.Allow}})
	if err != nil {
		t.Fatal(err)
	}
	var ap policy.Approver = gateway.ElicitApprover{}
	if len(approver) > 0 {
		ap = approver[0]
	}
	s := schedule.New(m, schedule.WithGate(policy.NewGate(engine, policy.WithApprover(ap), policy.WithConcurrentApprovals(true))))
	if o.Store == nil {
		if log, err = tasklog.Open(context.Background(), dir); err != nil {
			t.Fatal(err)
		}
		o.Store = log
	}
	opts.Tasks = o
	g = gateway.New(governed{m, s}, opts)
	srv := httptest.NewServer(g.Mux("", gateway.Security{Loopback: true}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		g.Close()
		m.Close()
		if log != nil {
			log.Close()
		}
	})
	return srv.URL + "/mcp", log, g
}

func pollCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A call still running after the threshold becomes a task, durable at
// once, polled to its result by another client; a quick call answers as
// usual; tool errors complete with isError, protocol errors fail.
func TestTasksLifecycle(t *testing.T) {
	url, _, _ := tasksGateway(t, t.TempDir(), gateway.Tasks{Threshold: 300 * time.Millisecond, TTL: time.Hour})
	ctx := pollCtx(t)
	c := &taskclient.Client{URL: url}

	quick, err := c.CallTool(ctx, "fx__greet", map[string]any{"name": "World"})
	if err != nil || quick.ResultType != "complete" || quick.TaskID != "" {
		t.Fatalf("quick call: %+v %v", quick, err)
	}
	if r, _ := quick.ToolResult(); r.Text() != "Hello, World!" {
		t.Errorf("quick call's result %s", quick.Raw)
	}

	created, err := c.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 1, "label": "x"})
	if err != nil || created.ResultType != "task" || created.TaskID == "" || created.Status != "working" ||
		created.CreatedAt == "" || created.TTLMs == nil || *created.TTLMs != 3600000 || created.PollIntervalMs <= 0 {
		t.Fatalf("CreateTaskResult: %+v %v", created, err)
	}
	// Durable create: readable at once, by another client.
	other := &taskclient.Client{URL: url}
	got, err := other.Get(ctx, created.TaskID)
	if err != nil || got.TaskID != created.TaskID || got.Result != nil {
		t.Fatalf("tasks/get at once: %+v %v", got, err)
	}
	done, err := other.Poll(ctx, created.TaskID, nil)
	if err != nil || done.Status != "completed" || done.ResultType != "complete" {
		t.Fatalf("polled: %+v %v", done, err)
	}
	if r, err := done.ToolResult(); err != nil || r.IsError || !strings.Contains(r.Text(), "computed x") {
		t.Errorf("result %s", done.Result)
	}

	failing, err := c.CallTool(ctx, "fx__failing_job", nil)
	if err != nil || failing.TaskID == "" {
		t.Fatalf("failing_job: %+v %v", failing, err)
	}
	if done, err := c.Poll(ctx, failing.TaskID, nil); err != nil || done.Status != "completed" {
		t.Errorf("failing_job: %+v %v", done, err)
	} else if r, _ := done.ToolResult(); !r.IsError {
		t.Errorf("failing_job's result is no error: %s", done.Result)
	}
	broken, err := c.CallTool(ctx, "fx__protocol_error_job", nil)
	if err != nil || broken.TaskID == "" {
		t.Fatalf("protocol_error_job: %+v %v", broken, err)
	}
	if done, err := c.Poll(ctx, broken.TaskID, nil); err != nil || done.Status != "failed" || done.Error == nil || done.Result != nil {
		t.Errorf("protocol_error_job: %+v %v", done, err)
	}
}

// tasks/cancel cancels the call (cancelled), and acks a finished task the
// same; unknown ids are -32602; a client that did not declare the
// extension gets -32021 on tasks/* and plain results from tools/call; a
// tool configured long is a task at once; the headers must match.
func TestTasksCancelUnknownAndGating(t *testing.T) {
	url, _, _ := tasksGateway(t, t.TempDir(), gateway.Tasks{Threshold: time.Minute, Long: []string{"fx/slow_*"}, Required: []string{"fx/failing_job"}})
	ctx := pollCtx(t)
	c := &taskclient.Client{URL: url}
	created, err := c.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 60})
	if err != nil || created.ResultType != "task" {
		t.Fatalf("a long tool: %+v %v", created, err)
	}
	if err := c.Cancel(ctx, created.TaskID); err != nil {
		t.Fatal(err)
	}
	done, err := c.Poll(ctx, created.TaskID, nil)
	if err != nil || done.Status != "cancelled" || done.Result != nil {
		t.Fatalf("after cancel: %+v %v", done, err)
	}
	if err := c.Cancel(ctx, created.TaskID); err != nil {
		t.Errorf("cancelling a cancelled task: %v", err)
	}

	var rpcErr *taskclient.Error
	if _, err := c.Get(ctx, "mcptask-nope"); !errors.As(err, &rpcErr) || rpcErr.Code != -32602 {
		t.Errorf("unknown task: %v", err)
	}
	if err := c.Update(ctx, "mcptask-nope", map[string]any{}); !errors.As(err, &rpcErr) || rpcErr.Code != -32602 {
		t.Errorf("update of an unknown task: %v", err)
	}

	plain := &taskclient.Client{URL: url, NoExtension: true}
	for _, m := range []func() error{
		func() error { _, err := plain.Get(ctx, created.TaskID); return err },
		func() error { return plain.Update(ctx, created.TaskID, map[string]any{}) },
		func() error { return plain.Cancel(ctx, created.TaskID) },
	} {
		if err := m(); !errors.As(err, &rpcErr) || rpcErr.Code != -32021 || rpcErr.Status != http.StatusBadRequest {
			t.Errorf("tasks/* without the extension: %v", err)
		}
	}

	if _, err := plain.CallTool(ctx, "fx__failing_job", nil); !errors.As(err, &rpcErr) || rpcErr.Code != -32021 ||
		!strings.Contains(string(rpcErr.Data), `"io.modelcontextprotocol/tasks"`) {
		t.Errorf("a required-task tool without the extension: %v", err)
	}
	if res, err := c.CallTool(ctx, "fx__failing_job", nil); err != nil || res.ResultType != "task" {
		t.Errorf("a required-task tool: %+v %v", res, err)
	}

	bad := &taskclient.Client{URL: url, Header: http.Header{"Mcp-Name": {"other"}}}
	if _, err := bad.Get(ctx, created.TaskID); !errors.As(err, &rpcErr) || rpcErr.Code != -32020 || rpcErr.Status != http.StatusBadRequest {
		t.Errorf("a mismatched Mcp-Name: %v", err)
	}
	bad = &taskclient.Client{URL: url, Header: http.Header{"Mcp-Method": {"tasks/cancel"}}}
	if _, err := bad.Get(ctx, created.TaskID); !errors.As(err, &rpcErr) || rpcErr.Code != -32020 {
		t.Errorf("a mismatched Mcp-Method: %v", err)
	}
	for _, m := range []string{"tasks/result", "tasks/list"} {
		if _, err := c.Request(ctx, m, map[string]any{"taskId": created.TaskID}, created.TaskID); !errors.As(err, &rpcErr) || rpcErr.Code != -32601 {
			t.Errorf("%s: %v", m, err)
		}
	}
}

// An approval inside a task shows as input_required with the question
// under inputRequests; tasks/update answers it and the call runs; a
// denial completes it refused; a client that cannot be asked is refused
// at once.
func TestTasksApproval(t *testing.T) {
	url, _, _ := tasksGateway(t, t.TempDir(), gateway.Tasks{Threshold: time.Minute})
	ctx := pollCtx(t)
	c := &taskclient.Client{URL: url, Elicitation: true}
	for _, answer := range []string{"once", "deny"} {
		created, err := c.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 0, "label": "ask-" + answer})
		if err != nil || created.ResultType != "task" {
			t.Fatalf("a call needing approval: %+v %v", created, err)
		}
		asked, err := c.Poll(ctx, created.TaskID, func(t *taskclient.Task) bool { return t.Status != "working" })
		if err != nil || asked.Status != "input_required" || len(asked.InputRequests) != 1 {
			t.Fatalf("asking: %+v %v", asked, err)
		}
		var key string
		for k, q := range asked.InputRequests {
			if q.Method != "elicitation/create" || !strings.Contains(string(q.Params), "approve the call to fx/slow_compute") {
				t.Errorf("question %s: %+v", k, q)
			}
			key = k
		}
		// An answer to a key never asked is acked and changes nothing.
		if err := c.Update(ctx, created.TaskID, map[string]any{"other": map[string]any{"action": "accept"}}); err != nil {
			t.Fatal(err)
		}
		if again, _ := c.Get(ctx, created.TaskID); again.Status != "input_required" {
			t.Errorf("after an answer to no question: %+v", again)
		}
		if err := c.Update(ctx, created.TaskID, map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"decision": answer}}}); err != nil {
			t.Fatal(err)
		}
		done, err := c.Poll(ctx, created.TaskID, nil)
		if err != nil || done.Status != "completed" {
			t.Fatalf("after the answer %s: %+v %v", answer, done, err)
		}
		r, _ := done.ToolResult()
		if answer == "once" && (r.IsError || !strings.Contains(r.Text(), "computed ask-once")) ||
			answer == "deny" && (!r.IsError || !strings.Contains(r.Text(), "approval_denied")) {
			t.Errorf("answer %s: result %s", answer, done.Result)
		}
	}
	mute := &taskclient.Client{URL: url}
	res, err := mute.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 0, "label": "ask-mute"})
	if err != nil || res.ResultType != "complete" {
		t.Fatalf("no elicitation: %+v %v", res, err)
	}
	if r, _ := res.ToolResult(); !r.IsError {
		t.Errorf("a call no one could approve ran: %s", res.Raw)
	}
}

// A task running when the gateway closes ends failed, saying why; read
// back from the task log after it is reopened, by a new gateway.
func TestTasksOutliveTheGateway(t *testing.T) {
	dir := t.TempDir()
	url, _, g := tasksGateway(t, dir, gateway.Tasks{Threshold: 100 * time.Millisecond})
	ctx := pollCtx(t)
	c := &taskclient.Client{URL: url}
	finished, err := c.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 0.3, "label": "before"})
	if err != nil || finished.TaskID == "" {
		t.Fatalf("%+v %v", finished, err)
	}
	if _, err := c.Poll(ctx, finished.TaskID, nil); err != nil {
		t.Fatal(err)
	}
	running, err := c.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 60, "label": "during"})
	if err != nil || running.TaskID == "" {
		t.Fatalf("%+v %v", running, err)
	}
	g.BeginShutdown()
	g.Close()

	dir2 := dir
	url2, _, _ := tasksGateway(t, dir2, gateway.Tasks{})
	c2 := &taskclient.Client{URL: url2}
	if got, err := c2.Get(ctx, finished.TaskID); err != nil || got.Status != "completed" {
		t.Errorf("the finished task after the restart: %+v %v", got, err)
	}
	got, err := c2.Get(ctx, running.TaskID)
	if err != nil || got.Status != "failed" || got.Error == nil || got.Error.Message != "interrupted: the gateway stopped" {
		t.Errorf("the task running at the restart: %+v %v", got, err)
	}
}

// A 2025-11-25 session that declared the extension at initialize gets
// tasks on its calls (a request of the session, with no 2026-07-28
// _meta); the server announced the extension; a session that did not
// declare it gets plain results and -32021.
func TestTasksSessionDeclared(t *testing.T) {
	url, _, _ := tasksGateway(t, t.TempDir(), gateway.Tasks{Threshold: 100 * time.Millisecond})
	ctx := pollCtx(t)
	cs := tasksSession(t, ctx, url)
	if ext := cs.InitializeResult().Capabilities.Extensions; ext[taskclient.Extension] == nil {
		t.Errorf("the extension is not announced: %+v", cs.InitializeResult().Capabilities)
	}
	c := &taskclient.Client{URL: url, SessionID: cs.ID()}
	created, err := c.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 0.5, "label": "session"})
	if err != nil || created.ResultType != "task" {
		t.Fatalf("a session's call: %+v %v", created, err)
	}
	if done, err := c.Poll(ctx, created.TaskID, nil); err != nil || done.Status != "completed" {
		t.Fatalf("%+v %v", done, err)
	}

	plain, err := mcp.NewClient(&mcp.Implementation{Name: "plain"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	res, err := plain.CallTool(ctx, &mcp.CallToolParams{Name: "fx__slow_compute", Arguments: map[string]any{"seconds": 0.5, "label": "plain"}})
	if err != nil || res.IsError || !strings.Contains(testservers.ResultText(res), "computed plain") {
		t.Fatalf("a session without the extension: %+v %v", res, err)
	}
	pc := &taskclient.Client{URL: url, SessionID: plain.ID()}
	var rpcErr *taskclient.Error
	if _, err := pc.Get(ctx, created.TaskID); !errors.As(err, &rpcErr) || rpcErr.Code != -32021 || rpcErr.Status != http.StatusOK {
		t.Errorf("tasks/get of a session without the extension: %v", err)
	}
}

// A session whose calls go the tasks' way (it declared the extension)
// does not idle out while they run, as any session's calls keep it.
func TestTasksSessionStaysBusy(t *testing.T) {
	url, _, _ := tasksGatewayWith(t, t.TempDir(), gateway.Options{Tasks: gateway.Tasks{Threshold: time.Minute}, SessionTimeout: time.Second})
	ctx := pollCtx(t)
	cs := tasksSession(t, ctx, url)
	c := &taskclient.Client{URL: url, SessionID: cs.ID()}
	// Longer in all than the idle timeout, with no pause between calls.
	for i := range 4 {
		got, err := c.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 0.6, "label": fmt.Sprint(i)})
		if err != nil || got.ResultType != "complete" {
			t.Fatalf("call %d of a busy session: %+v %v", i, got, err)
		}
	}
}

// tasksSession connects a 2025-11-25 session to url that declares the
// tasks extension at initialize.
func tasksSession(t *testing.T, ctx context.Context, url string) *mcp.ClientSession {
	t.Helper()
	caps := &mcp.ClientCapabilities{}
	caps.AddExtension(taskclient.Extension, map[string]any{})
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "tasks"}, &mcp.ClientOptions{Capabilities: caps}).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// A task's progress (the call's progress reports) shows on tasks/get
// while it works, its message as the statusMessage.
func TestTasksProgress(t *testing.T) {
	url, _, _ := tasksGateway(t, t.TempDir(), gateway.Tasks{Threshold: 100 * time.Millisecond})
	ctx := pollCtx(t)
	c := &taskclient.Client{URL: url}
	created, err := c.CallTool(ctx, "fx__progress", map[string]any{"steps": 4, "delay_ms": 700})
	if err != nil || created.ResultType != "task" {
		t.Fatalf("%+v %v", created, err)
	}
	seen, err := c.Poll(ctx, created.TaskID, func(t *taskclient.Task) bool {
		return t.Final() || strings.Contains(string(t.Raw), `"toolmux/progress"`)
	})
	if err != nil || seen.Final() || !strings.Contains(seen.StatusMessage, "step ") {
		t.Errorf("no progress seen while working: %+v %v", seen, err)
	}
	if done, err := c.Poll(ctx, created.TaskID, nil); err != nil || done.Status != "completed" || strings.Contains(string(done.Raw), "toolmux/progress") {
		t.Errorf("%+v %v", done, err)
	}
}

// A task's question is put to the page's queue too (ElicitApprover.Also):
// an answer there runs the call, and the task's question is withdrawn.
func TestTasksApprovalOnThePage(t *testing.T) {
	queue := api.NewApprovals(&api.ApprovalOptions{Timeout: time.Minute, Expect: true})
	url, _, _ := tasksGateway(t, t.TempDir(), gateway.Tasks{Threshold: time.Minute}, gateway.ElicitApprover{Also: queue})
	ctx := pollCtx(t)
	c := &taskclient.Client{URL: url, Elicitation: true}
	created, err := c.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 0, "label": "ask-page"})
	if err != nil || created.ResultType != "task" {
		t.Fatalf("%+v %v", created, err)
	}
	if asked, err := c.Poll(ctx, created.TaskID, func(t *taskclient.Task) bool { return t.Status != "working" }); err != nil || asked.Status != "input_required" {
		t.Fatalf("asking: %+v %v", asked, err)
	}
	var pending []api.Pending
	if !testservers.Eventually(10*time.Second, func() bool { pending = queue.Pending(); return len(pending) == 1 }) {
		t.Fatal("the question never reached the page's queue")
	}
	once, _ := policy.AnswerNamed("once")
	if err := queue.Decide(pending[0].ID, once); err != nil {
		t.Fatal(err)
	}
	done, err := c.Poll(ctx, created.TaskID, nil)
	if err != nil || done.Status != "completed" {
		t.Fatalf("%+v %v", done, err)
	}
	if r, _ := done.ToolResult(); r.IsError || !strings.Contains(r.Text(), "computed ask-page") {
		t.Errorf("result %s", done.Result)
	}
}

// asEventStream is a proxy to the gateway at base (its /mcp and every
// other route) that answers the tools/calls the gateway answers with JSON
// as an event stream of that one message, as servers that stream every
// answer do, counting them in framed. The gateway is reached over its own
// socket, as any client reaches it.
func asEventStream(t *testing.T, base string, framed *atomic.Int64) http.Handler {
	t.Helper()
	target, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	type toolsCall struct{}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			if pr.Out.Body == nil {
				return
			}
			body, _ := io.ReadAll(pr.Out.Body)
			pr.Out.Body = io.NopCloser(bytes.NewReader(body))
			if bytes.Contains(body, []byte(`"tools/call"`)) {
				pr.Out = pr.Out.WithContext(context.WithValue(pr.Out.Context(), toolsCall{}, true))
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			if resp.Request.Context().Value(toolsCall{}) == nil || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				return nil
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return err
			}
			resp.Body = io.NopCloser(strings.NewReader(fmt.Sprintf("event: message\ndata: %s\n\n", bytes.TrimSpace(body))))
			resp.Header.Set("Content-Type", "text/event-stream")
			resp.Header.Del("Content-Length")
			resp.ContentLength = -1
			framed.Add(1)
			return nil
		},
	}
}

// An upstream server that offers tasks (here a toolmux gateway with tasks
// on, its answers as JSON or as an event stream) answers a long call of
// the source with a task, which the source follows to its result: the
// call is an ordinary call to everything above it; a call cancelled
// meanwhile cancels the server's task.
func TestTasksUpstream(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("event-stream=%v", stream), func(t *testing.T) {
			upURL, upLog, _ := tasksGateway(t, t.TempDir(), gateway.Tasks{Threshold: 50 * time.Millisecond, PollInterval: 50 * time.Millisecond})
			var framed atomic.Int64
			if stream {
				srv := httptest.NewServer(asEventStream(t, strings.TrimSuffix(upURL, "/mcp"), &framed))
				t.Cleanup(srv.Close)
				upURL = srv.URL + "/mcp"
			}
			src, err := mcpsource.New(mcpsource.Config{Name: "up", Transport: mcpsource.StreamableHTTP, URL: upURL})
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			ctx := pollCtx(t)
			res, err := src.Call(ctx, "fx__slow_compute", map[string]any{"seconds": 0.4, "label": "upstream"})
			if err != nil || res.IsError || len(res.Content) == 0 || !strings.Contains(res.Content[0].Text, "computed upstream") {
				t.Fatalf("a call the server made a task: %+v %v", res, err)
			}
			if stream && framed.Load() == 0 {
				t.Fatal("no answer of the server's came as an event stream")
			}
			tasks, err := upLog.MCPTasks(ctx, tasklog.MCPTaskFilter{})
			if err != nil || len(tasks) != 1 || tasks[0].Status != tasklog.MCPCompleted {
				t.Fatalf("the server's tasks: %+v %v", tasks, err)
			}
			// A failed task is the server's error answer.
			if _, err := src.Call(ctx, "fx__protocol_error_job", nil); err == nil || !strings.Contains(err.Error(), "the job broke") {
				t.Errorf("a failed task: %v", err)
			}

			// A client of a gateway in front of that source gets a task of
			// this gateway's for the call, which follows the server's.
			m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
			if err != nil {
				t.Fatal(err)
			}
			downLog, err := tasklog.Open(ctx, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			down := gateway.New(m, gateway.Options{Tasks: gateway.Tasks{Store: downLog, Threshold: 50 * time.Millisecond}})
			downSrv := httptest.NewServer(down.Mux("", gateway.Security{Loopback: true}))
			defer func() {
				downSrv.CloseClientConnections()
				downSrv.Close()
				down.Close()
				downLog.Close()
			}()
			c := &taskclient.Client{URL: downSrv.URL + "/mcp"}
			created, err := c.CallTool(ctx, "up__fx__slow_compute", map[string]any{"seconds": 0.4, "label": "twice"})
			if err != nil || created.ResultType != "task" {
				t.Fatalf("through two gateways: %+v %v", created, err)
			}
			if done, err := c.Poll(ctx, created.TaskID, nil); err != nil || done.Status != "completed" || !strings.Contains(string(done.Result), "computed twice") {
				t.Errorf("through two gateways: %+v %v", done, err)
			}

			cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			if _, err := src.Call(cctx, "fx__slow_compute", map[string]any{"seconds": 60, "label": "cancelled"}); err == nil {
				t.Fatal("a call past its deadline succeeded")
			}
			if !testservers.Eventually(10*time.Second, func() bool {
				ts, _ := upLog.MCPTasks(ctx, tasklog.MCPTaskFilter{Status: tasklog.MCPCancelled})
				return len(ts) == 1
			}) {
				ts, _ := upLog.MCPTasks(ctx, tasklog.MCPTaskFilter{})
				t.Errorf("the server's task was not cancelled: %+v", ts)
			}
		})
	}
}

// A task's approval question unanswered within the approval timeout is
// withdrawn and the call refused, as any approval nobody answers.
func TestTasksApprovalTimeout(t *testing.T) {
	url, _, _ := tasksGateway(t, t.TempDir(), gateway.Tasks{Threshold: time.Minute, ApprovalTimeout: 300 * time.Millisecond})
	ctx := pollCtx(t)
	c := &taskclient.Client{URL: url, Elicitation: true}
	created, err := c.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 0, "label": "ask-nobody"})
	if err != nil || created.ResultType != "task" {
		t.Fatalf("%+v %v", created, err)
	}
	done, err := c.Poll(ctx, created.TaskID, nil)
	if err != nil || done.Status != "completed" || done.InputRequests != nil {
		t.Fatalf("%+v %v", done, err)
	}
	if r, _ := done.ToolResult(); !r.IsError || !strings.Contains(r.Text(), "approval_denied") || !strings.Contains(r.Text(), "did not answer within 300ms") {
		t.Errorf("an unanswered question: %s", done.Result)
	}
}

// A task expires with the task log's retention: once the journal segment
// holding its newest state is dropped, tasks/get says it is unknown
// (-32602); ttlMs says how long that is.
func TestTasksExpire(t *testing.T) {
	dir := t.TempDir()
	ctx := pollCtx(t)
	log, err := tasklog.Open(ctx, dir, tasklog.WithSegmentBytes(8<<10), tasklog.WithRetention(tasklog.Retention{MaxAge: 24 * time.Hour}),
		tasklog.WithRetentionInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	url, _, _ := tasksGateway(t, dir, gateway.Tasks{Store: log, Threshold: 50 * time.Millisecond, TTL: 24 * time.Hour})
	c := &taskclient.Client{URL: url}
	old, err := c.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 0.3, "label": "old"})
	if err != nil || old.ResultType != "task" || old.TTLMs == nil || *old.TTLMs != 86400000 {
		t.Fatalf("%+v %v", old, err)
	}
	if _, err := c.Poll(ctx, old.TaskID, nil); err != nil {
		t.Fatal(err)
	}
	// More records, then a day and a half passes for what is written.
	for i := range 20 {
		if err := log.PutMCPTask(ctx, tasklog.MCPTask{ID: fmt.Sprintf("pad-%d", i), Status: tasklog.MCPCompleted, Tool: "x",
			Result: json.RawMessage(`{"content":[{"type":"text","text":"` + strings.Repeat("p", 1000) + `"}]}`)}); err != nil {
			t.Fatal(err)
		}
	}
	segs, _ := filepath.Glob(filepath.Join(dir, tasklog.JournalDir, "*.seg"))
	for _, s := range segs {
		mt := time.Now().Add(-36 * time.Hour)
		os.Chtimes(s, mt, mt)
	}
	fresh, err := c.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 0.3, "label": "fresh"})
	if err != nil || fresh.ResultType != "task" {
		t.Fatalf("%+v %v", fresh, err)
	}
	if _, err := c.Poll(ctx, fresh.TaskID, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := log.EnforceRetention(ctx); err != nil {
		t.Fatal(err)
	}
	var rpcErr *taskclient.Error
	if _, err := c.Get(ctx, old.TaskID); !errors.As(err, &rpcErr) || rpcErr.Code != -32602 {
		t.Errorf("an expired task: %v", err)
	}
	if got, err := c.Get(ctx, fresh.TaskID); err != nil || got.Status != "completed" {
		t.Errorf("a recent task: %+v %v", got, err)
	}
}

// Past MaxRunning, a call of a declaring client runs as an ordinary call
// (its result, no task) while the tasks already running go on; once one
// has ended, the next long call is a task again.
func TestTasksMaxRunning(t *testing.T) {
	url, _, _ := tasksGateway(t, t.TempDir(), gateway.Tasks{Threshold: 100 * time.Millisecond, MaxRunning: 1})
	ctx := pollCtx(t)
	c := &taskclient.Client{URL: url}
	first, err := c.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 2, "label": "first"})
	if err != nil || first.ResultType != "task" {
		t.Fatalf("the first long call: %+v %v", first, err)
	}
	second, err := c.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 0.5, "label": "second"})
	if err != nil || second.ResultType != "complete" || second.TaskID != "" {
		t.Fatalf("a long call past max_running: %+v %v, want an ordinary result", second, err)
	}
	if r, _ := second.ToolResult(); !strings.Contains(r.Text(), "computed second") {
		t.Errorf("its result: %s", second.Raw)
	}
	// One past the bound that needs approval is asked as any other
	// 2026-07-28 call: input_required, not a refusal.
	asking := &taskclient.Client{URL: url, Elicitation: true}
	raw, err := asking.Request(ctx, "tools/call", map[string]any{"name": "fx__slow_compute", "arguments": map[string]any{"seconds": 0, "label": "ask-past"}}, "fx__slow_compute")
	if err != nil || !strings.Contains(string(raw), `"resultType":"input_required"`) || !strings.Contains(string(raw), "approve the call to fx/slow_compute") {
		t.Errorf("a call past max_running that needs approval: %s %v", raw, err)
	}
	if done, err := c.Poll(ctx, first.TaskID, nil); err != nil || done.Status != "completed" {
		t.Fatalf("the running task: %+v %v", done, err)
	}
	third, err := c.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 0.5, "label": "third"})
	if err != nil || third.ResultType != "task" {
		t.Errorf("a long call once the task ended: %+v %v, want a task", third, err)
	}
	if third.TaskID != "" {
		if _, err := c.Poll(ctx, third.TaskID, nil); err != nil {
			t.Error(err)
		}
	}
}

// A client that uses tasks whose stream breaks before its call of a tool
// that changes something became a task re-issues the request: the call
// went on as a task, and the re-issue is answered with it (the same
// task), so the append happened once. Once that answer reached the
// client, the same request made again (a client that restarted) runs.
// An explicit cancellation of such a request cancels its task.
func TestTasksReissuedRequest(t *testing.T) {
	url, log, _ := tasksGateway(t, t.TempDir(), gateway.Tasks{Threshold: time.Minute})
	ctx := pollCtx(t)
	path := filepath.Join(t.TempDir(), "out.txt")
	lines := func() []string { return appended(path) }
	client := func() *taskclient.Client { return freshTaskClient(url) }
	cutCall := func(args map[string]any) { cutTaskCall(t, ctx, url, args) }

	args := map[string]any{"path": path, "line": "once", "ms": 1500}
	cutCall(args)
	var got *taskclient.Task
	if !testservers.Eventually(20*time.Second, func() bool {
		var err error
		got, err = client().CallTool(ctx, "fx__append", args)
		return err == nil && got.ResultType == "task"
	}) {
		t.Fatalf("the re-issue got %+v, want the task the call became", got)
	}
	done, err := client().Poll(ctx, got.TaskID, nil)
	if r, _ := done.ToolResult(); err != nil || done.Status != "completed" || r.Text() != "appended once" {
		t.Fatalf("the task: %+v %v", done, err)
	}
	if l := lines(); len(l) != 1 {
		t.Fatalf("the file holds %q: the call ran %d times", l, len(l))
	}
	again, err := client().CallTool(ctx, "fx__append", map[string]any{"path": path, "line": "once", "ms": 1500})
	if err != nil || len(lines()) != 2 || again.TaskID == got.TaskID {
		t.Fatalf("the same request made after its answer was delivered: %+v %v, file %q", again, err, lines())
	}

	// Cancelled by the client after its stream broke, once the gateway
	// has seen it break (the call became a task). (A cancellation that
	// comes before cancels the call while it is still its request's: a
	// re-issue then gets its cancelled result, not a task.)
	args = map[string]any{"path": path, "line": "cancelled", "ms": 60000}
	cutCall(args)
	if !testservers.Eventually(20*time.Second, func() bool {
		working, err := log.MCPTasks(ctx, tasklog.MCPTaskFilter{Status: tasklog.MCPWorking})
		return err == nil && len(working) == 1
	}) {
		t.Fatal("the call whose stream broke never became a task")
	}
	note := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},` +
		`"io.modelcontextprotocol/clientInfo":{"name":"toolmux-taskclient","version":"1"}}}}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(note))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "notifications/cancelled")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var task *taskclient.Task
	if !testservers.Eventually(20*time.Second, func() bool {
		got, err := client().CallTool(ctx, "fx__append", args)
		if err != nil || got.ResultType != "task" {
			return false
		}
		task, err = client().Get(ctx, got.TaskID)
		return err == nil && task.Status == "cancelled"
	}) {
		t.Fatalf("the cancelled request's task: %+v", task)
	}
}

// appended is what fx__append wrote to path, a line a word.
func appended(path string) []string {
	b, _ := os.ReadFile(path)
	return strings.Fields(string(b))
}

// freshTaskClient is a client of url (2026-07-28, the tasks extension
// declared) on connections of its own, numbering its requests from 1, as
// a restarted client does.
func freshTaskClient(url string) *taskclient.Client {
	return &taskclient.Client{URL: url, HTTP: &http.Client{Transport: &http.Transport{}}}
}

// cutTaskCall calls fx__append with args (its path, and ms to keep it
// running after it appended) as a fresh client's request 1, and breaks
// the request's stream once the line is written.
func cutTaskCall(t *testing.T, ctx context.Context, url string, args map[string]any) {
	t.Helper()
	path, _ := args["path"].(string)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		freshTaskClient(url).CallTool(cctx, "fx__append", args)
	}()
	before := len(appended(path))
	if !testservers.Eventually(20*time.Second, func() bool { return len(appended(path)) > before }) {
		cancel()
		<-done
		t.Fatal("the call never started")
	}
	cancel()
	<-done
}

// At most reissue.max_entries calls of tasks clients are kept for a
// re-issue: one more goes unkeyed, as without the window (its request's
// end cancels it, and its re-issue runs it again), while the kept one's
// re-issue still gets its task.
func TestTasksReissueBound(t *testing.T) {
	url, _, _ := tasksGatewayWith(t, t.TempDir(), gateway.Options{Tasks: gateway.Tasks{Threshold: time.Minute},
		Reissue: gateway.Reissue{MaxEntries: 1}})
	ctx := pollCtx(t)
	path := filepath.Join(t.TempDir(), "out.txt")
	kept := map[string]any{"path": path, "line": "kept", "ms": 60000}
	cutTaskCall(t, ctx, url, kept)
	past := map[string]any{"path": path, "line": "past", "ms": 300}
	cutTaskCall(t, ctx, url, past)
	got, err := freshTaskClient(url).CallTool(ctx, "fx__append", past)
	if err != nil || got.ResultType != "complete" {
		t.Fatalf("the re-issue of the call past the bound: %+v %v, want it run again", got, err)
	}
	if got, err := freshTaskClient(url).CallTool(ctx, "fx__append", kept); err != nil || got.ResultType != "task" {
		t.Fatalf("the re-issue of the kept call: %+v %v, want its task", got, err)
	}
	if l := strings.Join(appended(path), " "); l != "kept past past" {
		t.Errorf("the file holds %q", l)
	}
}

// tasks/get, tasks/update and tasks/cancel with params that do not
// decode (a taskId that is not a string, params that are not an object)
// are invalid params, -32602 naming the field, with the status the go-sdk
// gives invalid params in the request's era (400 on 2026-07-28, 200 in a
// session): not "method not found", which would tell the client the
// server has no tasks.
func TestTasksInvalidParams(t *testing.T) {
	url, _, _ := tasksGateway(t, t.TempDir(), gateway.Tasks{})
	ctx := pollCtx(t)
	session := tasksSession(t, ctx, url)
	for _, c := range []struct {
		era    string
		client *taskclient.Client
		status int
	}{
		{"2026-07-28", &taskclient.Client{URL: url}, http.StatusBadRequest},
		{"session", &taskclient.Client{URL: url, SessionID: session.ID()}, http.StatusOK},
	} {
		for _, m := range []string{"tasks/get", "tasks/update", "tasks/cancel"} {
			for _, tc := range []struct {
				name   string
				params map[string]any
				field  string
			}{
				{"numeric taskId", map[string]any{"taskId": 5}, "params.taskId: found a number where a string was expected"},
				{"object taskId", map[string]any{"taskId": map[string]any{"id": "x"}}, "params.taskId: found an object where a string was expected"},
			} {
				_, err := c.client.Request(ctx, m, tc.params, "5")
				var rpcErr *taskclient.Error
				if !errors.As(err, &rpcErr) || rpcErr.Code != -32602 || rpcErr.Status != c.status || !strings.Contains(rpcErr.Message, tc.field) ||
					!strings.Contains(rpcErr.Message, m) {
					t.Errorf("%s %s, %s: %v", c.era, m, tc.name, err)
				}
			}
		}
	}
	// params that are not an object, as raw requests (the client sends
	// an object).
	for _, c := range []struct {
		era    string
		header map[string]string
		status int
	}{
		{"2026-07-28", map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tasks/get"}, http.StatusBadRequest},
		{"session", map[string]string{"Mcp-Protocol-Version": "2025-11-25", "Mcp-Session-Id": session.ID()}, http.StatusOK},
	} {
		for _, params := range []string{`[1]`, `"abc"`, `7`} {
			resp, b := postRaw(t, url, `{"jsonrpc":"2.0","id":9,"method":"tasks/get","params":`+params+`}`, c.header)
			msg, ok := rpcErrorOf(b)
			if !ok || resp.StatusCode != c.status || string(msg.ID) != "9" || msg.Error.Code != -32602 ||
				!strings.Contains(msg.Error.Message, "params: found") || !strings.Contains(msg.Error.Message, "where an object was expected") {
				t.Errorf("%s, params %s: %d %s", c.era, params, resp.StatusCode, b)
			}
		}
	}
}
