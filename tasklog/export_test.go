package tasklog_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

func TestExport(t *testing.T) {
	c := newClock()
	l := open(t, "", tasklog.WithClock(c.now))
	start := c.now()
	if err := l.StartTask(ctx, tasklog.Task{ID: "t", Input: "q?", Metadata: map[string]any{"benchmark": "gaia"}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Step(ctx, "t", tasklog.Step{Name: "turn 1", Message: "m", Metadata: map[string]any{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	if err := l.AppendMessages(ctx, "t", "", tasklog.Message{Role: "system", Content: json.RawMessage(`"sys"`)},
		tasklog.Message{Role: "user", Content: json.RawMessage(`"q?"`)}); err != nil {
		t.Fatal(err)
	}
	// A system message with parts is not a system_prompt string: kept in the history.
	if err := l.AppendMessages(ctx, "t", "agent-browsing_1", tasklog.Message{Role: "system", Content: json.RawMessage(`[{"type":"text","text":"sub sys"}]`)}); err != nil {
		t.Fatal(err)
	}
	rec := fullRecord("t")
	l.Record(ctx, rec)
	end := c.advance(time.Minute)
	if err := l.FinishTask(ctx, "t", tasklog.StatusSuccess, "A"); err != nil {
		t.Fatal(err)
	}
	b, err := l.Export(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var e tasklog.ExportTask
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if e.Version != tasklog.ExportVersion || e.TaskID != "t" || e.Status != tasklog.StatusSuccess || !e.StartTime.Equal(start) || !e.EndTime.Equal(end) ||
		e.Input != "q?" || e.FinalBoxedAnswer != "A" || e.Metadata["benchmark"] != "gaia" {
		t.Errorf("header %+v", e)
	}
	if e.MainAgentMessageHistory.SystemPrompt != "sys" || len(e.MainAgentMessageHistory.MessageHistory) != 1 ||
		e.MainAgentMessageHistory.MessageHistory[0].Role != "user" {
		t.Errorf("main history %+v", e.MainAgentMessageHistory)
	}
	sub, ok := e.SubAgentMessageHistorySessions["agent-browsing_1"]
	if !ok || sub.SystemPrompt != "" || len(sub.MessageHistory) != 1 || len(e.SubAgentMessageHistorySessions) != 1 {
		t.Errorf("sub sessions %+v", e.SubAgentMessageHistorySessions)
	}
	wantStep := tasklog.ExportStep{StepName: "turn 1", Message: "m", InfoLevel: tasklog.LevelInfo, Timestamp: start, Metadata: map[string]any{"k": "v"}}
	if len(e.StepLogs) != 1 || !reflect.DeepEqual(e.StepLogs[0], wantStep) {
		t.Errorf("step logs %+v", e.StepLogs)
	}
	want := tasklog.ExportCall{CallID: rec.ID, Session: rec.Session, ServerName: rec.Server, ToolName: rec.Tool, ExposedName: rec.Name,
		Arguments: rec.Arguments, Result: rec.Result, Error: rec.Error, DurationMS: 1500, CallTime: rec.Started, EndTime: rec.Ended,
		Attempts: 2, Notes: rec.Notes, Verdict: rec.Verdict, Instructions: rec.Instructions}
	if len(e.ToolCalls) != 1 || !reflect.DeepEqual(e.ToolCalls[0], want) {
		t.Errorf("tool calls:\n got  %+v\n want %+v", e.ToolCalls, want)
	}

	// The names MiroFlow's readers look for are all there.
	var m map[string]json.RawMessage
	json.Unmarshal(b, &m)
	for _, k := range []string{"task_id", "status", "start_time", "end_time", "input", "final_boxed_answer",
		"main_agent_message_history", "sub_agent_message_history_sessions", "step_logs"} {
		if _, ok := m[k]; !ok {
			t.Errorf("export lacks %q", k)
		}
	}
}

// A task with nothing in it exports empty collections, never null.
func TestExportEmptyTask(t *testing.T) {
	l := open(t, "")
	l.Record(ctx, &tool.Record{ID: "x", Task: "other", Server: "s", Tool: "t"})
	if err := l.StartTask(ctx, tasklog.Task{ID: "t"}); err != nil {
		t.Fatal(err)
	}
	b, err := l.Export(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"step_logs", "tool_calls", "sub_agent_message_history_sessions", "metadata"} {
		if m[k] == nil {
			t.Errorf("%s is null", k)
		}
	}
	if h := m["main_agent_message_history"].(map[string]any); h["message_history"] == nil {
		t.Errorf("main history %v", h)
	}
	if _, ok := m["end_time"]; ok {
		t.Error("a running task has an end_time")
	}
	d, err := l.Detail(ctx, "t")
	if err != nil || d.Steps == nil || d.Sessions == nil || d.Calls == nil {
		t.Errorf("detail of an empty task: %+v %v", d, err)
	}
}
