package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/toolmux/toolmux/internal/toolglob"
)

// DefaultDrain bounds how long Reconfigure waits for the calls of a
// server it takes out before it closes the server anyway.
const DefaultDrain = 30 * time.Second

// Server is a source with its policy, for Reconfigure.
type Server struct {
	Source  Source
	Options ServerOptions
}

// Reconfiguration is the manager's next server set.
type Reconfiguration struct {
	// Order is every server's name in the new configuration's order. A
	// server of the current set whose name is not in Order is removed.
	Order []string
	// Add are the servers that are new, or that replace the server of
	// the same name (whose configuration changed). Every server in Order
	// and not in Add is kept as it is, running.
	Add []Server
	// Allow and Deny are the new global filter (see WithFilter).
	Allow, Deny []string
	// Drain bounds the wait for the calls in flight of the servers taken
	// out (removed or replaced) before they are closed; 0 means
	// DefaultDrain. The calls are cancelled when they outlast it.
	Drain time.Duration
	// Swapped, when set, is called once the new set is in use, before the
	// drain: what must change at the same moment as the servers (the
	// caller's policy and pipeline).
	Swapped func()
}

// ReconfigureError is a reconfiguration that was refused; the manager's
// servers are as they were.
type ReconfigureError struct{ Err error }

func (e *ReconfigureError) Error() string { return "manager: reconfigure: " + e.Err.Error() }
func (e *ReconfigureError) Unwrap() error { return e.Err }

// Reconfigure swaps the manager's server set for the one r describes, in
// one step: a call, a listing or a catalog sees the old set or the new
// one, never a mixture. Calls of a server taken out (removed, or replaced
// by one of the same name) that are running go on against it; calls that
// start after the swap go to the new set. Reconfigure then waits for the
// running calls of the servers taken out, at most r.Drain (or until ctx
// ends), and closes them. The next Tools lists the servers added.
//
// Reconfigure owns the sources in r.Add from the call on: they are closed
// when it fails (a *ReconfigureError: an unknown name in Order, a name
// twice, a bad pattern), which leaves the current set as it was.
// Reconfigurations take turns.
func (m *Manager) Reconfigure(ctx context.Context, r Reconfiguration) (err error) {
	added := map[string]*server{}
	defer func() {
		if err != nil {
			for _, a := range r.Add {
				a.Source.Close()
			}
		}
	}()
	if m.closed.Load() {
		return &ReconfigureError{Err: errClosed}
	}
	allow, err := toolglob.ParseAll(r.Allow, true)
	if err != nil {
		return &ReconfigureError{Err: err}
	}
	deny, err := toolglob.ParseAll(r.Deny, true)
	if err != nil {
		return &ReconfigureError{Err: err}
	}
	for _, a := range r.Add {
		name := a.Source.Name()
		if _, dup := added[name]; dup {
			return &ReconfigureError{Err: fmt.Errorf("two sources named %q", name)}
		}
		s, err := newServer(a.Source, a.Options)
		if err != nil {
			return &ReconfigureError{Err: fmt.Errorf("server %q: %w", name, err)}
		}
		added[name] = s
	}

	m.reconfMu.Lock()
	old := m.set.Load()
	next := &serverSet{servers: make(map[string]*server, len(r.Order)), filter: filter{allow: allow, deny: deny}}
	for _, name := range r.Order {
		if _, dup := next.servers[name]; dup {
			m.reconfMu.Unlock()
			return &ReconfigureError{Err: fmt.Errorf("server %q named twice", name)}
		}
		s, ok := added[name]
		if !ok {
			if s, ok = old.servers[name]; !ok {
				m.reconfMu.Unlock()
				return &ReconfigureError{Err: fmt.Errorf("server %q is neither running nor added", name)}
			}
		}
		next.servers[name] = s
		next.order = append(next.order, name)
	}
	for name := range added {
		if !slices.Contains(next.order, name) {
			m.reconfMu.Unlock()
			return &ReconfigureError{Err: fmt.Errorf("server %q is added but not in the order", name)}
		}
	}
	var out []*server
	for _, name := range old.order {
		if s := old.servers[name]; next.servers[name] != s {
			out = append(out, s)
			m.retired[s] = struct{}{}
		}
	}
	for _, s := range added {
		m.attach(s)
	}
	m.set.Store(next)
	if r.Swapped != nil {
		r.Swapped()
	}
	m.reconfMu.Unlock()

	// The servers added are listed by the next Tools; one that fails
	// then is brought back by recovery, when on, as at start.
	return m.drain(ctx, out, r.Drain)
}

// drain waits for the calls of the servers taken out, at most d, then
// closes them (which cancels the calls still running).
func (m *Manager) drain(ctx context.Context, out []*server, d time.Duration) error {
	if len(out) == 0 {
		return nil
	}
	if d <= 0 {
		d = DefaultDrain
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	errs := make([]error, len(out))
	var wg sync.WaitGroup
	for i, s := range out {
		wg.Go(func() {
			select {
			case <-s.retire():
			case <-ctx.Done():
			case <-m.bg.ctx.Done(): // Close closes it
			}
			errs[i] = s.close()
			m.reconfMu.Lock()
			delete(m.retired, s)
			m.reconfMu.Unlock()
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// enter returns the server a call goes to, counted as running on it until
// exit. A server retired between the lookup and the count is looked up
// again: the call goes to the set that replaced it.
func (m *Manager) enter(server, name string) (*server, error) {
	for {
		s, err := m.server(server, name)
		if err != nil {
			return nil, err
		}
		if s.enter() {
			return s, nil
		}
	}
}

// enter counts a call as running on s, unless s is retired.
func (s *server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.retired {
		return false
	}
	s.inflight++
	return true
}

// exit ends what enter counted.
func (s *server) exit() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	if s.inflight == 0 && s.drained != nil {
		close(s.drained)
		s.drained = nil
	}
}

// retire stops calls from entering s and returns a channel closed once
// none runs.
func (s *server) retire() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retired = true
	ch := make(chan struct{})
	if s.inflight == 0 {
		close(ch)
	} else {
		s.drained = ch
	}
	return ch
}
