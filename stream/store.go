package stream

import (
	"context"
	"sort"
	"sync"
)

// Store keeps published events so that a client that reconnects, or
// subscribes late, is replayed what it missed. The task log is the durable
// one (through an adapter converting its events, which have the same
// fields as Event); MemoryStore keeps a bounded tail in memory.
//
// A Hub calls AppendEvents from one goroutine, in id order, with events it
// owns: a Store must copy the slice if it keeps it (the Data bytes are
// never modified and may be kept). Every method must return when ctx is
// done.
type Store interface {
	// AppendEvents stores events, in increasing id order.
	AppendEvents(ctx context.Context, evs ...Event) error
	// EventsAfter returns up to limit stored events with an id above
	// afterID, in id order; limit <= 0 means no limit. A non-empty task
	// keeps only that task's events; "" keeps every event.
	EventsAfter(ctx context.Context, afterID int64, task string, limit int) ([]Event, error)
	// LastEventID returns the highest id ever stored, 0 if none, so that
	// a new Hub continues the sequence.
	LastEventID(ctx context.Context) (int64, error)
}

// Defaults of MemoryStore, also the Hub's own replay ring.
const (
	// DefaultMemoryEvents is how many events a memory ring keeps.
	DefaultMemoryEvents = 4096
	// DefaultMemoryBytes bounds the payload bytes a memory ring keeps
	// (16 MiB): a few huge tool results must not pin the heap.
	DefaultMemoryBytes = 16 << 20
)

// eventOverhead is what an event costs beyond its strings and payload, for
// the byte bound: the struct and the ring slot.
const eventOverhead = 96

// MemoryStore is a Store that keeps the most recent events in memory, for
// runs without a task log: at most maxEvents events and at most maxBytes
// bytes of them (names, tasks and payloads plus a fixed overhead per
// event); the oldest go first. The newest event is always kept, even when
// it alone is larger than the byte bound. It is safe for concurrent use;
// the zero value is an empty ring with the default bounds.
type MemoryStore struct {
	mu        sync.Mutex
	maxEvents int
	maxBytes  int64
	ring      []posted // grows to maxEvents, then wraps
	head, n   int      // index of the oldest event, number held
	bytes     int64
	last      int64 // highest id ever appended, evicted or not
}

// NewMemoryStore returns a ring of at most maxEvents events and maxBytes
// bytes; values below 1 take DefaultMemoryEvents and DefaultMemoryBytes.
func NewMemoryStore(maxEvents int, maxBytes int64) *MemoryStore {
	if maxEvents < 1 {
		maxEvents = DefaultMemoryEvents
	}
	if maxBytes < 1 {
		maxBytes = DefaultMemoryBytes
	}
	return &MemoryStore{maxEvents: maxEvents, maxBytes: maxBytes}
}

// AppendEvents adds events to the ring, evicting the oldest beyond the
// bounds. Ids must increase (an *OrderError otherwise, and nothing of the
// batch is added).
func (m *MemoryStore) AppendEvents(ctx context.Context, evs ...Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	last := m.last
	for _, e := range evs {
		if e.ID <= last {
			return &OrderError{Last: last, Got: e.ID}
		}
		last = e.ID
	}
	for _, e := range evs {
		m.add(posted{Event: e, size: eventSize(e)})
	}
	return nil
}

// EventsAfter returns up to limit events above afterID (of task, unless
// task is ""), oldest first.
func (m *MemoryStore) EventsAfter(ctx context.Context, afterID int64, task string, limit int) ([]Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []Event
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := m.search(afterID); i < m.n; i++ {
		e := m.at(i)
		if task != "" && e.Task != task {
			continue
		}
		out = append(out, e.resolve())
		if limit > 0 && len(out) == limit {
			break
		}
	}
	return out, nil
}

// LastEventID returns the highest id ever appended, even if evicted.
func (m *MemoryStore) LastEventID(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last, nil
}

// Len returns how many events the ring holds.
func (m *MemoryStore) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}

// add appends e; m.mu is held and e.ID is above m.last.
func (m *MemoryStore) add(e posted) {
	if m.maxEvents < 1 { // the zero value
		m.maxEvents = DefaultMemoryEvents
	}
	if m.maxBytes < 1 {
		m.maxBytes = DefaultMemoryBytes
	}
	size := e.size
	for m.n > 0 && (m.n == m.maxEvents || m.bytes+size > m.maxBytes) {
		m.bytes -= m.ring[m.head].size
		m.ring[m.head] = posted{} // release the payload
		m.head = (m.head + 1) % len(m.ring)
		m.n--
	}
	if m.n == len(m.ring) { // room is needed and the ring is below its bound: grow
		grown := make([]posted, min(max(2*len(m.ring), 16), m.maxEvents))
		for i := 0; i < m.n; i++ {
			grown[i] = m.at(i)
		}
		m.ring, m.head = grown, 0
	}
	m.ring[(m.head+m.n)%len(m.ring)] = e
	m.n++
	m.bytes += size
	m.last = e.ID
}

// at returns the i-th oldest event held; m.mu is held.
func (m *MemoryStore) at(i int) posted { return m.ring[(m.head+i)%len(m.ring)] }

// search returns the position of the first event held with an id above
// afterID; m.mu is held.
func (m *MemoryStore) search(afterID int64) int {
	return sort.Search(m.n, func(i int) bool { return m.at(i).ID > afterID })
}

// since returns the events above afterID that match keep, and the id of the
// oldest event held (the next id to be appended when none is), so the
// caller knows whether the ring reaches back far enough. Their payloads
// may not be encoded yet.
func (m *MemoryStore) since(afterID int64, keep func(Event) bool) (evs []posted, oldest int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	oldest = m.last + 1
	if m.n > 0 {
		oldest = m.at(0).ID
	}
	for i := m.search(afterID); i < m.n; i++ {
		if e := m.at(i); keep(e.Event) {
			evs = append(evs, e)
		}
	}
	return evs, oldest
}

// pushAll appends events for the hub, whose ids always increase.
func (m *MemoryStore) pushAll(evs []posted) {
	m.mu.Lock()
	for _, e := range evs {
		m.add(e)
	}
	m.mu.Unlock()
}

func eventSize(e Event) int64 {
	return int64(len(e.Name)+len(e.Task)+len(e.Data)) + eventOverhead
}
