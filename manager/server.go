package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/toolmux/toolmux/internal/toolglob"
	"github.com/toolmux/toolmux/tool"
)

// server is one source with its policy and what the manager knows of it.
type server struct {
	name    string
	src     Source
	opts    ServerOptions
	filter  filter
	retryOK []toolglob.Pattern
	breaker *breaker // nil when disabled
	log     *slog.Logger

	mu       sync.Mutex
	tools    map[string]tool.Tool // everything the source listed, allowed or not
	listed   bool                 // tools holds a successful listing
	stale    bool                 // the source said its tools changed
	listErr  *tool.Error          // the last listing failed
	listedAt time.Time            // when the last listing attempt ended
	listing  chan struct{}        // closed when the listing in progress ends
	gen      uint64               // counts successful listings

	// Recovery (Manager.Recover).
	kick    func()    // starts the recovery of this server
	healing bool      // its recovery goroutine runs
	waiting bool      // it waits for its next attempt, until retryAt
	retryAt time.Time // when the next attempt starts
	lost    string    // why its session was lost, until recovery brings it back

	// Reload (Manager.Reconfigure).
	inflight  int           // calls running on it
	retired   bool          // a reload took it out: no new call enters
	drained   chan struct{} // closed when the last call of a retired server ends
	closeOnce sync.Once
	closeErr  error
}

// close closes the source, once, whoever asks first (a reload that
// retired the server, or the manager's Close).
func (s *server) close() error {
	s.closeOnce.Do(func() { s.closeErr = s.src.Close() })
	return s.closeErr
}

func newServer(src Source, o ServerOptions) (*server, error) {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.Retry.MaxAttempts <= 0 {
		o.Retry.MaxAttempts = 3
	}
	if o.Retry.InitialBackoff <= 0 {
		o.Retry.InitialBackoff = 200 * time.Millisecond
	}
	if o.Retry.MaxBackoff <= 0 {
		o.Retry.MaxBackoff = 5 * time.Second
	}
	if o.Breaker.Failures == 0 {
		o.Breaker.Failures = 5
	}
	if o.Breaker.Cooldown <= 0 {
		o.Breaker.Cooldown = 30 * time.Second
	}
	if o.Recovery.MinBackoff <= 0 {
		o.Recovery.MinBackoff = DefaultRecoveryMinBackoff
	}
	if o.Recovery.MaxBackoff <= 0 {
		o.Recovery.MaxBackoff = DefaultRecoveryMaxBackoff
	}
	o.Recovery.MinBackoff = min(o.Recovery.MinBackoff, o.Recovery.MaxBackoff)
	allow, err := toolglob.ParseAll(o.Allow, false)
	if err != nil {
		return nil, err
	}
	deny, err := toolglob.ParseAll(o.Deny, false)
	if err != nil {
		return nil, err
	}
	retryOK, err := toolglob.ParseAll(o.Retry.Tools, false)
	if err != nil {
		return nil, err
	}
	s := &server{
		name:    src.Name(),
		src:     src,
		opts:    o,
		filter:  filter{allow: allow, deny: deny},
		retryOK: retryOK,
		log:     slog.New(slog.DiscardHandler),
		kick:    func() {},
	}
	if o.Breaker.Failures > 0 {
		s.breaker = newBreaker(o.Breaker.Failures, o.Breaker.Cooldown, func(from, to breakerState) {
			s.log.Warn("circuit breaker", "server", s.name, "from", from.String(), "to", to.String())
		})
	}
	return s, nil
}

func (s *server) timeout(toolName string) time.Duration {
	if d, ok := s.opts.ToolTimeouts[toolName]; ok && d > 0 {
		return d
	}
	return s.opts.Timeout
}

func (s *server) markStale() {
	s.mu.Lock()
	s.stale = true
	s.mu.Unlock()
}

// needsListing reports whether discovery should list this server: never
// listed, told its tools changed, or failed long enough ago to try again;
// not while its recovery runs, which lists it in the background.
func (s *server) needsListing(all bool) bool {
	if s.opts.Disabled {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.healing:
		return false
	case all || s.stale:
		return true
	case s.listErr != nil:
		return time.Since(s.listedAt) >= rediscoverAfter
	default:
		return !s.listed
	}
}

// authFailed reports whether the server's last listing failed for want of
// a caller's credential.
func (s *server) authFailed() bool {
	if s.opts.Disabled {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listErr != nil && s.listErr.Kind == tool.KindAuthRequired
}

// list asks the source for its tools, bounded by the connect timeout, and
// keeps the answer. Concurrent callers share one listing.
func (s *server) list(ctx context.Context) error {
	return s.listWithin(ctx, s.opts.ConnectTimeout+listMargin)
}

// listWithin is list with its bound. A failed listing starts the server's
// recovery, when the manager recovers servers.
func (s *server) listWithin(ctx context.Context, bound time.Duration) error {
	s.mu.Lock()
	if ch := s.listing; ch != nil {
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		s.mu.Lock()
		err := s.listErr
		s.mu.Unlock()
		if err != nil {
			return copyError(err)
		}
		return nil
	}
	ch := make(chan struct{})
	s.listing = ch
	s.stale = false
	s.mu.Unlock()

	lctx, cancel := context.WithTimeout(ctx, bound)
	tools, err := s.guarded(func() ([]tool.Tool, error) { return s.src.Tools(lctx) })
	// Only our own limit expiring is "did not list in time": a source's
	// own timeout (a discovery command's) has its own, better error.
	expired := lctx.Err() != nil
	cancel()

	failed := false
	defer func() {
		// After the unlock below: kick takes the manager's lock first.
		if failed {
			s.kick()
		}
	}()
	s.mu.Lock()
	defer func() {
		s.listing = nil
		close(ch)
		s.mu.Unlock()
	}()
	s.listedAt = time.Now()
	if err != nil {
		if ctx.Err() != nil {
			// The caller gave up; that says nothing about the server.
			s.stale = true
			return ctx.Err()
		}
		te := tool.AsError(err)
		if expired && errors.Is(err, context.DeadlineExceeded) {
			te = &tool.Error{Kind: tool.KindServerUnavailable, Server: s.name, Err: err,
				Message: fmt.Sprintf("server %s did not list its tools within %s", s.name, bound)}
		}
		// An open breaker refused the listing without trying: the last
		// real failure says more about the server than the breaker does.
		if !errors.Is(err, errBreakerOpen) || s.listErr == nil {
			s.listErr = te
		}
		failed = true
		s.log.Warn("tool discovery failed", "server", s.name, "error", te.Message)
		return copyError(te)
	}
	m := make(map[string]tool.Tool, len(tools))
	for _, t := range tools {
		if _, dup := m[t.Name]; dup {
			s.log.Warn("server listed a tool twice; the later definition wins", "server", s.name, "tool", t.Name)
		}
		t.Server = s.name
		m[t.Name] = t
	}
	s.tools, s.listed, s.listErr = m, true, nil
	s.gen++
	return nil
}

// guarded runs a listing through the circuit breaker.
func (s *server) guarded(f func() ([]tool.Tool, error)) ([]tool.Tool, error) {
	if s.breaker == nil {
		return f()
	}
	ticket, err := s.breaker.allow()
	if err != nil {
		return nil, s.openError(err)
	}
	tools, err := f()
	s.breaker.done(ticket, err)
	return tools, err
}

// snapshot returns the last listed tools and the generation of that listing.
func (s *server) snapshot() ([]tool.Tool, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]tool.Tool, 0, len(s.tools))
	for _, t := range s.tools {
		out = append(out, t)
	}
	return out, s.gen
}

func (s *server) generation() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// lookup finds a tool's definition, listing the server first if it was
// never listed or said its tools changed.
func (s *server) lookup(ctx context.Context, name string) (tool.Tool, error) {
	s.mu.Lock()
	t, ok := s.tools[name]
	refresh := !s.listed || s.stale
	s.mu.Unlock()
	if ok && !refresh {
		return t, nil
	}
	if err := s.down(); err != nil && !ok {
		return tool.Tool{}, err
	}
	if err := s.list(ctx); err != nil && !ok {
		return tool.Tool{}, err
	}
	s.mu.Lock()
	t, ok = s.tools[name]
	s.mu.Unlock()
	if ok {
		return t, nil
	}
	names := make([]string, 0, len(s.tools))
	s.mu.Lock()
	for n := range s.tools {
		names = append(names, n)
	}
	s.mu.Unlock()
	return tool.Tool{}, &tool.Error{Kind: tool.KindToolNotRegistered, Server: s.name, Tool: name,
		Message:    fmt.Sprintf("server %s has no tool named %q", s.name, name),
		Suggestion: tool.Closest(name, names)}
}

// invoke calls the tool, retrying transport failures when that is safe.
// The first attempt is made directly: the retry machinery (a backoff, its
// options, a timer) is set up only once an attempt failed in a way worth
// retrying, which a healthy server never does.
func (s *server) invoke(ctx context.Context, t *tool.Tool, args map[string]any) (*tool.Result, int, error) {
	res, err := s.attempt(ctx, t.Name, args)
	if err == nil || s.opts.Retry.MaxAttempts <= 1 || !s.retryable(t, err) {
		return res, 1, err
	}
	attempts := 1
	first := true
	op := func() (*tool.Result, error) {
		if first {
			// The attempt already made, handed to the retry loop as its
			// first, so that it decides about it as about any other.
			first = false
			return nil, err
		}
		attempts++
		res, err := s.attempt(ctx, t.Name, args)
		if err == nil || !s.retryable(t, err) {
			if err != nil {
				return nil, backoff.Permanent(err)
			}
			return res, nil
		}
		return nil, err
	}
	b := &backoff.ExponentialBackOff{
		InitialInterval:     s.opts.Retry.InitialBackoff,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         s.opts.Retry.MaxBackoff,
	}
	res, err = backoff.Retry(ctx, op,
		backoff.WithBackOff(b),
		backoff.WithMaxTries(uint(s.opts.Retry.MaxAttempts)),
		backoff.WithMaxElapsedTime(0))
	return res, attempts, err
}

// retryable: only server_unavailable, and only when the request never
// reached the server or the tool is safe to repeat.
func (s *server) retryable(t *tool.Tool, err error) bool {
	if tool.KindOf(err) != tool.KindServerUnavailable {
		return false
	}
	if errors.Is(err, errBreakerOpen) {
		// Retrying would only hit the open breaker again.
		return false
	}
	if errors.Is(err, tool.ErrNotSent) || t.IsIdempotent() {
		return true
	}
	_, ok := toolglob.Any(s.retryOK, s.name, t.Name)
	return ok
}

func (s *server) attempt(ctx context.Context, name string, args map[string]any) (*tool.Result, error) {
	if s.breaker == nil {
		return safeCall(ctx, s.src, name, args)
	}
	ticket, err := s.breaker.allow()
	if err != nil {
		return nil, s.openError(err)
	}
	res, err := safeCall(ctx, s.src, name, args)
	s.breaker.done(ticket, err)
	return res, err
}

var errBreakerOpen = errors.New("circuit breaker open")

func breakerOpenMessage(name string) string {
	return fmt.Sprintf("server %s is failing: calls are suspended for a while (circuit breaker open)", name)
}

func (s *server) openError(err error) error {
	last, detail := s.lastError()
	d := fmt.Sprintf("after %d consecutive failures the breaker stays open for %s; last error: %s",
		s.opts.Breaker.Failures, s.opts.Breaker.Cooldown, last)
	if detail != "" {
		d += "\n" + detail
	}
	return &tool.Error{Kind: tool.KindServerUnavailable, Server: s.name, Message: breakerOpenMessage(s.name),
		Detail: d, Err: errors.Join(errBreakerOpen, tool.ErrNotSent, err)}
}

// lastError returns the server's last error and its diagnostics (the
// stderr tail of an MCP server).
func (s *server) lastError() (msg, detail string) {
	if hr, ok := s.src.(healthReporter); ok {
		if h := hr.Health(); h.Error != "" {
			return h.Error, h.Detail
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listErr != nil {
		return s.listErr.Message, s.listErr.Detail
	}
	return "unknown", ""
}

// copyError returns a copy of a kept error for one caller: callers fill in
// the tool they called.
func copyError(e *tool.Error) *tool.Error {
	c := *e
	return &c
}

// health combines what the source says of its connection with what the
// manager knows: discovery failures and the breaker.
func (s *server) health() tool.ServerHealth {
	h := tool.ServerHealth{Name: s.name, Transport: s.opts.Transport, State: tool.StateReady}
	if s.opts.Disabled {
		h.State = tool.StateDisabled
		return h
	}
	if hr, ok := s.src.(healthReporter); ok {
		h = hr.Health()
		h.Name = s.name
		if h.Transport == "" {
			h.Transport = s.opts.Transport
		}
	}
	s.mu.Lock()
	listErr, listing, listed := s.listErr, s.listing != nil, s.listed
	h.Tools = len(s.tools)
	s.mu.Unlock()
	switch {
	case listing && !listed && listErr == nil:
		h.State = tool.StateConnecting
	case listErr != nil:
		if listed {
			h.State = tool.StateDegraded
		} else {
			h.State = tool.StateFailed
		}
		if h.Error == "" || h.State == tool.StateFailed && h.Error != listErr.Message {
			h.Error, h.Detail = listErr.Message, listErr.Detail
		}
	}
	if s.breaker != nil {
		cur := s.breaker.current()
		h.Breaker = cur.String()
		switch cur {
		case breakerOpen:
			h.State = tool.StateFailed
			last, _ := s.lastError()
			h.Error = breakerOpenMessage(s.name) + ": " + last
		case breakerHalfOpen:
			h.State = tool.StateDegraded
		}
	}
	return h
}
