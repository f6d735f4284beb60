package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/agent"
	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/stream"
)

// A simple run publishes MiroFlow's events in order: the workflow, the
// agent, each model turn with its streamed text, the tool call's input
// and result, the end of the agent and of the workflow.
func TestEventsOfARun(t *testing.T) {
	t.Parallel()
	r := newRig(t, llmtest.Replies(
		llmtest.Reply{Content: "Let me echo.", Calls: []llmtest.Call{call("fixture__echo", `{"message": "events"}`)}},
		answer("The echo said events."),
	), "")
	res, err := r.run(t, "Echo events.")
	if err != nil {
		t.Fatal(err)
	}
	reqs := r.model.Requests()
	if len(reqs) != 2 || !reqs[0].Stream || !reqs[1].Stream {
		t.Fatalf("the model was not asked to stream: %d requests", len(reqs))
	}
	evs := r.events(t, res.Task)
	var names []string
	text := map[string]string{}
	var ids []string
	var toolCalls []stream.ToolCallData
	for _, e := range evs {
		switch e.Name {
		case stream.EventToolState:
			continue
		case stream.EventMessage:
			var d stream.MessageData
			if err := json.Unmarshal(e.Data, &d); err != nil {
				t.Fatal(err)
			}
			if _, ok := text[d.MessageID]; !ok {
				ids = append(ids, d.MessageID)
			}
			text[d.MessageID] += d.Delta.Content
			if n := len(names); n > 0 && names[n-1] == "message" {
				continue // one name for a run of deltas
			}
		case stream.EventToolCall:
			var d stream.ToolCallData
			if err := json.Unmarshal(e.Data, &d); err != nil {
				t.Fatal(err)
			}
			toolCalls = append(toolCalls, d)
		}
		names = append(names, e.Name)
	}
	want := "start_of_workflow start_of_agent " +
		"start_of_llm message end_of_llm tool_call tool_call " +
		"start_of_llm message end_of_llm end_of_agent end_of_workflow"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("events:\n%s\nwant:\n%s", got, want)
	}
	if len(ids) != 2 || text[ids[0]] != "Let me echo." || text[ids[1]] != "The echo said events." {
		t.Fatalf("messages: %q", text)
	}
	in, out := toolCalls[0], toolCalls[1]
	recs := r.calls(t, res.Task)
	if len(recs) != 1 || in.ToolCallID != recs[0].ID || out.ToolCallID != recs[0].ID || in.ToolName != "fixture__echo" {
		t.Fatalf("tool_call events %+v, records %+v", toolCalls, recs)
	}
	if args, _ := in.ToolInput.(map[string]any); args["message"] != "events" {
		t.Fatalf("tool_call input: %+v", in.ToolInput)
	}
	if result, _ := out.ToolInput.(map[string]any); result["result"] != "Echo: events" {
		t.Fatalf("tool_call result: %+v", out.ToolInput)
	}
	var wf stream.StartOfWorkflowData
	if err := json.Unmarshal(evs[0].Data, &wf); err != nil || len(wf.Input) != 1 || wf.Input[0].Content != "Echo events." {
		t.Fatalf("start_of_workflow: %s", evs[0].Data)
	}
}

// Without an event hub, the model is not asked to stream.
func TestNoEventsNoStream(t *testing.T) {
	t.Parallel()
	r := newRig(t, llmtest.Replies(answer("quiet")), "")
	rt := r.rt.AgentRuntime()
	rt.Events = nil
	a, err := agent.New(rt, r.agentOptions())
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Run(context.Background(), "Be quiet.")
	if err != nil || res.Answer != "quiet" {
		t.Fatalf("%+v %v", res, err)
	}
	if reqs := r.model.Requests(); len(reqs) != 1 || reqs[0].Stream {
		t.Fatalf("the model was asked to stream")
	}
}
