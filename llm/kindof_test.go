package llm_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/toolmux/toolmux/llm"
)

// TestKindOfConvention pins what KindOf returns for every sort of error,
// the convention tool.KindOf, llm.KindOf and agent.KindOf share (see
// internal/errkind).
func TestKindOfConvention(t *testing.T) {
	typed := &llm.Error{Kind: llm.KindAuth, Status: 401}
	for _, tc := range []struct {
		name string
		err  error
		want llm.Kind
	}{
		{"nil", nil, ""},
		{"foreign", errors.New("boom"), ""},
		{"wrapped foreign", fmt.Errorf("doing: %w", errors.New("boom")), ""},
		{"typed", typed, llm.KindAuth},
		{"wrapped typed", fmt.Errorf("a: %w", fmt.Errorf("b: %w", typed)), llm.KindAuth},
		{"joined typed", errors.Join(errors.New("other"), typed), llm.KindAuth},
		{"typed wrapping a context error", &llm.Error{Kind: llm.KindNetwork, Err: context.Canceled}, llm.KindNetwork},
		{"canceled", context.Canceled, llm.KindCancelled},
		{"wrapped canceled", fmt.Errorf("reading: %w", context.Canceled), llm.KindCancelled},
		{"deadline", context.DeadlineExceeded, llm.KindTimeout},
		{"wrapped deadline", fmt.Errorf("reading: %w", context.DeadlineExceeded), llm.KindTimeout},
	} {
		if got := llm.KindOf(tc.err); got != tc.want {
			t.Errorf("%s: KindOf(%v) = %q, want %q", tc.name, tc.err, got, tc.want)
		}
	}
}
