package policy

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolmux/toolmux/identity"
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

// DefaultApprovalTimeout bounds how long a call waits for a person's
// answer when the approver has no bound of its own configured: shorter
// than the 60 s most MCP clients give a request, so that the client reads
// the refusal (and how to allow the call) instead of timing out itself.
const DefaultApprovalTimeout = 45 * time.Second

// Request is what an approver is asked about.
type Request struct {
	// Tool is the definition of the tool to be called (annotations included).
	Tool tool.Tool
	// Call is the call, with its arguments.
	Call tool.Call
	// Decision is the policy's decision (Action Ask) and the rule behind it.
	Decision Decision
	// Caller is who made the call (the call's context's identity.From);
	// nil when no authentication is configured. Approvers show it, and
	// may judge by it who can answer.
	Caller *identity.Caller
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
//
// The hints of the approvers that could not ask ([NoApproverError]) are
// gathered into the one returned, so the refusal names every place a
// person could have answered. The result is an [Availability] when any
// of approvers is: it is available when one of them is (an approver that
// cannot tell counts as available).
func FirstOf(approvers ...Approver) Approver {
	return firstOf(slices.DeleteFunc(slices.Clone(approvers), func(a Approver) bool { return a == nil }))
}

type firstOf []Approver

func (f firstOf) Approve(ctx context.Context, req Request) (Answer, error) {
	var hints []string
	for _, a := range f {
		ans, err := a.Approve(ctx, req)
		if errors.Is(err, ErrNoApprover) {
			hints = appendHints(hints, err)
			continue
		}
		return ans, err
	}
	return 0, noApprover(hints)
}

func (f firstOf) Available(ctx context.Context, req Request) error {
	var hints []string
	for _, a := range f {
		av, ok := a.(Availability)
		if !ok {
			return nil
		}
		err := av.Available(ctx, req)
		if err == nil {
			return nil
		}
		hints = appendHints(hints, err)
	}
	return noApprover(hints)
}

func appendHints(hints []string, err error) []string {
	if ne, ok := errors.AsType[*NoApproverError](err); ok {
		hints = append(hints, ne.Hints...)
	}
	return hints
}

func noApprover(hints []string) error {
	if len(hints) > 0 {
		return &NoApproverError{Hints: hints}
	}
	return ErrNoApprover
}

// Availability is implemented by approvers that can tell, before a
// request is put to them, whether anyone could answer it now: an MCP
// client that declared elicitation, a web page that is open. Available
// returns nil, or an error matching [ErrNoApprover] (a
// [*NoApproverError] with hints). The gate then refuses such a call at
// once, without reporting it as awaiting approval.
type Availability interface {
	Available(ctx context.Context, req Request) error
}
