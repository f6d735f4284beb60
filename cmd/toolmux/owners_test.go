package main_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/taskclient"
)

// The caller (with --token, the key named default) is in every record:
// the gateway's server span and the call's execute_tool span carry
// enduser.id, an MCP task's call included; the journal's call records
// and the session's task name it, through the API and `toolmux logs`;
// and after toolmux serve restarts, the MCP task read back from the task
// log is still the caller's.
func TestServeCallerInRecords(t *testing.T) {
	t.Parallel()
	recv := startOTLPReceiver(t)
	dir := workspace(t, tasksConfig(t))
	data := t.TempDir()
	const token = "owners-test-token-0123456789"
	p := startServeEnv(t, binary, dir, data, recv.env(), "--token", token)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	withToken := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+token)
		return http.DefaultTransport.RoundTrip(r)
	})
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "owners"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: p.url("/mcp"), HTTPClient: &http.Client{Transport: withToken}},
		&mcp.ClientSessionOptions{ProtocolVersion: legacyProtocol})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__greet", Arguments: map[string]any{"name": "Ann"}}); err != nil || res.IsError {
		t.Fatalf("greet: %+v %v", res, err)
	}
	server := recv.span(t, "tools/call fx__greet", nil)
	exec := recv.span(t, "execute_tool greet", server)
	if attr(server, "enduser.id") != "key:default" || attr(exec, "enduser.id") != "key:default" {
		t.Errorf("enduser.id: server span %q, execute_tool %q", attr(server, "enduser.id"), attr(exec, "enduser.id"))
	}

	c := &taskclient.Client{URL: p.url("/mcp"), Token: token}
	created, err := c.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 1, "label": "owned"})
	if err != nil || created.ResultType != "task" {
		t.Fatalf("a long call: %+v %v", created, err)
	}
	if done, err := c.Poll(ctx, created.TaskID, nil); err != nil || done.Status != "completed" {
		t.Fatalf("%+v %v", done, err)
	}
	if exec := recv.span(t, "execute_tool slow_compute", nil); attr(exec, "enduser.id") != "key:default" {
		t.Errorf("an MCP task's execute_tool span: enduser.id %q", attr(exec, "enduser.id"))
	}

	// The session's task and its call's record, through the API.
	var tasks []struct {
		ID     string
		Input  string
		Caller *struct{ Name, Key string }
	}
	p.getAs(t, token, "/api/tasks", &tasks)
	session := ""
	for _, task := range tasks {
		if strings.Contains(task.Input, "MCP session of owners") {
			session = task.ID
			if task.Caller == nil || task.Caller.Name != "default" || task.Caller.Key != "key:default" {
				t.Errorf("the session's task: %+v", task)
			}
		}
	}
	if session == "" {
		t.Fatalf("no session task among %+v", tasks)
	}
	var d struct {
		Calls []struct {
			Tool   string
			Caller *struct{ Name, Key string }
		}
	}
	p.getAs(t, token, "/api/tasks/"+session, &d)
	if len(d.Calls) != 1 || d.Calls[0].Caller == nil || d.Calls[0].Caller.Name != "default" {
		t.Errorf("the session's call records: %+v", d.Calls)
	}

	if err := p.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(); err != nil {
		t.Fatalf("serve: %v\n%s", err, p.stderr)
	}
	// The operator's view of the data directory: the caller of each
	// task, and of its calls.
	env := append(os.Environ(), "XDG_DATA_HOME="+data)
	r := execToolmux(t, dir, "", env, "logs")
	if r.code != 0 || !strings.Contains(r.stdout, "CALLER") || !strings.Contains(r.stdout, session+"  ") {
		t.Fatalf("toolmux logs: %d %s %s", r.code, r.stdout, r.stderr)
	}
	for _, line := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(line, session) && !strings.Contains(line, " default ") {
			t.Errorf("toolmux logs does not name the session's caller: %q", line)
		}
	}
	r = execToolmux(t, dir, "", env, "logs", "show", session)
	if r.code != 0 || !strings.Contains(r.stdout, "caller    default (key:default)") {
		t.Errorf("toolmux logs show: %d %s %s", r.code, r.stdout, r.stderr)
	}
	r = execToolmux(t, dir, "", env, "logs", "show", session, "--json")
	var shown struct {
		Calls []struct{ Caller *struct{ Name, Key string } }
	}
	if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil || len(shown.Calls) != 1 || shown.Calls[0].Caller == nil ||
		shown.Calls[0].Caller.Key != "key:default" || strings.Contains(r.stdout, token) {
		t.Errorf("toolmux logs show --json: %v %s", err, r.stdout)
	}

	// Restarted, the MCP task is read back from the task log, its
	// caller's.
	p = startServeEnv(t, binary, dir, data, recv.env(), "--token", token)
	var mt struct {
		Status string
		Caller *struct{ Name, Key string }
	}
	p.getAs(t, token, "/api/mcp-tasks/"+created.TaskID, &mt)
	if mt.Status != "completed" || mt.Caller == nil || mt.Caller.Name != "default" || mt.Caller.Key != "key:default" {
		t.Errorf("the MCP task after a restart: %+v", mt)
	}
	c.URL = p.url("/mcp")
	if got, err := c.Get(ctx, created.TaskID); err != nil || got.Status != "completed" {
		t.Errorf("tasks/get after a restart: %+v %v", got, err)
	}
}
