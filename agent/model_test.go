package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/agent"
	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/llm"
	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

// A rate limit is retried within the turn: two HTTP requests, one turn.
func TestRateLimitRetried(t *testing.T) {
	t.Parallel()
	r := newRig(t, llmtest.Replies(
		llmtest.Reply{Status: 429, RetryAfter: "0"},
		calls(call("fixture__echo", `{"message": "hi"}`)),
		answer("done"),
	), "")
	res, err := r.run(t, "Echo.")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "done" || res.Turns != 2 || res.Rollbacks != 0 {
		t.Fatalf("result: %+v", res)
	}
	reqs := r.model.Requests()
	if len(reqs) != 3 || raw(t, reqs[0]) != raw(t, reqs[1]) {
		t.Fatalf("%d requests", len(reqs))
	}
	var attempts []any
	for _, s := range r.steps(t, res.Task) {
		if strings.HasSuffix(s.Name, "| llm") {
			attempts = append(attempts, s.Metadata["attempts"])
		}
	}
	if len(attempts) != 2 || attempts[0] != float64(2) || attempts[1] != float64(1) {
		t.Fatalf("attempts per turn: %v", attempts)
	}
}

// A whole run against an Anthropic Messages API, streamed: a tool call,
// its result as a tool_result block, the answer.
func TestAnthropicRun(t *testing.T) {
	t.Parallel()
	r := newRigWith(t, llmtest.Replies(
		llmtest.Reply{Content: "Let me echo.", Calls: []llmtest.Call{call("fixture__echo", `{"message": "claude"}`)}},
		answer("The echo said claude."),
	), rigOptions{anthropic: true, extra: `agent: {system_prompt: "You are Claude, in a test."}`})
	res, err := r.run(t, "Echo claude.")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "The echo said claude." || res.Turns != 2 || res.Calls != 1 {
		t.Fatalf("result: %+v", res)
	}
	if res.Usage.InputTokens != 10+20 || res.Usage.OutputTokens != 10 {
		t.Fatalf("usage: %+v", res.Usage)
	}
	reqs := r.model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	for i, req := range reqs {
		if !req.Stream || req.System != "You are Claude, in a test." || !strings.Contains(strings.Join(req.Tools, ","), "fixture__echo") {
			t.Fatalf("request %d: stream %v, system %q, tools %v", i, req.Stream, req.System, req.Tools)
		}
	}
	// The second request has the assistant's tool_use and the user's
	// tool_result for it.
	msgs := reqs[1].Messages
	if len(msgs) != 3 {
		t.Fatalf("messages: %s", raw(t, reqs[1]))
	}
	blocks, _ := msgs[1]["content"].([]any)
	var use map[string]any
	for _, b := range blocks {
		if bm := b.(map[string]any); bm["type"] == "tool_use" {
			use = bm
		}
	}
	if use == nil || use["id"] != "toolu_0_0" || use["name"] != "fixture__echo" {
		t.Fatalf("assistant message: %s", raw(t, reqs[1]))
	}
	results, _ := msgs[2]["content"].([]any)
	if msgs[2]["role"] != "user" || len(results) != 1 || results[0].(map[string]any)["tool_use_id"] != "toolu_0_0" ||
		!strings.Contains(reqs[1].Text(), "Echo: claude") {
		t.Fatalf("tool result message: %s", raw(t, reqs[1]))
	}
	if task := r.task(t, res.Task); task.Status != tasklog.StatusSuccess {
		t.Fatalf("task: %+v", task)
	}
}

// A model that refuses the key ends the run with ErrModel, the task
// failed, and show_error on the stream.
func TestModelFailure(t *testing.T) {
	t.Parallel()
	r := newRig(t, llmtest.Replies(llmtest.Reply{Status: 401, Body: `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`}), "")
	res, err := r.run(t, "Anything.")
	if agent.KindOf(err) != agent.ErrModel {
		t.Fatalf("err = %v", err)
	}
	if le, ok := errors.AsType[*llm.Error](err); !ok || le.Kind != llm.KindAuth || le.Status != 401 {
		t.Fatalf("err = %#v", err)
	}
	if n := len(r.model.Requests()); n != 1 {
		t.Fatalf("%d requests: an auth failure was retried", n)
	}
	task := r.task(t, res.Task)
	if task.Status != tasklog.StatusFailed || !strings.Contains(task.FinalAnswer, "Incorrect API key provided") {
		t.Fatalf("task: %+v", task)
	}
	var names []string
	var shown stream.ErrorData
	for _, e := range r.events(t, res.Task) {
		names = append(names, e.Name)
		if e.Name == stream.EventShowError {
			if err := json.Unmarshal(e.Data, &shown); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := "start_of_workflow start_of_agent start_of_llm end_of_llm end_of_agent show_error end_of_workflow"
	if strings.Join(names, " ") != want || shown.Error != err.Error() {
		t.Fatalf("events %v, show_error %q", names, shown.Error)
	}
	steps := r.steps(t, res.Task)
	if last := steps[len(steps)-1]; last.Level != tasklog.LevelError || !strings.HasSuffix(last.Name, "failed") {
		t.Fatalf("last step: %+v", last)
	}
}

// Without a model, the agent cannot be built: ErrNoModel, saying how to
// configure one.
func TestNoModel(t *testing.T) {
	t.Parallel()
	r := newRigWith(t, nil, rigOptions{noModel: true, extra: subAgentConfig})
	_, err := r.rt.Agent()
	if agent.KindOf(err) != agent.ErrNoModel || !strings.Contains(err.Error(), "model:") {
		t.Fatalf("err = %v", err)
	}
	// The sub-agent's tool exists, and says it cannot run.
	rec := r.rt.Scheduler.Call(context.Background(), tool.Call{Server: "agent-browsing", Tool: "search_and_browse",
		Arguments: map[string]any{"subtask": "Browse."}})
	if rec.Error == nil || rec.Error.Kind != tool.KindServerUnavailable || !strings.Contains(rec.Error.Message, "not bound") {
		t.Fatalf("record: %+v", rec.Error)
	}
}
