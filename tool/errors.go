package tool

import (
	"errors"
	"strings"

	"github.com/toolmux/toolmux/internal/errkind"
)

// Kind classifies a failed call. Callers branch on kinds with [KindOf] or
// errors.As, never on error text.
type Kind string

// The error kinds. The string values are stable: they appear in JSON output,
// task logs and messages to models.
const (
	// KindToolNotRegistered: no tool of that name; the error suggests the closest one.
	KindToolNotRegistered Kind = "tool_not_registered"
	// KindServerNotFound: no server of that name is configured.
	KindServerNotFound Kind = "server_not_found"
	// KindServerUnavailable: the server could not be reached, crashed, or its
	// circuit breaker is open. The only kind retried automatically.
	KindServerUnavailable Kind = "server_unavailable"
	// KindInvalidParams: the arguments do not fit the tool's schema.
	KindInvalidParams Kind = "invalid_tool_params"
	// KindPolicyViolation: an allow/deny list or policy rule refused the call.
	KindPolicyViolation Kind = "policy_violation"
	// KindApprovalDenied: the call needed approval and was refused: a
	// person declined it, or was asked and did not answer in time.
	KindApprovalDenied Kind = "approval_denied"
	// KindApprovalUnavailable: the call needed approval and nobody could
	// be asked (a non-interactive run, an MCP client that cannot show the
	// question, no web page open). No person refused it; it cannot run
	// until someone allows such calls (the message says how) or a person
	// is there to answer.
	KindApprovalUnavailable Kind = "approval_unavailable"
	// KindTimeout: the call ran past its time limit and was cancelled.
	KindTimeout Kind = "timeout"
	// KindCancelled: the caller cancelled the call.
	KindCancelled Kind = "cancelled"
	// KindToolError: the tool ran and reported an error itself (isError).
	KindToolError Kind = "tool_error"
	// KindExecutionFailed: the call failed for another reason (a protocol
	// error from the server, a panic in a tool, ...).
	KindExecutionFailed Kind = "execution_failed"
	// KindDuplicateQuery: the same query was already made in this task.
	KindDuplicateQuery Kind = "duplicate_query"
	// KindPathNotInWorkspace: a file tool was given a path outside its workspace.
	KindPathNotInWorkspace Kind = "path_not_in_workspace"
	// KindFileNotFound: a file tool was given a path that does not exist.
	KindFileNotFound Kind = "file_not_found"
	// KindPermissionDenied: the operating system refused access to a path.
	KindPermissionDenied Kind = "permission_denied"
	// KindOutputTruncated: informational; the output was cut for the model.
	KindOutputTruncated Kind = "output_truncated"
	// KindFallbackFailed: the call failed and so did every fallback.
	KindFallbackFailed Kind = "fallback_failed"
	// KindOutcomeUnknown: the call started in an earlier attempt of its run
	// (on a fleet worker that died) and never reported back; the tool is
	// not idempotent, so it was not run again. Its effect may or may not
	// have happened.
	KindOutcomeUnknown Kind = "outcome_unknown"
	// KindToolChanged: the server now presents a definition of the tool
	// (description, input schema, annotations) other than the one pinned
	// when it was first seen; the tool is held until a person accepts the
	// new definition. The message says which parts changed and how to
	// accept them, not what the new definition says (a model reads it);
	// the record's "pinning" note carries the difference.
	KindToolChanged Kind = "tool_changed"
	// KindAuthRequired: the server takes each caller's own credential
	// (its auth section) and this caller has not given it yet; the
	// message says what to do (the command that sets a secret, the page
	// to open), never what a credential is. Nothing was sent.
	KindAuthRequired Kind = "auth_required"
)

// ErrNotSent is in the chain of errors for calls that failed before the
// request reached the tool (the server could not be started or reached), so
// repeating them is safe even for tools that are not idempotent.
var ErrNotSent = errors.New("the request never reached the server")

// Error is the error every failed call carries.
type Error struct {
	// Kind says what went wrong, in a form programs can branch on.
	Kind Kind `json:"kind"`
	// Message says what went wrong in words a model or a person can act on.
	Message string `json:"message"`
	// Server and Tool name the call, when known.
	Server string `json:"server,omitempty"`
	Tool   string `json:"tool,omitempty"`
	// Suggestion is a "did you mean" name for unknown tools and servers.
	Suggestion string `json:"suggestion,omitempty"`
	// Detail is diagnostic text, such as the tail of a server's stderr.
	Detail string `json:"detail,omitempty"`
	// URL, for KindAuthRequired, is where the caller's user goes to give
	// the credential (an authorization server's page, the web page's
	// secrets). It is not kept in records or events: an authorization
	// URL holds a single-use state meant for that user alone. The
	// gateway sends it through the channel the client has (an
	// elicitation in URL mode, the page), else in the error's text.
	URL string `json:"-"`
	// Err is the underlying cause, if any.
	Err error `json:"-"`
}

// NewError returns an error of the given kind.
func NewError(kind Kind, message string) *Error {
	return &Error{Kind: kind, Message: message}
}

// Error implements the error interface.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(string(e.Kind))
	b.WriteString(": ")
	b.WriteString(e.Message)
	if e.Suggestion != "" {
		b.WriteString(" (did you mean ")
		b.WriteString(e.Suggestion)
		b.WriteString("?)")
	}
	if e.Detail != "" {
		b.WriteString("\n")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, &Error{Kind: k}) match any error of kind k.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Kind == e.Kind && t.Message == "" && t.Err == nil
}

// KindOf returns the kind of err, by the convention of every error
// vocabulary in toolmux (tool.KindOf, llm.KindOf, agent.KindOf):
//   - a nil error: "";
//   - an error whose chain holds an *Error: the Kind of the first one,
//     however deeply wrapped, even when it wraps a context error;
//   - a context error (or one wrapping it) with no *Error in its chain:
//     KindTimeout for context.DeadlineExceeded, KindCancelled for
//     context.Canceled;
//   - any other error: "" (KindOf reports a classification, it does not
//     guess; [AsError] classifies such an error as KindExecutionFailed).
func KindOf(err error) Kind {
	return errkind.Of(err, func(e *Error) (Kind, bool) {
		if e == nil {
			return "", false
		}
		return e.Kind, true
	}, KindTimeout, KindCancelled)
}

// AsError returns err as an *Error, wrapping errors of other types with the
// kind [KindOf] gives them, KindExecutionFailed when it gives none.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var te *Error
	if errors.As(err, &te) && te != nil {
		return te
	}
	kind := KindOf(err)
	if kind == "" {
		kind = KindExecutionFailed
	}
	return &Error{Kind: kind, Message: err.Error(), Err: err}
}
