//go:build !race

package policy_test

// The tests that count allocations, built without the race detector only:
// under -race sync.Pool drops items at random, so allocation counts of code
// that pools (regexp does) mean nothing. make test runs them in a run of
// their own without -race (go test -run 'Allocat' ./policy); in its -race
// run they do not exist, rather than being skipped.

import (
	"testing"

	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

// Decide runs for every call: it must not allocate for string arguments.
func TestDecideAllocations(t *testing.T) {
	e := mustEngine(t, policy.ModeDefault,
		policy.Rule{Tools: []string{"github/*", "gitlab/*"}, Server: "git*", Action: policy.Allow, Priority: 3},
		policy.Rule{Tools: []string{"shell"}, Args: map[string]string{"command": `^git (status|diff)\b`}, Action: policy.Allow, Priority: 2},
		policy.Rule{Tools: []string{"shell"}, Args: map[string]string{"timeout": `^[0-9]+$`}, Action: policy.Deny, Priority: 1},
		policy.Rule{Destructive: tool.Bool(true), Action: policy.Ask},
	)
	c := call(shell, map[string]any{"command": "git status", "timeout": 30.0})
	if n := testing.AllocsPerRun(100, func() { e.Decide(shell, c) }); n != 0 {
		t.Errorf("Decide allocates %.0f times per call", n)
	}
	c = call(shell, map[string]any{"command": "ls", "timeout": 30.0})
	if n := testing.AllocsPerRun(100, func() { e.Decide(shell, c) }); n != 0 {
		t.Errorf("Decide with a number argument allocates %.0f times per call", n)
	}
}
