// Package errkind is the one implementation of the convention toolmux's
// error vocabularies follow (tool.Kind, llm.Kind, agent.ErrorKind): what
// their KindOf returns for any error.
//
//   - a nil error: "";
//   - an error whose chain holds the package's typed error: the kind of
//     the first one (errors.As), however deeply it is wrapped, and even
//     when it wraps a context error itself;
//   - a context error (context.DeadlineExceeded, context.Canceled, or an
//     error wrapping one) with no typed error in its chain: the
//     vocabulary's kind for a deadline or for a cancellation;
//   - any other error: "", the kind of nothing: KindOf reports how an
//     error was classified, it does not guess. (tool.AsError is what
//     classifies a foreign error, as execution_failed.)
package errkind

import (
	"context"
	"errors"
)

// Of returns the kind of err by the convention. kind reads the kind of a
// typed error E found in err's chain; it returns false for one that holds
// none (a nil pointer), and the search goes on as if there were none.
// timeout and cancelled are the vocabulary's kinds for the two context
// errors (the same kind when it has only one).
func Of[E error, K ~string](err error, kind func(E) (K, bool), timeout, cancelled K) K {
	if err == nil {
		return ""
	}
	if e, ok := errors.AsType[E](err); ok {
		if k, ok := kind(e); ok {
			return k
		}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return timeout
	case errors.Is(err, context.Canceled):
		return cancelled
	}
	return ""
}
