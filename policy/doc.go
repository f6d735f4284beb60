// Package policy decides whether a tool call may run: allowed, denied, or
// only after a person approves it.
//
// An [Engine] holds an approval [Mode] and the user's [Rule]s, followed by
// the mode's default rules. [Engine.Decide] returns the [Decision] of the
// first rule, by priority, that matches the call; it is cheap enough to run
// for every call. [Engine.Requires] answers the same question for a tool
// without arguments, for listings.
//
// A [Gate] is what a scheduler calls, once per call: it adds the session's
// memory of "always" answers to the engine's decisions, asks an [Approver]
// (a [Terminal], a web UI, a programmatic [ApproverFunc]) when a decision
// is [Ask], and turns refusals into *tool.Error values of kind
// policy_violation, approval_denied (a person said no, or did not answer
// in time) or approval_unavailable (nobody could be asked). Without an
// approver, every Ask is refused at once with a message that says how to
// allow the call: a non-interactive run never hangs waiting for an answer.
//
// Behind authentication a call has a caller (identity.Caller, in the
// call's context): rules may name callers and groups, groups may have
// approval modes of their own ([Engine.WithGroupModes]; the most cautious
// of a caller's), and the gate decides for the caller its call's context
// carries, remembering "always" answers per caller. [Visibility] says
// which tools each caller may see at all (the `groups:` section). A call
// without a caller is decided as before any of this.
//
// The rules come from the `policy:` section of toolmux.yaml
// ([FromConfig]); "always" answers can be saved back to that file
// ([SaveRule]). docs/policy.md documents the semantics, the modes' default
// rules and the file format.
package policy
