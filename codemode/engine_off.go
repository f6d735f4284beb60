//go:build toolmux_nocodemode

package codemode

import "context"

// Built is whether this build runs programs: a build with the
// toolmux_nocodemode tag leaves the JavaScript engine out, and with it
// what it costs the binary (docs/codemode.md, "The engine and the
// binary").
const Built = false

// Run refuses every program: this build has no JavaScript engine.
func (r *Runner) Run(context.Context, string, []string) (*Result, error) {
	return &Result{}, &Error{Kind: KindUnavailable, Message: "this build of toolmux has no JavaScript engine (built with the toolmux_nocodemode tag)"}
}
