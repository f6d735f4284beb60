package tool

import "context"

// Progress is a progress report from a running tool.
type Progress struct {
	// Progress so far; it increases with every report.
	Progress float64 `json:"progress"`
	// Total is the amount of work when known, else 0.
	Total float64 `json:"total,omitempty"`
	// Message describes the current step.
	Message string `json:"message,omitempty"`
}

// ProgressFunc receives progress reports. It is called from the goroutine
// that reads the server's messages, so it must return quickly.
type ProgressFunc func(Progress)

type progressKey struct{}

// WithProgress returns a context whose calls report progress to fn. Sources
// that support progress (MCP servers, long-running built-ins) look it up
// with [ProgressFrom]; the rest ignore it. A report the server sent just
// before its result may reach fn shortly after the call has returned.
func WithProgress(ctx context.Context, fn ProgressFunc) context.Context {
	return context.WithValue(ctx, progressKey{}, fn)
}

// ProgressFrom returns the progress callback of ctx, or nil.
func ProgressFrom(ctx context.Context) ProgressFunc {
	fn, _ := ctx.Value(progressKey{}).(ProgressFunc)
	return fn
}
