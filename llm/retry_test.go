package llm_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/toolmux/toolmux/llm"
)

var fast = llm.RetryPolicy{MaxAttempts: 4, InitialBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond}

func TestRetryRetriesOnlyRetryable(t *testing.T) {
	for _, tc := range []struct {
		kind  llm.Kind
		calls int
	}{
		{llm.KindRateLimited, 4}, {llm.KindServer, 4}, {llm.KindNetwork, 4},
		{llm.KindContextLength, 1}, {llm.KindAuth, 1}, {llm.KindBadRequest, 1},
		{llm.KindTimeout, 1}, {llm.KindCancelled, 1}, {llm.KindInvalidResponse, 1},
	} {
		calls := 0
		err := llm.Retry(context.Background(), fast, func(_ context.Context, n int) error {
			calls++
			if n != calls {
				t.Errorf("attempt numbered %d, is %d", n, calls)
			}
			return &llm.Error{Kind: tc.kind}
		})
		if calls != tc.calls || llm.KindOf(err) != tc.kind {
			t.Errorf("%s: %d calls, error %v", tc.kind, calls, err)
		}
		if e, ok := errors.AsType[*llm.Error](err); !ok || e.Attempts != tc.calls {
			t.Errorf("%s: Attempts %+v", tc.kind, e)
		}
	}
	// An untyped error is not retried either.
	calls := 0
	plain := errors.New("boom")
	if err := llm.Retry(context.Background(), fast, func(context.Context, int) error { calls++; return plain }); err != plain || calls != 1 {
		t.Errorf("plain error: %v after %d calls", err, calls)
	}
}

func TestRetryHonoursRetryAfter(t *testing.T) {
	var at []time.Time
	err := llm.Retry(context.Background(), fast, func(_ context.Context, n int) error {
		at = append(at, time.Now())
		if n == 1 {
			return &llm.Error{Kind: llm.KindRateLimited, RetryAfter: 50 * time.Millisecond}
		}
		return nil
	})
	if err != nil || len(at) != 2 {
		t.Fatalf("%v after %d attempts", err, len(at))
	}
	if gap := at[1].Sub(at[0]); gap < 50*time.Millisecond {
		t.Errorf("retried after %s, the server asked for 50ms", gap)
	}
	// A wait longer than the policy allows fails at once.
	p := fast
	p.MaxRetryAfter = time.Second
	calls := 0
	err = llm.Retry(context.Background(), p, func(context.Context, int) error {
		calls++
		return &llm.Error{Kind: llm.KindRateLimited, RetryAfter: time.Hour}
	})
	if calls != 1 || llm.KindOf(err) != llm.KindRateLimited {
		t.Errorf("an hour's Retry-After: %d calls, %v", calls, err)
	}
}

func TestRetryStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p := llm.RetryPolicy{MaxAttempts: 10, InitialBackoff: time.Hour, MaxBackoff: time.Hour}
	done := make(chan error, 1)
	go func() {
		done <- llm.Retry(ctx, p, func(context.Context, int) error { return &llm.Error{Kind: llm.KindServer} })
	}()
	cancel()
	select {
	case err := <-done:
		if llm.KindOf(err) != llm.KindServer {
			t.Errorf("got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Retry did not return when its context ended")
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		h    http.Header
		want time.Duration
	}{
		{http.Header{}, 0},
		{http.Header{"Retry-After": {"3"}}, 3 * time.Second},
		{http.Header{"Retry-After": {"0.5"}}, 500 * time.Millisecond},
		{http.Header{"Retry-After": {"-1"}}, 0},
		{http.Header{"Retry-After": {"soon"}}, 0},
		{http.Header{"Retry-After": {"Sun, 22 Nov 2026 10:00:30 GMT"}}, 30 * time.Second},
		{http.Header{"Retry-After": {"Sun, 22 Nov 2026 09:00:00 GMT"}}, 0},
		{http.Header{"Retry-After": {"3"}, "Retry-After-Ms": {"250"}}, 250 * time.Millisecond},
	} {
		if got := llm.ParseRetryAfter(tc.h, now); got != tc.want {
			t.Errorf("%v: %s, want %s", tc.h, got, tc.want)
		}
	}
}

func TestErrorText(t *testing.T) {
	e := &llm.Error{Kind: llm.KindContextLength, Provider: "openai", Status: 400, Message: "maximum context length is 8192 tokens", Attempts: 1}
	if got := e.Error(); got != "llm: openai: context_length (HTTP 400): maximum context length is 8192 tokens" {
		t.Errorf("%q", got)
	}
	for status, want := range map[int]llm.Kind{429: llm.KindRateLimited, 401: llm.KindAuth, 403: llm.KindAuth,
		500: llm.KindServer, 529: llm.KindServer, 408: llm.KindServer, 404: llm.KindBadRequest, 200: llm.KindInvalidResponse} {
		if got := llm.KindForStatus(status, false); got != want {
			t.Errorf("status %d: %s, want %s", status, got, want)
		}
	}
	if llm.KindForStatus(400, true) != llm.KindContextLength {
		t.Error("context length not recognised")
	}
}
