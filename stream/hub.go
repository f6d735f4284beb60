package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of a Hub.
const (
	// DefaultBuffer is how many events wait for one subscriber before it
	// starts losing them: enough for a burst of tool states and output
	// while a browser is busy, small enough that a dead client costs
	// little.
	DefaultBuffer = 256
	// DefaultHeartbeat is how long an SSE connection may stay silent
	// before a heartbeat is sent: below the idle timeouts of common
	// proxies (30–60 s).
	DefaultHeartbeat = 15 * time.Second
	// DefaultPersistQueue is how many events may wait for the store.
	DefaultPersistQueue = 4096
	// DefaultPersistLinger is how long the persister waits for more
	// events before it appends a batch: a tool call publishes about six
	// events around its execution, and one commit for many of them costs
	// the task log's single writer (which also commits call records, on
	// the calls' path) far less than one per event or two per call.
	DefaultPersistLinger = 10 * time.Millisecond
	// maxPersistBatch bounds one AppendEvents call.
	maxPersistBatch = 256
	// replayPage is how many events one EventsAfter call asks for.
	replayPage = 512
)

// Live is the afterID that makes Subscribe replay nothing: only events
// published from now on are delivered.
const Live int64 = -1

// Option configures a Hub.
type Option func(*config)

type config struct {
	buffer       int
	store        Store
	heartbeat    time.Duration
	log          *slog.Logger
	startID      int64
	memEvents    int
	memBytes     int64
	persistQueue int
	linger       time.Duration
}

// WithBuffer sets how many events wait for each subscriber before it loses
// them (default DefaultBuffer; values below 1 keep it). A few more wait in
// the subscription's channel.
func WithBuffer(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.buffer = n
		}
	}
}

// WithStore sets where events are persisted and replayed from beyond the
// hub's memory ring. The hub continues the store's sequence of ids.
func WithStore(s Store) Option { return func(c *config) { c.store = s } }

// WithHeartbeat sets how long an SSE connection stays silent before a
// heartbeat event is written (default DefaultHeartbeat); 0 or less turns
// heartbeats off.
func WithHeartbeat(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			d = 0
		}
		c.heartbeat = d
	}
}

// WithLogger sets the logger for store failures and unencodable payloads.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.log = l
		}
	}
}

// WithStartID makes ids start after id, when it is above the store's last
// id (a hub without a store starts at 1 otherwise).
func WithStartID(id int64) Option { return func(c *config) { c.startID = max(id, 0) } }

// WithMemory bounds the hub's memory ring, which serves replays of recent
// events without asking the store, and serves every replay when there is
// no store (defaults DefaultMemoryEvents and DefaultMemoryBytes).
func WithMemory(maxEvents int, maxBytes int64) Option {
	return func(c *config) { c.memEvents, c.memBytes = maxEvents, maxBytes }
}

// WithPersistQueue bounds how many events may wait for the store (default
// DefaultPersistQueue); beyond it events are not persisted, and counted.
func WithPersistQueue(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.persistQueue = n
		}
	}
}

// WithPersistLinger sets how long the persister waits for more events
// before appending a batch to the store (default DefaultPersistLinger; 0
// appends what the queue holds at once). A replay from the store waits
// for the events before it, so this also delays a resumption that reaches
// back to the newest events by at most d.
func WithPersistLinger(d time.Duration) Option {
	return func(c *config) { c.linger = max(d, 0) }
}

// Hub publishes events to subscribers and to a store. Publish never
// blocks on them and never fails; see the package documentation. A Hub is
// safe for concurrent use; Close releases its goroutines.
type Hub struct {
	cfg config
	log *slog.Logger
	mem *MemoryStore

	mu           sync.Mutex // orders publication: ids, fan-out, ring and queue
	lastID       int64
	subs         []*Subscription
	closed       bool
	persistQ     chan posted // nil without a store
	lastEnqueued int64       // id of the last event put in persistQ

	pmu       sync.Mutex
	persisted int64         // every event up to this id has been handed to the store
	progress  chan struct{} // closed (and replaced) when persisted advances

	closing       chan struct{} // closed when Close begins
	closeOnce     sync.Once
	forceOnce     sync.Once
	persistCtx    context.Context
	persistCancel context.CancelFunc
	persisterDone chan struct{}
	subsWG        sync.WaitGroup

	published      atomic.Uint64
	dropped        atomic.Uint64
	persistedN     atomic.Uint64
	persistDropped atomic.Uint64
	persistFailed  atomic.Uint64
}

// NewHub returns a hub. With a store, it asks the store for its last id
// (bounded by ctx) so that ids continue where the store's end, and starts
// the goroutine that persists events; the error is then a *StoreError.
func NewHub(ctx context.Context, opts ...Option) (*Hub, error) {
	cfg := config{buffer: DefaultBuffer, heartbeat: DefaultHeartbeat, persistQueue: DefaultPersistQueue, linger: DefaultPersistLinger,
		log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	h := &Hub{cfg: cfg, log: cfg.log, mem: NewMemoryStore(cfg.memEvents, cfg.memBytes),
		lastID: cfg.startID, progress: make(chan struct{}), closing: make(chan struct{}),
		persisterDone: make(chan struct{})}
	h.persistCtx, h.persistCancel = context.WithCancel(context.WithoutCancel(ctx))
	if cfg.store != nil {
		last, err := cfg.store.LastEventID(ctx)
		if err != nil {
			h.persistCancel()
			return nil, &StoreError{Op: "last_event_id", Err: err}
		}
		h.lastID = max(h.lastID, last)
	}
	// The ring starts where the sequence does, so that a replay from
	// before it is known to need the store.
	h.mem.last = h.lastID
	if cfg.store == nil {
		close(h.persisterDone)
		return h, nil
	}
	h.persisted, h.lastEnqueued = h.lastID, h.lastID
	h.persistQ = make(chan posted, cfg.persistQueue)
	go h.persist()
	return h, nil
}

// Publish publishes an event named name for task with data as its payload
// (a payload type of this package, any value encoding/json accepts, or
// JSON bytes as json.RawMessage) and returns it with its id and time. It
// never blocks on subscribers or the store and never fails: a payload that
// does not encode is replaced by {"encode_error": ...} and logged. After
// Close it publishes nothing and returns the event with ID 0.
//
// A name with line breaks (which would end the SSE field early) has them
// turned into spaces, and an empty name becomes "unnamed", so that the
// stored event is the one sent and a store may require a name.
func (h *Hub) Publish(name, task string, data any) Event {
	name = cleanName(name)
	e := Event{Name: name, Task: task, Data: h.encode(name, data)}
	p := [1]posted{{Event: e, size: eventSize(e)}}
	h.publish(p[:])
	return p[0].Event
}

// publish gives each event the next id and the time, and hands it to the
// memory ring, the subscribers and the store's queue, all in one turn of
// the lock (the events of one call's transition come together). After
// Close the events get the time and ID 0, and go nowhere.
func (h *Hub) publish(evs []posted) {
	h.mu.Lock()
	// Taken under the lock, so that times never go back as ids go up.
	now := time.Now().UTC()
	if h.closed {
		h.mu.Unlock()
		for i := range evs {
			evs[i].Time = now
		}
		return
	}
	for i := range evs {
		h.lastID++
		evs[i].ID, evs[i].Time = h.lastID, now
	}
	h.mem.pushAll(evs)
	for _, e := range evs {
		for _, s := range h.subs {
			s.offer(e)
		}
		if h.persistQ != nil {
			select {
			case h.persistQ <- e:
				h.lastEnqueued = e.ID
			default:
				h.persistDropped.Add(1)
			}
		}
	}
	h.mu.Unlock()
	h.published.Add(uint64(len(evs)))
}

func cleanName(name string) string {
	if name == "" {
		return "unnamed"
	}
	if strings.ContainsAny(name, "\r\n") {
		name = strings.NewReplacer("\r", " ", "\n", " ").Replace(name)
	}
	return name
}

// encode turns a payload into compact JSON, which the SSE writer relies on
// (one data: line per event).
func (h *Hub) encode(name string, data any) json.RawMessage {
	var raw []byte
	var err error
	switch v := data.(type) {
	case nil:
		return emptyObject
	case jsonAppender:
		size := 128
		if h, ok := v.(interface{ sizeHint() int }); ok {
			size = h.sizeHint()
		}
		if b, ok := v.appendJSON(make([]byte, 0, size)); ok {
			return b
		}
		raw, err = json.Marshal(v)
	case map[string]any:
		if b, ok := appendValue(make([]byte, 0, 128), v); ok {
			return b
		}
		raw, err = json.Marshal(v)
	case json.RawMessage:
		raw, err = compact(v)
	case []byte:
		raw, err = compact(v)
	default:
		raw, err = json.Marshal(v)
	}
	if err != nil {
		h.log.Warn("stream: payload does not encode", "event", name, "err", err)
		raw, _ = json.Marshal(map[string]string{"encode_error": err.Error()})
	}
	return raw
}

func compact(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// persist is the one goroutine writing to the store: it takes what the
// queue holds, up to maxPersistBatch events, and appends it as one batch,
// so a slow store costs one call per batch, not per event.
func (h *Hub) persist() {
	defer close(h.persisterDone)
	batch := make([]Event, 0, maxPersistBatch)
	failed := 0 // events lost since the store last accepted a batch
	var linger *time.Timer
	if h.cfg.linger > 0 {
		linger = time.NewTimer(h.cfg.linger)
		linger.Stop()
	}
	// Payloads not encoded yet are encoded here, off the calls' path.
	for e := range h.persistQ {
		batch = append(batch[:0], e.resolve())
		var due <-chan time.Time
		if linger != nil {
			linger.Reset(h.cfg.linger)
			due = linger.C
		}
	fill:
		for len(batch) < maxPersistBatch {
			select {
			case e, ok := <-h.persistQ:
				if !ok {
					break fill
				}
				batch = append(batch, e.resolve())
				continue
			default:
			}
			if due == nil {
				break
			}
			// Nothing queued: wait for more until the batch is due.
			select {
			case e, ok := <-h.persistQ:
				if !ok {
					break fill
				}
				batch = append(batch, e.resolve())
			case <-due:
				break fill
			case <-h.persistCtx.Done():
				break fill
			}
		}
		if linger != nil {
			linger.Stop()
		}
		if h.persistCtx.Err() != nil {
			// Close gave up waiting: what is left is not persisted.
			h.persistDropped.Add(uint64(len(batch)))
		} else if err := h.cfg.store.AppendEvents(h.persistCtx, batch...); err != nil {
			h.persistFailed.Add(uint64(len(batch)))
			// A store that is down fails every batch: say so once, and
			// again when it recovers, not once per batch.
			if failed == 0 {
				h.log.Error("stream: persisting events failed", "from_id", batch[0].ID,
					"to_id", batch[len(batch)-1].ID, "err", err)
			}
			failed += len(batch)
		} else {
			h.persistedN.Add(uint64(len(batch)))
			if failed > 0 {
				h.log.Info("stream: persisting events again", "lost", failed)
				failed = 0
			}
		}
		h.advance(batch[len(batch)-1].ID)
		clear(batch) // release the payloads
	}
}

// advance records that every event up to id has been handed to the store
// and wakes replays waiting for it.
func (h *Hub) advance(id int64) {
	h.pmu.Lock()
	h.persisted = id
	close(h.progress)
	h.progress = make(chan struct{})
	h.pmu.Unlock()
}

// waitPersisted waits until every event up to id has been handed to the
// store, so that a replay from the store has no hole where the queue was.
func (h *Hub) waitPersisted(ctx context.Context, id int64) error {
	for {
		h.pmu.Lock()
		done, ch := h.persisted >= id, h.progress
		h.pmu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-h.persisterDone:
			return nil // nothing more will be persisted: replay what is there
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close stops the hub: Publish publishes nothing more, subscribers are
// delivered what they already have and then their channels are closed,
// and the events waiting for the store are persisted — all within ctx.
// When ctx ends first, Close cancels the store's call, drops what is left
// (counted in Stats), ends every subscription, waits for its goroutines
// and returns ctx's error. Calling it again waits the same way.
func (h *Hub) Close(ctx context.Context) error {
	h.closeOnce.Do(func() {
		h.mu.Lock()
		h.closed = true
		if h.persistQ != nil {
			close(h.persistQ)
		}
		h.mu.Unlock()
		close(h.closing)
	})
	done := make(chan struct{})
	go func() {
		h.subsWG.Wait()
		<-h.persisterDone
		close(done)
	}()
	select {
	case <-done:
		h.persistCancel()
		return nil
	case <-ctx.Done():
		select {
		case <-done: // both were ready
			h.persistCancel()
			return nil
		default:
		}
	}
	h.forceOnce.Do(func() {
		h.persistCancel()
		h.mu.Lock()
		for _, s := range h.subs {
			s.cancel()
		}
		h.mu.Unlock()
	})
	<-done
	return ctx.Err()
}

// Stats is a snapshot of a hub's counters.
type Stats struct {
	// LastID is the id of the last event published.
	LastID int64 `json:"last_id"`
	// Published counts the events published.
	Published uint64 `json:"published"`
	// Subscribers is how many subscriptions are open.
	Subscribers int `json:"subscribers"`
	// Dropped counts events subscribers lost because their buffer was
	// full, over all subscriptions.
	Dropped uint64 `json:"dropped"`
	// PersistQueued is how many events wait for the store now.
	PersistQueued int `json:"persist_queued"`
	// Persisted counts events the store accepted.
	Persisted uint64 `json:"persisted"`
	// PersistDropped counts events never handed to the store: the queue
	// was full, or Close gave up waiting.
	PersistDropped uint64 `json:"persist_dropped"`
	// PersistFailed counts events in batches the store refused.
	PersistFailed uint64 `json:"persist_failed"`
}

// Stats returns the hub's counters.
func (h *Hub) Stats() Stats {
	h.mu.Lock()
	st := Stats{LastID: h.lastID, Subscribers: len(h.subs), PersistQueued: len(h.persistQ)}
	h.mu.Unlock()
	st.Published = h.published.Load()
	st.Dropped = h.dropped.Load()
	st.Persisted = h.persistedN.Load()
	st.PersistDropped = h.persistDropped.Load()
	st.PersistFailed = h.persistFailed.Load()
	return st
}
