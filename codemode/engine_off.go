//go:build !toolmux_codemode

package codemode

import "context"

// Built is whether this build runs programs: a build without the
// toolmux_codemode tag leaves the JavaScript engine out, and with it
// what it costs the binary (docs/codemode.md, "The engine and the
// binary").
const Built = false

// Run refuses every program: this build has no JavaScript engine.
func (r *Runner) Run(context.Context, string, []string) (*Result, error) {
	return &Result{}, &Error{Kind: KindUnavailable, Message: "this build of toolmux has no JavaScript engine (built without the toolmux_codemode tag)"}
}
