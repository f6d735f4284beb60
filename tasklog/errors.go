package tasklog

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNotFound is in the chain of every [NotFoundError]: test with
// errors.Is(err, tasklog.ErrNotFound).
var ErrNotFound = errors.New("not found")

// ErrClosed is returned by every method called after [Log.Close].
var ErrClosed = errors.New("tasklog: the log is closed")

// NotFoundError says that a task is not in the log.
type NotFoundError struct {
	// Task is the id that was asked for.
	Task string
}

// Error implements the error interface.
func (e *NotFoundError) Error() string { return fmt.Sprintf("tasklog: task %q not found", e.Task) }

// Is makes errors.Is(err, ErrNotFound) true.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// AmbiguousError says that a prefix given to [Log.ResolveID] is the start
// of more than one task's id. errors.Is(err, ErrNotFound) is false: the
// tasks exist, the prefix is too short to choose.
type AmbiguousError struct {
	// Prefix is what was asked for.
	Prefix string
	// Candidates are ids it starts, newest task first, at most 10.
	Candidates []string
	// More says that further tasks match too.
	More bool
}

// Error implements the error interface.
func (e *AmbiguousError) Error() string {
	more := ""
	if e.More {
		more = ", …"
	}
	return fmt.Sprintf("tasklog: %q is the start of several task ids: %s%s", e.Prefix, strings.Join(e.Candidates, ", "), more)
}

// ValidationError says that an argument cannot be stored as given: an
// unknown status or level, or text that should be JSON and is not.
type ValidationError struct {
	// Field names the argument ("status", "level", "content", ...).
	Field string
	// Value is the offending value, cut short when long.
	Value string
	// Reason says what is expected.
	Reason string
}

// Error implements the error interface.
func (e *ValidationError) Error() string {
	return fmt.Sprintf("tasklog: invalid %s %q: %s", e.Field, e.Value, e.Reason)
}

// VersionError says that the database was written by a newer toolmux, with
// a schema this binary does not know. Nothing was changed in the file.
type VersionError struct {
	// Path is the database file.
	Path string
	// Found is the schema version in the file; Supported is the newest this
	// binary knows.
	Found, Supported int
}

// Error implements the error interface.
func (e *VersionError) Error() string {
	return fmt.Sprintf("tasklog: %s has schema version %d, newer than the %d this toolmux knows; upgrade toolmux to read it",
		e.Path, e.Found, e.Supported)
}

// DuplicateEventError says that an event id is already in the log with
// different content: two stream hubs handed out the same id. Appending the
// very same event twice is not an error (replays are idempotent).
type DuplicateEventError struct {
	// ID is the event id both events carry.
	ID int64
}

// Error implements the error interface.
func (e *DuplicateEventError) Error() string {
	return fmt.Sprintf("tasklog: event id %d is already taken by a different event", e.ID)
}

// short cuts s for error messages.
func short(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}
