package policy_test

import (
	"context"
	"sync"
	"testing"

	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

// queue is an approver that holds every request until the test answers
// it, like the API's approval queue behind a web page.
type queue struct {
	mu      sync.Mutex
	waiting map[string]chan policy.Answer // by call id
	gone    map[string]bool               // withdrawn by the gate
}

func (q *queue) Approve(ctx context.Context, req policy.Request) (policy.Answer, error) {
	ch := make(chan policy.Answer, 1)
	q.mu.Lock()
	q.waiting[req.Call.ID] = ch
	q.mu.Unlock()
	select {
	case a := <-ch:
		return a, nil
	case <-ctx.Done():
		q.mu.Lock()
		q.gone[req.Call.ID] = true
		q.mu.Unlock()
		return 0, ctx.Err()
	}
}

func (q *queue) count() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}

func (q *queue) answer(id string, a policy.Answer) {
	q.mu.Lock()
	ch := q.waiting[id]
	q.mu.Unlock()
	ch <- a
}

// With concurrent approvals, requests wait side by side; an "always"
// answer to one approves the others it covers and withdraws them from the
// approver; a request it does not cover keeps waiting for its own answer.
func TestGateConcurrentApprovals(t *testing.T) {
	q := &queue{waiting: map[string]chan policy.Answer{}, gone: map[string]bool{}}
	g := policy.NewGate(nil, policy.WithApprover(q), policy.WithConcurrentApprovals(true))
	shellA := tool.Tool{Server: "builtin", Name: "shell"}
	write := tool.Tool{Server: "builtin", Name: "write_file"}
	results := map[string]chan error{}
	for _, c := range []struct {
		id string
		t  tool.Tool
	}{{"a", shellA}, {"b", shellA}, {"c", shellA}, {"w", write}} {
		ch := make(chan error, 1)
		results[c.id] = ch
		go func() {
			cl := call(c.t, nil)
			cl.ID = c.id
			ch <- g.Check(context.Background(), c.t, cl)
		}()
	}
	waitFor(t, func() bool { return q.count() == 4 })

	q.answer("b", policy.AlwaysTool)
	for _, id := range []string{"a", "b", "c"} {
		if err := <-results[id]; err != nil {
			t.Errorf("call %s: %v", id, err)
		}
	}
	q.mu.Lock()
	if !q.gone["a"] || !q.gone["c"] || q.gone["b"] || q.gone["w"] {
		t.Errorf("withdrawn: %v, want a and c", q.gone)
	}
	q.mu.Unlock()
	select {
	case err := <-results["w"]:
		t.Fatalf("write_file was decided without an answer: %v", err)
	default:
	}
	q.answer("w", policy.Decline)
	if err := <-results["w"]; kindOf(t, err) != tool.KindApprovalDenied {
		t.Errorf("declined write_file: %v", err)
	}
}

// A request withdrawn because its caller went away ends cancelled, and the
// approver sees its context end.
func TestGateConcurrentCancel(t *testing.T) {
	q := &queue{waiting: map[string]chan policy.Answer{}, gone: map[string]bool{}}
	g := policy.NewGate(nil, policy.WithApprover(q), policy.WithConcurrentApprovals(true))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	sh := tool.Tool{Server: "builtin", Name: "shell"}
	go func() {
		cl := call(sh, nil)
		cl.ID = "x"
		done <- g.Check(ctx, sh, cl)
	}()
	waitFor(t, func() bool { return q.count() == 1 })
	cancel()
	if err := <-done; kindOf(t, err) != tool.KindCancelled {
		t.Errorf("got %v", err)
	}
	waitFor(t, func() bool { q.mu.Lock(); defer q.mu.Unlock(); return q.gone["x"] })
}
