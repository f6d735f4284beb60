package main_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toolmux/toolmux/internal/taskclient"
	"github.com/toolmux/toolmux/internal/testservers"
)

// tasksConfig serves the fixture's task jobs, on /mcp and, under the
// names the conformance suite's tasks scenarios call, on the virtual
// server /virtual/tasks/mcp; failing_job requires tasks.
func tasksConfig(t *testing.T) string {
	return fmt.Sprintf(`servers:
  fx:
    command: %s
    args: ["-task-jobs"]
    trust: true
policy:
  rules:
    - {tools: ["fx/confirm_delete"], action: ask}
virtual_servers:
  - name: tasks
    tools: ["fx/greet", "fx/slow_compute", "fx/failing_job", "fx/protocol_error_job", "fx/confirm_delete"]
    rename:
      fx/greet: greet
      fx/slow_compute: slow_compute
      fx/failing_job: failing_job
      fx/protocol_error_job: protocol_error_job
      fx/confirm_delete: confirm_delete
mcp_tasks:
  threshold: 300ms
  long: ["fx/confirm_delete"]
  required: ["fx/failing_job"]
`, testservers.Fixture(t))
}

// A long call started as a task is polled to its result by a new client
// (new connections, no session); after toolmux serve is stopped and
// started again, a task that finished before reads back completed, one
// that ran at the stop reads failed with the reason, and so does one that
// ran when serve was killed.
func TestTasksOutliveClientsAndRestarts(t *testing.T) {
	t.Parallel()
	dir := workspace(t, tasksConfig(t))
	data := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	newClient := func(p *serveProc) *taskclient.Client {
		return &taskclient.Client{URL: p.url("/mcp"), HTTP: &http.Client{Transport: &http.Transport{}}}
	}

	p := startServeProc(t, dir, data)
	first := newClient(p)
	done, err := first.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 1, "label": "before"})
	if err != nil || done.ResultType != "task" {
		t.Fatalf("a long call: %+v %v", done, err)
	}
	running, err := first.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 120, "label": "at the stop"})
	if err != nil || running.ResultType != "task" {
		t.Fatalf("a longer call: %+v %v", running, err)
	}
	// The first client is gone; another polls.
	first.HTTP.CloseIdleConnections()
	got, err := newClient(p).Poll(ctx, done.TaskID, nil)
	if err != nil || got.Status != "completed" {
		t.Fatalf("polled by a new client: %+v %v", got, err)
	}
	if r, _ := got.ToolResult(); !strings.Contains(r.Text(), "computed before") {
		t.Errorf("result %s", got.Result)
	}
	if err := p.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(); err != nil {
		t.Fatalf("serve: %v\n%s", err, p.stderr.String())
	}

	p = startServeProc(t, dir, data)
	c := newClient(p)
	got, err = c.Get(ctx, done.TaskID)
	if err != nil || got.Status != "completed" {
		t.Errorf("the finished task after the restart: %+v %v", got, err)
	} else if r, _ := got.ToolResult(); !strings.Contains(r.Text(), "computed before") {
		t.Errorf("its result after the restart: %s", got.Result)
	}
	got, err = c.Get(ctx, running.TaskID)
	if err != nil || got.Status != "failed" || got.Error == nil || got.Error.Message != "interrupted: the gateway stopped" || got.Result != nil {
		t.Errorf("the task running at the stop: %+v %v", got, err)
	}

	killed, err := c.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 120, "label": "at the kill"})
	if err != nil || killed.ResultType != "task" {
		t.Fatalf("%+v %v", killed, err)
	}
	if err := p.signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.wait()
	p = startServeProc(t, dir, data)
	got, err = newClient(p).Get(ctx, killed.TaskID)
	if err != nil || got.Status != "failed" || got.Error == nil || got.Error.Message != "interrupted: the gateway stopped" {
		t.Errorf("the task running when serve was killed: %+v %v", got, err)
	}
}

// The official suite's tasks-* scenarios (protocol 2026-07-28) against a
// virtual server exposing the fixture's task jobs under the names they
// call. Those whose fixtures toolmux can serve pass; see docs/gateway.md
// "Tasks" for the two that cannot apply (a server's own elicitation).
func TestConformanceTasks(t *testing.T) {
	t.Parallel()
	node := testservers.Node22(t)
	suite := testservers.NodeModule(t, "@modelcontextprotocol/conformance/dist/index.js")
	addr := serveGateway(t, workspace(t, tasksConfig(t)))
	url := "http://" + addr + "/virtual/tasks/mcp"
	for _, name := range []string{"tasks-lifecycle", "tasks-capability-negotiation", "tasks-wire-fields", "tasks-request-state-removal",
		"tasks-request-headers", "tasks-dispatch-and-envelope", "tasks-required-task-error"} {
		res := runConformance(t, node, suite, url, "--scenario", name)
		sc, ok := res[name]
		if !ok || sc.checks == 0 {
			t.Errorf("%s did not run: %+v", name, res)
			continue
		}
		if len(sc.failures) > 0 {
			t.Errorf("%s: %d of %d checks fail:\n  %s", name, len(sc.failures), sc.checks, strings.Join(sc.failures, "\n  "))
		}
	}
}

// The Tasks tab lists the gateway's MCP tasks with their status, and links
// each to the task of its client's session (none for a sessionless
// client).
func TestBrowserMCPTasks(t *testing.T) {
	t.Parallel()
	p := startServeProc(t, workspace(t, tasksConfig(t)), "")
	b := newUIBrowser(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := &taskclient.Client{URL: p.url("/mcp")}
	created, err := c.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 0.5, "label": "page"})
	if err != nil || created.ResultType != "task" {
		t.Fatalf("%+v %v", created, err)
	}
	if _, err := c.Poll(ctx, created.TaskID, nil); err != nil {
		t.Fatal(err)
	}
	b.do(chromedp.Navigate(p.url("/#tasks")))
	b.visible(fmt.Sprintf(`#mcp-tasks-card #mcp-tasks tr[data-task=%q][data-status="completed"] .badge.mcp-completed`, created.TaskID))
	if txt := b.text(fmt.Sprintf(`#mcp-tasks tr[data-task=%q]`, created.TaskID)); !strings.Contains(txt, "fx__slow_compute") || !strings.Contains(txt, "no session") {
		t.Errorf("the row reads %q", txt)
	}
}
