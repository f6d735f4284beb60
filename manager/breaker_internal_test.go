package manager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolmux/toolmux/tool"
)

// breakerClock is a clock the test moves.
type breakerClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *breakerClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *breakerClock) pass(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func testBreaker(threshold int, cooldown time.Duration) (*breaker, *breakerClock, *[]string) {
	clock := &breakerClock{t: time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)}
	var changes []string
	b := newBreaker(threshold, cooldown, func(from, to breakerState) { changes = append(changes, from.String()+"→"+to.String()) })
	b.now = clock.now
	return b, clock, &changes
}

var (
	errDown      = &tool.Error{Kind: tool.KindServerUnavailable, Message: "down"}
	errCancelled = &tool.Error{Kind: tool.KindCancelled, Message: "cancelled"}
	errAnswered  = &tool.Error{Kind: tool.KindToolError, Message: "the tool said no"}
	errSlow      = &tool.Error{Kind: tool.KindTimeout, Message: "slow"}
)

// call lets one call through b with result err; it fails the test when
// the breaker refuses.
func call(t *testing.T, b *breaker, err error) {
	t.Helper()
	ticket, refused := b.allow()
	if refused != nil {
		t.Fatalf("refused: %v", refused)
	}
	b.done(ticket, err)
}

// Only failures to reach the server count, consecutively: answers,
// timeouts and cancellations never open the breaker, and a success starts
// the count again.
func TestBreakerOpensOnConsecutiveFailures(t *testing.T) {
	b, _, changes := testBreaker(3, time.Minute)
	for _, err := range []error{nil, errAnswered, errSlow, errCancelled, errDown, errDown, nil, errDown, errDown, errCancelled, errAnswered} {
		call(t, b, err)
	}
	if st := b.current(); st != breakerClosed || len(*changes) != 0 {
		t.Fatalf("state %s, changes %v: opened without 3 failures in a row", st, *changes)
	}
	call(t, b, errDown)
	call(t, b, errDown)
	call(t, b, errDown)
	if st := b.current(); st != breakerOpen {
		t.Fatalf("state %s after 3 failures in a row", st)
	}
	if _, err := b.allow(); !errors.Is(err, errBreakerIsOpen) {
		t.Fatalf("an open breaker let a call through: %v", err)
	}
	if fmt.Sprint(*changes) != "[closed→open]" {
		t.Errorf("changes %v", *changes)
	}
}

// After the cooldown one trial goes through at a time: its success closes
// the breaker, its failure opens it for another cooldown, its
// cancellation makes room for another trial.
func TestBreakerTrialAfterCooldown(t *testing.T) {
	b, clock, changes := testBreaker(1, time.Minute)
	call(t, b, errDown)
	clock.pass(59 * time.Second)
	if _, err := b.allow(); !errors.Is(err, errBreakerIsOpen) {
		t.Fatalf("before the cooldown: %v", err)
	}
	clock.pass(2 * time.Second)
	if st := b.current(); st != breakerHalfOpen {
		t.Fatalf("state %s after the cooldown", st)
	}
	trial, err := b.allow()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.allow(); !errors.Is(err, errBreakerTrial) {
		t.Fatalf("a second call during the trial: %v", err)
	}
	b.done(trial, errCancelled)
	trial, err = b.allow()
	if err != nil {
		t.Fatalf("no room for a trial after a cancelled one: %v", err)
	}
	b.done(trial, errDown)
	if st := b.current(); st != breakerOpen {
		t.Fatalf("state %s after a failed trial", st)
	}
	clock.pass(61 * time.Second)
	call(t, b, nil)
	if st := b.current(); st != breakerClosed || !b.clean.Load() {
		t.Fatalf("state %s (clean %v) after a successful trial", st, b.clean.Load())
	}
	if got := fmt.Sprint(*changes); got != "[closed→open open→half-open half-open→open open→half-open half-open→closed]" {
		t.Errorf("changes %s", got)
	}
}

// A result that comes back after the breaker changed state is not
// counted: a slow success from before it opened does not close it, a
// slow failure from before it closed does not count against it.
func TestBreakerIgnoresResultsFromAnEarlierState(t *testing.T) {
	b, clock, _ := testBreaker(1, time.Minute)
	slow, _ := b.allow()
	call(t, b, errDown) // opens
	b.done(slow, nil)
	if st := b.current(); st != breakerOpen {
		t.Fatalf("a success from before the breaker opened changed it: %s", st)
	}
	clock.pass(2 * time.Minute)
	trial, _ := b.allow()
	b.done(trial, nil) // closes
	slowFailure := slow
	b.done(slowFailure, errDown)
	if st := b.current(); st != breakerClosed || !b.clean.Load() {
		t.Fatalf("a failure from before the breaker closed counted: %s", st)
	}
}

// Many calls at once (run with -race): the breaker's fast path and its
// counted path agree, and a run of failures opens it exactly once.
func TestBreakerConcurrentCalls(t *testing.T) {
	b, _, changes := testBreaker(50, time.Hour)
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 16 {
		wg.Go(func() {
			for j := 0; j < 200 && ctx.Err() == nil; j++ {
				ticket, err := b.allow()
				if err != nil {
					return
				}
				if i%2 == 0 {
					b.done(ticket, nil)
				} else {
					b.done(ticket, errDown)
				}
			}
		})
	}
	wg.Wait()
	for b.current() != breakerOpen {
		call(t, b, errDown)
	}
	if got := fmt.Sprint(*changes); got != "[closed→open]" {
		t.Errorf("changes %s", got)
	}
}
