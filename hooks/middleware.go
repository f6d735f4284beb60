package hooks

import (
	"context"
	"fmt"

	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/tool"
)

// layer is the name of the hooks' notes on a record.
const layer = "hooks"

// Middleware returns the pipeline middleware of the hooks: the notes of
// the PreToolUse hooks that admitted the call (through the context Gate
// returned) and the PostToolUse hooks and guardrails, run on a call that
// succeeded. Their additionalContext becomes instructions the model sees
// after the result; a block replaces the result by an error of kind
// policy_violation naming the hook and its reason. Innermost of the
// pipeline's own (toolmux.Open adds it before the embedding program's
// middlewares), so that what is truncated, recorded and shown is what the
// hooks left.
func (h *Hooks) Middleware() pipeline.Middleware {
	return func(next pipeline.Handler) pipeline.Handler {
		return pipeline.HandlerFunc(func(ctx context.Context, call tool.Call) *tool.Record {
			rec := next.Call(ctx, call)
			a := admittedFrom(ctx)
			if a != nil {
				for _, n := range a.notes {
					rec.Note(layer, n, nil)
				}
				rec.Instructions = append(rec.Instructions, a.context...)
			}
			if len(h.post) == 0 || rec.Error != nil || rec.Result == nil {
				// Claude Code runs PostToolUse after a tool that
				// succeeded only.
				return rec
			}
			mode := ""
			if a != nil {
				mode = a.mode
			}
			v := h.run(ctx, PostToolUse, h.post, call, rec.Result, mode)
			for _, n := range v.notes {
				rec.Note(layer, n, nil)
			}
			if v.decision == "block" {
				reason := v.reason
				if reason == "" {
					reason = "no reason given"
				}
				rec.Result = nil
				rec.Error = refusal(call, v, fmt.Sprintf("%s blocked the result: %s", v.by, reason))
				return rec
			}
			if v.output != nil {
				// A hook's result is the tool's, as far as what follows
				// can tell: its isError says whether the call failed.
				rec.Result = v.output
				if v.output.IsError {
					rec.Error = &tool.Error{Kind: tool.KindToolError, Server: call.Server, Tool: call.Tool,
						Message: fmt.Sprintf("%s replaced the result by an error: %s", v.outputBy, v.output.Text())}
				}
			}
			rec.Instructions = append(rec.Instructions, v.context...)
			return rec
		})
	}
}
