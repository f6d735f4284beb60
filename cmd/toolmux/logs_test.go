package main_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

// taskLogFixture writes two tasks into a task log in a new data directory
// through the tasklog API, as the runtime would, and returns the directory.
func taskLogFixture(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	data := t.TempDir()
	l, err := tasklog.Open(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	start := time.Now().Add(-time.Hour)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(l.StartTask(ctx, tasklog.Task{ID: "task-paris", Created: start, Input: "What is the capital of France?\nAnswer in one word.",
		Metadata: map[string]any{"model": "m1"}}))
	must(l.Step(ctx, "task-paris", tasklog.Step{Name: "Main Agent | Turn: 1 | LLM Call", Message: "calling the model", Time: start}))
	must(l.Step(ctx, "task-paris", tasklog.Step{Name: "Main Agent | Turn: 1 | Tool Call", Message: "search failed once", Level: tasklog.LevelWarning, Time: start.Add(time.Second)}))
	must(l.AppendMessages(ctx, "task-paris", "",
		tasklog.Message{Role: "system", Content: json.RawMessage(`"You are a research agent."`)},
		tasklog.Message{Role: "user", Content: json.RawMessage(`[{"type":"text","text":"What is the capital of France?"}]`)},
		tasklog.Message{Role: "assistant", Content: json.RawMessage(`"\\boxed{Paris}"`)}))
	must(l.AppendMessages(ctx, "task-paris", "agent-browsing_1", tasklog.Message{Role: "user", Content: json.RawMessage(`"find the capital"`)}))
	l.Record(ctx, &tool.Record{ID: "call-1", Task: "task-paris", Session: "main", Server: "search", Tool: "google_search",
		Arguments: map[string]any{"q": "capital of France"}, Error: &tool.Error{Kind: tool.KindTimeout, Message: "no answer in 30s"},
		Started: start.Add(time.Second), Ended: start.Add(31 * time.Second), Duration: 30 * time.Second, Attempts: 2})
	l.Record(ctx, &tool.Record{ID: "call-2", Task: "task-paris", Session: "agent-browsing_1", Server: "browser", Tool: "fetch",
		Arguments: map[string]any{"url": "https://example.org"}, Result: &tool.Result{Content: []tool.Content{{Type: "text", Text: "Paris"}}},
		Started: start.Add(32 * time.Second), Ended: start.Add(33 * time.Second), Duration: time.Second, Attempts: 1})
	must(l.FinishTask(ctx, "task-paris", tasklog.StatusSuccess, `\boxed{Paris}`))
	// A gateway session: its task row comes from its first call.
	l.Record(ctx, &tool.Record{ID: "call-3", Task: "session-7", Server: "builtin", Tool: "read_file",
		Started: time.Now(), Ended: time.Now(), Attempts: 1})
	if s := l.Stats(); s.Lost != 0 {
		t.Fatalf("fixture lost records: %+v", s)
	}
	return data
}

func TestLogsList(t *testing.T) {
	t.Parallel()
	data := taskLogFixture(t)
	dir := workspace(t, "")
	r := toolmux(t, dir, "", "--data-dir", data, "logs")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") || !strings.HasPrefix(lines[1], "session-7") || !strings.HasPrefix(lines[2], "task-paris") {
		t.Fatalf("table:\n%s", r.stdout)
	}
	for _, want := range []string{"success", "1h0m", "2 (1 failed)", "What is the capital of France?"} {
		if !strings.Contains(lines[2], want) {
			t.Errorf("task-paris row lacks %q: %s", want, lines[2])
		}
	}
	if strings.Contains(lines[2], "Answer in one word") {
		t.Errorf("more than the input's first line: %s", lines[2])
	}
	if !strings.Contains(lines[1], "running") || !strings.Contains(lines[1], " - ") {
		t.Errorf("session row: %s", lines[1])
	}

	r = toolmux(t, dir, "", "--data-dir", data, "logs", "--status", "success", "--json")
	var tasks []tasklog.TaskSummary
	if err := json.Unmarshal([]byte(r.stdout), &tasks); err != nil || r.code != 0 {
		t.Fatalf("--json: %v exit %d\n%s%s", err, r.code, r.stdout, r.stderr)
	}
	if len(tasks) != 1 || tasks[0].ID != "task-paris" || tasks[0].Calls != 2 || tasks[0].Errors != 1 {
		t.Errorf("--status success --json: %+v", tasks)
	}
	r = toolmux(t, dir, "", "--data-dir", data, "logs", "--limit", "1", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &tasks); err != nil || len(tasks) != 1 || tasks[0].ID != "session-7" {
		t.Errorf("--limit 1: %v %+v", err, tasks)
	}
}

func TestLogsShow(t *testing.T) {
	t.Parallel()
	data := taskLogFixture(t)
	dir := workspace(t, "")
	r := toolmux(t, dir, "", "--data-dir", data, "logs", "show", "task-paris")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{
		"task      task-paris", "status    success", "Answer in one word.", `\boxed{Paris}`, `"model":"m1"`,
		"steps (2)", "warning", "Main Agent | Turn: 1 | Tool Call",
		"sessions (2)", "main (3 messages)", "agent-browsing_1 (1 message)", "You are a research agent.", "find the capital",
		"calls (2)", "search/google_search", "error", "timeout", "no answer in 30s", "browser/fetch", "success",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(r.stdout)
	}

	r = toolmux(t, dir, "", "--data-dir", data, "logs", "show", "task-paris", "--json")
	var d tasklog.TaskDetail
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || r.code != 0 {
		t.Fatalf("--json: %v exit %d\n%s", err, r.code, r.stdout)
	}
	if d.ID != "task-paris" || len(d.Steps) != 2 || len(d.Sessions) != 2 || len(d.Calls) != 2 ||
		d.Calls[0].Error.Kind != tool.KindTimeout || d.Calls[0].Arguments["q"] != "capital of France" || d.Calls[0].Attempts != 2 {
		t.Errorf("--json detail: %+v", d)
	}
}

func TestLogsExport(t *testing.T) {
	t.Parallel()
	data := taskLogFixture(t)
	dir := workspace(t, "")
	r := toolmux(t, dir, "", "--data-dir", data, "logs", "export", "task-paris")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var e map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &e); err != nil {
		t.Fatal(err)
	}
	if e["task_id"] != "task-paris" || e["final_boxed_answer"] != `\boxed{Paris}` || e["status"] != "success" {
		t.Errorf("export: %v", e)
	}
	main := e["main_agent_message_history"].(map[string]any)
	if main["system_prompt"] != "You are a research agent." || len(main["message_history"].([]any)) != 2 {
		t.Errorf("main history: %v", main)
	}
	if _, ok := e["sub_agent_message_history_sessions"].(map[string]any)["agent-browsing_1"]; !ok {
		t.Errorf("sub-agent sessions: %v", e["sub_agent_message_history_sessions"])
	}
	steps := e["step_logs"].([]any)
	if len(steps) != 2 || steps[1].(map[string]any)["info_level"] != "warning" {
		t.Errorf("step_logs: %v", steps)
	}
	calls := e["tool_calls"].([]any)
	if len(calls) != 2 || calls[0].(map[string]any)["server_name"] != "search" || calls[0].(map[string]any)["duration_ms"] != float64(30000) {
		t.Errorf("tool_calls: %v", calls)
	}
}

func TestLogsErrors(t *testing.T) {
	t.Parallel()
	data := taskLogFixture(t)
	dir := workspace(t, "")
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"logs", "show", "nope"}, 1, `no task "nope" in the task log`},
		{[]string{"logs", "export", "nope"}, 1, `no task "nope" in the task log`},
		{[]string{"logs", "--status", "done"}, 2, "--status"},
		{[]string{"logs", "--limit", "-1"}, 2, "--limit"},
		{[]string{"logs", "show"}, 2, "accepts 1 arg"},
		{[]string{"logs", "show", "a", "b"}, 2, "accepts 1 arg"},
		{[]string{"logs", "bogus"}, 2, "unknown command"},
	} {
		r := toolmux(t, dir, "", append([]string{"--data-dir", data}, tc.args...)...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, tc.code, tc.msg)
		}
		// The command speaks of the task log, not of Go packages.
		if strings.Contains(r.stderr, "tasklog") {
			t.Errorf("%v: a package name in %q", tc.args, r.stderr)
		}
	}
	// A data directory without a task log: nothing listed, nothing created.
	empty := t.TempDir()
	r := toolmux(t, dir, "", "--data-dir", empty, "logs")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "no tasks" {
		t.Errorf("empty data dir: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = toolmux(t, dir, "", "--data-dir", empty, "logs", "--json")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("empty data dir --json: %q", r.stdout)
	}
	r = toolmux(t, dir, "", "--data-dir", empty, "logs", "show", "x")
	if r.code != 1 {
		t.Errorf("show in an empty data dir: exit %d", r.code)
	}
	if tasklog.Exists(empty) {
		t.Error("reading created a task log")
	}
}

// A task is named by its id or by any start of it that no other id has;
// an ambiguous start lists the tasks it could mean, and exits 1.
func TestLogsShowByPrefix(t *testing.T) {
	t.Parallel()
	data := taskLogFixture(t)
	l, err := tasklog.Open(context.Background(), data)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.StartTask(context.Background(), tasklog.Task{ID: "task-pisa", Input: "Where is the leaning tower?"}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	dir := workspace(t, "")
	r := toolmux(t, dir, "", "--data-dir", data, "logs", "show", "task-pa")
	if r.code != 0 || !strings.Contains(r.stdout, "task      task-paris") {
		t.Errorf("show task-pa: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = toolmux(t, dir, "", "--data-dir", data, "logs", "export", "task-pi")
	var e map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &e); err != nil || r.code != 0 || e["task_id"] != "task-pisa" {
		t.Errorf("export task-pi: exit %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	r = toolmux(t, dir, "", "--data-dir", data, "logs", "show", "task-p")
	if r.code != 1 || !strings.Contains(r.stderr, `"task-p" is the start of several task ids`) ||
		!strings.Contains(r.stderr, "\n  task-pisa\n  task-paris\n") || strings.Contains(r.stderr, "tasklog") {
		t.Errorf("ambiguous: exit %d\n%s", r.code, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("ambiguous: stdout %q", r.stdout)
	}
}

// Once retention has dropped something, `toolmux logs` ends with a line
// saying what.
func TestLogsSaysWhatRetentionDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	data := t.TempDir()
	l, err := tasklog.Open(ctx, data, tasklog.WithSegmentBytes(64<<10), tasklog.WithRetention(tasklog.Retention{MaxBytes: 1 << 20}))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		id := "old-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if err := l.StartTask(ctx, tasklog.Task{ID: id}); err != nil {
			t.Fatal(err)
		}
		l.Record(ctx, &tool.Record{ID: tool.NewID(), Task: id, Server: "s", Tool: "t", Started: time.Now(), Ended: time.Now(),
			Result: tool.TextResult(strings.Repeat("x", 60<<10))})
		if err := l.FinishTask(ctx, id, tasklog.StatusSuccess, ""); err != nil {
			t.Fatal(err)
		}
	}
	// Retention runs in the background as segments fill, and now.
	if _, err := l.EnforceRetention(ctx); err != nil {
		t.Fatal(err)
	}
	l.Close()
	// Read what was dropped once the background pass has stopped too: a
	// count taken before Close can miss a pass still running.
	l, err = tasklog.Open(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	st, err := l.RetentionStatus(ctx)
	l.Close()
	if err != nil || st.DroppedTasks == 0 {
		t.Fatalf("retention dropped %+v, %v", st, err)
	}
	r := toolmux(t, workspace(t, ""), "", "--data-dir", data, "logs")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	want := "retention: dropped " + strconv.Itoa(int(st.DroppedTasks)) + " tasks, 0 calls of running tasks and 0 spill files ("
	if !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "keeping 30d and 1.0 GiB") {
		t.Errorf("no retention line %q:\n%s", want, r.stdout)
	}
	t.Log(r.stdout[strings.Index(r.stdout, "retention:"):])
}
