package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolmux/toolmux/tool"
)

// Status is where a run is.
type Status string

// The statuses of a run. Done and Failed are final.
const (
	// StatusQueued: waiting for a worker (also after a worker handed it
	// back or died).
	StatusQueued Status = "queued"
	// StatusRunning: a worker holds it.
	StatusRunning Status = "running"
	// StatusDone: the agent answered (whatever its answer).
	StatusDone Status = "done"
	// StatusFailed: the agent failed (the model could not be reached, say),
	// or the run was given up after MaxDeliveries deliveries.
	StatusFailed Status = "failed"
)

// Final reports whether a run in this status is over.
func (s Status) Final() bool { return s == StatusDone || s == StatusFailed }

// Request is a run to submit.
type Request struct {
	// ID names the run; "" gives it a new one. Submitting an id already
	// submitted runs nothing: its run is the one returned.
	ID string `json:"id"`
	// Task is what the agent is asked to do.
	Task string `json:"task"`
	// Agent names the agent of the workers' configuration to run ("" is
	// the main agent).
	Agent string `json:"agent,omitempty"`
	// Metadata is kept with the run in the task log.
	Metadata map[string]any `json:"metadata,omitempty"`
}

// Run is a run's state as the fleet keeps it.
type Run struct {
	Request
	Status Status `json:"status"`
	// Worker is the worker that holds (or last held) the run.
	Worker string `json:"worker,omitempty"`
	// Deliveries counts the times the queue handed the run to a worker.
	Deliveries int `json:"deliveries,omitempty"`
	// QueueSeq is the queue message the run was taken from: a second
	// message of the same run (submitted again after the queue's
	// de-duplication window) is recognised and dropped.
	QueueSeq  uint64    `json:"queue_seq,omitempty"`
	Submitted time.Time `json:"submitted"`
	Started   time.Time `json:"started,omitzero"`
	Ended     time.Time `json:"ended,omitzero"`
	// Answer is the final answer; AgentStatus the agent's own status
	// (answered, max_turns, ...).
	Answer      string `json:"answer,omitempty"`
	AgentStatus string `json:"agent_status,omitempty"`
	// Error says why a failed run failed.
	Error string `json:"error,omitempty"`
	// Turns and Calls are the agent's counts.
	Turns int `json:"turns,omitempty"`
	Calls int `json:"calls,omitempty"`

	rev uint64
}

// RequestError is a request the fleet refuses.
type RequestError struct {
	ID, Reason string
}

func (e *RequestError) Error() string {
	if e.ID == "" {
		return "fleet: bad run request: " + e.Reason
	}
	return fmt.Sprintf("fleet: run %q: %s", e.ID, e.Reason)
}

// NotFoundError is a run the fleet does not know.
type NotFoundError struct{ ID string }

func (e *NotFoundError) Error() string { return fmt.Sprintf("fleet: no run %q", e.ID) }

// Submit queues a run. created is false when the id was submitted before:
// nothing is queued again, and the run returned is the earlier one.
func (f *Fleet) Submit(ctx context.Context, req Request) (run *Run, created bool, err error) {
	if req.ID == "" {
		req.ID = tool.NewID()
	}
	if req.Task == "" {
		return nil, false, &RequestError{ID: req.ID, Reason: "the task is empty"}
	}
	r := &Run{Request: req, Status: StatusQueued, Submitted: time.Now().UTC()}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, false, &RequestError{ID: req.ID, Reason: "metadata: " + err.Error()}
	}
	rev, err := f.runs.Create(ctx, key(req.ID), b)
	if errors.Is(err, jetstream.ErrKeyExists) {
		old, gerr := f.Get(ctx, req.ID)
		if gerr != nil {
			return nil, false, gerr
		}
		if old.Status == StatusQueued && old.QueueSeq == 0 {
			// Queued and never taken: its queue message may be the one
			// lost between the state and the queue; sending it again is
			// harmless (de-duplicated, or dropped by the worker that
			// finds the run taken).
			if err := f.enqueue(ctx, &old.Request); err != nil {
				return nil, false, err
			}
		}
		return old, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("fleet: recording run %q: %w", req.ID, err)
	}
	r.rev = rev
	if err := f.enqueue(ctx, &req); err != nil {
		return nil, false, err
	}
	return r, true, nil
}

func (f *Fleet) enqueue(ctx context.Context, req *Request) error {
	b, _ := json.Marshal(req)
	msg := nats.NewMsg(f.queueSubject())
	msg.Data = b
	msg.Header.Set(jetstream.MsgIDHeader, req.ID)
	if _, err := f.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("fleet: queueing run %q: %w", req.ID, err)
	}
	return nil
}

// Get returns a run's state, or a *NotFoundError.
func (f *Fleet) Get(ctx context.Context, id string) (*Run, error) {
	e, err := f.runs.Get(ctx, key(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, &NotFoundError{ID: id}
	}
	if err != nil {
		return nil, fmt.Errorf("fleet: reading run %q: %w", id, err)
	}
	return decodeRun(e)
}

func decodeRun(e jetstream.KeyValueEntry) (*Run, error) {
	r := &Run{}
	if err := json.Unmarshal(e.Value(), r); err != nil {
		return nil, fmt.Errorf("fleet: run entry %s: %w", e.Key(), err)
	}
	r.rev = e.Revision()
	return r, nil
}

// update applies fn to a run's state by compare-and-set, retrying when
// another writer came first; fn returning errStop leaves it as it is.
func (f *Fleet) update(ctx context.Context, id string, fn func(r *Run) error) (*Run, error) {
	for {
		r, err := f.Get(ctx, id)
		var nf *NotFoundError
		if errors.As(err, &nf) {
			r = &Run{Request: Request{ID: id}}
		} else if err != nil {
			return nil, err
		}
		if err := fn(r); err != nil {
			return r, err
		}
		b, _ := json.Marshal(r)
		if r.rev == 0 {
			r.rev, err = f.runs.Create(ctx, key(id), b)
		} else {
			r.rev, err = f.runs.Update(ctx, key(id), b, r.rev)
		}
		if err == nil {
			return r, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongSeq(err) {
			return nil, fmt.Errorf("fleet: updating run %q: %w", id, err)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

func isWrongSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// listTimeout bounds a listing of the runs.
const listTimeout = 30 * time.Second

// Runs lists every run the fleet keeps, in no particular order.
//
// The states are read as one watcher's initial values (an ordered
// consumer delivering the bucket's last value of every key, in batches),
// not as a list of keys and a request per key: a round trip per run made
// GET /api/fleet, which the page polls every 2 s, cost about 50 µs per run
// (260 ms with 5000 runs; 20 ms this way: BenchmarkSummarize).
func (f *Fleet) Runs(ctx context.Context) ([]*Run, error) {
	// A watcher whose server went away waits for it to come back; a
	// listing asked without a deadline (an HTTP request's context) must
	// still end.
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	w, err := f.runs.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("fleet: listing runs: %w", err)
	}
	defer w.Stop() //nolint:errcheck // nothing to do about it
	var out []*Run
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("fleet: listing runs: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("fleet: listing runs: the watch of runs ended")
			}
			// nil marks the end of the initial values: every key's
			// current state has been read.
			if e == nil {
				return out, nil
			}
			r, err := decodeRun(e)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
	}
}

// Watch calls fn with the state of the runs ids (every run with none)
// now and at every change, until fn returns false or ctx ends.
func (f *Fleet) Watch(ctx context.Context, fn func(*Run) bool, ids ...string) error {
	keys := []string{">"}
	if len(ids) > 0 {
		keys = keys[:0]
		for _, id := range ids {
			keys = append(keys, key(id))
		}
	}
	w, err := f.runs.WatchFiltered(ctx, keys, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("fleet: watching runs: %w", err)
	}
	defer w.Stop() //nolint:errcheck // nothing to do about it
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("fleet: the watch of runs ended")
			}
			if e == nil {
				continue // the initial values have all come
			}
			r, err := decodeRun(e)
			if err != nil {
				continue
			}
			if !fn(r) {
				return nil
			}
		}
	}
}

// Wait returns when the run has ended, with its final state.
func (f *Fleet) Wait(ctx context.Context, id string) (*Run, error) {
	var last *Run
	err := f.Watch(ctx, func(r *Run) bool {
		last = r
		return !r.Status.Final()
	}, id)
	if err != nil {
		return last, err
	}
	return last, nil
}

// Workers lists the workers alive (their heartbeats not yet expired).
func (f *Fleet) Workers(ctx context.Context) ([]WorkerInfo, error) {
	lister, err := f.workers.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("fleet: listing workers: %w", err)
	}
	var out []WorkerInfo
	for k := range lister.Keys() {
		e, err := f.workers.Get(ctx, k)
		if err != nil {
			continue // gone since the listing
		}
		var w WorkerInfo
		if json.Unmarshal(e.Value(), &w) == nil {
			out = append(out, w)
		}
	}
	return out, nil
}
