package agent_test

import (
	"context"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/agent"
	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

// Two tools called in one turn run as one batch of the scheduler; their
// results go back with the model's call ids; the final reply is the
// answer.
func TestParallelCallsInOneTurn(t *testing.T) {
	t.Parallel()
	r := newRig(t, llmtest.Replies(
		calls(call("fixture__echo", `{"message": "hello"}`), call("builtin__read_file", `{"path": "notes.txt"}`)),
		answer("The notes say 42."),
	), "")
	res, err := r.run(t, "What do the notes say?")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "The notes say 42." || res.Status != agent.StatusAnswered || res.Turns != 2 || res.Calls != 2 {
		t.Fatalf("result: %+v", res)
	}
	reqs := r.model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	second := reqs[1].Text()
	if !strings.Contains(second, "Echo: hello") || !strings.Contains(second, "the answer is 42") {
		t.Fatalf("the second request lacks the results:\n%s", second)
	}
	// The results answer the model's call ids, in the model's order.
	var ids []string
	for _, m := range reqs[1].Messages {
		if m["role"] == "tool" {
			ids = append(ids, m["tool_call_id"].(string))
		}
	}
	if strings.Join(ids, ",") != "call_0_0,call_0_1" {
		t.Fatalf("tool results answer %v", ids)
	}
	recs := r.calls(t, res.Task)
	if len(recs) != 2 {
		t.Fatalf("recorded calls: %d", len(recs))
	}
	for _, rec := range recs {
		if rec.Error != nil || rec.Session != tasklog.MainSession || rec.Task != res.Task {
			t.Fatalf("record: %+v", rec)
		}
	}
	task := r.task(t, res.Task)
	if task.Status != tasklog.StatusSuccess || task.FinalAnswer != "The notes say 42." {
		t.Fatalf("task: %+v", task)
	}

	// One batch: every tool_state of both calls names the same batch,
	// and the calls are its items 0 and 1.
	states := toolStates(t, r.events(t, res.Task))
	batches := map[string]bool{}
	index := map[string]int{}
	final := map[string]string{}
	for _, s := range states {
		batches[s.Batch] = true
		index[s.CallID] = s.Index
		final[s.CallID] = s.State
	}
	if len(batches) != 1 || len(index) != 2 {
		t.Fatalf("calls %v in batches %v", index, batches)
	}
	for _, rec := range recs {
		if final[rec.ID] != string(schedule.Success) {
			t.Fatalf("call %s ended %q", rec.ID, final[rec.ID])
		}
	}
	seen := map[int]bool{}
	for _, i := range index {
		seen[i] = true
	}
	if !seen[0] || !seen[1] {
		t.Fatalf("indexes %v", index)
	}
}

// rollbackCase is one cause of a rollback: the config, the reply that is
// dropped (carrying the marker DROPPED in its text or arguments) and what
// the retried request's hint says.
type rollbackCase struct {
	name    string
	extra   string
	dropped llmtest.Reply
	cause   string
	// recorded is how many calls the dropped turn leaves in the task log
	// (calls that ran before the turn was judged).
	recorded int
}

// Each cause of a rollback drops the turn and asks again with a hint: the
// retried request carries the hint and not the dropped reply, the
// committed history and the task log's messages never see it, and the
// step log has a warning "rollback" step saying why.
func TestRollbackCauses(t *testing.T) {
	t.Parallel()
	for _, c := range []rollbackCase{{
		name:    "malformed arguments",
		dropped: llmtest.Reply{Content: "DROPPED", Calls: []llmtest.Call{call("fixture__echo", `[1,2`)}},
		cause:   "malformed: the arguments of tool call 1 (fixture__echo) are not a JSON object",
	}, {
		name:    "arguments a string",
		dropped: llmtest.Reply{Content: "DROPPED", Calls: []llmtest.Call{call("fixture__echo", `"just a string"`)}},
		cause:   "malformed: the arguments of tool call 1 (fixture__echo) are not a JSON object",
	}, {
		name:    "refusal",
		dropped: answer("DROPPED: I'm sorry, but I can't help with that."),
		cause:   "refusal: the reply declines the task",
	}, {
		name:    "empty reply",
		dropped: llmtest.Reply{Content: "", Finish: "stop"},
		cause:   "malformed: the reply was empty",
	}, {
		name:    "content filter",
		dropped: llmtest.Reply{Content: "DROPPED", Finish: "content_filter"},
		cause:   "refusal: the provider's content filter stopped the reply",
	}, {
		name:     "rollback verdict",
		extra:    `pipeline: {rollback: {rules: [{kinds: [tool_error], tools: [fail], reason: "the tool failed; try another one"}]}}`,
		dropped:  llmtest.Reply{Content: "DROPPED", Calls: []llmtest.Call{call("fixture__fail", `{}`)}},
		cause:    "rollback verdict on fixture__fail: the tool failed; try another one",
		recorded: 1,
	}, {
		name:     "prefix rule",
		extra:    `pipeline: {rollback: {rules: [{prefix: "Echo: DROPPED", reason: "an echo of nothing"}]}}`,
		dropped:  llmtest.Reply{Calls: []llmtest.Call{call("fixture__echo", `{"message": "DROPPED"}`)}},
		cause:    "rollback verdict on fixture__echo: an echo of nothing",
		recorded: 1,
	}, {
		name:     "unknown tool",
		dropped:  llmtest.Reply{Content: "DROPPED", Calls: []llmtest.Call{call("fixture__ech", `{"message": "x"}`)}},
		cause:    "rollback verdict on fixture__ech",
		recorded: 1,
	}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, llmtest.Replies(
				c.dropped,
				calls(call("fixture__echo", `{"message": "kept"}`)),
				answer("done"),
			), c.extra)
			res, err := r.run(t, "Echo something.")
			if err != nil {
				t.Fatal(err)
			}
			if res.Answer != "done" || res.Turns != 2 || res.Rollbacks != 1 || res.Calls != 1 || len(res.Notes) != 0 {
				t.Fatalf("result: %+v", res)
			}
			checkRolledBack(t, r, res, c.cause)
			if recs := r.calls(t, res.Task); len(recs) != c.recorded+1 {
				t.Fatalf("%d calls recorded, want %d", len(recs), c.recorded+1)
			}
		})
	}
}

// checkRolledBack checks a run whose first reply (marked DROPPED, with
// the call id call_0_0) was rolled back for cause, then a turn echoing
// "kept" committed, then the answer.
func checkRolledBack(t *testing.T, r *rig, res *agent.Result, cause string) {
	t.Helper()
	reqs := r.model.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests", len(reqs))
	}
	retried := reqs[1]
	hint := retried.Text()
	if !strings.Contains(hint, "Your previous reply was discarded ("+cause) {
		t.Fatalf("the retried request has no hint for %q:\n%s", cause, hint)
	}
	if last := lastMessage(retried); last["role"] != "user" || !strings.Contains(last["content"].(string), "Your previous reply was discarded") {
		t.Fatalf("the hint is not the last message: %v", last)
	}
	// Apart from the hint, the retried request is the first one again.
	if len(retried.Messages) != len(reqs[0].Messages)+1 {
		t.Fatalf("the retried request has %d messages, the first %d", len(retried.Messages), len(reqs[0].Messages))
	}
	for i, req := range reqs[1:] {
		if s := raw(t, req); strings.Contains(s, "DROPPED") || strings.Contains(s, "call_0_0") {
			t.Fatalf("request %d shows the dropped reply:\n%s", i+2, s)
		}
	}
	// The hint was for one request only.
	if s := reqs[2].Text(); strings.Contains(s, "Your previous reply was discarded") || !strings.Contains(s, "Echo: kept") {
		t.Fatalf("the request after the retried turn:\n%s", s)
	}
	h := history(t, r.messages(t, res.Task, tasklog.MainSession))
	if strings.Contains(h, "DROPPED") || strings.Contains(h, "call_0_0") || strings.Contains(h, "discarded") {
		t.Fatalf("the logged history keeps the dropped turn:\n%s", h)
	}
	if !strings.Contains(h, "call_1_0") || !strings.Contains(h, "Echo: kept") {
		t.Fatalf("the logged history lacks the kept turn:\n%s", h)
	}
	var rollbacks []tasklog.Step
	for _, s := range r.steps(t, res.Task) {
		if strings.Contains(s.Name, "rollback") {
			rollbacks = append(rollbacks, s)
		}
	}
	if len(rollbacks) != 1 || rollbacks[0].Level != tasklog.LevelWarning || rollbacks[0].Name != "main | turn 1 | rollback 1" ||
		!strings.HasPrefix(rollbacks[0].Message, cause) {
		t.Fatalf("rollback steps: %+v", rollbacks)
	}
}

// A repeated query is rolled back; the queries of a dropped turn do not
// count: a turn with a duplicate and a new query is dropped whole, and
// the new query made again in the next turn is not a duplicate.
func TestRollbackDuplicateQuery(t *testing.T) {
	t.Parallel()
	r := newRig(t, llmtest.Replies(
		calls(call("fixture__echo", `{"message": "alpha"}`)),
		calls(call("fixture__echo", `{"message": "ALPHA "}`), call("fixture__echo", `{"message": "beta"}`)),
		calls(call("fixture__echo", `{"message": "beta"}`)),
		answer("done"),
	), `pipeline: {dedupe: {policy: reject, tools: {echo: {keys: [message]}}}}`)
	res, err := r.run(t, "Echo alpha and beta.")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "done" || res.Turns != 3 || res.Rollbacks != 1 || res.Calls != 2 {
		t.Fatalf("result: %+v", res)
	}
	reqs := r.model.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests", len(reqs))
	}
	if s := reqs[2].Text(); !strings.Contains(s, "Your previous reply was discarded (duplicate query: the same query") {
		t.Fatalf("the retried request:\n%s", s)
	}
	if s := raw(t, reqs[2]); strings.Contains(s, "call_1_") || strings.Contains(s, `"ALPHA "`) {
		t.Fatalf("the retried request shows the dropped turn:\n%s", s)
	}
	if s := reqs[3].Text(); !strings.Contains(s, "Echo: beta") || strings.Contains(s, "duplicate") {
		t.Fatalf("the repeated new query was refused:\n%s", s)
	}
	recs := r.calls(t, res.Task)
	if len(recs) != 4 {
		t.Fatalf("%d records", len(recs))
	}
	var dup, betas int
	for _, rec := range recs {
		switch {
		case rec.Error != nil && rec.Error.Kind == tool.KindDuplicateQuery:
			dup++
		case rec.Error != nil:
			t.Fatalf("record: %+v", rec.Error)
		case rec.Arguments["message"] == "beta":
			betas++
		}
	}
	if dup != 1 || betas != 2 {
		t.Fatalf("%d duplicates, %d betas", dup, betas)
	}
	h := history(t, r.messages(t, res.Task, tasklog.MainSession))
	if strings.Count(h, "Echo: beta") != 1 || strings.Contains(h, "duplicate") {
		t.Fatalf("history:\n%s", h)
	}
}

// refusal is a reply every default refusal pattern catches.
var refusal = answer("I'm sorry, but I can't help with that.")

// fail calls the fixture's failing tool, rolled back by failRule.
var fail = calls(call("fixture__fail", `{}`))

const failRule = `pipeline: {rollback: {rules: [{kinds: [tool_error], reason: "the tool failed"}]}}`

// max_consecutive_rollbacks (default 5) turns in a row are dropped; the
// next offending turn is kept with a note; a committed turn resets the
// count.
func TestRollbackLimit(t *testing.T) {
	t.Parallel()
	var replies []llmtest.Reply
	for range 5 {
		replies = append(replies, fail)
	}
	replies = append(replies, calls(call("fixture__echo", `{"message": "good"}`)))
	for range 6 {
		replies = append(replies, fail)
	}
	replies = append(replies, answer("done"))
	r := newRig(t, llmtest.Replies(replies...), failRule)
	res, err := r.run(t, "Try.")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "done" || res.Rollbacks != 10 || res.Turns != 3 || res.Calls != 2 {
		t.Fatalf("result: %+v", res)
	}
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "turn 2 was kept after 5 consecutive rollbacks") ||
		!strings.Contains(res.Notes[0], "rollback verdict on fixture__fail: the tool failed") {
		t.Fatalf("notes: %q", res.Notes)
	}
	reqs := r.model.Requests()
	if len(reqs) != 13 {
		t.Fatalf("%d requests", len(reqs))
	}
	for i, req := range reqs {
		hinted := strings.Contains(req.Text(), "Your previous reply was discarded")
		// Requests 1-5 and 7-11 follow a rollback.
		if want := i >= 1 && i <= 5 || i >= 7 && i <= 11; hinted != want {
			t.Fatalf("request %d hinted %v", i, hinted)
		}
	}
	// The kept failure is in the history the model sees.
	if s := reqs[12].Text(); !strings.Contains(s, "Echo: good") || !strings.Contains(s, "failed on purpose") {
		t.Fatalf("the last request:\n%s", s)
	}
	w := warnings(r.steps(t, res.Task))
	if countContaining(w, "rollback") != 10 || countContaining(w, "rollback 5") != 2 || countContaining(w, "rollback 6") != 0 ||
		countContaining(w, "note") != 1 {
		t.Fatalf("warning steps: %q", w)
	}
	if recs := r.calls(t, res.Task); len(recs) != 12 {
		t.Fatalf("%d records", len(recs))
	}
}

// With max_consecutive_rollbacks: 2, two refusals are dropped and the
// third is kept: it is the answer, with a note.
func TestRollbackLimitConfigured(t *testing.T) {
	t.Parallel()
	r := newRig(t, llmtest.Replies(refusal, refusal, refusal, answer("unreachable")), `agent: {max_consecutive_rollbacks: 2}`)
	res, err := r.run(t, "Do it.")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "I'm sorry, but I can't help with that." || res.Status != agent.StatusAnswered || res.Rollbacks != 2 || res.Turns != 1 {
		t.Fatalf("result: %+v", res)
	}
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "kept after 2 consecutive rollbacks") {
		t.Fatalf("notes: %q", res.Notes)
	}
	if n := len(r.model.Requests()); n != 3 {
		t.Fatalf("%d requests", n)
	}
	w := warnings(r.steps(t, res.Task))
	if countContaining(w, "rollback") != 2 || countContaining(w, "note") != 1 {
		t.Fatalf("warning steps: %q", w)
	}
	msgs := r.messages(t, res.Task, tasklog.MainSession)
	if last := msgs[len(msgs)-1]; last.Role != "assistant" || content(t, last) != "I'm sorry, but I can't help with that." {
		t.Fatalf("last message: %+v", last)
	}
}

// With max_consecutive_rollbacks: 0 a malformed call is kept at once: the
// model is shown the error as the call's result.
func TestMalformedCallKept(t *testing.T) {
	t.Parallel()
	r := newRig(t, llmtest.Replies(
		calls(call("fixture__echo", `[1,2`), call("fixture__echo", `{"message": "fine"}`)),
		answer("done"),
	), `agent: {max_consecutive_rollbacks: 0}`)
	res, err := r.run(t, "Echo.")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "done" || res.Rollbacks != 0 || res.Turns != 2 || len(res.Notes) != 1 {
		t.Fatalf("result: %+v", res)
	}
	reqs := r.model.Requests()
	var results []string
	for _, m := range reqs[1].Messages {
		if m["role"] == "tool" {
			results = append(results, m["tool_call_id"].(string)+": "+m["content"].(string))
		}
	}
	if len(results) != 2 || !strings.HasPrefix(results[0], "call_0_0: Error: the arguments of tool call 1 (fixture__echo) are not a JSON object") ||
		results[1] != "call_0_1: Echo: fine" {
		t.Fatalf("results: %q", results)
	}
	if recs := r.calls(t, res.Task); len(recs) != 1 {
		t.Fatalf("%d records", len(recs))
	}
}

// max_turns ends the run with a forced summary: a last request without
// tools allowed, saying why, whose answer is the result.
func TestMaxTurnsForcedSummary(t *testing.T) {
	t.Parallel()
	r := newRig(t, llmtest.Replies(
		calls(call("fixture__echo", `{"message": "one"}`)),
		calls(call("fixture__echo", `{"message": "two"}`)),
		answer("Summary: one and two."),
	), `agent: {max_turns: 2}`)
	res, err := r.run(t, "Echo forever.")
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != agent.StatusMaxTurns || res.Answer != "Summary: one and two." || res.Turns != 3 || res.Calls != 2 {
		t.Fatalf("result: %+v", res)
	}
	reqs := r.model.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests", len(reqs))
	}
	for i, req := range reqs[:2] {
		if req.ToolChoice != "auto" {
			t.Fatalf("request %d tool_choice %v", i, req.ToolChoice)
		}
	}
	last := reqs[2]
	if last.ToolChoice != "none" || !strings.Contains(last.Text(), "You have reached the limit of 2 turns") || !strings.Contains(last.Text(), "Echo: two") {
		t.Fatalf("the summary request: %v\n%s", last.ToolChoice, last.Text())
	}
	msgs := r.messages(t, res.Task, tasklog.MainSession)
	if last := msgs[len(msgs)-1]; last.Role != "assistant" || content(t, last) != "Summary: one and two." {
		t.Fatalf("last message: %+v", last)
	}
	if w := warnings(r.steps(t, res.Task)); countContaining(w, "forced summary") != 1 {
		t.Fatalf("warning steps: %q", w)
	}
	if task := r.task(t, res.Task); task.Status != tasklog.StatusSuccess || task.FinalAnswer != "Summary: one and two." {
		t.Fatalf("task: %+v", task)
	}
}

// The same calls repeated: a warning to the model at 3 repeats (and at
// each further one), a forced summary with status loop at 6.
func TestLoopDetection(t *testing.T) {
	t.Parallel()
	same := calls(call("fixture__echo", `{"message": "again"}`))
	r := newRig(t, llmtest.Replies(same, same, same, same, same, same, answer("I was looping.")), "")
	res, err := r.run(t, "Echo.")
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != agent.StatusLoop || res.Answer != "I was looping." || res.Turns != 7 {
		t.Fatalf("result: %+v", res)
	}
	reqs := r.model.Requests()
	if len(reqs) != 7 {
		t.Fatalf("%d requests", len(reqs))
	}
	for i, req := range reqs[:6] {
		warned := strings.Contains(req.Text(), "You have made the same tool calls")
		if warned != (i >= 3) {
			t.Fatalf("request %d warned %v", i, warned)
		}
	}
	if last := lastMessage(reqs[3]); last["role"] != "user" || !strings.Contains(last["content"].(string), "the same tool calls 3 times in a row") {
		t.Fatalf("request 4 ends with %v", last)
	}
	if !strings.Contains(reqs[5].Text(), "5 times in a row") {
		t.Fatalf("request 6:\n%s", reqs[5].Text())
	}
	if reqs[6].ToolChoice != "none" || !strings.Contains(reqs[6].Text(), "You have reached a loop") {
		t.Fatalf("the summary request:\n%s", reqs[6].Text())
	}
	if len(res.Notes) != 3 || res.Notes[0] != "loop: the same calls repeated 3 times" {
		t.Fatalf("notes: %q", res.Notes)
	}
}

// The terminate tool ends the run with its answer, whatever else the
// model might have said.
func TestTerminate(t *testing.T) {
	t.Parallel()
	r := newRig(t, llmtest.Replies(
		calls(call("fixture__echo", `{"message": "x"}`)),
		llmtest.Reply{Content: "Finishing.", Calls: []llmtest.Call{call("terminate", `{"answer": "forty-two"}`)}},
	), "")
	res, err := r.run(t, "Answer.")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "forty-two" || res.Status != agent.StatusAnswered || res.Turns != 2 {
		t.Fatalf("result: %+v", res)
	}
	reqs := r.model.Requests()
	if len(reqs) != 2 || reqs[0].Tools[len(reqs[0].Tools)-1] != "terminate" {
		t.Fatalf("%d requests, tools %v", len(reqs), reqs[0].Tools)
	}
	if recs := r.calls(t, res.Task); len(recs) != 1 {
		t.Fatalf("terminate was recorded as a tool call: %d records", len(recs))
	}
	if task := r.task(t, res.Task); task.FinalAnswer != "forty-two" {
		t.Fatalf("task: %+v", task)
	}
}

// boxed_answer takes the answer from the last \boxed{}; without one the
// whole reply is the answer, with a note.
func TestBoxedAnswer(t *testing.T) {
	t.Parallel()
	r := newRig(t, llmtest.Replies(
		answer(`First \boxed{1}, then on reflection the answer is \boxed{{42}}.`),
		answer("No box here."),
	), `agent: {boxed_answer: true}`)
	res, err := r.run(t, "Compute.")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "{42}" || len(res.Notes) != 0 {
		t.Fatalf("result: %+v", res)
	}
	res, err = r.run(t, "Compute again.")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "No box here." || len(res.Notes) != 1 || !strings.Contains(res.Notes[0], `\boxed{}`) {
		t.Fatalf("result: %+v", res)
	}
}

// Just-in-time instructions come with a tool's first result in the task:
// the model reads them in the tool message.
func TestInstructionsReachTheModel(t *testing.T) {
	t.Parallel()
	r := newRig(t, llmtest.Replies(
		calls(call("fixture__echo", `{"message": "one"}`)),
		calls(call("fixture__echo", `{"message": "two"}`)),
		answer("done"),
	), `pipeline: {instructions: {tools: {echo: "ECHO-GUIDE: the echo repeats your words."}}}`)
	res, err := r.run(t, "Echo twice.")
	if err != nil {
		t.Fatal(err)
	}
	reqs := r.model.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests", len(reqs))
	}
	var results []string
	for _, m := range reqs[2].Messages {
		if m["role"] == "tool" {
			results = append(results, m["content"].(string))
		}
	}
	if len(results) != 2 || !strings.Contains(results[0], "Echo: one") || !strings.Contains(results[0], "ECHO-GUIDE: the echo repeats your words.") ||
		strings.Contains(results[1], "ECHO-GUIDE") {
		t.Fatalf("results: %q", results)
	}
	if h := history(t, r.messages(t, res.Task, tasklog.MainSession)); strings.Count(h, "ECHO-GUIDE") != 1 {
		t.Fatalf("history:\n%s", h)
	}
}

// The task log has the main session's whole history: the system prompt
// the model got, the task, each turn, the answer.
func TestHistoryLogged(t *testing.T) {
	t.Parallel()
	r := newRig(t, llmtest.Replies(
		calls(call("fixture__echo", `{"message": "hi"}`)),
		answer("done"),
	), "")
	res, err := r.run(t, "Say hi.")
	if err != nil {
		t.Fatal(err)
	}
	reqs := r.model.Requests()
	msgs := r.messages(t, res.Task, tasklog.MainSession)
	roles := make([]string, 0, len(msgs))
	for _, m := range msgs {
		roles = append(roles, m.Role)
	}
	if strings.Join(roles, " ") != "system user assistant tool assistant" {
		t.Fatalf("roles: %v", roles)
	}
	if got := content(t, msgs[0]); got != reqs[0].System || got != agent.DefaultSystemPrompt {
		t.Fatalf("logged system prompt %q, sent %q", got, reqs[0].System)
	}
	if content(t, msgs[1]) != "Say hi." || msgs[3].ToolCallID != "call_0_0" || content(t, msgs[3]) != "Echo: hi" || content(t, msgs[4]) != "done" {
		t.Fatalf("history:\n%s", history(t, msgs))
	}
	sessions, err := r.rt.Log.Sessions(context.Background(), res.Task)
	if err != nil || len(sessions) != 1 || sessions[0] != tasklog.MainSession {
		t.Fatalf("sessions %v %v", sessions, err)
	}
}
