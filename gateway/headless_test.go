package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/api"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/internal/taskclient"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/policy"
)

// askInTask makes a call needing approval as a task of c, waits for its
// question and answers it with action (no content): the client could not
// show it. It returns the task's id.
func askInTask(t *testing.T, ctx context.Context, c *taskclient.Client, label, action string) string {
	t.Helper()
	created, err := c.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 0, "label": label})
	if err != nil || created.ResultType != "task" {
		t.Fatalf("a call needing approval: %+v %v", created, err)
	}
	asked, err := c.Poll(ctx, created.TaskID, func(t *taskclient.Task) bool { return t.Status != "working" })
	if err != nil || asked.Status != "input_required" || len(asked.InputRequests) != 1 {
		t.Fatalf("asking: %+v %v", asked, err)
	}
	for key := range asked.InputRequests {
		if err := c.Update(ctx, created.TaskID, map[string]any{key: map[string]any{"action": action}}); err != nil {
			t.Fatal(err)
		}
	}
	return created.TaskID
}

// A task's client that answers its approval question with cancel could
// not show it: with nobody on the page, the call is refused as
// approval_unavailable, saying what the client answered and how to allow
// the call; with a page attached (asked at the same time, as serve does),
// the question is left to the page, whose answer runs the call — put to
// the page once, not again after the client's cancel, also when the page
// gives no answer.
func TestTasksApprovalCancelledByTheClient(t *testing.T) {
	queue := api.NewApprovals(&api.ApprovalOptions{Timeout: time.Minute, Grace: -1})
	url, _, _ := tasksGateway(t, t.TempDir(), gateway.Tasks{Threshold: time.Minute},
		policy.FirstOf(gateway.ElicitApprover{Also: queue}, queue))
	ctx := pollCtx(t)
	c := &taskclient.Client{URL: url, Elicitation: true}

	id := askInTask(t, ctx, c, "ask-nobody", "cancel")
	done, err := c.Poll(ctx, id, nil)
	if err != nil || done.Status != "completed" {
		t.Fatalf("after cancel: %+v %v", done, err)
	}
	r, _ := done.ToolResult()
	if text := r.Text(); !r.IsError || !strings.Contains(text, "approval_unavailable") || !strings.Contains(text, "answered cancel") ||
		!strings.Contains(text, "--yes") || !strings.Contains(text, "open it first") {
		t.Errorf("refusal: %s", done.Result)
	}

	detach := queue.Attach()
	id = askInTask(t, ctx, c, "ask-page", "cancel")
	var pending []api.Pending
	if !testservers.Eventually(10*time.Second, func() bool { pending = queue.Pending(); return len(pending) == 1 }) {
		t.Fatalf("the page holds %d questions, want 1", len(pending))
	}
	if err := queue.Decide(pending[0].ID, policy.ProceedOnce); err != nil {
		t.Fatal(err)
	}
	done, err = c.Poll(ctx, id, nil)
	if err != nil || done.Status != "completed" {
		t.Fatalf("after the page's answer: %+v %v", done, err)
	}
	if r, _ := done.ToolResult(); r.IsError || !strings.Contains(r.Text(), "computed ask-page") {
		t.Errorf("result %s", done.Result)
	}
	if p := queue.Pending(); len(p) != 0 {
		t.Errorf("the page was asked again: %+v", p)
	}

	// The page goes away with the question on it: the call is refused
	// for that, and not put to the page again.
	id = askInTask(t, ctx, c, "ask-gone", "cancel")
	if !testservers.Eventually(10*time.Second, func() bool { return len(queue.Pending()) == 1 }) {
		t.Fatal("the question never reached the page")
	}
	detach()
	done, err = c.Poll(ctx, id, nil)
	if err != nil || done.Status != "completed" {
		t.Fatalf("after the page went away: %+v %v", done, err)
	}
	r, _ = done.ToolResult()
	if text := r.Text(); !r.IsError || !strings.Contains(text, "approval_denied") || !strings.Contains(text, "went away") {
		t.Errorf("refusal: %s", done.Result)
	}
}
