package policy_test

import (
	"context"
	"testing"

	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

// A Once question is asked whatever "always" answers were given before,
// and an "always" answer to it is not remembered.
func TestGateOnceIsNeverCovered(t *testing.T) {
	for _, concurrent := range []bool{false, true} {
		asked := 0
		g := policy.NewGate(nil, policy.WithConcurrentApprovals(concurrent),
			policy.WithApprover(policy.ApproverFunc(func(_ context.Context, req policy.Request) (policy.Answer, error) {
				asked++
				return policy.AlwaysTool, nil
			})))
		def := tool.Tool{Server: "files", Name: "list"}
		call := tool.Call{Server: "files", Tool: "list"}
		ask := policy.Decision{Action: policy.Ask, Rule: "r"}
		once := policy.Decision{Action: policy.Ask, Rule: "pinning", Message: "changed", Once: true}
		ctx := context.Background()
		if err := g.Approve(ctx, def, call, once); err != nil || asked != 1 {
			t.Fatalf("once: %v, asked %d", err, asked)
		}
		// Its "always" was not remembered: an ordinary question is asked.
		if err := g.Approve(ctx, def, call, ask); err != nil || asked != 2 {
			t.Fatalf("ordinary after once: %v, asked %d", err, asked)
		}
		// That one's "always" is, and covers ordinary questions, not Once.
		if err := g.Approve(ctx, def, call, ask); err != nil || asked != 2 {
			t.Fatalf("ordinary, covered: %v, asked %d", err, asked)
		}
		if err := g.Approve(ctx, def, call, once); err != nil || asked != 3 {
			t.Errorf("concurrent %v: once after always: %v, asked %d", concurrent, err, asked)
		}
	}
}
