package agent_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/agent"
	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tasklog"
)

const subAgentConfig = `
agent:
  system_prompt: You are the main agent.
agents:
  browsing:
    description: Searches and browses; give it one precise subtask.
    tool: search_and_browse
    max_turns: 3
    system_prompt: You are the browsing agent.
`

// bySystemPrompt routes a request to the agent whose system prompt it
// carries.
func bySystemPrompt(req llmtest.Request) string {
	if strings.Contains(req.System, "browsing agent") {
		return "browsing"
	}
	return "main"
}

// A sub-agent is a tool of the main agent: its call runs the sub-agent's
// own loop (its prompt, its tools, its session in the task log) through
// the same scheduler, and its answer is the tool's result.
func TestSubAgent(t *testing.T) {
	t.Parallel()
	r := newRig(t, script(bySystemPrompt, map[string][]llmtest.Reply{
		"main": {
			calls(call("agent-browsing__search_and_browse", `{"subtask": "Find what the echo says about toolmux."}`)),
			answer("The browsing agent found: Echo: toolmux."),
		},
		"browsing": {
			calls(call("fixture__echo", `{"message": "toolmux"}`)),
			answer("SUB-ANSWER: the echo says Echo: toolmux."),
		},
	}), subAgentConfig)
	res, err := r.run(t, "What does the echo say about toolmux?")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "The browsing agent found: Echo: toolmux." || res.Turns != 2 || res.Calls != 1 {
		t.Fatalf("result: %+v", res)
	}
	reqs := r.model.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests", len(reqs))
	}
	var mainReqs, subReqs []llmtest.Request
	for _, req := range reqs {
		if bySystemPrompt(req) == "browsing" {
			subReqs = append(subReqs, req)
		} else {
			mainReqs = append(mainReqs, req)
		}
	}
	if len(mainReqs) != 2 || len(subReqs) != 2 {
		t.Fatalf("%d main requests, %d sub-agent requests", len(mainReqs), len(subReqs))
	}
	if !slices.Contains(mainReqs[0].Tools, "agent-browsing__search_and_browse") || !slices.Contains(mainReqs[0].Tools, "fixture__echo") {
		t.Fatalf("the main agent's tools: %v", mainReqs[0].Tools)
	}
	// The sub-agent is not offered itself; it sees only its subtask.
	if slices.Contains(subReqs[0].Tools, "agent-browsing__search_and_browse") || !slices.Contains(subReqs[0].Tools, "fixture__echo") {
		t.Fatalf("the sub-agent's tools: %v", subReqs[0].Tools)
	}
	if subReqs[0].System != "You are the browsing agent." || len(subReqs[0].Messages) != 2 ||
		lastMessage(subReqs[0])["content"] != "Find what the echo says about toolmux." {
		t.Fatalf("the sub-agent's first request: %s", raw(t, subReqs[0]))
	}
	if !strings.Contains(subReqs[1].Text(), "Echo: toolmux") {
		t.Fatalf("the sub-agent's second request:\n%s", subReqs[1].Text())
	}
	var result string
	for _, m := range mainReqs[1].Messages {
		if m["role"] == "tool" {
			result = m["content"].(string)
		}
	}
	if result != "SUB-ANSWER: the echo says Echo: toolmux." {
		t.Fatalf("the main agent got %q", result)
	}

	// The task log: one task, two sessions, the sub-agent's with its own
	// history; the calls of each agent in its session.
	ctx := context.Background()
	sessions, err := r.rt.Log.Sessions(ctx, res.Task)
	if err != nil {
		t.Fatal(err)
	}
	if len(sessions) != 2 || !slices.Contains(sessions, tasklog.MainSession) {
		t.Fatalf("sessions: %v", sessions)
	}
	sub := sessions[0]
	if sub == tasklog.MainSession {
		sub = sessions[1]
	}
	if !strings.HasPrefix(sub, "browsing-") {
		t.Fatalf("the sub-agent's session is %q", sub)
	}
	subMsgs := r.messages(t, res.Task, sub)
	var roles []string
	for _, m := range subMsgs {
		roles = append(roles, m.Role)
	}
	if strings.Join(roles, " ") != "system user assistant tool assistant" || content(t, subMsgs[0]) != "You are the browsing agent." ||
		content(t, subMsgs[1]) != "Find what the echo says about toolmux." || content(t, subMsgs[4]) != "SUB-ANSWER: the echo says Echo: toolmux." {
		t.Fatalf("the sub-agent's history:\n%s", history(t, subMsgs))
	}
	mainMsgs := history(t, r.messages(t, res.Task, tasklog.MainSession))
	if strings.Contains(mainMsgs, "fixture__echo") || !strings.Contains(mainMsgs, "SUB-ANSWER") {
		t.Fatalf("the main history:\n%s", mainMsgs)
	}
	recs := r.calls(t, res.Task)
	bySession := map[string]string{}
	for _, rec := range recs {
		bySession[rec.Session] += rec.Server + "/" + rec.Tool
	}
	if len(recs) != 2 || bySession[tasklog.MainSession] != "agent-browsing/search_and_browse" || bySession[sub] != "fixture/echo" {
		t.Fatalf("calls by session: %v", bySession)
	}
	// The sub-agent's session is named after the call that started it.
	for _, rec := range recs {
		if rec.Session == tasklog.MainSession && sub != "browsing-"+rec.ID {
			t.Fatalf("session %q, call %s", sub, rec.ID)
		}
	}
	if task := r.task(t, res.Task); task.Status != tasklog.StatusSuccess {
		t.Fatalf("task: %+v", task)
	}

	// Both agents start and end, the sub-agent inside the main one.
	var agents []string
	for _, e := range r.events(t, res.Task) {
		if e.Name != stream.EventStartOfAgent && e.Name != stream.EventEndOfAgent {
			continue
		}
		var d stream.AgentData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		agents = append(agents, e.Name+" "+d.AgentName)
	}
	want := "start_of_agent main,start_of_agent browsing,end_of_agent browsing,end_of_agent main"
	if strings.Join(agents, ",") != want {
		t.Fatalf("agent events: %v", agents)
	}
}

// A sub-agent that runs out of turns returns its forced summary, marked
// as such, and the main agent carries on.
func TestSubAgentMaxTurns(t *testing.T) {
	t.Parallel()
	r := newRig(t, script(bySystemPrompt, map[string][]llmtest.Reply{
		"main": {
			calls(call("agent-browsing__search_and_browse", `{"subtask": "Echo three times."}`)),
			answer("done"),
		},
		"browsing": {
			calls(call("fixture__echo", `{"message": "1"}`)),
			calls(call("fixture__echo", `{"message": "2"}`)),
			calls(call("fixture__echo", `{"message": "3"}`)),
			answer("I echoed three times."),
		},
	}), subAgentConfig)
	res, err := r.run(t, "Delegate.")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "done" {
		t.Fatalf("result: %+v", res)
	}
	reqs := r.model.Requests()
	last := reqs[len(reqs)-1]
	var result string
	for _, m := range last.Messages {
		if m["role"] == "tool" {
			result = m["content"].(string)
		}
	}
	if result != "(The browsing agent stopped at max_turns; this is its summary.)\nI echoed three times." {
		t.Fatalf("the main agent got %q", result)
	}
	if res.Status != agent.StatusAnswered {
		t.Fatalf("status %s", res.Status)
	}
}

// firstUser is the first user message of a request: the task, or the
// sub-agent's subtask.
func firstUser(req llmtest.Request) string {
	for _, m := range req.Messages {
		if m["role"] == "user" {
			s, _ := m["content"].(string)
			return s
		}
	}
	return ""
}

// Two calls of the same sub-agent in one turn run side by side, each in
// its own session, and each answer goes back to its call.
func TestSubAgentsInParallel(t *testing.T) {
	t.Parallel()
	r := newRig(t, script(func(req llmtest.Request) string {
		if bySystemPrompt(req) == "browsing" {
			return firstUser(req)
		}
		return "main"
	}, map[string][]llmtest.Reply{
		"main": {
			calls(call("agent-browsing__search_and_browse", `{"subtask": "red"}`),
				call("agent-browsing__search_and_browse", `{"subtask": "blue"}`)),
			answer("done"),
		},
		"red":  {calls(call("fixture__echo", `{"message": "red"}`)), answer("RED")},
		"blue": {calls(call("fixture__echo", `{"message": "blue"}`)), answer("BLUE")},
	}), subAgentConfig)
	res, err := r.run(t, "Colours.")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "done" || res.Calls != 2 {
		t.Fatalf("result: %+v", res)
	}
	reqs := r.model.Requests()
	last := reqs[len(reqs)-1]
	results := map[string]string{}
	for _, m := range last.Messages {
		if m["role"] == "tool" {
			results[m["tool_call_id"].(string)] = m["content"].(string)
		}
	}
	if results["call_0_0"] != "RED" || results["call_0_1"] != "BLUE" {
		t.Fatalf("results: %v", results)
	}
	sessions, err := r.rt.Log.Sessions(context.Background(), res.Task)
	if err != nil || len(sessions) != 3 {
		t.Fatalf("sessions %v %v", sessions, err)
	}
	for _, s := range sessions {
		if s == tasklog.MainSession {
			continue
		}
		msgs := r.messages(t, res.Task, s)
		colour := content(t, msgs[1])
		if len(msgs) != 5 || content(t, msgs[3]) != "Echo: "+colour || content(t, msgs[4]) != strings.ToUpper(colour) {
			t.Fatalf("session %s:\n%s", s, history(t, msgs))
		}
	}
}

// One agent runs several tasks at once, each with its own state.
func TestConcurrentRuns(t *testing.T) {
	t.Parallel()
	tasks := []string{"one", "two", "three", "four"}
	lists := map[string][]llmtest.Reply{}
	for _, task := range tasks {
		lists[task] = []llmtest.Reply{calls(call("fixture__echo", `{"message": "`+task+`"}`)), answer("answered " + task)}
	}
	r := newRig(t, script(firstUser, lists), "")
	a, err := r.rt.Agent()
	if err != nil {
		t.Fatal(err)
	}
	type out struct {
		task string
		res  *agent.Result
		err  error
	}
	done := make(chan out, len(tasks))
	for _, task := range tasks {
		go func() {
			res, err := a.Run(context.Background(), task)
			done <- out{task, res, err}
		}()
	}
	for range tasks {
		o := <-done
		if o.err != nil || o.res.Answer != "answered "+o.task || o.res.Turns != 2 {
			t.Fatalf("%s: %+v %v", o.task, o.res, o.err)
		}
		if h := history(t, r.messages(t, o.res.Task, tasklog.MainSession)); !strings.Contains(h, "Echo: "+o.task) {
			t.Fatalf("%s:\n%s", o.task, h)
		}
	}
}
