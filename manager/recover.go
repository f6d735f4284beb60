package manager

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/toolmux/toolmux/tool"
)

// Defaults of Recovery.
const (
	DefaultRecoveryMinBackoff = 250 * time.Millisecond
	DefaultRecoveryMaxBackoff = 30 * time.Second
)

// Recovery paces the background attempts to bring a server back, once
// [Manager.Recover] has been called: the first comes MinBackoff after the
// failure, and each later wait doubles, up to MaxBackoff.
type Recovery struct {
	// MinBackoff defaults to 250ms, MaxBackoff to 30 seconds.
	MinBackoff, MaxBackoff time.Duration
}

// wait returns the wait before attempt n+1 after n failed ones, jittered
// over its upper half so that servers that failed together do not all
// come back at once.
func (r Recovery) wait(failures int) time.Duration {
	d := r.MinBackoff << min(failures, 16)
	if d > r.MaxBackoff || d <= 0 {
		d = r.MaxBackoff
	}
	return d/2 + rand.N(d/2+1)
}

// lossNotifier is implemented by sources whose connection can be lost and
// made again (MCP servers).
type lossNotifier interface {
	OnSessionLost(func())
}

// background is the manager's recovery: off until Recover, stopped by
// Close.
type background struct {
	mu       sync.Mutex
	on       bool
	onChange func(*tool.Catalog)
	ctx      context.Context
	stop     context.CancelFunc
	wg       sync.WaitGroup
}

// Recover makes the manager keep its servers up from now until Close,
// rather than only when a call or a listing needs them:
//
//   - a server whose listing failed (at start or since) is listed again in
//     the background, after waits growing from its Recovery.MinBackoff to
//     its Recovery.MaxBackoff, until it answers;
//   - a server whose session was lost (it crashed, its connection dropped,
//     it stopped answering and its session was dropped) or whose tools
//     changed is listed again at once, which starts it again;
//   - while a server waits for its next attempt, calls of its tools fail at
//     once with server_unavailable and the server's last error (its stderr
//     tail), instead of starting it themselves;
//   - Tools no longer lists such servers itself: it returns what they last
//     listed, so no caller waits for a server that is down.
//
// Each server has at most one goroutine doing this, and only while it is
// down. onChange, when not nil, is called from that goroutine after a
// background listing succeeded, with the catalog built from it (the
// gateway uses it to tell its clients that the tool list changed).
// Calling Recover again replaces onChange.
func (m *Manager) Recover(onChange func(*tool.Catalog)) {
	m.bg.mu.Lock()
	m.bg.on, m.bg.onChange = true, onChange
	m.bg.mu.Unlock()
	set := m.set.Load()
	for _, name := range set.order {
		s := set.servers[name]
		s.mu.Lock()
		down := s.listErr != nil || s.stale
		s.mu.Unlock()
		if down {
			m.kick(s)
		}
	}
}

func (m *Manager) recovering() bool {
	m.bg.mu.Lock()
	defer m.bg.mu.Unlock()
	return m.bg.on
}

// kick starts the recovery goroutine of s, unless recovery is off or it
// runs already. Callers must not hold s.mu.
func (m *Manager) kick(s *server) {
	if s.opts.Disabled {
		return
	}
	m.bg.mu.Lock()
	defer m.bg.mu.Unlock()
	if !m.bg.on || m.closed.Load() {
		return
	}
	s.mu.Lock()
	if s.healing || s.retired {
		s.mu.Unlock()
		return
	}
	s.healing = true
	s.mu.Unlock()
	m.bg.wg.Add(1)
	go m.heal(s)
}

// heal lists s until it has no failed or stale listing left, waiting
// between failed attempts.
func (m *Manager) heal(s *server) {
	defer m.bg.wg.Done()
	failures := 0
	for {
		s.mu.Lock()
		stale, failed := s.stale, s.listErr != nil
		if !stale && !failed || m.bg.ctx.Err() != nil || s.retired {
			s.healing, s.waiting = false, false
			s.mu.Unlock()
			return
		}
		var wait time.Duration
		if !stale {
			wait = s.opts.Recovery.wait(failures)
			s.waiting, s.retryAt = true, time.Now().Add(wait)
		}
		s.mu.Unlock()
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-m.bg.ctx.Done():
				t.Stop()
			}
			s.mu.Lock()
			s.waiting = false
			retired := s.retired
			s.mu.Unlock()
			if m.bg.ctx.Err() != nil || retired {
				continue // to the top, which ends the recovery
			}
		}
		before := s.generation()
		// The source may still wait out a backoff of its own before it
		// connects: that wait must not count as the server being slow.
		if err := s.listWithin(m.bg.ctx, s.opts.ConnectTimeout+listMargin+s.opts.Recovery.MaxBackoff); err != nil {
			failures++
			continue
		}
		failures = 0
		m.sayRestarted(s)
		if s.generation() != before {
			m.changed()
		}
	}
}

// markLost marks s as to be listed again because its session was lost,
// keeping why (its source's last error) for the Restart that reports its
// return.
func (s *server) markLost() {
	why := "its session was lost"
	if hr, ok := s.src.(healthReporter); ok {
		if h := hr.Health(); h.Error != "" {
			why = h.Error
		}
	}
	s.mu.Lock()
	s.lost = why
	s.mu.Unlock()
	s.markStale()
}

// sayRestarted tells the restart observer that s, lost, answers again.
func (m *Manager) sayRestarted(s *server) {
	s.mu.Lock()
	lost := s.lost
	s.lost = ""
	s.mu.Unlock()
	if lost == "" || m.restarted == nil {
		return
	}
	r := Restart{Server: s.name, Lost: lost}
	if hr, ok := s.src.(healthReporter); ok {
		r.Restarts = hr.Health().Restarts
	}
	m.restarted(r)
}

// changed rebuilds the catalog after a background listing and hands it to
// onChange.
func (m *Manager) changed() {
	cat, err := m.Tools(m.bg.ctx)
	if err != nil {
		return
	}
	m.bg.mu.Lock()
	fn := m.bg.onChange
	m.bg.mu.Unlock()
	if fn != nil {
		fn(cat)
	}
}

// stopRecovery ends the recovery goroutines and waits for them.
func (m *Manager) stopRecovery() {
	// closed is set: no kick starts a goroutine after this.
	m.bg.mu.Lock()
	m.bg.on = false
	m.bg.mu.Unlock()
	m.bg.stop()
	m.bg.wg.Wait()
}

// down returns the error a call of a server gets while the server waits
// for its next recovery attempt, nil when it does not wait.
func (s *server) down() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.waiting || s.listErr == nil {
		return nil
	}
	e := *s.listErr
	e.Message = fmt.Sprintf("%s (server %s is down; toolmux tries it again in the background, next in %s)",
		strings.TrimRight(e.Message, ". "), s.name, max(time.Until(s.retryAt), 0).Round(100*time.Millisecond).String())
	e.Err = errors.Join(tool.ErrNotSent, s.listErr.Err)
	return &e
}
