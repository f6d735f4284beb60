package hooks

import (
	"errors"
	"fmt"
)

// Kind says how a hook or a guardrail failed.
type Kind string

const (
	// KindStart: the command could not be started.
	KindStart Kind = "start_failed"
	// KindExit: the command ended with an exit code other than 0 and 2,
	// or was killed by a signal (Claude Code's non-blocking error).
	KindExit Kind = "exit"
	// KindTimeout: the command or the request outlived its timeout (the
	// command's process group killed).
	KindTimeout Kind = "timeout"
	// KindOutputTooLarge: more than the bound was written or answered.
	KindOutputTooLarge Kind = "output_too_large"
	// KindBadOutput: the answer is not the JSON a hook answers.
	KindBadOutput Kind = "bad_output"
	// KindUnavailable: a guardrail could not be reached, or answered with
	// a status other than 2xx.
	KindUnavailable Kind = "unavailable"
)

// Error is a hook's or a guardrail's failure: which one, at which event,
// what went wrong. It never holds a guardrail's headers.
type Error struct {
	Kind  Kind
	Event string
	// Hook names the hook: "hook COMMAND", or "guardrail NAME".
	Hook    string
	Message string
	Err     error
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s (%s): %s", e.Hook, e.Event, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the kind of the first *Error in err's chain, "" without
// one.
func KindOf(err error) Kind {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Kind
	}
	return ""
}
