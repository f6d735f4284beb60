package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/agent"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/tasklog/jsjournal"
)

// The kinds of a failed run's error (Run.ErrorKind) besides the agent's.
const (
	// ErrorKindGivenUp: the queue handed the run out MaxDeliveries times
	// and it never finished.
	ErrorKindGivenUp = "given_up"
	// ErrorKindRunFailed: the run failed with an error of no kind the
	// agent knows.
	ErrorKindRunFailed = "run_failed"
)

// runErrorKind is the kind of the error a run failed with.
func runErrorKind(err error) string {
	if k := agent.KindOf(err); k != "" {
		return string(k)
	}
	return ErrorKindRunFailed
}

// Runner runs one run (the worker's runtime: toolmux.Runtime is one).
type Runner interface {
	Run(ctx context.Context, t toolmux.Task) (*agent.Result, error)
}

// Claimer fences a run's journal writes by the worker that holds it
// (*jsjournal.Journal is one): Claim when the run is taken, Renew with
// the lease, Release when it is over or handed back.
type Claimer interface {
	Claim(ctx context.Context, task, owner string) (uint64, error)
	Renew(ctx context.Context, task string) (uint64, error)
	Release(task string)
}

// WorkerOptions adjust a worker. Runner is required.
type WorkerOptions struct {
	// Name names the worker in run states and the page (default
	// HOST-PID).
	Name string
	// Concurrency is how many runs the worker runs at once (default 1).
	Concurrency int
	// Runner runs the runs.
	Runner Runner
	// Journal fences the runs' journal writes; nil: unfenced.
	Journal Claimer
	// Events is the store of the runner's event hub, told when a run
	// begins and waited on before a run is acknowledged; nil: none.
	Events *EventStore
	// Grace is how long Run waits, once its context ends, for the runs
	// in progress to finish before handing them back (default 30s).
	Grace time.Duration
	// Servers reports the health of the worker's servers for the page
	// (nil: none).
	Servers func() map[string]string
	// Logger receives diagnostics (default: discarded).
	Logger *slog.Logger
	// OnRun, when set, is told of each run the worker takes, resumes,
	// finishes, hands back or loses (toolmux worker says them on
	// stderr). It is called from the run's goroutine and must return
	// quickly.
	OnRun func(RunNotice)
}

// RunNotice is a change of a run on a worker, as WorkerOptions.OnRun is
// told it.
type RunNotice struct {
	// Run is the run's id; Task its task's text (which may be long, and
	// is the submitter's: show a prefix at most).
	Run, Task string
	// State is what happened: RunTaken (first delivery), RunResumed
	// (taken again after a worker handed it back or died), RunFinished,
	// RunHandedBack (draining past the grace), RunLost (another worker
	// holds it now) or RunGivenUp (past the fleet's max_deliveries).
	State string
	// Deliveries counts the times the queue handed the run out.
	Deliveries int
	// Status is a finished run's: done or failed; AgentStatus the
	// agent's (answered, max_turns, ...).
	Status      Status
	AgentStatus string
	// Took is how long this worker held the run, once it let it go.
	Took time.Duration
}

// The states of a RunNotice.
const (
	RunTaken      = "taken"
	RunResumed    = "resumed"
	RunFinished   = "finished"
	RunHandedBack = "handed back"
	RunLost       = "lost"
	RunGivenUp    = "given up"
)

// notify tells OnRun of n.
func (w *Worker) notify(n RunNotice) {
	if w.o.OnRun != nil {
		w.o.OnRun(n)
	}
}

// Worker takes runs from the fleet's queue and runs them.
type Worker struct {
	f    *Fleet
	o    WorkerOptions
	log  *slog.Logger
	cons jetstream.Consumer

	mu      sync.Mutex
	running map[string]time.Time
	started time.Time
}

// WorkerInfo is a worker as the workers bucket shows it.
type WorkerInfo struct {
	Name        string            `json:"name"`
	Host        string            `json:"host"`
	PID         int               `json:"pid"`
	Concurrency int               `json:"concurrency"`
	Running     []string          `json:"running"`
	Started     time.Time         `json:"started"`
	Seen        time.Time         `json:"seen"`
	Servers     map[string]string `json:"servers,omitempty"`
}

// NewWorker returns a worker of the fleet; Run starts it.
func (f *Fleet) NewWorker(ctx context.Context, o WorkerOptions) (*Worker, error) {
	if o.Runner == nil {
		return nil, &ConfigError{Field: "runner", Reason: "a worker needs a runner"}
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 1
	}
	if o.Grace <= 0 {
		o.Grace = 30 * time.Second
	}
	host, _ := os.Hostname()
	defaultName := fmt.Sprintf("%s-%d", host, os.Getpid())
	if o.Name == "" {
		o.Name = defaultName
	}
	if !jsjournal.ValidToken(o.Name) {
		return nil, &ConfigError{Field: "name", Reason: fmt.Sprintf("%q: want letters, digits, '-' and '_'", o.Name)}
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if f.opts.Member.binds() {
		// A member's name is the fleet's: its heartbeat is its own.
		self, err := f.Self(ctx)
		if err != nil {
			return nil, err
		}
		if o.Name != self.Name && o.Name != defaultName {
			return nil, &ConfigError{Field: "name", Reason: fmt.Sprintf("%q: this worker's credentials are member %q's, and its name is its member's", o.Name, self.Name)}
		}
		o.Name = self.Name
	} else if err := f.setLease(ctx); err != nil {
		return nil, err
	}
	cons, err := f.queueConsumer(ctx)
	if err != nil {
		return nil, err
	}
	return &Worker{f: f, o: o, log: log, cons: cons, running: map[string]time.Time{}, started: time.Now().UTC()}, nil
}

// queueConsumer is the queue's one consumer, which every worker shares:
// the queue hands each run to one of them, and to another when the lease
// (AckWait) lapses. Deliveries are counted by the worker, which gives a
// run up after MaxDeliveries; the consumer itself never stops. The
// fleet's admin (a worker of a fleet without members, the gateway) makes
// it with its lease; a member binds to it and takes its lease, the
// gateway's.
func (f *Fleet) queueConsumer(ctx context.Context) (jetstream.Consumer, error) {
	if f.opts.Member.binds() {
		cons, err := f.js.Consumer(ctx, f.queueStream(), f.consumerName())
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, &NotSetUpError{What: "the queue's consumer " + f.consumerName()}
		}
		if err != nil {
			return nil, fmt.Errorf("fleet: joining the queue: %w", err)
		}
		if lease := cons.CachedInfo().Config.AckWait; lease > 0 {
			f.opts.Lease = lease
		}
		return cons, nil
	}
	cons, err := f.js.CreateOrUpdateConsumer(ctx, f.queueStream(), jetstream.ConsumerConfig{
		Durable:       f.consumerName(),
		Description:   "toolmux workers",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       f.opts.Lease,
		MaxDeliver:    -1,
		MaxAckPending: -1,
		// Every submitter's subject, and the admin's.
		FilterSubject: f.opts.Prefix + ".queue.>",
	})
	if err != nil {
		return nil, fmt.Errorf("fleet: joining the queue: %w", err)
	}
	return cons, nil
}

// Name is the worker's name.
func (w *Worker) Name() string { return w.o.Name }

// Run takes and runs runs until ctx ends, then drains: it takes no more,
// lets the runs in progress finish for Grace, and hands back the rest
// (they are redelivered at once to another worker, which resumes them).
func (w *Worker) Run(ctx context.Context) error {
	// Runs live on their own context: the worker's ending only stops
	// taking new ones; runs are cancelled after the grace.
	runCtx, cancelRuns := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRuns()
	beatCtx, stopBeat := context.WithCancel(context.WithoutCancel(ctx))
	var beat sync.WaitGroup
	beat.Go(func() { w.heartbeat(beatCtx) })
	defer func() {
		stopBeat()
		beat.Wait()
		// Gone from the page at once, not a TTL later.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = w.f.workers.Delete(dctx, w.o.Name)
		cancel()
	}()

	var slots sync.WaitGroup
	for range w.o.Concurrency {
		slots.Go(func() {
			for ctx.Err() == nil {
				fctx, cancel := context.WithTimeout(ctx, time.Second)
				batch, err := w.cons.Fetch(1, jetstream.FetchContext(fctx))
				if err != nil {
					cancel()
					if ctx.Err() == nil {
						w.log.Warn("fetching from the queue", "error", err)
						sleep(ctx, time.Second)
					}
					continue
				}
				for m := range batch.Messages() {
					w.handle(runCtx, m)
				}
				cancel()
			}
		})
	}
	<-ctx.Done()
	done := make(chan struct{})
	go func() { slots.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(w.o.Grace):
		running := w.Running()
		w.log.Info("handing back the runs still in progress", "runs", len(running))
		if w.o.Events != nil {
			// Their cancellation is not their end: they go on elsewhere.
			for _, id := range running {
				w.o.Events.mute(id)
			}
		}
		cancelRuns()
		<-done
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// Running lists the runs in progress.
func (w *Worker) Running() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.running))
	for id := range w.running {
		out = append(out, id)
	}
	return out
}

func (w *Worker) heartbeat(ctx context.Context) {
	t := time.NewTicker(w.f.opts.heartbeat())
	defer t.Stop()
	host, _ := os.Hostname()
	for {
		info := WorkerInfo{Name: w.o.Name, Host: host, PID: os.Getpid(), Concurrency: w.o.Concurrency,
			Running: w.Running(), Started: w.started, Seen: time.Now().UTC()}
		if w.o.Servers != nil {
			info.Servers = w.o.Servers()
		}
		b, _ := json.Marshal(info)
		if _, err := w.f.workers.Put(ctx, w.o.Name, b); err != nil && ctx.Err() == nil {
			w.log.Warn("could not announce the worker", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// handle runs one delivery of a run.
func (w *Worker) handle(ctx context.Context, m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		w.log.Warn("a queue message without metadata", "error", err)
		_ = m.Term()
		return
	}
	var req Request
	if err := json.Unmarshal(m.Data(), &req); err != nil || req.ID == "" {
		w.log.Warn("dropping a malformed run request", "error", err)
		_ = m.Term()
		return
	}
	// Who submitted the run is the subject it came on, which only its
	// submitter may publish on: never what the request says.
	owner, ok := w.f.submitterOf(m.Subject())
	if !ok {
		w.log.Warn("dropping a run request on a subject of no submitter", "subject", m.Subject())
		_ = m.Term()
		return
	}
	ref := runRef{owner: owner, id: req.ID}
	task, caller := req.ID, (*identity.Caller)(nil)
	if owner != "" {
		sub, err := w.f.Member(ctx, owner)
		var nm *NotMemberError
		switch {
		case errors.As(err, &nm) || err == nil && sub.Role != RoleSubmitter:
			if err == nil {
				nm = &NotMemberError{Key: owner, Name: sub.Name, Role: sub.Role}
			}
			w.refuse(ctx, m, ref, nm)
			return
		case err != nil:
			w.log.Warn("could not read a run's submitter; handing it back", "run", req.ID, "error", err)
			_ = m.NakWithDelay(time.Second)
			return
		}
		caller, task = sub.Caller(), sub.Name+":"+req.ID
	}
	deliveries := int(meta.NumDelivered)
	seq := meta.Sequence.Stream
	// Take the run in its state, by compare-and-set: a second message of
	// a run already taken (or over) is dropped; a redelivery of the same
	// message is the run handed back or its worker gone, and is taken.
	var giveUp bool
	run, err := w.f.update(ctx, ref, func(r *Run) error {
		if r.Request.ID == "" || r.Task == "" {
			r.Request = req
		}
		if r.Status.Final() || (r.QueueSeq != 0 && r.QueueSeq != seq) {
			return errStop
		}
		r.Deliveries = deliveries
		r.QueueSeq = seq
		r.Worker = w.o.Name
		r.TaskID = task
		if caller != nil {
			r.Submitter = caller.Name
		}
		if deliveries > w.f.opts.MaxDeliveries {
			giveUp = true
			r.Status = StatusFailed
			r.Ended = time.Now().UTC()
			r.Error = fmt.Sprintf("given up after %d deliveries: the run never finished (its workers died or handed it back)", deliveries-1)
			r.ErrorKind = ErrorKindGivenUp
			return nil
		}
		r.Status = StatusRunning
		if r.Started.IsZero() {
			r.Started = time.Now().UTC()
		}
		return nil
	})
	switch {
	case errors.Is(err, errStop):
		w.log.Info("dropping a message of a run taken or over", "run", req.ID, "status", run.Status)
		_ = m.Ack()
		return
	case err != nil:
		w.log.Warn("could not take a run; handing it back", "run", req.ID, "error", err)
		_ = m.NakWithDelay(time.Second)
		return
	case giveUp:
		w.log.Warn("giving up a run", "run", req.ID, "deliveries", deliveries)
		_ = m.Term()
		w.notify(RunNotice{Run: req.ID, Task: req.Task, State: RunGivenUp, Deliveries: deliveries, Status: StatusFailed})
		return
	}
	took := time.Now()
	notice := RunNotice{Run: req.ID, Task: req.Task, State: RunTaken, Deliveries: deliveries}
	if deliveries > 1 {
		notice.State = RunResumed
	}
	w.notify(notice)
	// let says how this worker let the run go.
	let := func(state string, status Status, agentStatus string) {
		notice.State, notice.Status, notice.AgentStatus, notice.Took = state, status, agentStatus, time.Since(took)
		w.notify(notice)
	}
	w.mu.Lock()
	w.running[task] = time.Now()
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.running, task)
		w.mu.Unlock()
	}()
	if w.o.Journal != nil {
		if _, err := w.o.Journal.Claim(ctx, task, w.o.Name); err != nil {
			w.log.Warn("could not claim a run's journal; handing it back", "run", req.ID, "error", err)
			_ = m.NakWithDelay(time.Second)
			return
		}
		defer w.o.Journal.Release(task)
	}
	if w.o.Events != nil {
		w.o.Events.begin(task, w.f.eventSubjectOf(ref))
		defer w.o.Events.End(task)
	}

	// The lease: renewed while the run lives; lost (another worker
	// claimed the run) stops it.
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var lease sync.WaitGroup
	lease.Go(func() { w.renew(runCtx, cancel, m, task) })
	// The run is its submitter's: its calls are decided, recorded and
	// limited for that caller, as a gateway's call by it would be.
	callCtx := runCtx
	if caller != nil {
		callCtx = identity.With(runCtx, caller)
	}
	res, runErr := w.o.Runner.Run(callCtx, toolmux.Task{ID: task, Input: req.Task, Agent: req.Agent, Metadata: req.Metadata, Resume: true})
	if w.o.Events != nil && res != nil {
		// The agent ran: its events end with end_of_workflow.
		wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if err := w.o.Events.WaitEnded(wctx, task); err != nil {
			w.log.Warn("the run's last events were not stored in time", "run", req.ID, "error", err)
		}
		wcancel()
	}
	lost := context.Cause(runCtx)
	cancel(nil)
	lease.Wait()
	if lost != nil && !errors.Is(lost, context.Canceled) {
		// Another worker holds it now: nothing more is written.
		w.log.Warn("lost a run to another worker", "run", req.ID, "cause", lost)
		let(RunLost, "", "")
		return
	}
	if ctx.Err() != nil {
		// Draining past the grace: hand the run back, to be resumed.
		w.handBack(m, ref)
		let(RunHandedBack, StatusQueued, "")
		return
	}
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer fcancel()
	_, err = w.f.update(fctx, ref, func(r *Run) error {
		if r.Worker != w.o.Name || r.QueueSeq != seq {
			return errStop
		}
		r.Ended = time.Now().UTC()
		if res != nil {
			r.Answer, r.AgentStatus, r.Turns, r.Calls = res.Answer, string(res.Status), res.Turns, res.Calls
		}
		r.Status = StatusDone
		if runErr != nil {
			r.Status, r.Error, r.ErrorKind = StatusFailed, runErr.Error(), runErrorKind(runErr)
		}
		return nil
	})
	if errors.Is(err, errStop) {
		// Another worker took the run while this one was cut off (its
		// lease lapsed unnoticed): the queue message is that worker's
		// now. An acknowledgement removes a message by its stream
		// sequence, whoever holds it, and the run would be lost with its
		// new worker; this attempt's end is not the run's.
		w.log.Warn("finished a run another worker holds now; leaving it to that worker", "run", req.ID)
		let(RunLost, "", "")
		return
	}
	if err != nil {
		w.log.Warn("could not record the end of a run", "run", req.ID, "error", err)
	}
	status, agentStatus := StatusDone, ""
	if res != nil {
		agentStatus = string(res.Status)
	}
	if runErr != nil {
		status = StatusFailed
	}
	let(RunFinished, status, agentStatus)
	if err := m.DoubleAck(fctx); err != nil {
		w.log.Warn("the queue did not take the acknowledgement of a run", "run", req.ID, "error", err)
	}
}

// refuse ends a run whose submitter is not a submitter of the fleet (a
// member removed since it submitted, or no member at all): it fails,
// saying so, and leaves the queue.
func (w *Worker) refuse(ctx context.Context, m jetstream.Msg, ref runRef, why error) {
	w.log.Warn("refusing a run of no submitter of the fleet", "run", ref.id, "error", why)
	_, err := w.f.update(ctx, ref, func(r *Run) error {
		if r.Status.Final() {
			return errStop
		}
		r.Status, r.Error, r.Worker, r.Ended = StatusFailed, why.Error(), w.o.Name, time.Now().UTC()
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		w.log.Warn("could not record a refused run", "run", ref.id, "error", err)
	}
	_ = m.Term()
}

// errLeaseLost ends a run whose lease another worker took.
var errLeaseLost = errors.New("the run's lease was lost to another worker")

func (w *Worker) renew(ctx context.Context, cancel context.CancelCauseFunc, m jetstream.Msg, id string) {
	t := time.NewTicker(w.f.opts.heartbeat())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := m.InProgress(); err != nil {
			w.log.Warn("could not renew a run's lease", "run", id, "error", err)
		}
		if w.o.Journal != nil {
			rctx, rcancel := context.WithTimeout(ctx, w.f.opts.Lease)
			_, err := w.o.Journal.Renew(rctx, id)
			rcancel()
			if err != nil && ctx.Err() == nil && isOwnership(err) {
				// The journal refuses this worker's records of the run
				// from now on; its events must stop too.
				if w.o.Events != nil {
					w.o.Events.mute(id)
				}
				cancel(fmt.Errorf("%w: %v", errLeaseLost, err))
				return
			}
		}
	}
}

func isOwnership(err error) bool {
	var oe *jsjournal.OwnershipError
	return errors.As(err, &oe)
}

func (w *Worker) handBack(m jetstream.Msg, ref runRef) {
	id := ref.id
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := w.f.update(ctx, ref, func(r *Run) error {
		if r.Worker != w.o.Name || r.Status != StatusRunning {
			return errStop
		}
		r.Status = StatusQueued
		return nil
	})
	if errors.Is(err, errStop) {
		// Not this worker's any more (see handle): its message is
		// another's to settle.
		return
	}
	if err != nil {
		w.log.Warn("could not record a run handed back", "run", id, "error", err)
	}
	if err := m.Nak(); err != nil {
		w.log.Warn("could not hand a run back; it returns after its lease", "run", id, "error", err)
	}
	w.log.Info("handed a run back", "run", id)
}
