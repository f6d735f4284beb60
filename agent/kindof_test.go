package agent_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/toolmux/toolmux/agent"
)

// TestKindOfConvention pins what KindOf returns for every sort of error,
// the convention tool.KindOf, llm.KindOf and agent.KindOf share (see
// internal/errkind).
func TestKindOfConvention(t *testing.T) {
	typed := &agent.Error{Kind: agent.ErrModel, Agent: "a"}
	for _, tc := range []struct {
		name string
		err  error
		want agent.ErrorKind
	}{
		{"nil", nil, ""},
		{"foreign", errors.New("boom"), ""},
		{"wrapped foreign", fmt.Errorf("doing: %w", errors.New("boom")), ""},
		{"typed", typed, agent.ErrModel},
		{"wrapped typed", fmt.Errorf("a: %w", fmt.Errorf("b: %w", typed)), agent.ErrModel},
		{"joined typed", errors.Join(errors.New("other"), typed), agent.ErrModel},
		{"typed wrapping a context error", &agent.Error{Kind: agent.ErrCatalog, Err: context.Canceled}, agent.ErrCatalog},
		{"canceled", context.Canceled, agent.ErrCancelled},
		{"wrapped canceled", fmt.Errorf("reading: %w", context.Canceled), agent.ErrCancelled},
		{"deadline", context.DeadlineExceeded, agent.ErrCancelled},
		{"wrapped deadline", fmt.Errorf("reading: %w", context.DeadlineExceeded), agent.ErrCancelled},
	} {
		if got := agent.KindOf(tc.err); got != tc.want {
			t.Errorf("%s: KindOf(%v) = %q, want %q", tc.name, tc.err, got, tc.want)
		}
	}
}
