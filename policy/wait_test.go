package policy_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

// The watcher of WithApprovalWait is told when a call starts and stops
// waiting for an approver, and may end the wait before it starts: the call
// is then refused as cancelled while waiting, without asking.
func TestApprovalWait(t *testing.T) {
	engine, err := policy.New(policy.ModeDefault, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, concurrent := range []bool{false, true} {
		var mu sync.Mutex
		var asked int
		var seen []bool
		g := policy.NewGate(engine, policy.WithConcurrentApprovals(concurrent), policy.WithApprover(policy.ApproverFunc(
			func(context.Context, policy.Request) (policy.Answer, error) {
				mu.Lock()
				defer mu.Unlock()
				asked++
				return policy.ProceedOnce, nil
			})))
		shell := tool.Tool{Server: "builtin", Name: "shell", Annotations: tool.Annotations{ReadOnly: tool.Bool(false)}}
		call := tool.Call{Server: "builtin", Tool: "shell", Arguments: map[string]any{"command": "ls"}}
		watch := func(waiting bool) {
			mu.Lock()
			seen = append(seen, waiting)
			mu.Unlock()
		}
		if err := g.Check(policy.WithApprovalWait(context.Background(), watch), shell, call); err != nil {
			t.Fatalf("concurrent %v: %v", concurrent, err)
		}
		if !slices.Equal(seen, []bool{true, false}) || asked != 1 {
			t.Fatalf("concurrent %v: told %v, asked %d", concurrent, seen, asked)
		}

		ctx, cancel := context.WithCancel(context.Background())
		err := g.Check(policy.WithApprovalWait(ctx, func(waiting bool) {
			if waiting {
				cancel()
			}
		}), shell, call)
		if tool.KindOf(err) != tool.KindCancelled || !errors.Is(err, context.Canceled) || asked != 1 {
			t.Fatalf("concurrent %v: a wait ended by the watcher: %v (asked %d)", concurrent, err, asked)
		}
	}
}
