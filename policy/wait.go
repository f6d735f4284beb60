package policy

import "context"

type approvalWaitKey struct{}

// WithApprovalWait returns a context whose calls tell fn when they start
// (true) and stop (false) waiting for an approver's answer. The gateway
// uses it to know which of its calls wait for a person: such a call is
// withdrawn when its client leaves, whereas a running one may be kept for
// the client's re-issued request. fn is called on the call's goroutine,
// before the gate looks at ctx (so fn may end it), and must return
// quickly.
func WithApprovalWait(ctx context.Context, fn func(waiting bool)) context.Context {
	return context.WithValue(ctx, approvalWaitKey{}, fn)
}

func approvalWaitFrom(ctx context.Context) func(bool) {
	fn, _ := ctx.Value(approvalWaitKey{}).(func(bool))
	return fn
}
