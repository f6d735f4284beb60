package main_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// Every `toolmux call` is a task in the task log of the data directory,
// with its call record: `toolmux logs` lists it, `logs show` has the call.
func TestCallsAreRecordedInTheTaskLog(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "")
	data := filepath.Join(t.TempDir(), "data")
	if r := toolmux(t, dir, "", "--data-dir", data, "call", "builtin", "read_file", `{"path": "notes.txt"}`); r.code != 0 {
		t.Fatalf("call: %d %s", r.code, r.stderr)
	}
	if r := toolmux(t, dir, "", "--data-dir", data, "call", "builtin", "shell", `{"command": "echo no"}`); r.code != 1 {
		t.Fatalf("refused call: %d %s", r.code, r.stderr)
	}
	r := toolmux(t, dir, "", "--data-dir", data, "logs", "--json")
	if r.code != 0 {
		t.Fatalf("logs: %d %s", r.code, r.stderr)
	}
	var tasks []struct {
		ID, Status, Input string
		Calls, Errors     int
	}
	if err := json.Unmarshal([]byte(r.stdout), &tasks); err != nil {
		t.Fatalf("logs --json: %v\n%s", err, r.stdout)
	}
	if len(tasks) != 2 {
		t.Fatalf("%d tasks, want 2: %s", len(tasks), r.stdout)
	}
	byTool := map[string]int{}
	for i, tk := range tasks {
		for _, name := range []string{"read_file", "shell"} {
			if strings.Contains(tk.Input, name) {
				byTool[name] = i
			}
		}
	}
	read, shell := tasks[byTool["read_file"]], tasks[byTool["shell"]]
	if read.Status != "success" || read.Calls != 1 || read.Errors != 0 {
		t.Errorf("read_file task: %+v", read)
	}
	if shell.Status != "failed" || shell.Calls != 1 || shell.Errors != 1 {
		t.Errorf("refused shell task: %+v", shell)
	}
	r = toolmux(t, dir, "", "--data-dir", data, "logs", "show", shell.ID)
	if r.code != 0 || !strings.Contains(r.stdout, "approval_unavailable") || !strings.Contains(r.stdout, "builtin/shell") {
		t.Errorf("logs show: %d\n%s", r.code, r.stdout)
	}
}
