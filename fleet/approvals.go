package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

// Approvals cross the fleet by NATS request and reply, not JetStream: a
// question needs someone who can answer now, and "nobody is there" must be
// known at once (NATS answers a request nobody listens to with "no
// responders"), never queued for later. A worker's approver asks on
// PREFIX.approvals.ask; the fleet's gateways answer in a queue group (one
// of them takes each question) with whatever approver serve has (the page,
// the console with --yes). A question whose run is cancelled or lost is
// withdrawn on PREFIX.approvals.withdraw, so it leaves the page and can
// never be answered into a call that runs.

// question is an approval question as it travels.
type question struct {
	ID          string           `json:"id"`
	Worker      string           `json:"worker"`
	Run         string           `json:"run"`
	Session     string           `json:"session,omitempty"`
	Server      string           `json:"server"`
	Tool        string           `json:"tool"`
	Arguments   map[string]any   `json:"arguments,omitempty"`
	Rule        string           `json:"rule,omitempty"`
	Message     string           `json:"message,omitempty"`
	Annotations tool.Annotations `json:"annotations,omitzero"`
	Description string           `json:"description,omitempty"`
	// Caller is who asks: the run's submitter (its name, subject and
	// groups; never a credential), nil for a run of no caller.
	Caller *identity.Caller `json:"caller,omitempty"`
}

// reply is a gateway's answer.
type reply struct {
	Answer string `json:"answer,omitempty"`
	// Error, when set, refuses the call: no_approver (with Hints),
	// unanswered (with Reason) or failed.
	Error  string   `json:"error,omitempty"`
	Reason string   `json:"reason,omitempty"`
	Hints  []string `json:"hints,omitempty"`
}

func (f *Fleet) askSubject() string      { return f.opts.Prefix + ".approvals.ask" }
func (f *Fleet) withdrawSubject() string { return f.opts.Prefix + ".approvals.withdraw" }

// Approver returns the policy.Approver of a worker: each question goes to
// a gateway of the fleet and waits at most maxWait (default 10 min, the
// gateway's own approval timeout normally ends it first).
func (f *Fleet) Approver(worker string, maxWait time.Duration) policy.Approver {
	if maxWait <= 0 {
		maxWait = 10 * time.Minute
	}
	return &remoteApprover{f: f, worker: worker, maxWait: maxWait}
}

type remoteApprover struct {
	f       *Fleet
	worker  string
	maxWait time.Duration
}

func (a *remoteApprover) Approve(ctx context.Context, req policy.Request) (policy.Answer, error) {
	q := question{ID: req.Call.ID, Worker: a.worker, Run: req.Call.Task, Session: req.Call.Session, Server: req.Call.Server,
		Tool: req.Call.Tool, Arguments: req.Call.Arguments, Rule: req.Decision.Rule, Message: req.Decision.Message,
		Annotations: req.Tool.Annotations, Description: req.Tool.Description, Caller: req.Caller}
	if q.ID == "" {
		q.ID = tool.NewID()
	}
	b, err := json.Marshal(q)
	if err != nil {
		return 0, fmt.Errorf("fleet: encoding an approval question: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, a.maxWait)
	defer cancel()
	msg, err := a.f.nc.RequestWithContext(wctx, a.f.askSubject(), b)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return 0, &policy.NoApproverError{Hints: []string{
				"no gateway of the fleet is up to ask: start `toolmux serve --nats URL` and open its page, or allow the call in the workers' policy"}}
		}
		// Cancelled (the run ended or was lost), or no answer in time:
		// the question leaves the page.
		a.f.nc.Publish(a.f.withdrawSubject(), []byte(q.ID)) //nolint:errcheck // best effort: the gateway's own timeout ends it too
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, &policy.UnansweredError{Reason: fmt.Sprintf("no gateway answered within %s", a.maxWait)}
	}
	var r reply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return 0, fmt.Errorf("fleet: a gateway's approval answer: %w", err)
	}
	switch r.Error {
	case "":
	case "no_approver":
		return 0, &policy.NoApproverError{Hints: r.Hints}
	case "unanswered":
		return 0, &policy.UnansweredError{Reason: r.Reason}
	default:
		return 0, fmt.Errorf("fleet: the gateway could not ask: %s", r.Reason)
	}
	ans, ok := policy.AnswerNamed(r.Answer)
	if !ok {
		return 0, fmt.Errorf("fleet: the gateway answered %q, not an answer", r.Answer)
	}
	return ans, nil
}

// ServeApprovals answers the workers' approval questions with approver
// (serve's: the page, the console) until stop is called; questions still
// waiting are withdrawn then.
func (f *Fleet) ServeApprovals(approver policy.Approver, log *slog.Logger) (stop func(), err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	type asked struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	var (
		mu      sync.Mutex
		waiting = map[string]*asked{}
		wg      sync.WaitGroup
	)
	wsub, err := f.nc.Subscribe(f.withdrawSubject(), func(m *nats.Msg) {
		mu.Lock()
		w := waiting[string(m.Data)]
		mu.Unlock()
		if w != nil {
			w.cancel()
		}
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("fleet: serving approvals: %w", err)
	}
	asub, err := f.nc.QueueSubscribe(f.askSubject(), "gateways", func(m *nats.Msg) {
		var q question
		if err := json.Unmarshal(m.Data, &q); err != nil || q.ID == "" {
			b, _ := json.Marshal(reply{Error: "failed", Reason: "a malformed question"})
			m.Respond(b) //nolint:errcheck // the asker times out otherwise
			return
		}
		qctx, qcancel := context.WithCancel(ctx)
		me := &asked{cancel: qcancel, done: make(chan struct{})}
		mu.Lock()
		prev := waiting[q.ID]
		waiting[q.ID] = me
		mu.Unlock()
		wg.Go(func() {
			defer func() {
				mu.Lock()
				if waiting[q.ID] == me {
					delete(waiting, q.ID)
				}
				mu.Unlock()
				qcancel()
				close(me.done)
			}()
			if prev != nil {
				// The same call asked again: its run was resumed by
				// another worker, and the first asker is gone. Its
				// question leaves before this one is put.
				prev.cancel()
				<-prev.done
			}
			// A question whose worker dies leaves with it: the worker's
			// heartbeat is watched while the question waits.
			stopWatch := f.watchWorker(qctx, q.Worker, qcancel)
			defer stopWatch()
			req := policy.Request{
				Tool: tool.Tool{Server: q.Server, Name: q.Tool, Description: q.Description, Annotations: q.Annotations},
				Call: tool.Call{ID: q.ID, Server: q.Server, Tool: q.Tool, Arguments: q.Arguments, Task: q.Run, Session: q.Session,
					Caller: q.Caller.Ref()},
				Decision: policy.Decision{Action: policy.Ask, Rule: q.Rule, Message: q.Message},
				// The question is its asker's, as a gateway client's is:
				// who sees it, who may answer it (not its asker, with
				// self-approval off).
				Caller: q.Caller,
			}
			actx := qctx
			if q.Caller != nil {
				actx = identity.With(qctx, q.Caller)
			}
			ans, err := approver.Approve(actx, req)
			var r reply
			var nae *policy.NoApproverError
			var ue *policy.UnansweredError
			switch {
			case err == nil:
				r.Answer = ans.String()
			case errors.As(err, &nae):
				r.Error, r.Hints = "no_approver", nae.Hints
			case errors.Is(err, policy.ErrNoApprover):
				r.Error = "no_approver"
			case errors.As(err, &ue):
				r.Error, r.Reason = "unanswered", ue.Reason
			case qctx.Err() != nil:
				// Withdrawn (by the worker, its death, or the same call
				// asked again), or the gateway stops: the asker is gone
				// or will hear nothing that runs the call.
				r.Error, r.Reason = "unanswered", "the question was withdrawn"
			default:
				r.Error, r.Reason = "failed", err.Error()
			}
			b, _ := json.Marshal(r)
			if err := m.Respond(b); err != nil {
				log.Warn("could not answer a worker's approval question", "call", q.ID, "error", err)
			}
		})
	})
	if err != nil {
		wsub.Unsubscribe() //nolint:errcheck // closing anyway
		cancel()
		return nil, fmt.Errorf("fleet: serving approvals: %w", err)
	}
	return func() {
		asub.Unsubscribe() //nolint:errcheck // the connection closes next
		cancel()
		wg.Wait()
		wsub.Unsubscribe() //nolint:errcheck // idem
	}, nil
}

// watchWorker calls gone once worker's heartbeat entry has expired
// (checked every heartbeat), until ctx ends or stop is called.
func (f *Fleet) watchWorker(ctx context.Context, worker string, gone func()) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(f.opts.heartbeat())
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			_, err := f.workers.Get(ctx, worker)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				gone()
				return
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}
