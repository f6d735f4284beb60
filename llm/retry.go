package llm

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// RetryPolicy is how a provider retries failed requests.
type RetryPolicy struct {
	// MaxAttempts counts every request, the first included (default 4).
	MaxAttempts int
	// InitialBackoff and MaxBackoff bound the exponential backoff between
	// attempts (defaults 1s and 30s), with jitter; a Retry-After the
	// server sent replaces it, up to MaxRetryAfter.
	InitialBackoff, MaxBackoff time.Duration
	// MaxRetryAfter caps a server's Retry-After (default 2 minutes): a
	// longer wait fails at once with the error, RetryAfter telling how
	// long the server asked for.
	MaxRetryAfter time.Duration
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 4
	}
	if p.InitialBackoff <= 0 {
		p.InitialBackoff = time.Second
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = 30 * time.Second
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = 2 * time.Minute
	}
	return p
}

// Retry calls attempt until it succeeds, fails with an error that is not
// retryable (see [Error.Retryable]), the attempts run out or ctx ends. It
// waits between attempts as the policy says, or as the *Error's RetryAfter
// asks. attempt gets the attempt's number, from 1. The error returned is
// the last attempt's, with Attempts set when it is an *Error.
func Retry(ctx context.Context, p RetryPolicy, attempt func(ctx context.Context, n int) error) error {
	p = p.withDefaults()
	backoff := p.InitialBackoff
	for n := 1; ; n++ {
		err := attempt(ctx, n)
		if err == nil {
			return nil
		}
		e, typed := errors.AsType[*Error](err)
		if typed {
			e.Attempts = n
		}
		if !typed || !e.Retryable() || n >= p.MaxAttempts || ctx.Err() != nil {
			return err
		}
		wait := backoff/2 + rand.N(backoff/2+1) // jitter: spread retries of many clients
		if e.RetryAfter > 0 {
			if e.RetryAfter > p.MaxRetryAfter {
				return err
			}
			wait = e.RetryAfter
		}
		backoff = min(backoff*2, p.MaxBackoff)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

// ParseRetryAfter reads a Retry-After header: seconds, or an HTTP date
// (relative to now). It returns 0 when there is none or it cannot be read.
// OpenAI-compatible servers may also send retry-after-ms, which wins.
func ParseRetryAfter(h http.Header, now time.Time) time.Duration {
	if ms := h.Get("Retry-After-Ms"); ms != "" {
		if v, err := strconv.ParseFloat(ms, 64); err == nil && v > 0 {
			return time.Duration(v * float64(time.Millisecond))
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// retryResponse makes a provider's request with attempt under Retry, and
// fills in the Response's Attempts and Duration. When the caller's context
// ends while Retry waits between attempts, the error says so (kind
// cancelled) rather than report the failure it meant to retry.
func retryResponse(ctx context.Context, provider string, p RetryPolicy,
	attempt func(ctx context.Context, n int) (*Response, error)) (*Response, error) {
	start := time.Now()
	var resp *Response
	attempts := 0
	err := Retry(ctx, p, func(ctx context.Context, n int) error {
		attempts = n
		r, err := attempt(ctx, n)
		if err != nil {
			return err
		}
		resp = r
		return nil
	})
	if err != nil {
		// A bare context error is wrapped too: the caller gets an *Error.
		if e, ok := errors.AsType[*Error](err); ctx.Err() != nil && (!ok || e.Kind != KindCancelled) {
			return nil, &Error{Kind: KindCancelled, Provider: provider, Attempts: attempts,
				Message: "cancelled while waiting to retry after: " + err.Error(), Err: context.Cause(ctx)}
		}
		return nil, err
	}
	resp.Attempts = attempts
	resp.Duration = time.Since(start)
	return resp, nil
}
