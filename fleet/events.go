package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolmux/toolmux/stream"
)

// seqHeader numbers a run's events 1, 2, 3, … across every worker that
// held it: a worker taking a run over goes on from the last one stored.
const seqHeader = "Toolmux-Seq"

// Event is one event of a run as the fleet's events stream keeps it.
type Event struct {
	// Seq numbers the run's events from 1, with no gap.
	Seq  int64           `json:"seq"`
	Name string          `json:"name"`
	Task string          `json:"task"`
	Time time.Time       `json:"time"`
	Data json.RawMessage `json:"data,omitempty"`
	// Worker is the worker that published it.
	Worker string `json:"worker,omitempty"`
}

// EventStore is the stream.Store of a worker's event hub: it appends each
// event of a run to the run's subject of the fleet's events stream, where
// the submitter, the page and the next worker find it. Events of no run
// (a server's tools/list_changed) stay local.
type EventStore struct {
	f      *Fleet
	worker string

	mu   sync.Mutex
	seqs map[string]int64
	// subjects are the runs' events' subjects, by task (Begin): a
	// member's run's are under its submitter's key.
	subjects map[string]string
	// ended are runs whose end_of_workflow event is stored.
	ended map[string]chan struct{}
	// muted are runs this worker gave up (handed back past the grace, or
	// lost to another worker) until it takes them again: the events of
	// their cancellation (an error, the workflow's end) are not the run's
	// (it goes on elsewhere), and a worker that lost a run must not write
	// into it.
	muted map[string]bool
}

// NewEventStore returns the event store of worker's hub.
func NewEventStore(f *Fleet, worker string) *EventStore {
	return &EventStore{f: f, worker: worker, seqs: map[string]int64{}, subjects: map[string]string{}, ended: map[string]chan struct{}{}, muted: map[string]bool{}}
}

// AppendEvents publishes evs, in order, and returns when the stream has
// stored them all. Events whose publication fails (the server went away
// with them) are sent again, under the same numbers and message ids,
// until stored or ctx ends: no number is lost. What got through
// meanwhile is stored before them, so across a server restart a run's
// events may be stored out of their numbers' order.
func (s *EventStore) AppendEvents(ctx context.Context, evs ...stream.Event) error {
	type sent struct {
		msg  *nats.Msg
		task string
		fut  jetstream.PubAckFuture
	}
	batch := make([]sent, 0, len(evs))
	var ended []string
	for _, e := range evs {
		if e.Task == "" {
			continue
		}
		if s.isMuted(e.Task) {
			if e.Name == stream.EventEndOfWorkflow {
				// Dropped, but over: WaitEnded need not wait for it.
				ended = append(ended, e.Task)
			}
			continue
		}
		subject := s.subjectOf(e.Task)
		seq, err := s.next(ctx, e.Task, subject)
		if err != nil {
			return err
		}
		b, _ := json.Marshal(Event{Seq: seq, Name: e.Name, Task: e.Task, Time: e.Time, Data: e.Data, Worker: s.worker})
		msg := nats.NewMsg(subject)
		msg.Data = b
		msg.Header.Set(seqHeader, strconv.FormatInt(seq, 10))
		// A retried batch is stored once.
		msg.Header.Set(jetstream.MsgIDHeader, e.Task+"/"+strconv.FormatInt(seq, 10))
		// An event that cannot be sent now is sent again below, and
		// so are the rest, in order.
		var fut jetstream.PubAckFuture
		if len(batch) == 0 || batch[len(batch)-1].fut != nil {
			fut, _ = s.f.js.PublishMsgAsync(msg)
		}
		batch = append(batch, sent{msg: msg, task: e.Task, fut: fut})
		if e.Name == stream.EventEndOfWorkflow {
			ended = append(ended, e.Task)
		}
	}
	// The numbering of the runs of events that could not be stored is
	// read again from the stream: their next events are numbered from the
	// last one stored, so the loss leaves no gap in the numbers.
	forget := func(lost []sent) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, b := range lost {
			delete(s.seqs, b.task)
		}
	}
	// Every answer is awaited before anything is sent again, so that an
	// event sent again cannot overtake one still in flight.
	retry := -1
	for i, b := range batch {
		if b.fut == nil {
			if retry < 0 {
				retry = i
			}
			continue
		}
		select {
		case <-b.fut.Ok():
		case <-b.fut.Err():
			// The server went away with it (a restart), or did not
			// answer in time: its number is taken, so it must be
			// stored, or the run's events would have a gap.
			if retry < 0 {
				retry = i
			}
		case <-ctx.Done():
			if retry < 0 {
				retry = i
			}
			forget(batch[retry:])
			return ctx.Err()
		}
	}
	if retry >= 0 {
		for i, b := range batch[retry:] {
			if err := s.republish(ctx, b.msg); err != nil {
				forget(batch[retry+i:])
				return fmt.Errorf("fleet: storing an event of run %q: %w", b.task, err)
			}
		}
	}
	s.mu.Lock()
	for _, task := range ended {
		s.endedLocked(task)
	}
	s.mu.Unlock()
	return nil
}

// republish sends an event again, until the stream stores it or ctx
// ends: its message id makes a copy already stored count as stored.
func (s *EventStore) republish(ctx context.Context, msg *nats.Msg) error {
	wait := 100 * time.Millisecond
	for {
		_, err := s.f.js.PublishMsg(ctx, msg)
		if err == nil {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}

func (s *EventStore) endedLocked(task string) {
	ch, ok := s.ended[task]
	if !ok {
		ch = make(chan struct{})
		s.ended[task] = ch
	}
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// subjectOf is the subject of task's events: as Begin was told, or the
// run's of that id of the fleet's admin.
func (s *EventStore) subjectOf(task string) string {
	s.mu.Lock()
	subject, ok := s.subjects[task]
	s.mu.Unlock()
	if !ok {
		subject = s.f.eventSubjectOf(runRef{id: task})
	}
	return subject
}

// next is the run's next event number: one above the last stored, read
// from the stream at the run's first event in this process.
func (s *EventStore) next(ctx context.Context, task, subject string) (int64, error) {
	s.mu.Lock()
	n, ok := s.seqs[task]
	s.mu.Unlock()
	if !ok {
		last, err := s.f.lastEventSeq(ctx, subject)
		if err != nil {
			return 0, err
		}
		n = last
	}
	n++
	s.mu.Lock()
	s.seqs[task] = n
	s.mu.Unlock()
	return n, nil
}

func (s *EventStore) isMuted(task string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.muted[task]
}

// mute drops the run's events from now until it is taken again (Begin):
// the worker is giving it up. Events of the run that the hub has not
// handed to the store yet are dropped too: the next worker numbers its
// own from the last one stored, so nothing is left with a gap.
func (s *EventStore) mute(task string) {
	s.mu.Lock()
	s.muted[task] = true
	s.mu.Unlock()
}

// Begin readies the store for a run taken by this worker: its numbering
// is read afresh (another worker may have gone on since).
func (s *EventStore) Begin(task string) { s.begin(task, s.f.eventSubjectOf(runRef{id: task})) }

// begin is Begin for a run whose events go on subject.
func (s *EventStore) begin(task, subject string) {
	s.mu.Lock()
	s.subjects[task] = subject
	delete(s.muted, task)
	delete(s.seqs, task)
	if ch, ok := s.ended[task]; ok {
		select {
		case <-ch:
			delete(s.ended, task)
		default:
		}
	}
	s.mu.Unlock()
}

// WaitEnded returns once the run's end_of_workflow event is stored.
func (s *EventStore) WaitEnded(ctx context.Context, task string) error {
	s.mu.Lock()
	ch, ok := s.ended[task]
	if !ok {
		ch = make(chan struct{})
		s.ended[task] = ch
	}
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// End forgets a run this worker no longer holds.
func (s *EventStore) End(task string) {
	s.mu.Lock()
	delete(s.seqs, task)
	delete(s.subjects, task)
	delete(s.ended, task)
	s.mu.Unlock()
}

// EventsAfter has nothing: a worker's hub replays from its memory; the
// fleet's events are read with Fleet.Events.
func (s *EventStore) EventsAfter(context.Context, int64, string, int) ([]stream.Event, error) {
	return nil, nil
}

// LastEventID is 0: a worker's hub numbers its events for itself.
func (s *EventStore) LastEventID(context.Context) (int64, error) { return 0, nil }

// LastEventSeq is the highest number of a run's stored events, 0 if
// none. Events sent again after a server's restart may be stored after
// higher ones, so the last stored is not always the highest: every one's
// number is read (headers only).
func (f *Fleet) LastEventSeq(ctx context.Context, id string) (_ int64, err error) {
	ctx, end := f.denied.guard(ctx)
	defer func() { err = end(err) }()
	n, err := f.lastEventSeq(ctx, f.eventSubjectOf(f.own(id)))
	if err != nil {
		return 0, fmt.Errorf("fleet: reading the events of run %q: %w", id, err)
	}
	return n, nil
}

func (f *Fleet) lastEventSeq(ctx context.Context, subject string) (int64, error) {
	if _, err := f.events.GetLastMsgForSubject(ctx, subject); errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	var highest int64
	err := f.follow(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}, HeadersOnly: true},
		func(m jetstream.Msg, meta *jetstream.MsgMetadata) bool {
			if n, err := strconv.ParseInt(m.Headers().Get(seqHeader), 10, 64); err == nil {
				highest = max(highest, n)
			}
			return meta.NumPending > 0
		})
	if err != nil {
		return 0, err
	}
	return highest, nil
}

// Events calls fn with the events of run id (every run's with ""; a
// submitter's, its own) after number after, in order, the stored ones
// first, then live ones as they come, until fn returns false or ctx ends.
func (f *Fleet) Events(ctx context.Context, id string, after int64, fn func(Event) bool) (err error) {
	ctx, end := f.denied.guard(ctx)
	defer func() { err = end(err) }()
	subject := f.opts.Prefix + ".events.>"
	if ref := f.own(id); id != "" {
		subject = f.eventSubjectOf(ref)
	} else if ref.owner != "" {
		subject = f.opts.Prefix + ".events." + memberSpace + ref.owner + ".>"
	}
	return f.follow(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}},
		func(m jetstream.Msg, _ *jetstream.MsgMetadata) bool {
			var e Event
			if json.Unmarshal(m.Data(), &e) != nil || id != "" && e.Seq <= after {
				return true
			}
			return fn(e)
		})
}

// follow reads the events stream through an ordered consumer of cfg,
// handing each message to fn until fn returns false (nil) or ctx ends
// (its error).
func (f *Fleet) follow(ctx context.Context, cfg jetstream.OrderedConsumerConfig, fn func(jetstream.Msg, *jetstream.MsgMetadata) bool) error {
	cons, err := f.events.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("fleet: following events: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("fleet: following events: %w", err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("fleet: following events: %w", err)
		}
		meta, err := m.Metadata()
		if err != nil {
			continue
		}
		if !fn(m, meta) {
			return nil
		}
	}
}
