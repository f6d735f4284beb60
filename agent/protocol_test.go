package agent_test

import (
	"strings"
	"testing"

	"github.com/toolmux/toolmux/agent"
	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/tasklog"
)

// textBlock is a call in MiroFlow's text protocol.
func textBlock(server, tool, args string) string {
	return "<use_mcp_tool>\n<server_name>" + server + "</server_name>\n<tool_name>" + tool +
		"</tool_name>\n<arguments>\n" + args + "\n</arguments>\n</use_mcp_tool>"
}

// textCall is a reply making one call in the text protocol.
func textCall(server, tool, args string) llmtest.Reply {
	return answer("I will call " + tool + ".\n\n" + textBlock(server, tool, args))
}

// With tool_protocol: text the tools are listed in the system prompt, not
// offered natively; a block with almost-JSON arguments runs repaired; the
// results come back as a user message; a reply without a block is the
// answer.
func TestTextProtocol(t *testing.T) {
	t.Parallel()
	r := newRig(t, llmtest.Replies(
		textCall("fixture", "echo", `{"message": "hi",}`),
		answer("The echo said hi."),
	), `agent: {tool_protocol: text, system_prompt: "You are a text-protocol agent."}`)
	res, err := r.run(t, "Echo hi.")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "The echo said hi." || res.Turns != 2 || res.Calls != 1 {
		t.Fatalf("result: %+v", res)
	}
	reqs := r.model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	for i, req := range reqs {
		if len(req.Tools) != 0 || req.Raw["tools"] != nil || req.ToolChoice != nil {
			t.Fatalf("request %d offers tools natively: %v %v", i, req.Tools, req.ToolChoice)
		}
	}
	sys := reqs[0].System
	for _, want := range []string{
		"You are a text-protocol agent.\n\n# Using tools",
		"<use_mcp_tool>\n<server_name>SERVER</server_name>",
		"## Server: fixture\n",
		"### echo\nEchoes the message back.\nInput schema: {",
		"## Server: builtin\n",
		"### read_file\n",
		"## Server: toolmux\n",
		"### terminate\nEnd the task with your final answer.",
	} {
		if !strings.Contains(sys, want) {
			t.Fatalf("the system prompt lacks %q:\n%s", want, sys)
		}
	}
	if strings.Contains(sys, "### find_tools") {
		t.Fatalf("find_tools is listed for a small catalog")
	}
	recs := r.calls(t, res.Task)
	if len(recs) != 1 || recs[0].Server != "fixture" || recs[0].Tool != "echo" || recs[0].Arguments["message"] != "hi" || recs[0].Error != nil {
		t.Fatalf("records: %+v", recs)
	}
	last := lastMessage(reqs[1])
	if last["role"] != "user" || last["content"] != "Result of fixture/echo:\nEcho: hi" {
		t.Fatalf("the results message: %v", last)
	}
	msgs := r.messages(t, res.Task, tasklog.MainSession)
	var roles []string
	for _, m := range msgs {
		roles = append(roles, m.Role)
	}
	if strings.Join(roles, " ") != "system user assistant user assistant" || !strings.Contains(content(t, msgs[2]), "<use_mcp_tool>") {
		t.Fatalf("history:\n%s", history(t, msgs))
	}
}

// A text-protocol block that cannot be read is a malformed turn, rolled
// back with a hint saying what was wrong.
func TestTextProtocolMalformedBlock(t *testing.T) {
	t.Parallel()
	r := newRig(t, llmtest.Replies(
		answer("DROPPED\n<use_mcp_tool>\n<server_name>fixture</server_name>\n<arguments>{}</arguments>\n</use_mcp_tool>"),
		textCall("fixture", "echo", `{'message': 'kept'}`),
		answer("done"),
	), `agent: {tool_protocol: text}`)
	res, err := r.run(t, "Echo.")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "done" || res.Rollbacks != 1 || res.Turns != 2 {
		t.Fatalf("result: %+v", res)
	}
	reqs := r.model.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests", len(reqs))
	}
	if s := reqs[1].Text(); !strings.Contains(s, "Your previous reply was discarded (malformed: tool call 1 in the text protocol: <tool_name> is missing)") ||
		strings.Contains(s, "DROPPED") {
		t.Fatalf("the retried request:\n%s", s)
	}
	if s := reqs[2].Text(); strings.Contains(s, "DROPPED") || strings.Contains(s, "discarded") || !strings.Contains(s, "Result of fixture/echo:\nEcho: kept") {
		t.Fatalf("the last request:\n%s", s)
	}
	if h := history(t, r.messages(t, res.Task, tasklog.MainSession)); strings.Contains(h, "DROPPED") {
		t.Fatalf("history:\n%s", h)
	}
	if w := warnings(r.steps(t, res.Task)); countContaining(w, "rollback") != 1 {
		t.Fatalf("warning steps: %q", w)
	}
}

// The text protocol's terminate is toolmux/terminate.
func TestTextProtocolTerminate(t *testing.T) {
	t.Parallel()
	r := newRig(t, llmtest.Replies(textCall("toolmux", "terminate", `{"answer": "42"}`)), `agent: {tool_protocol: text}`)
	res, err := r.run(t, "Answer.")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "42" || res.Status != agent.StatusAnswered {
		t.Fatalf("result: %+v", res)
	}
}
