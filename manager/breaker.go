package manager

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolmux/toolmux/tool"
)

// breakerState is where a circuit breaker stands.
type breakerState int32

const (
	breakerClosed breakerState = iota
	breakerHalfOpen
	breakerOpen
)

func (s breakerState) String() string {
	switch s {
	case breakerClosed:
		return "closed"
	case breakerHalfOpen:
		return "half-open"
	}
	return "open"
}

// The refusals of a breaker.
var (
	errBreakerIsOpen = errors.New("circuit breaker is open")
	errBreakerTrial  = errors.New("circuit breaker is half-open and its trial call is under way")
)

// breaker is one server's circuit breaker: it opens after threshold
// consecutive failures (a server that cannot be reached:
// server_unavailable; a cancelled call counts for nothing), refuses calls
// for cooldown, then lets one trial call through (half-open), which closes
// it again or opens it for another cooldown. A result that comes back
// after the breaker changed state is not counted.
//
// A healthy server costs two atomic loads per call: while the breaker is
// closed and no failure is counted, neither letting a call through nor
// its success takes the lock or reads the clock.
type breaker struct {
	threshold int
	cooldown  time.Duration
	changed   func(from, to breakerState) // called with mu held
	now       func() time.Time            // the clock (tests set their own)

	// clean: closed with no failure counted. Cleared before gen moves on,
	// so that a caller that sees the new gen sees it cleared.
	clean atomic.Bool
	gen   atomic.Uint64 // changes with every change of state

	mu       sync.Mutex
	state    breakerState
	failures int       // consecutive, while closed
	trials   int       // calls let through while half-open
	until    time.Time // when an open breaker lets a trial through
}

func newBreaker(threshold int, cooldown time.Duration, changed func(from, to breakerState)) *breaker {
	b := &breaker{threshold: threshold, cooldown: cooldown, changed: changed, now: time.Now}
	b.clean.Store(true)
	return b
}

// allow lets a call through, returning the ticket to hand to done, or
// refuses it (errBreakerIsOpen, errBreakerTrial).
func (b *breaker) allow() (uint64, error) {
	gen := b.gen.Load()
	if b.clean.Load() {
		return gen, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(b.now())
	switch b.state {
	case breakerOpen:
		return 0, errBreakerIsOpen
	case breakerHalfOpen:
		if b.trials >= 1 {
			return 0, errBreakerTrial
		}
		b.trials++
	}
	return b.gen.Load(), nil
}

// done counts the result of a call allow let through with ticket.
func (b *breaker) done(ticket uint64, err error) {
	kind := tool.KindOf(err)
	if err == nil || kind != tool.KindServerUnavailable && kind != tool.KindCancelled {
		if b.clean.Load() {
			return // a success of a healthy server changes nothing
		}
		kind = "" // a success
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.advance(now)
	if ticket != b.gen.Load() {
		return // from before the last change of state
	}
	switch kind {
	case tool.KindCancelled:
		// Neither a success nor a failure: a trial cancelled makes room
		// for another.
		if b.state == breakerHalfOpen {
			b.trials--
		}
	case tool.KindServerUnavailable:
		switch b.state {
		case breakerClosed:
			b.failures++
			b.clean.Store(false)
			if b.failures >= b.threshold {
				b.set(breakerOpen, now)
			}
		case breakerHalfOpen:
			b.set(breakerOpen, now)
		}
	default:
		switch b.state {
		case breakerClosed:
			b.failures = 0
			b.clean.Store(true)
		case breakerHalfOpen:
			b.set(breakerClosed, now)
		}
	}
}

// current returns the breaker's state.
func (b *breaker) current() breakerState {
	if b.clean.Load() {
		return breakerClosed
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(b.now())
	return b.state
}

// advance moves an open breaker whose cooldown is over to half-open; b.mu
// is held.
func (b *breaker) advance(now time.Time) {
	if b.state == breakerOpen && now.After(b.until) {
		b.set(breakerHalfOpen, now)
	}
}

// set moves the breaker to state, starting a new generation; b.mu is held.
func (b *breaker) set(state breakerState, now time.Time) {
	if b.state == state {
		return
	}
	from := b.state
	b.clean.Store(false)
	b.state = state
	b.failures, b.trials = 0, 0
	b.gen.Add(1)
	if state == breakerOpen {
		b.until = now.Add(b.cooldown)
	}
	if state == breakerClosed {
		b.clean.Store(true)
	}
	if b.changed != nil {
		b.changed(from, state)
	}
}
