package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
	// Error says why a failed run failed, and ErrorKind what kind of
	// failure it was: the agent's kind (agent.KindOf: model_failed,
	// cancelled, ...), ErrorKindGivenUp, or ErrorKindRunFailed.
	Error     string `json:"error,omitempty"`
	ErrorKind string `json:"error_kind,omitempty"`
	// Turns and Calls are the agent's counts.
	Turns int `json:"turns,omitempty"`
	Calls int `json:"calls,omitempty"`
	// SubmitterKey is the public nkey of the member that submitted the
	// run, in a fleet of members (docs/fleet.md); "" for a run of the
	// fleet's admin (a fleet without members, or its token). It is read
	// from where the run's state lives, which only that member (and the
	// workers) may write, never from what the state says.
	SubmitterKey string `json:"submitter_key,omitempty"`
	// Submitter is that member's name, and TaskID the run's task in the
	// fleet's task log (the run's id, or SUBMITTER:ID for a member's
	// run, so that two members' ids never meet): the worker that takes
	// the run sets them, from the fleet's members.
	Submitter string `json:"submitter,omitempty"`
	TaskID    string `json:"task_id,omitempty"`

	rev uint64
}

// runRef is where a run lives: whose it is (owner: the public nkey of
// the member that submitted it, "" for a run of the fleet's admin) and its
// id, unique among its owner's.
type runRef struct{ owner, id string }

// key is the run's key in the runs bucket: its id's token, under
// u.OWNER. for a member's.
func (r runRef) key() string {
	if r.owner == "" {
		return key(r.id)
	}
	return memberSpace + r.owner + "." + key(r.id)
}

// msgID de-duplicates the run's queue messages.
func (r runRef) msgID() string {
	if r.owner == "" {
		return r.id
	}
	return r.owner + "/" + r.id
}

// memberSpace begins the keys and subjects of a member's runs.
const memberSpace = "u."

// own is where this member's run id lives: under its key for a
// submitter, the admin's otherwise.
func (f *Fleet) own(id string) runRef {
	if m := f.opts.Member; m != nil && m.Role == RoleSubmitter {
		return runRef{owner: m.Key, id: id}
	}
	return runRef{id: id}
}

// refOf is where the run of entry key k lives.
func refOf(k string) (owner string) {
	if rest, ok := strings.CutPrefix(k, memberSpace); ok {
		if owner, _, ok := strings.Cut(rest, "."); ok {
			return owner
		}
	}
	return ""
}

// queueSubjectOf is the subject the runs of owner are queued on: the
// queue's own for the admin's, PREFIX.queue.u.OWNER for a member's, which
// only that member may publish on.
func (f *Fleet) queueSubjectOf(owner string) string {
	if owner == "" {
		return f.queueSubject()
	}
	return f.opts.Prefix + ".queue." + memberSpace + owner
}

// submitterOf is whose the queue message on subject is: "" for the
// queue's own subject, the public nkey a member's subject names; ok is
// false for a subject of neither form.
func (f *Fleet) submitterOf(subject string) (owner string, ok bool) {
	if subject == f.queueSubject() {
		return "", true
	}
	owner, ok = strings.CutPrefix(subject, f.opts.Prefix+".queue."+memberSpace)
	return owner, ok && validToken(owner)
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
//
// A member submitting with credentials of its own (a submitter) submits
// as itself: the run is queued on its own subject, which tells the
// workers who submitted it, and its id is its own, apart from every other
// member's ids. A refusal of the NATS server (credentials that may not
// submit: a worker's) is a *PermissionError.
func (f *Fleet) Submit(ctx context.Context, req Request) (run *Run, created bool, err error) {
	ctx, end := f.denied.guard(ctx)
	defer func() { err = end(err) }()
	if req.ID == "" {
		req.ID = tool.NewID()
	}
	if req.Task == "" {
		return nil, false, &RequestError{ID: req.ID, Reason: "the task is empty"}
	}
	ref := f.own(req.ID)
	r := &Run{Request: req, Status: StatusQueued, Submitted: time.Now().UTC(), SubmitterKey: ref.owner}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, false, &RequestError{ID: req.ID, Reason: "metadata: " + err.Error()}
	}
	rev, err := f.runs.Create(ctx, ref.key(), b)
	if errors.Is(err, jetstream.ErrKeyExists) {
		old, gerr := f.get(ctx, ref)
		if gerr != nil {
			return nil, false, gerr
		}
		if old.Status == StatusQueued && old.QueueSeq == 0 {
			// Queued and never taken: its queue message may be the one
			// lost between the state and the queue; sending it again is
			// harmless (de-duplicated, or dropped by the worker that
			// finds the run taken).
			if err := f.enqueue(ctx, ref, &old.Request); err != nil {
				return nil, false, err
			}
		}
		return old, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("fleet: recording run %q: %w", req.ID, err)
	}
	r.rev = rev
	if err := f.enqueue(ctx, ref, &req); err != nil {
		if _, refused := context.Cause(ctx).(*PermissionError); refused {
			// Credentials that may write a state but not queue a run (a
			// worker's): the state just made would wait for ever.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = f.runs.Delete(dctx, ref.key(), jetstream.LastRevision(rev))
			cancel()
		}
		return nil, false, err
	}
	return r, true, nil
}

func (f *Fleet) enqueue(ctx context.Context, ref runRef, req *Request) error {
	b, _ := json.Marshal(req)
	msg := nats.NewMsg(f.queueSubjectOf(ref.owner))
	msg.Data = b
	msg.Header.Set(jetstream.MsgIDHeader, ref.msgID())
	if _, err := f.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("fleet: queueing run %q: %w", req.ID, err)
	}
	return nil
}

// Get returns a run's state, or a *NotFoundError. A submitter's ids are
// its own runs'.
func (f *Fleet) Get(ctx context.Context, id string) (r *Run, err error) {
	ctx, end := f.denied.guard(ctx)
	defer func() { err = end(err) }()
	return f.get(ctx, f.own(id))
}

func (f *Fleet) get(ctx context.Context, ref runRef) (*Run, error) {
	e, err := f.runs.Get(ctx, ref.key())
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, &NotFoundError{ID: ref.id}
	}
	if err != nil {
		return nil, fmt.Errorf("fleet: reading run %q: %w", ref.id, err)
	}
	return decodeRun(e)
}

func decodeRun(e jetstream.KeyValueEntry) (*Run, error) {
	r := &Run{}
	if err := json.Unmarshal(e.Value(), r); err != nil {
		return nil, fmt.Errorf("fleet: run entry %s: %w", e.Key(), err)
	}
	r.rev = e.Revision()
	// Whose the run is is where it lives.
	r.SubmitterKey = refOf(e.Key())
	return r, nil
}

// update applies fn to a run's state by compare-and-set, retrying when
// another writer came first; fn returning errStop leaves it as it is.
func (f *Fleet) update(ctx context.Context, ref runRef, fn func(r *Run) error) (*Run, error) {
	for {
		r, err := f.get(ctx, ref)
		var nf *NotFoundError
		if errors.As(err, &nf) {
			r = &Run{Request: Request{ID: ref.id}, SubmitterKey: ref.owner}
		} else if err != nil {
			return nil, err
		}
		if err := fn(r); err != nil {
			return r, err
		}
		b, _ := json.Marshal(r)
		if r.rev == 0 {
			r.rev, err = f.runs.Create(ctx, ref.key(), b)
		} else {
			r.rev, err = f.runs.Update(ctx, ref.key(), b, r.rev)
		}
		if err == nil {
			return r, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongSeq(err) {
			return nil, fmt.Errorf("fleet: updating run %q: %w", ref.id, err)
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
//
// A submitter lists its own runs only.
func (f *Fleet) Runs(ctx context.Context) (_ []*Run, err error) {
	// A watcher whose server went away waits for it to come back; a
	// listing asked without a deadline (an HTTP request's context) must
	// still end.
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	ctx, end := f.denied.guard(ctx)
	defer func() { err = end(err) }()
	var out []*Run
	err = readAll(ctx, f.runs, f.allKeys(), "runs", func(e jetstream.KeyValueEntry) error {
		r, err := decodeRun(e)
		if err == nil {
			out = append(out, r)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// readAll hands fn the current entry of every key of kv that filter
// matches, read as one watcher's initial values, and returns once they
// have all come (or fn fails, or ctx ends). what names them in errors.
func readAll(ctx context.Context, kv jetstream.KeyValue, filter, what string, fn func(jetstream.KeyValueEntry) error) error {
	w, err := kv.WatchFiltered(ctx, []string{filter}, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("fleet: listing %s: %w", what, err)
	}
	defer w.Stop() //nolint:errcheck // nothing to do about it
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("fleet: listing %s: %w", what, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("fleet: listing %s: the watch ended", what)
			}
			// nil marks the end of the initial values: every key's
			// current state has been read.
			if e == nil {
				return nil
			}
			if err := fn(e); err != nil {
				return err
			}
		}
	}
}

// allKeys is the keys of every run this member may read: a submitter's
// own, or all.
func (f *Fleet) allKeys() string {
	if ref := f.own(""); ref.owner != "" {
		return memberSpace + ref.owner + ".>"
	}
	return ">"
}

// Watch calls fn with the state of the runs ids (every run with none;
// a submitter's own) now and at every change, until fn returns false or
// ctx ends.
func (f *Fleet) Watch(ctx context.Context, fn func(*Run) bool, ids ...string) (err error) {
	ctx, end := f.denied.guard(ctx)
	defer func() { err = end(err) }()
	keys := []string{f.allKeys()}
	var only map[string]bool
	switch {
	case len(ids) == 1:
		keys = []string{f.own(ids[0]).key()}
	case len(ids) > 1 && f.own("").owner != "":
		// One filter, which names the submitter's own runs in the
		// request (its permissions allow no other); the ids are picked
		// here.
		only = make(map[string]bool, len(ids))
		for _, id := range ids {
			only[id] = true
		}
	case len(ids) > 1:
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
			if err != nil || only != nil && !only[r.ID] {
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
func (f *Fleet) Workers(ctx context.Context) (_ []WorkerInfo, err error) {
	ctx, end := f.denied.guard(ctx)
	defer func() { err = end(err) }()
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
