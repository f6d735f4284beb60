package tasklog_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolmux/toolmux/tasklog"
)

// An MCP task's newest state is the task: read at once after it is put,
// listed without its bulk, and read back from the journal after the log is
// reopened with its index lost.
func TestMCPTaskStates(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir)
	if _, err := l.MCPTask(ctx, "nope"); !errors.Is(err, tasklog.ErrNotFound) {
		t.Fatalf("unknown task: %v", err)
	}
	task := tasklog.MCPTask{ID: "t1", Status: tasklog.MCPWorking, Route: "/mcp", Tool: "s__slow", Server: "s", ServerTool: "slow", Session: "sess"}
	if err := l.PutMCPTask(ctx, task); err != nil {
		t.Fatal(err)
	}
	got, err := l.MCPTask(ctx, "t1")
	if err != nil || got.Status != tasklog.MCPWorking || got.Tool != "s__slow" || got.Owner == "" || got.Created.IsZero() {
		t.Fatalf("after create: %+v %v", got, err)
	}
	task.Created = got.Created
	task.Status, task.InputRequests = tasklog.MCPInputRequired, json.RawMessage(`{"k":{"method":"elicitation/create"}}`)
	if err := l.PutMCPTask(ctx, task); err != nil {
		t.Fatal(err)
	}
	task.Status, task.InputRequests, task.Call = tasklog.MCPCompleted, nil, "call-1"
	task.Result = json.RawMessage(`{"content":[{"type":"text","text":"done"}]}`)
	if err := l.PutMCPTask(ctx, task); err != nil {
		t.Fatal(err)
	}
	got, err = l.MCPTask(ctx, "t1")
	if err != nil || got.Status != tasklog.MCPCompleted || string(got.Result) != string(task.Result) || got.InputRequests != nil ||
		!got.Created.Equal(task.Created) || got.Call != "call-1" {
		t.Fatalf("completed: %+v %v", got, err)
	}
	list, err := l.MCPTasks(ctx, tasklog.MCPTaskFilter{})
	if err != nil || len(list) != 1 || list[0].Status != tasklog.MCPCompleted || list[0].Result != nil || list[0].Call != "call-1" {
		t.Fatalf("list %+v %v", list, err)
	}
	if list, _ := l.MCPTasks(ctx, tasklog.MCPTaskFilter{Status: tasklog.MCPWorking}); len(list) != 0 {
		t.Errorf("working tasks %+v", list)
	}
	if err := l.PutMCPTask(ctx, tasklog.MCPTask{ID: "t2", Status: "done"}); err == nil {
		t.Error("an unknown status was stored")
	}
	l.Close()
	os.Remove(filepath.Join(dir, tasklog.JournalDir, tasklog.IndexName))
	l = open(t, dir)
	got, err = l.MCPTask(ctx, "t1")
	if err != nil || got.Status != tasklog.MCPCompleted || string(got.Result) != string(task.Result) {
		t.Fatalf("after the index was rebuilt: %+v %v", got, err)
	}
}

// Open ends failed, with the reason, the MCP tasks left working or waiting
// for input by a process that is gone; finished ones and those of live
// processes are left alone.
func TestOpenFailsTheMCPTasksOfDeadProcesses(t *testing.T) {
	dir := t.TempDir()
	host, _ := os.Hostname()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadOwner := fmt.Sprintf("%s/%d/1", host, dead.Process.Pid)
	l := open(t, dir)
	for _, tk := range []tasklog.MCPTask{
		{ID: "working", Status: tasklog.MCPWorking, Tool: "x", Owner: deadOwner},
		{ID: "asking", Status: tasklog.MCPInputRequired, Tool: "x", Owner: deadOwner, InputRequests: json.RawMessage(`{"a":{}}`)},
		{ID: "done", Status: tasklog.MCPCompleted, Tool: "x", Owner: deadOwner, Result: json.RawMessage(`{"content":[]}`)},
		{ID: "mine", Status: tasklog.MCPWorking, Tool: "x"},
	} {
		if err := l.PutMCPTask(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	l = open(t, dir)
	for id, want := range map[string]tasklog.MCPTaskStatus{"working": tasklog.MCPFailed, "asking": tasklog.MCPFailed,
		"done": tasklog.MCPCompleted, "mine": tasklog.MCPWorking} {
		got, err := l.MCPTask(ctx, id)
		if err != nil || got.Status != want {
			t.Errorf("%s: %+v %v, want %s", id, got, err, want)
			continue
		}
		if want == tasklog.MCPFailed {
			var e struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if json.Unmarshal(got.Error, &e) != nil || e.Code != -32603 || e.Message != "interrupted: the gateway stopped" ||
				got.StatusMessage != e.Message || got.InputRequests != nil {
				t.Errorf("%s: %+v", id, got)
			}
		}
	}
}

// An MCP task expires with the journal segment holding its newest state:
// retention by age makes it unknown.
func TestMCPTaskExpiresUnderRetention(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, tasklog.WithSegmentBytes(8<<10), tasklog.WithRetention(tasklog.Retention{MaxAge: 24 * time.Hour}), tasklog.NoBackgroundRetention())
	if err := l.PutMCPTask(ctx, tasklog.MCPTask{ID: "old", Status: tasklog.MCPCompleted, Tool: "x", Result: json.RawMessage(`{"content":[]}`)}); err != nil {
		t.Fatal(err)
	}
	fillTasks(t, l, "pad", 10, 3, 1000)
	segs, _ := filepath.Glob(filepath.Join(dir, tasklog.JournalDir, "*.seg"))
	for _, s := range segs {
		mt := time.Now().Add(-48 * time.Hour)
		os.Chtimes(s, mt, mt)
	}
	if err := l.PutMCPTask(ctx, tasklog.MCPTask{ID: "new", Status: tasklog.MCPCompleted, Tool: "x", Result: json.RawMessage(`{"content":[]}`)}); err != nil {
		t.Fatal(err)
	}
	fillTasks(t, l, "fresh", 2, 1, 10)
	if _, err := l.EnforceRetention(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.MCPTask(ctx, "old"); !errors.Is(err, tasklog.ErrNotFound) {
		t.Errorf("the old task: %v", err)
	}
	if _, err := l.MCPTask(ctx, "new"); err != nil {
		t.Errorf("the new task: %v", err)
	}
}
