package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/agent"
	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

// runResult is what a run in the background came to.
type runResult struct {
	res *agent.Result
	err error
}

// runInBackground runs the main agent on task, as task id, with a context
// the caller cancels.
func runInBackground(t *testing.T, r *rig, id, task string) (context.CancelFunc, <-chan runResult) {
	t.Helper()
	a, err := r.rt.Agent()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan runResult, 1)
	go func() {
		res, err := a.Run(ctx, task, agent.WithTask(id))
		done <- runResult{res, err}
	}()
	return cancel, done
}

// awaitRun waits for the background run to return; a run that does not
// end soon after its cancellation fails the test.
func awaitRun(t *testing.T, done <-chan runResult) runResult {
	t.Helper()
	select {
	case out := <-done:
		return out
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not return after its cancellation")
		return runResult{}
	}
}

// Cancelling a run while a tool call executes ends the run at once with
// ErrCancelled; the task log has the task cancelled, the call recorded as
// cancelled, and a history that ends with that call's result.
func TestCancelWhileToolRuns(t *testing.T) {
	t.Parallel()
	r := newRig(t, llmtest.Replies(calls(call("fixture__hang", `{}`)), answer("unreachable")), "")
	id := "cancel-" + tool.NewID()
	cancel, done := runInBackground(t, r, id, "Wait forever.")
	waitExecuting(t, r, id, "hang")
	cancel()
	out := awaitRun(t, done)
	if agent.KindOf(out.err) != agent.ErrCancelled || !errors.Is(out.err, context.Canceled) {
		t.Fatalf("err = %v", out.err)
	}
	if out.res == nil || out.res.Task != id {
		t.Fatalf("result: %+v", out.res)
	}
	if n := len(r.model.Requests()); n != 1 {
		t.Fatalf("%d requests", n)
	}
	task := r.task(t, id)
	if task.Status != tasklog.StatusCancelled || task.Ended.IsZero() {
		t.Fatalf("task: %+v", task)
	}
	running, err := r.rt.Log.Tasks(context.Background(), tasklog.Filter{Status: tasklog.StatusRunning})
	if err != nil || len(running) != 0 {
		t.Fatalf("running tasks: %+v %v", running, err)
	}
	recs := r.calls(t, id)
	if len(recs) != 1 || recs[0].Tool != "hang" || recs[0].Error == nil || recs[0].Error.Kind != tool.KindCancelled {
		t.Fatalf("records: %+v", recs)
	}
	msgs := r.messages(t, id, tasklog.MainSession)
	if len(msgs) != 4 {
		t.Fatalf("history:\n%s", history(t, msgs))
	}
	asked, last := msgs[2], msgs[3]
	if asked.Role != "assistant" || !strings.Contains(string(asked.ToolCalls), `"id":"call_0_0"`) ||
		last.Role != "tool" || last.ToolCallID != "call_0_0" || !strings.Contains(content(t, last), "(cancelled)") {
		t.Fatalf("history:\n%s", history(t, msgs))
	}
	evs := r.events(t, id)
	var names []string
	for _, e := range evs {
		names = append(names, e.Name)
	}
	if !strings.Contains(strings.Join(names, " "), "show_error end_of_workflow") {
		t.Fatalf("events: %v", names)
	}
	var shown stream.ErrorData
	for _, e := range evs {
		if e.Name == stream.EventShowError {
			if err := json.Unmarshal(e.Data, &shown); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !strings.Contains(shown.Error, "cancelled") {
		t.Fatalf("show_error: %+v", shown)
	}
}

// Cancelling a run while the model thinks ends it with ErrCancelled too,
// the task cancelled and nothing of the turn in the history.
func TestCancelWhileModelThinks(t *testing.T) {
	t.Parallel()
	r := newRig(t, llmtest.Replies(llmtest.Reply{Content: "late", Delay: time.Hour}), "")
	id := "cancel-" + tool.NewID()
	cancel, done := runInBackground(t, r, id, "Think.")
	r.evs.wait(t, "the model request", func(evs []stream.Event) bool {
		for _, e := range evs {
			if e.Task == id && e.Name == stream.EventStartOfLLM {
				return true
			}
		}
		return false
	}, id)
	cancel()
	out := awaitRun(t, done)
	if agent.KindOf(out.err) != agent.ErrCancelled {
		t.Fatalf("err = %v", out.err)
	}
	if task := r.task(t, id); task.Status != tasklog.StatusCancelled {
		t.Fatalf("task: %+v", task)
	}
	if msgs := r.messages(t, id, tasklog.MainSession); len(msgs) != 2 {
		t.Fatalf("history:\n%s", history(t, msgs))
	}
}

// Cancelling a run while its sub-agent waits on a tool cancels both
// loops: the main run ends with ErrCancelled, every call is recorded as
// cancelled, and each session's history ends with its call's result.
func TestCancelInsideSubAgent(t *testing.T) {
	t.Parallel()
	r := newRig(t, script(bySystemPrompt, map[string][]llmtest.Reply{
		"main":     {calls(call("agent-browsing__search_and_browse", `{"subtask": "Wait."}`))},
		"browsing": {calls(call("fixture__hang", `{}`))},
	}), subAgentConfig)
	id := "cancel-" + tool.NewID()
	cancel, done := runInBackground(t, r, id, "Delegate the wait.")
	waitExecuting(t, r, id, "hang")
	cancel()
	out := awaitRun(t, done)
	if agent.KindOf(out.err) != agent.ErrCancelled {
		t.Fatalf("err = %v", out.err)
	}
	if task := r.task(t, id); task.Status != tasklog.StatusCancelled {
		t.Fatalf("task: %+v", task)
	}
	recs := r.calls(t, id)
	if len(recs) != 2 {
		t.Fatalf("%d records", len(recs))
	}
	for _, rec := range recs {
		if rec.Error == nil || rec.Error.Kind != tool.KindCancelled {
			t.Fatalf("record of %s/%s: %+v", rec.Server, rec.Tool, rec.Error)
		}
	}
	sessions, err := r.rt.Log.Sessions(context.Background(), id)
	if err != nil || len(sessions) != 2 {
		t.Fatalf("sessions %v %v", sessions, err)
	}
	for _, s := range sessions {
		msgs := r.messages(t, id, s)
		if last := msgs[len(msgs)-1]; len(msgs) != 4 || last.Role != "tool" || last.ToolCallID != "call_0_0" && last.ToolCallID != "call_1_0" {
			t.Fatalf("session %s:\n%s", s, history(t, msgs))
		}
	}
	var agents []string
	for _, e := range r.events(t, id) {
		if e.Name == stream.EventEndOfAgent {
			var d stream.AgentData
			if err := json.Unmarshal(e.Data, &d); err != nil {
				t.Fatal(err)
			}
			agents = append(agents, d.AgentName)
		}
	}
	if strings.Join(agents, ",") != "browsing,main" {
		t.Fatalf("end_of_agent events: %v", agents)
	}
}

// waitExecuting waits until a call of the tool name is executing in the
// task id.
func waitExecuting(t *testing.T, r *rig, id, name string) {
	t.Helper()
	r.evs.wait(t, "the "+name+" call executing", func(evs []stream.Event) bool {
		for _, s := range toolStates(t, evs) {
			if s.Tool == name && s.State == string(schedule.Executing) {
				return true
			}
		}
		return false
	}, id)
}
