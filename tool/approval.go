package tool

import "context"

// AnsweredFunc is told who answered a call's approval question: the
// name of the person (a caller's name, "the terminal") whose answer
// decided it.
type AnsweredFunc func(by string)

type answeredKey struct{}

// WithAnswered returns a context whose call's approval question, if one
// is asked and answered, reports who answered to fn: the scheduler sets
// it, so that the call's events say who approved or denied it. An
// approver that knows who answered tells it with [Answered].
func WithAnswered(ctx context.Context, fn AnsweredFunc) context.Context {
	return context.WithValue(ctx, answeredKey{}, fn)
}

// Answered tells the call of ctx who answered its approval question; a
// context without [WithAnswered] ignores it.
func Answered(ctx context.Context, by string) {
	if fn, _ := ctx.Value(answeredKey{}).(AnsweredFunc); fn != nil {
		fn(by)
	}
}
