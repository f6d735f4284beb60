package mcpsource

import (
	"fmt"
	"sync"
	"time"
)

// callWatch watches the calls (and listings) waiting for their answers on
// one session, with one timer for all of them: the session is pinged once
// a request has waited HealthCheck.PingAfter, and again every PingAfter
// while it still waits. A request costs two short critical sections and
// no allocation of its own; the timer is set when the session goes from
// idle to busy, and otherwise only when it fires.
type callWatch struct {
	mu    sync.Mutex
	slots []watchSlot
	free  []int // indexes of unused slots
	timer *time.Timer
	armed bool // the timer will fire
	// stopped is set when the session ends: nothing is armed again.
	stopped bool
}

// watchSlot is one waiting request.
type watchSlot struct {
	used    bool
	listing bool      // a tools/list, not a call
	name    string    // the tool called
	due     time.Time // when it has waited long enough to ping about
}

// what says what a slot waits for, in a wedge's message.
func (w watchSlot) what() string {
	if w.listing {
		return "listing its tools"
	}
	return "a call of " + w.name
}

// waitFor registers a request on c (a call of name, or a listing) and
// returns its slot, which c.watch.done ends. With the health check off it
// does nothing.
func (s *Source) waitFor(c *conn, name string, listing bool) (slot int) {
	hc := s.cfg.HealthCheck
	if hc.Disabled {
		return -1
	}
	w := &c.watch
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return -1
	}
	if n := len(w.free); n > 0 {
		slot = w.free[n-1]
		w.free = w.free[:n-1]
	} else {
		w.slots = append(w.slots, watchSlot{})
		slot = len(w.slots) - 1
	}
	w.slots[slot] = watchSlot{used: true, listing: listing, name: name, due: now.Add(hc.PingAfter)}
	if !w.armed {
		// Every earlier request is due before this one: the timer, when
		// armed, is never late for it.
		w.armed = true
		if w.timer == nil {
			w.timer = time.AfterFunc(hc.PingAfter, func() { s.watchFired(c) })
		} else {
			w.timer.Reset(hc.PingAfter)
		}
	}
	return slot
}

// done ends the watch of slot i.
func (w *callWatch) done(i int) {
	if i < 0 {
		return
	}
	w.mu.Lock()
	w.slots[i] = watchSlot{}
	w.free = append(w.free, i)
	w.mu.Unlock()
}

// stop ends every watch of the session: the timer is not armed again.
func (w *callWatch) stop() {
	w.mu.Lock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
}

// watchFired runs when the timer fires: it pings the session if a request
// is due (pushing its next due time PingAfter on), and arms the timer for
// the next request due.
func (s *Source) watchFired(c *conn) {
	hc := s.cfg.HealthCheck
	w := &c.watch
	now := time.Now()
	var why string
	var next time.Time
	w.mu.Lock()
	w.armed = false
	if w.stopped {
		w.mu.Unlock()
		return
	}
	for i := range w.slots {
		sl := &w.slots[i]
		if !sl.used {
			continue
		}
		if !sl.due.After(now) {
			if why == "" {
				why = fmt.Sprintf("%s had waited %s for its answer", sl.what(), hc.PingAfter)
			}
			sl.due = now.Add(hc.PingAfter)
		}
		if next.IsZero() || sl.due.Before(next) {
			next = sl.due
		}
	}
	if !next.IsZero() {
		w.armed = true
		w.timer.Reset(next.Sub(now))
	}
	w.mu.Unlock()
	if why == "" || c.gone.Err() != nil || !s.track() {
		return
	}
	defer s.wg.Done()
	s.ping(c, why, hc.PingAfter/2)
}
