package hooks

import (
	"context"
	"fmt"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

// Policy is what Gate needs of the policy gate (*policy.Gate): its
// decision for a call, and its way of admitting a call on a decision.
type Policy interface {
	Engine() *policy.Engine
	DecideFor(c *identity.Caller, t tool.Tool, call tool.Call) policy.Decision
	AdmitDecision(ctx context.Context, t tool.Tool, call tool.Call, d policy.Decision, asking func(message string)) error
}

// Gate is the scheduler's gate with the PreToolUse hooks before the
// policy: a schedule.ArgumentGate.
type Gate struct {
	h      *Hooks
	policy Policy
}

// Gate returns p with h's PreToolUse hooks and guardrails in front.
func (h *Hooks) Gate(p Policy) *Gate { return &Gate{h: h, policy: p} }

// Admit is AdmitArguments for a scheduler that cannot take rewritten
// arguments: they are refused rather than dropped.
func (g *Gate) Admit(ctx context.Context, t tool.Tool, call tool.Call, asking func(message string)) error {
	_, args, err := g.AdmitArguments(ctx, t, call, asking)
	if err == nil && args != nil {
		return &tool.Error{Kind: tool.KindPolicyViolation, Server: call.Server, Tool: call.Tool,
			Message: "a PreToolUse hook rewrote the arguments, which this caller cannot apply"}
	}
	return err
}

// AdmitArguments runs the PreToolUse hooks, then decides the call (with
// the arguments they rewrote) as the policy does, changed by the hooks:
// a hook's deny refuses the call (policy_violation naming the hook and its
// reason); its ask puts the call to the approver, with its reason as the
// question, even where the policy allows it; its allow admits a call the policy would ask about (a policy
// deny still refuses). The context returned carries the hooks' notes for
// the record (Middleware).
func (g *Gate) AdmitArguments(ctx context.Context, t tool.Tool, call tool.Call, asking func(message string)) (context.Context, map[string]any, error) {
	var v verdict
	mode := permissionMode(g.policy.Engine().ModeFor(identity.From(ctx)))
	if len(g.h.pre) > 0 {
		v = g.h.run(ctx, PreToolUse, g.h.pre, call, nil, mode)
	}
	if v.decision == "deny" {
		reason := v.reason
		if reason == "" {
			reason = "no reason given"
		}
		return ctx, nil, refusal(call, v, fmt.Sprintf("%s denied the call: %s", v.by, reason))
	}
	if v.input != nil {
		call.Arguments = v.input
	}
	d := g.policy.DecideFor(identity.From(ctx), t, call)
	switch {
	case v.decision == "allow" && d.Action == policy.Ask:
		d = policy.Decision{Action: policy.Allow, Rule: v.by, Message: v.reason}
	case v.decision == "ask" && d.Action != policy.Deny:
		// Where the policy asks too, the hook's question is put, and
		// put again: a remembered "always" does not answer for the hook.
		msg := v.reason
		if msg == "" {
			msg = fmt.Sprintf("%s asks for approval of %s", v.by, exposed(call))
		}
		// Once: a hook asks about this call, with these arguments; an
		// "always" answer to another does not cover it.
		d = policy.Decision{Action: policy.Ask, Rule: v.by, Message: msg, Once: true}
	}
	if err := g.policy.AdmitDecision(ctx, t, call, d, asking); err != nil {
		return ctx, nil, err
	}
	ctx = context.WithValue(ctx, admittedKey{}, &admitted{notes: v.notes, context: v.context, mode: mode})
	return ctx, v.input, nil
}

// admitted is what the PreToolUse hooks that admitted a call left for its
// record (notes, and additionalContext for the model) and for its
// PostToolUse hooks (the permission mode).
type admitted struct {
	notes, context []string
	mode           string
}

// permissionMode is Claude Code's name of an approval mode, the input's
// permission_mode.
func permissionMode(m policy.Mode) string {
	switch m {
	case policy.ModeAutoEdit:
		return "acceptEdits"
	case policy.ModeYolo:
		return "bypassPermissions"
	}
	return string(m) // default, plan: the same words
}

type admittedKey struct{}

// admittedFrom returns what the gate left for the record, nil for nothing.
func admittedFrom(ctx context.Context) *admitted {
	a, _ := ctx.Value(admittedKey{}).(*admitted)
	return a
}

// refusal is the policy_violation error of a call or result the hooks
// refused, wrapping the hook's failure when that is what refused it (a
// closed guardrail that is down, a hook failing with on_error block).
func refusal(call tool.Call, v verdict, msg string) *tool.Error {
	e := &tool.Error{Kind: tool.KindPolicyViolation, Server: call.Server, Tool: call.Tool, Message: msg}
	if v.err != nil {
		e.Err, e.Message = v.err, v.err.Error()
	}
	return e
}
