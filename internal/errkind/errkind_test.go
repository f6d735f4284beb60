package errkind

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

type kind string

type typedError struct {
	k   kind
	err error
}

func (e *typedError) Error() string { return string(e.k) }
func (e *typedError) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.err
}

func of(err error) kind {
	return Of(err, func(e *typedError) (kind, bool) {
		if e == nil {
			return "", false
		}
		return e.k, true
	}, "timeout", "cancelled")
}

// The convention, case by case.
func TestOf(t *testing.T) {
	typed := &typedError{k: "auth"}
	var nilTyped *typedError
	for _, tc := range []struct {
		name string
		err  error
		want kind
	}{
		{"nil", nil, ""},
		{"foreign", errors.New("boom"), ""},
		{"wrapped foreign", fmt.Errorf("x: %w", errors.New("boom")), ""},
		{"typed", typed, "auth"},
		{"wrapped typed", fmt.Errorf("a: %w", fmt.Errorf("b: %w", typed)), "auth"},
		{"joined typed", errors.Join(errors.New("other"), typed), "auth"},
		{"typed wrapping a context error", &typedError{k: "network", err: context.Canceled}, "network"},
		{"context error wrapping typed", fmt.Errorf("%w: %w", context.Canceled, typed), "auth"},
		{"first typed wins", fmt.Errorf("%w", &typedError{k: "outer", err: &typedError{k: "inner"}}), "outer"},
		{"canceled", context.Canceled, "cancelled"},
		{"deadline", context.DeadlineExceeded, "timeout"},
		{"wrapped canceled", fmt.Errorf("reading: %w", context.Canceled), "cancelled"},
		{"wrapped deadline", fmt.Errorf("reading: %w", context.DeadlineExceeded), "timeout"},
		{"nil typed pointer", fmt.Errorf("x: %w", nilTyped), ""},
		{"nil typed pointer, canceled", errors.Join(nilTyped, context.Canceled), "cancelled"},
	} {
		if got := of(tc.err); got != tc.want {
			t.Errorf("%s: Of(%v) = %q, want %q", tc.name, tc.err, got, tc.want)
		}
	}
}
