package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
)

// A client that cannot show a question, with no page open, is refused at
// once — over HTTP (the go-sdk client and the TypeScript SDK's, in the
// MCP Inspector) and over stdio — with how to allow the call, and where a
// person could have answered.
func TestServeRefusesWhatNobodyCanApprove(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "")
	p := startServeProc(t, dir, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := p.connect(t, ctx)
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "builtin__write_file", Arguments: map[string]any{"path": "a.txt", "content": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	msg := testservers.ResultText(res)
	if !res.IsError || res.Meta["toolmux/error_kind"] != "approval_unavailable" || !strings.Contains(msg, "--yes") ||
		!strings.Contains(msg, "the web page at "+p.url("/")) {
		t.Fatalf("go-sdk client: %v %v %s", res.IsError, res.Meta, msg)
	}

	inspector := testservers.NodeBin(t, "mcp-inspector")
	out, err := inspect(t, inspector, p.url("/mcp"), "--method", "tools/call", "--tool-name", "builtin__write_file",
		"--tool-arg", "path=b.txt", "--tool-arg", "content=x")
	if err != nil || !strings.Contains(out, "approval_unavailable") || !strings.Contains(out, "--yes") {
		t.Fatalf("the inspector: %v\n%s", err, out)
	}
	for _, f := range []string{"a.txt", "b.txt"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("%s was written without approval", f)
		}
	}

	// stdio, without a page: refused at once, pointing at --addr.
	cmd := exec.Command(binary, "serve", "--stdio")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+t.TempDir())
	var stderr testservers.SyncBuffer
	cmd.Stderr = &stderr
	sc, err := mcp.NewClient(&mcp.Implementation{Name: "stdio-client"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	res, err = sc.CallTool(ctx, &mcp.CallToolParams{Name: "builtin__write_file", Arguments: map[string]any{"path": "c.txt", "content": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if msg := testservers.ResultText(res); !res.IsError || !strings.Contains(msg, "approval_unavailable") || !strings.Contains(msg, "serve --stdio --addr") {
		t.Fatalf("stdio: %s", msg)
	}
	if strings.Contains(stderr.String(), "/api/") {
		t.Errorf("serve --stdio points at an API that is not there:\n%s", stderr.String())
	}
}

// serve --stdio --addr also serves the page: with it open, a stdio
// client's call waits; when the client goes away (its stdin closes) the
// question is withdrawn, and approving it afterwards runs nothing. The
// session's task ends as closed.
func TestServeStdioWithPage(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "")
	data := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", testservers.FreePort(t))
	cmd := exec.Command(binary, "serve", "--stdio", "--addr", addr)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+data)
	var stderr testservers.SyncBuffer
	cmd.Stderr = &stderr
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The client's own pipes, so that the test can cut them as a client
	// that crashes would (the go-sdk's ClientSession.Close would wait for
	// the call first).
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "stdio-client", Version: "3.1"}, nil).Connect(ctx,
		&mcp.IOTransport{Reader: stdout, Writer: stdin}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !testservers.Eventually(30*time.Second, func() bool {
		return strings.Contains(stderr.String(), "web page (approvals, live calls) at http://"+addr+"/")
	}) {
		t.Fatalf("stderr does not say where the page is:\n%s", stderr.String())
	}
	page := &serveProc{addr: addr}
	page.attach(t)
	go func() {
		_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "builtin__write_file", Arguments: map[string]any{"path": "a.txt", "content": "x"}})
	}()
	var pending []struct{ ID, Task string }
	if !testservers.Eventually(30*time.Second, func() bool {
		pending = nil
		page.getJSON(t, "/api/approvals", &pending)
		return len(pending) == 1
	}) {
		t.Fatalf("the call never waited on the page\n%s", stderr.String())
	}
	// The client goes: serve's stdin ends. serve ends with it, withdrawing
	// the question first.
	stdin.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not end with its stdin (the question held it)\n%s", stderr.String())
	}
	_ = cs.Close()
	if _, err := os.Stat(filepath.Join(dir, "a.txt")); err == nil {
		t.Fatal("the call ran after its client went away")
	}
	if !strings.Contains(stderr.String(), "no longer waits for approval") {
		t.Errorf("the console does not say the question was withdrawn:\n%s", stderr.String())
	}
	task := findTask(t, dir, data, pending[0].Task)
	if task.Status != "closed" || !strings.Contains(task.Input, "stdio-client 3.1") {
		t.Errorf("the session's task: %+v", task)
	}
}

// With the page open, a call over HTTP waits; when the client's request
// ends, the question leaves the page's queue, and answering it afterwards
// through the API is refused as gone and runs nothing.
func TestServeWithdrawsTheQuestionOfAClientThatLeft(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "")
	p := startServeProc(t, dir, "")
	p.attach(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := p.connect(t, ctx)
	defer cs.Close()
	callCtx, leave := context.WithCancel(ctx)
	go func() {
		_, _ = cs.CallTool(callCtx, &mcp.CallToolParams{Name: "builtin__write_file", Arguments: map[string]any{"path": "a.txt", "content": "x"}})
	}()
	var pending []struct{ ID string }
	if !testservers.Eventually(30*time.Second, func() bool {
		pending = nil
		p.getJSON(t, "/api/approvals", &pending)
		return len(pending) == 1
	}) {
		t.Fatalf("the call never waited\n%s", p.stderr)
	}
	if !testservers.Eventually(10*time.Second, func() bool { return strings.Contains(p.stderr.String(), "/api/approvals/"+pending[0].ID) }) {
		t.Errorf("the console does not say where to answer:\n%s", p.stderr)
	}
	leave()
	if !testservers.Eventually(30*time.Second, func() bool {
		var now []struct{ ID string }
		p.getJSON(t, "/api/approvals", &now)
		return len(now) == 0
	}) {
		t.Fatal("the question stayed on the page after its client left")
	}
	resp, err := http.Post(p.url("/api/approvals/"+pending[0].ID), "application/json", strings.NewReader(`{"decision": "once"}`))
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Error struct{ Kind, Message string }
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusGone || body.Error.Kind != "gone" {
		t.Fatalf("approving after the client left: %d %+v", resp.StatusCode, body)
	}
	// The call ended, cancelled, and did not run.
	var calls []callRecord
	if !testservers.Eventually(30*time.Second, func() bool {
		calls = p.recordedCalls(t)
		return len(calls) == 1
	}) {
		t.Fatalf("the withdrawn call was not recorded: %+v", calls)
	}
	if calls[0].Error == nil || calls[0].Error.Kind != "cancelled" {
		t.Errorf("the withdrawn call's record: %+v", calls[0].Error)
	}
	if _, err := os.Stat(filepath.Join(dir, "a.txt")); err == nil {
		t.Fatal("the call ran after its client went away")
	}
	if !testservers.Eventually(10*time.Second, func() bool { return strings.Contains(p.stderr.String(), "no longer waits for approval") }) {
		t.Errorf("the console does not say the question was withdrawn:\n%s", p.stderr)
	}
}

type loggedTask struct {
	ID, Status, Input string
	FinalAnswer       string `json:"final_answer"`
}

// findTask reads one task with toolmux logs.
func findTask(t *testing.T, dir, data, id string) loggedTask {
	t.Helper()
	cmd := exec.Command(binary, "logs", "show", id, "--json")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+data)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("logs show %s: %v\n%s", id, err, out)
	}
	var task loggedTask
	if err := json.Unmarshal(out, &task); err != nil {
		t.Fatalf("logs show: %v\n%s", err, out)
	}
	return task
}

// Every session is a task that ends, saying how: closed by its client,
// idle (timed out), shutdown; a call made through the API without a task
// is a task of its own.
func TestServeTasksEnd(t *testing.T) {
	t.Parallel()
	dir := workspace(t, fmt.Sprintf(`servers:
  fx:
    command: %s
    trust: true
passthrough:
  idle_timeout: 1s
`, testservers.Fixture(t)))
	data := t.TempDir()
	p := startServeProc(t, dir, data)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Clients with sessions (2025-11-25): a session is a task.
	connect := func(name, path string) *mcp.ClientSession {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: name, Version: "1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: p.url(path)}, &mcp.ClientSessionOptions{ProtocolVersion: legacyProtocol})
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	closer := connect("closer", "/mcp")
	if _, err := closer.CallTool(ctx, &mcp.CallToolParams{Name: "fx__echo", Arguments: map[string]any{"message": "hi"}}); err != nil {
		t.Fatal(err)
	}
	closer.Close() // DELETE
	idler := connect("idler", "/servers/fx/mcp")
	defer idler.Close()
	stayer := connect("stayer", "/mcp")
	defer stayer.Close()
	var rec struct{ Task string }
	resp, err := http.Post(p.url("/api/tools/fx/echo/call"), "application/json", strings.NewReader(`{"arguments": {"message": "api"}}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&rec)
	resp.Body.Close()
	// The passthrough session idles out after 1s.
	if !testservers.Eventually(30*time.Second, func() bool {
		var tasks []struct{ ID, Status string }
		p.getJSON(t, "/api/tasks?status=idle", &tasks)
		return len(tasks) == 1 && tasks[0].ID == idler.ID()
	}) {
		t.Fatal("the idle passthrough session's task never ended as idle")
	}
	if err := p.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(); err != nil {
		t.Fatalf("serve: %v\n%s", err, p.stderr)
	}
	for id, want := range map[string]struct{ status, input string }{
		closer.ID(): {"closed", "MCP session of closer 1 on /mcp"},
		idler.ID():  {"idle", "MCP session of idler 1 on /servers/fx/mcp"},
		stayer.ID(): {"shutdown", "MCP session of stayer 1 on /mcp"},
		rec.Task:    {"success", "API call of fx/echo"},
	} {
		task := findTask(t, dir, data, id)
		if task.Status != want.status || task.Input != want.input || task.FinalAnswer == "" && want.status != "success" {
			t.Errorf("task %s: %+v, want %s %q", id, task, want.status, want.input)
		}
	}
	// Nothing is left running.
	cmd := exec.Command(binary, "logs", "--status", "running", "--json")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+data)
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) != "[]" {
		t.Errorf("running tasks after the gateway stopped: %v %s", err, out)
	}
}

// A gateway killed with its sessions open leaves their tasks running;
// the next one to open the task log marks them interrupted.
func TestKilledServeTasksAreInterrupted(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "")
	data := t.TempDir()
	p := startServeProc(t, dir, data)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := p.connect(t, ctx)
	defer cs.Close()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "builtin__list_directory", Arguments: map[string]any{"path": "."}}); err != nil {
		t.Fatal(err)
	}
	if err := p.signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.wait()
	q := startServeProc(t, dir, data)
	var task struct {
		Status string
		Steps  []struct{ Name, Message string }
	}
	q.getJSON(t, "/api/tasks/"+cs.ID(), &task)
	if task.Status != "interrupted" || len(task.Steps) == 0 || task.Steps[len(task.Steps)-1].Name != "interrupted" ||
		!strings.Contains(task.Steps[len(task.Steps)-1].Message, fmt.Sprintf("pid %d", p.cmd.Process.Pid)) {
		t.Fatalf("the killed gateway's session: %+v", task)
	}
}

// A blank token, or one with spaces around it, is refused before anything
// starts; a short one is served with a warning.
func TestServeTokenChecks(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "")
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--token", "   "}, "", "--token is blank"},
		{[]string{"--token", ""}, "", "--token is blank"},
		{nil, " \t", "TOOLMUX_TOKEN is blank"},
		{[]string{"--token", " secret-secret-secret "}, "", "spaces around it"},
	} {
		env := os.Environ()
		if tc.env != "" {
			env = append(env, "TOOLMUX_TOKEN="+tc.env)
		}
		r := execToolmux(t, dir, "", append(env, "XDG_DATA_HOME="+t.TempDir()),
			append([]string{"serve", "--addr", "127.0.0.1:0"}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q %q: exit %d\n%s", tc.args, tc.env, r.code, r.stderr)
		}
	}
	p := startServeProc(t, dir, "", "--token", "short")
	if !strings.Contains(p.stderr.String(), "warning: the token (--token) is 5 characters long; use at least 16") {
		t.Errorf("no warning for a short token:\n%s", p.stderr)
	}
}
