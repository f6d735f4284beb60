package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

// DefaultApprovalTimeout is how long a call waits for someone to answer
// in the web page or the API before it is refused: policy's default,
// shorter than the time MCP clients give a request.
const DefaultApprovalTimeout = policy.DefaultApprovalTimeout

// DefaultApproverGrace is how long after the last approver went away the
// queue still takes requests: a page reloading, or reconnecting its event
// stream, is away for a moment only.
const DefaultApproverGrace = 10 * time.Second

// DefaultProgressInterval is how often a waiting call tells its client
// (by MCP progress, when the client asked for progress) that it still
// waits and where to answer: often enough for clients that reset their
// request timeout on progress.
const DefaultProgressInterval = 10 * time.Second

// endedMemory bounds how many answered or withdrawn requests the queue
// remembers, so that a late answer gets a reason rather than "unknown".
const endedMemory = 1024

// Pending is a call waiting for approval, as the API lists it.
type Pending struct {
	// ID is the call's ID, the call_id of the stream's approval_request.
	ID        string         `json:"id"`
	Task      string         `json:"task,omitempty"`
	Server    string         `json:"server"`
	Tool      string         `json:"tool"`
	Arguments map[string]any `json:"arguments"`
	// Caller names who made the call, and so asks; "" when no
	// authentication is configured.
	Caller string `json:"caller,omitempty"`
	// Rule and Message are the policy's reason for asking.
	Rule    string    `json:"rule,omitempty"`
	Message string    `json:"message,omitempty"`
	Since   time.Time `json:"since"`
	// Deadline is when the call is refused if nobody answers.
	Deadline time.Time `json:"deadline"`
}

// The ways a wait ends, in [Ending.Outcome].
const (
	// OutcomeAnswered: someone answered (approve or deny).
	OutcomeAnswered = "answered"
	// OutcomeWithdrawn: the call's client went away (cancelled, closed its
	// request or session) or the call was approved by an "always" answer
	// given elsewhere; it will not wait again.
	OutcomeWithdrawn = "withdrawn"
	// OutcomeTimedOut: nobody answered before the deadline.
	OutcomeTimedOut = "timed_out"
	// OutcomeUnattended: every approver went away while it waited.
	OutcomeUnattended = "unattended"
)

// Ending says how a wait ended.
type Ending struct {
	Outcome string    `json:"outcome"`
	Message string    `json:"message"`
	At      time.Time `json:"at"`
}

// ApprovalOptions configure an [Approvals] queue; zero fields take the
// defaults.
type ApprovalOptions struct {
	// Timeout bounds one wait (DefaultApprovalTimeout).
	Timeout time.Duration
	// Grace is how long requests are still taken after the last approver
	// went away (DefaultApproverGrace); negative means not at all.
	Grace time.Duration
	// ProgressInterval is how often a waiting call reports progress to its
	// client (DefaultProgressInterval).
	ProgressInterval time.Duration
	// Where names the place approvers answer, for the messages a client
	// and the refusals show: "http://127.0.0.1:8931/".
	Where string
	// Expect takes questions even while nobody is attached, each waiting
	// at most Timeout for someone to come: for a process whose user was
	// just told to open the page (toolmux run --serve), not for a gateway,
	// whose clients must not wait on a page nobody may open.
	Expect bool
	// OnPending is told of every call that starts waiting; OnEnded of how
	// each wait ended (to say so on a console). Both must return quickly;
	// they are called outside the queue's lock.
	OnPending func(Pending)
	OnEnded   func(Pending, Ending)
}

// Approvals is an approver whose questions wait for an answer given
// through the HTTP API (and the web page on top of it).
//
// A question is put only to someone who can answer now: while an approver
// is attached ([Approvals.Attach]; the page's event stream opened with
// ?approver=1), or less than the grace after the last one left. Otherwise
// Approve returns at once a *policy.NoApproverError saying where to
// attach, and the gate refuses the call with how to allow it. A waiting
// call ends when someone answers ([Approvals.Decide]), when its context
// ends — its client went away: the request is withdrawn and can never
// run —, when the timeout passes, or when every approver has gone. While
// it waits, a call whose context carries a progress callback
// (tool.WithProgress: an MCP client that asked for progress) is told
// every ProgressInterval where to answer and how long is left.
//
// Safe for concurrent use.
type Approvals struct {
	o ApprovalOptions

	mu        sync.Mutex
	pending   map[string]*waiting
	approvers int
	grace     *time.Timer // runs while nobody is attached but the grace is not over
	ended     map[string]Ending
	endedIDs  []string // oldest first, for eviction
	// askers are the callers of the questions waiting or remembered in
	// ended (those with a caller), by id: whose each is (Asker).
	askers map[string]*identity.Ref
}

type waiting struct {
	info Pending
	done chan verdict // buffered: whoever ends the wait never blocks
}

type verdict struct {
	ans policy.Answer
	err error
}

// NewApprovals returns an empty queue with nobody attached; nil options
// take the defaults.
func NewApprovals(o *ApprovalOptions) *Approvals {
	a := &Approvals{pending: map[string]*waiting{}, ended: map[string]Ending{}, askers: map[string]*identity.Ref{}}
	if o != nil {
		a.o = *o
	}
	if a.o.Timeout <= 0 {
		a.o.Timeout = DefaultApprovalTimeout
	}
	if a.o.Grace == 0 {
		a.o.Grace = DefaultApproverGrace
	}
	if a.o.ProgressInterval <= 0 {
		a.o.ProgressInterval = DefaultProgressInterval
	}
	return a
}

// Timeout is how long a call waits for an answer.
func (a *Approvals) Timeout() time.Duration { return a.o.Timeout }

// SetWhere names the place approvers answer (see ApprovalOptions.Where),
// once it is known: the address serve listens on.
func (a *Approvals) SetWhere(where string) {
	a.mu.Lock()
	a.o.Where = where
	a.mu.Unlock()
}

// ErrUnknownApproval is returned by Decide for an ID no call waits under
// (never asked, already answered, withdrawn or timed out).
var ErrUnknownApproval = errors.New("no call is waiting for approval under this id")

// EndedError is Decide's error for a call that waited but no longer does:
// it says how its wait ended. It matches ErrUnknownApproval.
type EndedError struct {
	ID     string
	Ending Ending
}

func (e *EndedError) Error() string {
	return fmt.Sprintf("call %s no longer waits for approval (%s at %s: %s); it will not run on this answer",
		e.ID, e.Ending.Outcome, e.Ending.At.Format(time.RFC3339), e.Ending.Message)
}

// Is makes an EndedError match ErrUnknownApproval.
func (e *EndedError) Is(target error) bool { return target == ErrUnknownApproval }

// Attach registers an approver: someone who can answer now. Questions
// are put while at least one is attached; detach (safe to call more than
// once) says it went away. When the last one goes, questions are still
// taken for the grace, then the calls still waiting are refused.
func (a *Approvals) Attach() (detach func()) {
	a.mu.Lock()
	a.approvers++
	if a.grace != nil {
		a.grace.Stop()
		a.grace = nil
	}
	a.mu.Unlock()
	var once sync.Once
	return func() { once.Do(a.detach) }
}

func (a *Approvals) detach() {
	a.mu.Lock()
	if a.approvers--; a.approvers > 0 || a.o.Expect {
		a.mu.Unlock()
		return
	}
	if a.o.Grace < 0 {
		a.unattended() // unlocks
		return
	}
	var t *time.Timer
	t = time.AfterFunc(a.o.Grace, func() {
		a.mu.Lock()
		if a.grace != t || a.approvers > 0 {
			a.mu.Unlock()
			return
		}
		a.grace = nil
		a.unattended() // unlocks
	})
	a.grace = t
	a.mu.Unlock()
}

// unattended refuses every waiting call, nobody being left to answer;
// a.mu is held, and released before OnEnded is told.
func (a *Approvals) unattended() {
	reason := "everyone who could answer it went away (the web page was closed)"
	var ended []*waiting
	e := Ending{Outcome: OutcomeUnattended, Message: reason, At: time.Now()}
	for id, w := range a.pending {
		delete(a.pending, id)
		a.rememberLocked(w.info.ID, e)
		w.done <- verdict{err: &policy.UnansweredError{Reason: reason}}
		ended = append(ended, w)
	}
	a.mu.Unlock()
	for _, w := range ended {
		a.told(w.info, e)
	}
}

// Approvers returns how many approvers are attached.
func (a *Approvals) Approvers() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.approvers
}

// Attached reports whether a question put now would be taken: an approver
// is attached, or the last one left less than the grace ago.
func (a *Approvals) Attached() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.attachedLocked()
}

func (a *Approvals) attachedLocked() bool {
	return a.o.Expect || a.approvers > 0 || a.grace != nil
}

// where names the place to answer, for messages.
func (a *Approvals) whereLocked() string {
	if a.o.Where != "" {
		return "the web page at " + a.o.Where
	}
	return "the web page"
}

// Available implements policy.Availability: nil while a question put now
// would be taken, else why not and where to answer.
func (a *Approvals) Available(context.Context, policy.Request) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.attachedLocked() {
		return nil
	}
	return a.unavailableLocked()
}

func (a *Approvals) unavailableLocked() error {
	return &policy.NoApproverError{Hints: []string{
		"approvals are asked on " + a.whereLocked() + " only while it is open: open it first, then make the call"}}
}

// Approve implements policy.Approver: the request waits in the queue, if
// anyone is there to answer it.
func (a *Approvals) Approve(ctx context.Context, req policy.Request) (policy.Answer, error) {
	id := req.Call.ID
	if id == "" {
		id = tool.NewID()
	}
	now := time.Now()
	asker := req.Call.Caller
	if asker == nil {
		asker = identity.RefFrom(ctx)
	}
	w := &waiting{done: make(chan verdict, 1), info: Pending{
		ID: id, Task: req.Call.Task, Server: req.Call.Server, Tool: req.Call.Tool, Arguments: req.Call.Arguments, Caller: asker.String(),
		Rule: req.Decision.Rule, Message: req.Decision.Message, Since: now, Deadline: now.Add(a.o.Timeout),
	}}
	a.mu.Lock()
	where := a.whereLocked()
	if !a.attachedLocked() {
		err := a.unavailableLocked()
		a.mu.Unlock()
		return 0, err
	}
	if _, dup := a.pending[id]; dup {
		a.mu.Unlock()
		return 0, fmt.Errorf("a call with id %s is already waiting for approval", id)
	}
	a.pending[id] = w
	if asker != nil {
		a.askers[id] = asker
	}
	a.mu.Unlock()
	if a.o.OnPending != nil {
		a.o.OnPending(w.info)
	}

	report := tool.ProgressFrom(ctx)
	tell := func(at time.Time) {
		if report == nil {
			return
		}
		left := w.info.Deadline.Sub(at).Round(time.Second)
		report(tool.Progress{
			Progress: at.Sub(now).Seconds(), Total: a.o.Timeout.Seconds(),
			Message: fmt.Sprintf("waiting for approval of %s/%s on %s (call %s); refused in %s if nobody answers",
				req.Call.Server, req.Call.Tool, where, id, left),
		})
	}
	tell(now)
	tick := time.NewTicker(a.o.ProgressInterval)
	defer tick.Stop()
	timer := time.NewTimer(a.o.Timeout)
	defer timer.Stop()
	for {
		select {
		case v := <-w.done:
			return v.ans, v.err
		case at := <-tick.C:
			tell(at)
		case <-ctx.Done():
			why := "the call's client went away"
			if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
				why = c.Error()
			}
			if a.end(id, Ending{Outcome: OutcomeWithdrawn, Message: why}) {
				return 0, ctx.Err()
			}
			v := <-w.done // ended meanwhile by someone else
			return v.ans, v.err
		case <-timer.C:
			reason := fmt.Sprintf("nobody answered on %s within %s", where, a.o.Timeout)
			if a.end(id, Ending{Outcome: OutcomeTimedOut, Message: reason}) {
				return 0, &policy.UnansweredError{Reason: reason}
			}
			v := <-w.done
			return v.ans, v.err
		}
	}
}

// end takes the call off the queue with how its wait ended, unless
// someone else did first (then it returns false, and the verdict is on its
// way).
func (a *Approvals) end(id string, e Ending) bool {
	e.At = time.Now()
	a.mu.Lock()
	w, ok := a.pending[id]
	if ok {
		delete(a.pending, id)
		a.rememberLocked(id, e)
	}
	a.mu.Unlock()
	if ok {
		a.told(w.info, e)
	}
	return ok
}

// rememberLocked keeps how a wait ended, for a late answer; a.mu is held.
func (a *Approvals) rememberLocked(id string, e Ending) {
	if _, seen := a.ended[id]; !seen {
		if len(a.endedIDs) >= endedMemory {
			delete(a.ended, a.endedIDs[0])
			delete(a.askers, a.endedIDs[0])
			a.endedIDs = a.endedIDs[1:]
		}
		a.endedIDs = append(a.endedIDs, id)
	}
	a.ended[id] = e
}

// Asker returns who made the call of the question id, waiting or ended
// (while the queue remembers it); ok is false for an id it does not
// know. A question of a call made with no caller has a nil asker.
func (a *Approvals) Asker(id string) (asker *identity.Ref, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, waits := a.pending[id]
	_, ended := a.ended[id]
	return a.askers[id], waits || ended
}

func (a *Approvals) told(p Pending, e Ending) {
	if a.o.OnEnded != nil {
		a.o.OnEnded(p, e)
	}
}

// Decide answers the call waiting under id. A call that no longer waits
// gets an *EndedError saying why (or ErrUnknownApproval, for an id never
// seen): an answer given after the call's client went away never runs it.
func (a *Approvals) Decide(id string, ans policy.Answer) error {
	e := Ending{Outcome: OutcomeAnswered, Message: ans.String(), At: time.Now()}
	a.mu.Lock()
	w, ok := a.pending[id]
	if !ok {
		defer a.mu.Unlock()
		if e, ok := a.ended[id]; ok {
			return &EndedError{ID: id, Ending: e}
		}
		return ErrUnknownApproval
	}
	delete(a.pending, id) // a second answer finds it ended
	a.rememberLocked(id, e)
	w.done <- verdict{ans: ans}
	a.mu.Unlock()
	a.told(w.info, e)
	return nil
}

// Pending lists the calls waiting, oldest first.
func (a *Approvals) Pending() []Pending {
	a.mu.Lock()
	out := make([]Pending, 0, len(a.pending))
	for _, w := range a.pending {
		out = append(out, w.info)
	}
	a.mu.Unlock()
	slices.SortFunc(out, func(x, y Pending) int { return x.Since.Compare(y.Since) })
	return out
}
