package llm

import (
	"fmt"
	"time"

	"github.com/toolmux/toolmux/internal/errkind"
)

// Kind classifies a failed request, for callers that react to it.
type Kind string

// Kinds of failure.
const (
	// KindRateLimited: 429; retried, after Retry-After when given.
	KindRateLimited Kind = "rate_limited"
	// KindServer: 5xx (and 408, 409 as OpenAI retries them); retried.
	KindServer Kind = "server_error"
	// KindNetwork: the request did not get an answer (connection refused
	// or reset, a stream cut short); retried.
	KindNetwork Kind = "network"
	// KindContextLength: the conversation is longer than the model takes.
	// Not retried: the agent elides older results and asks again.
	KindContextLength Kind = "context_length"
	// KindAuth: 401, 403 — the key is missing, wrong or not allowed.
	KindAuth Kind = "auth"
	// KindBadRequest: any other 4xx — the request is wrong (unknown model,
	// invalid tool schema).
	KindBadRequest Kind = "bad_request"
	// KindTimeout: the request timeout ran out (each attempt has its own).
	KindTimeout Kind = "timeout"
	// KindCancelled: the caller's context ended.
	KindCancelled Kind = "cancelled"
	// KindInvalidResponse: an answer that could not be understood.
	KindInvalidResponse Kind = "invalid_response"
)

// Error is a failed model request.
type Error struct {
	Kind Kind
	// Provider is "openai" or "anthropic" (or another implementation's
	// name); Status the HTTP status, 0 when there was no answer.
	Provider string
	Status   int
	Message  string
	// RetryAfter is the wait the server asked for, 0 when it did not.
	RetryAfter time.Duration
	// Attempts counts the requests made before giving up.
	Attempts int
	Err      error
}

// Error returns "llm: PROVIDER: KIND (STATUS): MESSAGE".
func (e *Error) Error() string {
	s := "llm: "
	if e.Provider != "" {
		s += e.Provider + ": "
	}
	s += string(e.Kind)
	if e.Status != 0 {
		s += fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Attempts > 1 {
		s += fmt.Sprintf(" (after %d attempts)", e.Attempts)
	}
	return s
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Retryable reports whether a request that failed this way may succeed
// if made again.
func (e *Error) Retryable() bool {
	switch e.Kind {
	case KindRateLimited, KindServer, KindNetwork:
		return true
	}
	return false
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
//     guess).
func KindOf(err error) Kind {
	return errkind.Of(err, func(e *Error) (Kind, bool) {
		if e == nil {
			return "", false
		}
		return e.Kind, true
	}, KindTimeout, KindCancelled)
}

// KindForStatus maps an HTTP status to a Kind; isContextLength says
// whether the body names a context-length problem (each API words it its
// own way, so the provider decides).
func KindForStatus(status int, isContextLength bool) Kind {
	switch {
	case isContextLength:
		return KindContextLength
	case status == 429:
		return KindRateLimited
	case status == 401 || status == 403:
		return KindAuth
	case status == 408 || status == 409 || status >= 500:
		return KindServer
	case status >= 400:
		return KindBadRequest
	}
	return KindInvalidResponse
}
