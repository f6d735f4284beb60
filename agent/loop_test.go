package agent_test

import (
	"context"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/agent"
	"github.com/toolmux/toolmux/internal/llmtest"
)

// Two tools called in one turn run as one batch; their results go back
// with the model's call ids; the final reply is the answer.
func TestParallelCallsInOneTurn(t *testing.T) {
	r := newRig(t, llmtest.Replies(
		calls(call("fixture__echo", `{"message": "hello"}`), call("builtin__read_file", `{"path": "notes.txt"}`)),
		answer("The notes say 42."),
	), "")
	res, err := r.run(t, "What do the notes say?")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "The notes say 42." || res.Status != agent.StatusAnswered || res.Turns != 1 || res.Calls != 2 {
		t.Fatalf("result: %+v", res)
	}
	reqs := r.model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	second := reqs[1].Text()
	if !strings.Contains(second, "hello") || !strings.Contains(second, "the answer is 42") {
		t.Fatalf("the second request lacks the results:\n%s", second)
	}
	recs, err := r.rt.Log.Calls(context.Background(), res.Task)
	if err != nil || len(recs) != 2 {
		t.Fatalf("recorded calls: %d %v", len(recs), err)
	}
	task, err := r.rt.Log.Task(context.Background(), res.Task)
	if err != nil || task.Status != "success" || task.FinalAnswer != "The notes say 42." {
		t.Fatalf("task: %+v %v", task, err)
	}
}
