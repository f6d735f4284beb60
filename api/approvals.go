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

// Who may answer approvals when callers are known (docs/gateway.md
// "Approvals by approvers"): members of the approvers group, and of the
// admin group, who may do everything. The groups are configurable
// (ApprovalOptions); these are their defaults.
const (
	DefaultApproversGroup = "approvers"
	DefaultAdminGroup     = "admin"
)

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
	// CanAnswer says whether whoever listed the queue may answer this
	// question (ListFor); always true without authentication.
	CanAnswer bool `json:"can_answer"`

	// askerKey is the asker's identity.Caller.Key, for who may answer.
	askerKey string
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
	// By names who answered, for OutcomeAnswered, when callers are known.
	By string `json:"by,omitempty"`
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
	// ApproversGroup and AdminGroup name the groups whose members may
	// answer when callers are known (DefaultApproversGroup,
	// DefaultAdminGroup): auth.approvers_group and auth.admin_group.
	// Anyone else's answer is refused with a *ForbiddenError, and their
	// event stream does not attach them as an approver.
	ApproversGroup, AdminGroup string
	// NoSelfApproval refuses the answer of the caller who made the call
	// (auth.self_approval: false): someone else must approve it, even
	// an approver's own call. Off, an approver may answer their own.
	NoSelfApproval bool
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
	// attached counts the approvers attached by caller
	// (identity.Caller.Key; "" for those without), for NoSelfApproval:
	// a question whose only approver is its asker has nobody to go to.
	attached map[string]int
	grace    *time.Timer // runs while nobody is attached but the grace is not over
	ended    map[string]Ending
	endedIDs []string // oldest first, for eviction
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
	by  string // who answered, when known
}

// NewApprovals returns an empty queue with nobody attached; nil options
// take the defaults.
func NewApprovals(o *ApprovalOptions) *Approvals {
	a := &Approvals{pending: map[string]*waiting{}, ended: map[string]Ending{}, askers: map[string]*identity.Ref{}, attached: map[string]int{}}
	if o != nil {
		a.o = *o
	}
	if a.o.ApproversGroup == "" {
		a.o.ApproversGroup = DefaultApproversGroup
	}
	if a.o.AdminGroup == "" {
		a.o.AdminGroup = DefaultAdminGroup
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

// ForbiddenError refuses the answer of someone who may not give it: not
// a member of the approvers (or admin) group, or, with NoSelfApproval,
// the caller who made the call. The question still waits.
type ForbiddenError struct {
	ID      string
	Message string
}

func (e *ForbiddenError) Error() string { return e.Message }

// mayApprove reports whether c may answer questions at all: anyone when
// callers are not known (nil), else the members of the approvers and
// admin groups.
func (a *Approvals) mayApprove(c *identity.Caller) bool {
	return c == nil || c.In(a.o.ApproversGroup) || c.In(a.o.AdminGroup)
}

// Attach registers an approver: someone who can answer now. Questions
// are put while at least one is attached; detach (safe to call more than
// once) says it went away. When the last one goes, questions are still
// taken for the grace, then the calls still waiting are refused.
func (a *Approvals) Attach() (detach func()) { return a.AttachAs(nil) }

// AttachAs is Attach for someone known as c (nil: callers are not known):
// a caller who may not answer (mayApprove) is not counted, and detach
// does nothing.
func (a *Approvals) AttachAs(c *identity.Caller) (detach func()) {
	if !a.mayApprove(c) {
		return func() {}
	}
	key := c.Key()
	a.mu.Lock()
	a.approvers++
	a.attached[key]++
	if a.grace != nil {
		a.grace.Stop()
		a.grace = nil
	}
	a.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { a.detach(key) }) }
}

func (a *Approvals) detach(key string) {
	a.mu.Lock()
	if a.attached[key]--; a.attached[key] == 0 {
		delete(a.attached, key)
	}
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
	return a.attachedLocked("")
}

// attachedLocked reports whether a question of the caller keyed asker
// would be taken; a.mu is held. With NoSelfApproval, the asker attached
// does not count for its own question.
func (a *Approvals) attachedLocked(asker string) bool {
	n := a.approvers
	if a.o.NoSelfApproval && asker != "" {
		n -= a.attached[asker]
	}
	return a.o.Expect || n > 0 || a.grace != nil
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
func (a *Approvals) Available(_ context.Context, req policy.Request) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.attachedLocked(req.Caller.Key()) {
		return nil
	}
	return a.unavailableLocked(req.Caller)
}

func (a *Approvals) unavailableLocked(asker *identity.Caller) error {
	if asker == nil {
		return &policy.NoApproverError{Hints: []string{
			"approvals are asked on " + a.whereLocked() + " only while it is open: open it first, then make the call"}}
	}
	who := fmt.Sprintf("a member of the %s group", a.o.ApproversGroup)
	if a.o.NoSelfApproval {
		who += " other than " + asker.Name
	}
	return &policy.NoApproverError{Hints: []string{
		"approvals are asked on " + a.whereLocked() + " only while " + who + " has it open"}}
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
		askerKey: req.Caller.Key(), CanAnswer: true,
	}}
	if req.Caller != nil {
		w.info.Caller = req.Caller.Name
	}
	a.mu.Lock()
	where := a.whereLocked()
	if !a.attachedLocked(w.info.askerKey) {
		err := a.unavailableLocked(req.Caller)
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
			if v.by != "" {
				tool.Answered(ctx, v.by)
			}
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
func (a *Approvals) Decide(id string, ans policy.Answer) error { return a.DecideAs(id, ans, nil) }

// DecideAs is Decide by someone known as by (nil: callers are not known,
// anyone answers). A member of neither the approvers nor the admin group
// is refused with a *ForbiddenError, and so is the caller who made the
// call with NoSelfApproval; the question goes on waiting. A question by
// may not see (another caller's, by may not answer) is ErrUnknownApproval,
// as one that does not exist. The answer, and its ending, name by.
func (a *Approvals) DecideAs(id string, ans policy.Answer, by *identity.Caller) error {
	e := Ending{Outcome: OutcomeAnswered, Message: ans.String(), At: time.Now()}
	if by != nil {
		e.By = by.Name
	}
	a.mu.Lock()
	w, ok := a.pending[id]
	if !ok {
		defer a.mu.Unlock()
		// An ended question is gone to those who could see it waiting:
		// approvers, and its asker.
		if e, ok := a.ended[id]; ok && (by == nil || a.mayApprove(by) || a.askers[id] != nil && a.askers[id].Key == by.Key()) {
			return &EndedError{ID: id, Ending: e}
		}
		return ErrUnknownApproval
	}
	if err := a.forbiddenLocked(w.info, by); err != nil {
		a.mu.Unlock()
		return err
	}
	delete(a.pending, id) // a second answer finds it ended
	a.rememberLocked(id, e)
	w.done <- verdict{ans: ans, by: e.By}
	a.mu.Unlock()
	a.told(w.info, e)
	return nil
}

// forbiddenLocked says why by may not answer the question p, nil if it
// may; a.mu is held. A question by may not even see is unknown to it.
func (a *Approvals) forbiddenLocked(p Pending, by *identity.Caller) error {
	switch {
	case by == nil:
		return nil
	case !a.mayApprove(by) && p.askerKey != by.Key():
		return ErrUnknownApproval
	case !a.mayApprove(by):
		return &ForbiddenError{ID: p.ID, Message: fmt.Sprintf(
			"%s may not answer approvals: only members of the %s group may (or %s); the call still waits for one",
			by.Name, a.o.ApproversGroup, a.o.AdminGroup)}
	case a.o.NoSelfApproval && p.askerKey == by.Key():
		return &ForbiddenError{ID: p.ID, Message: fmt.Sprintf(
			"%s made this call and may not approve it (auth.self_approval is false): another approver must; the call still waits",
			by.Name)}
	}
	return nil
}

// Pending lists the calls waiting, oldest first.
func (a *Approvals) Pending() []Pending { return a.PendingFor(nil) }

// PendingFor lists the calls waiting that c may see, oldest first, each
// saying whether c may answer it (CanAnswer): every call for an approver
// (and for anyone when callers are not known, nil), a caller's own calls
// for anyone else.
func (a *Approvals) PendingFor(c *identity.Caller) []Pending {
	a.mu.Lock()
	out := make([]Pending, 0, len(a.pending))
	for _, w := range a.pending {
		p := w.info
		if c != nil && !a.mayApprove(c) && p.askerKey != c.Key() {
			continue
		}
		p.CanAnswer = a.forbiddenLocked(p, c) == nil
		out = append(out, p)
	}
	a.mu.Unlock()
	slices.SortFunc(out, func(x, y Pending) int { return x.Since.Compare(y.Since) })
	return out
}
