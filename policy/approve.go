package policy

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/toolmux/toolmux/tool"
)

// Answer is a person's answer to an approval request.
//
// The zero value is not an answer; a Gate treats it, like any value it
// does not know, as a refusal, so a forgotten assignment never approves.
type Answer int

// The answers.
const (
	// ProceedOnce approves this call only.
	ProceedOnce Answer = iota + 1
	// AlwaysTool approves this call and, for the rest of the session, every
	// call to the same tool that would otherwise ask.
	AlwaysTool
	// AlwaysServer approves this call and, for the rest of the session,
	// every call to any tool of the same server that would otherwise ask.
	AlwaysServer
	// Decline refuses the call. (It is not called Deny, which is the
	// Action.)
	Decline
)

// String returns "once", "always_tool", "always_server" or "deny", the
// words used in logs and events.
func (a Answer) String() string {
	switch a {
	case ProceedOnce:
		return "once"
	case AlwaysTool:
		return "always_tool"
	case AlwaysServer:
		return "always_server"
	case Decline:
		return "deny"
	}
	return "answer(" + strconv.Itoa(int(a)) + ")"
}

// ParseAnswer reads a typed answer: "y", "yes" or "1" (once), "t" or "2"
// (always this tool), "s" or "3" (always this server), "n", "no" or "4"
// (deny), ignoring case and surrounding space. Anything else, the empty
// line included, is not an answer: an approval must never be given by
// just pressing Enter.
func ParseAnswer(s string) (Answer, bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	switch s {
	case "y", "yes", "1":
		return ProceedOnce, true
	case "t", "2":
		return AlwaysTool, true
	case "s", "3":
		return AlwaysServer, true
	case "n", "no", "4":
		return Decline, true
	}
	return 0, false
}

// Request is what an approver is asked about.
type Request struct {
	// Tool is the definition of the tool to be called (annotations included).
	Tool tool.Tool
	// Call is the call, with its arguments.
	Call tool.Call
	// Decision is the policy's decision (Action Ask) and the rule behind it.
	Decision Decision
}

// Approver asks whoever is attached (a person at a terminal, a web UI, an
// MCP client) whether a call may run. Approve must return when ctx is done,
// with ctx.Err(); any error refuses the call.
type Approver interface {
	Approve(ctx context.Context, req Request) (Answer, error)
}

// ApproverFunc is a function used as an Approver, for programs that decide
// by themselves.
type ApproverFunc func(ctx context.Context, req Request) (Answer, error)

// Approve calls f.
func (f ApproverFunc) Approve(ctx context.Context, req Request) (Answer, error) {
	return f(ctx, req)
}

// AnswerNamed returns the answer whose String is name ("once",
// "always_tool", "always_server", "deny"): the words APIs and forms use.
func AnswerNamed(name string) (Answer, bool) {
	for _, a := range []Answer{ProceedOnce, AlwaysTool, AlwaysServer, Decline} {
		if a.String() == name {
			return a, true
		}
	}
	return 0, false
}

// FirstOf returns an approver that asks each of approvers in turn until
// one can ask: an approver that returns ErrNoApprover passes the request
// on to the next (the gateway asks the MCP client by elicitation, and
// when the client cannot show a question, the web UI). If none can ask,
// the result is ErrNoApprover.
func FirstOf(approvers ...Approver) Approver {
	return ApproverFunc(func(ctx context.Context, req Request) (Answer, error) {
		for _, a := range approvers {
			if a == nil {
				continue
			}
			ans, err := a.Approve(ctx, req)
			if errors.Is(err, ErrNoApprover) {
				continue
			}
			return ans, err
		}
		return 0, ErrNoApprover
	})
}
