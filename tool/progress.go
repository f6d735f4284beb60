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

// OutputFunc receives output of a running tool as it is produced: a chunk
// of a shell command's stdout or stderr, for example. It is called from the
// goroutine that reads the output, so it must return quickly. Chunks are
// split where the reads split them, not at line ends.
type OutputFunc func(stream, chunk string)

type outputKey struct{}

// WithOutput returns a context whose calls deliver live output to fn.
// Tools that stream output (the built-in shell) look it up with
// [OutputFrom]; the result still carries the whole output.
func WithOutput(ctx context.Context, fn OutputFunc) context.Context {
	return context.WithValue(ctx, outputKey{}, fn)
}

// OutputFrom returns the live-output callback of ctx, or nil.
func OutputFrom(ctx context.Context) OutputFunc {
	fn, _ := ctx.Value(outputKey{}).(OutputFunc)
	return fn
}

type callKey struct{}

// WithCall returns a context carrying the call being made, so that a
// source can see which task and session a call belongs to (the built-in
// memory tool keeps facts per task). The manager sets it for every call.
func WithCall(ctx context.Context, call Call) context.Context {
	return context.WithValue(ctx, callKey{}, call)
}

// CallFrom returns the call ctx carries, and whether it carries one.
func CallFrom(ctx context.Context) (Call, bool) {
	c, ok := ctx.Value(callKey{}).(Call)
	return c, ok
}
