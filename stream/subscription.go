package stream

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Filter selects the events a subscription receives. Gap markers are
// always delivered.
type Filter struct {
	// Task keeps only that task's events; "" keeps every event.
	Task string
	// Names keeps only events with these names; empty keeps every name.
	Names []string
}

// Subscription receives the events of a Hub that match its filter, in id
// order, each at most once. Close it (or cancel the context given to
// Subscribe) when done.
type Subscription struct {
	hub    *Hub
	task   string
	names  map[string]struct{}
	ctx    context.Context
	cancel context.CancelFunc
	out    chan Event
	done   chan struct{} // closed when run has returned

	mu      sync.Mutex
	q       deque
	nEvents int // events (not gap markers) in q
	max     int
	notify  chan struct{} // a token when q gains an item
	dropped atomic.Int64
}

// outBuffer is the capacity of a subscription's channel: a few events in
// the channel let the reader take a burst without a goroutine switch per
// event. They come on top of the hub's per-subscriber buffer.
const outBuffer = 32

// replay is what a new subscription delivers before live events.
type replay struct {
	last       int64   // id after which delivery starts
	store      bool    // read the store first, from last up to storeUntil
	firstPage  []Event // the store's first page, read by Subscribe
	storeUntil int64   // first id the memory snapshot or live events cover
	expired    *GapData
	snapshot   []posted // from the memory ring, all below the first live id
}

// Subscribe returns a subscription to the events matching f. With afterID
// >= 0 it first replays the matching events with a larger id — from the
// hub's memory ring, and from the store for what the ring no longer holds
// — and then delivers live events, with no duplicate and no hole at the
// seam; with Live it delivers live events only.
//
// The seam: the subscription is registered for live events and the next
// id is noted in the same critical section as Publish, so every later
// event is queued for it; the replay stops below that id, and ids already
// delivered are skipped. A replay from the store first waits (within ctx)
// until the events queued for the store before the subscription have
// reached it.
//
// The subscription ends when ctx is done, when Close is called, or after
// the hub is closed and every queued event was delivered; its channel is
// then closed. It returns ErrClosed after Close, and a *StoreError when the
// store's first page cannot be read.
func (h *Hub) Subscribe(ctx context.Context, f Filter, afterID int64) (*Subscription, error) {
	s := &Subscription{hub: h, task: f.Task, out: make(chan Event, outBuffer), done: make(chan struct{}),
		max: h.cfg.buffer, notify: make(chan struct{}, 1)}
	if len(f.Names) > 0 {
		s.names = make(map[string]struct{}, len(f.Names))
		for _, n := range f.Names {
			s.names[n] = struct{}{}
		}
	}
	s.ctx, s.cancel = context.WithCancel(ctx)

	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		s.cancel()
		return nil, ErrClosed
	}
	liveFrom := h.lastID + 1
	rp := replay{last: liveFrom - 1}
	var waitFor int64
	if afterID >= 0 && afterID < h.lastID {
		var oldest int64
		rp.snapshot, oldest = h.mem.since(afterID, s.match)
		rp.last = afterID
		if afterID+1 < oldest {
			if h.persistQ != nil {
				// Only what lies below the ring must have reached the
				// store; the queue is in id order.
				rp.store, rp.storeUntil, waitFor = true, oldest, min(h.lastEnqueued, oldest-1)
			} else {
				rp.expired = &GapData{Missed: oldest - afterID - 1, FromID: afterID + 1, ToID: oldest - 1, Reason: GapExpired}
			}
		}
	}
	h.subs = append(h.subs, s)
	h.subsWG.Add(1)
	h.mu.Unlock()

	if rp.store {
		err := h.waitPersisted(s.ctx, waitFor)
		if err == nil {
			rp.firstPage, err = h.cfg.store.EventsAfter(s.ctx, rp.last, s.task, replayPage)
			if err != nil {
				err = &StoreError{Op: "events_after", Err: err}
			}
		}
		if err != nil {
			s.cancel()
			h.remove(s)
			h.subsWG.Done()
			return nil, err
		}
	}
	go s.run(rp)
	return s, nil
}

// Events returns the channel delivering the subscription's events, closed
// when the subscription ends. Gap markers (Name EventGap, ID 0) stand
// where events were lost. An event's Data is shared with the other
// subscribers and must not be modified.
func (s *Subscription) Events() <-chan Event { return s.out }

// Dropped returns how many events this subscriber lost because it did not
// read fast enough.
func (s *Subscription) Dropped() int64 { return s.dropped.Load() }

// Close ends the subscription and waits for its goroutine; the channel is
// closed. Events still queued are discarded. It may be called more than
// once, from any goroutine.
func (s *Subscription) Close() {
	s.cancel()
	<-s.done
}

func (s *Subscription) match(e Event) bool {
	if s.task != "" && e.Task != s.task {
		return false
	}
	if s.names != nil {
		if _, ok := s.names[e.Name]; !ok {
			return false
		}
	}
	return true
}

// offer queues e for the subscriber, or counts it lost when the buffer is
// full. It is called by Publish with the hub's lock held, so events are
// offered in id order; it never waits for the subscriber, and the
// payload is encoded by the subscriber's goroutine.
func (s *Subscription) offer(e posted) {
	if !s.match(e.Event) {
		return
	}
	s.mu.Lock()
	if s.nEvents < s.max {
		s.q.push(item{ev: e})
		s.nEvents++
	} else {
		// Consecutive losses make one gap marker, at the place of the
		// first lost event; the marker is not counted against the buffer.
		s.dropped.Add(1)
		s.hub.dropped.Add(1)
		if t := s.q.tail(); t != nil && t.missed > 0 {
			t.to = e.ID
			t.missed++
		} else {
			s.q.push(item{from: e.ID, to: e.ID, missed: 1, at: e.Time})
		}
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// run delivers the replay, then the queue, until the subscription ends.
func (s *Subscription) run(rp replay) {
	defer close(s.done)
	defer s.hub.subsWG.Done()
	defer close(s.out)
	defer s.hub.remove(s)
	defer s.cancel()

	last := rp.last
	deliver := func(e Event) bool {
		if e.ID <= last {
			return true // already delivered: the seam
		}
		if !s.send(e) {
			return false
		}
		last = e.ID
		return true
	}
	if rp.store {
		page := rp.firstPage
		for {
			end := false
			for _, e := range page {
				if e.ID >= rp.storeUntil {
					end = true
					break
				}
				if s.match(e) && !deliver(e) {
					return
				}
			}
			if end || len(page) < replayPage {
				break
			}
			var err error
			page, err = s.hub.cfg.store.EventsAfter(s.ctx, page[len(page)-1].ID, s.task, replayPage)
			if err != nil {
				if s.ctx.Err() != nil {
					return
				}
				g := GapData{FromID: last + 1, ToID: rp.storeUntil - 1, Reason: GapReplayFailed, Error: err.Error()}
				g.Missed = g.ToID - g.FromID + 1
				if !s.send(gapEvent(g, time.Now().UTC(), s.task)) {
					return
				}
				last = g.ToID
				break
			}
		}
	}
	if g := rp.expired; g != nil {
		if !s.send(gapEvent(*g, time.Now().UTC(), s.task)) {
			return
		}
		last = g.ToID
	}
	for _, e := range rp.snapshot {
		if !deliver(e.resolve()) {
			return
		}
	}
	rp = replay{} // release the snapshot
	for {
		it, ok := s.next()
		if !ok {
			return
		}
		if it.missed > 0 {
			g := GapData{Missed: it.missed, FromID: it.from, ToID: it.to, Reason: GapSlow}
			if !s.send(gapEvent(g, it.at, s.task)) {
				return
			}
			continue
		}
		if !deliver(it.ev.resolve()) {
			return
		}
	}
}

// next waits for the next queued item. It reports false when the
// subscription has ended, or when the hub is closed and the queue is empty.
func (s *Subscription) next() (item, bool) {
	closing := s.hub.closing
	for {
		s.mu.Lock()
		if s.q.len() > 0 {
			it := s.q.pop()
			if it.missed == 0 {
				s.nEvents--
			}
			s.mu.Unlock()
			return it, true
		}
		s.mu.Unlock()
		if closing == nil {
			return item{}, false // closed, and nothing was left
		}
		select {
		case <-s.notify:
		case <-closing:
			// No event is offered after the hub is closed: one more look
			// at the queue, then stop.
			closing = nil
		case <-s.ctx.Done():
			return item{}, false
		}
	}
}

// send hands e to the reader unless the subscription ends first.
func (s *Subscription) send(e Event) bool {
	select {
	case s.out <- e:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// remove unregisters s so that Publish no longer offers it events.
func (h *Hub) remove(s *Subscription) {
	h.mu.Lock()
	if i := slices.Index(h.subs, s); i >= 0 {
		h.subs = slices.Delete(h.subs, i, i+1)
	}
	h.mu.Unlock()
}

func gapEvent(g GapData, at time.Time, task string) Event {
	data, _ := json.Marshal(g)
	return Event{Name: EventGap, Task: task, Time: at, Data: data}
}

// item is a queued event, or a gap marker when missed > 0.
type item struct {
	ev       posted
	from, to int64
	missed   int64
	at       time.Time
}

// deque is a growable ring of items. A subscription's queue holds at most
// its buffer of events plus one gap marker after each of them, so it stays
// bounded without a bound of its own.
type deque struct {
	buf     []item
	head, n int
}

func (d *deque) len() int { return d.n }

func (d *deque) push(it item) {
	if d.n == len(d.buf) {
		grown := make([]item, max(2*len(d.buf), 16))
		for i := 0; i < d.n; i++ {
			grown[i] = d.buf[(d.head+i)%len(d.buf)]
		}
		d.buf, d.head = grown, 0
	}
	d.buf[(d.head+d.n)%len(d.buf)] = it
	d.n++
}

func (d *deque) pop() item {
	it := d.buf[d.head]
	d.buf[d.head] = item{} // release the payload
	d.head = (d.head + 1) % len(d.buf)
	d.n--
	return it
}

func (d *deque) tail() *item {
	if d.n == 0 {
		return nil
	}
	return &d.buf[(d.head+d.n-1)%len(d.buf)]
}
