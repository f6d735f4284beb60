package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

// DefaultApprovalTimeout is how long a call waits for someone to answer
// in the web UI or the API before it is refused: long enough to notice
// the question, short enough that an unattended gateway does not hold
// calls forever.
const DefaultApprovalTimeout = 10 * time.Minute

// Pending is a call waiting for approval, as the API lists it.
type Pending struct {
	// ID is the call's ID, the call_id of the stream's approval_request.
	ID        string         `json:"id"`
	Task      string         `json:"task,omitempty"`
	Server    string         `json:"server"`
	Tool      string         `json:"tool"`
	Arguments map[string]any `json:"arguments"`
	// Rule and Message are the policy's reason for asking.
	Rule    string    `json:"rule,omitempty"`
	Message string    `json:"message,omitempty"`
	Since   time.Time `json:"since"`
	// Deadline is when the call is refused if nobody answers.
	Deadline time.Time `json:"deadline"`
}

// Approvals is an approver whose questions wait for an answer given
// through the HTTP API (and the web UI on top of it): Approve blocks until
// Decide is called for the call, the call's context ends, or the timeout
// passes. Safe for concurrent use.
type Approvals struct {
	timeout   time.Duration
	onPending func(Pending)

	mu      sync.Mutex
	pending map[string]*waiting
}

type waiting struct {
	info   Pending
	answer chan policy.Answer // buffered: Decide never blocks
}

// NewApprovals returns an empty queue; timeout <= 0 means
// DefaultApprovalTimeout.
func NewApprovals(timeout time.Duration) *Approvals {
	if timeout <= 0 {
		timeout = DefaultApprovalTimeout
	}
	return &Approvals{timeout: timeout, pending: map[string]*waiting{}}
}

// OnPending sets a function told of every call that starts waiting (to
// say on a console where to answer). Call it before the queue is used.
func (a *Approvals) OnPending(f func(Pending)) { a.onPending = f }

// ErrUnknownApproval is returned by Decide for an ID no call waits under
// (never asked, already answered, or timed out).
var ErrUnknownApproval = errors.New("no call is waiting for approval under this id")

// Approve implements policy.Approver: the request waits in the queue.
func (a *Approvals) Approve(ctx context.Context, req policy.Request) (policy.Answer, error) {
	id := req.Call.ID
	if id == "" {
		id = tool.NewID()
	}
	now := time.Now()
	w := &waiting{answer: make(chan policy.Answer, 1), info: Pending{
		ID: id, Task: req.Call.Task, Server: req.Call.Server, Tool: req.Call.Tool, Arguments: req.Call.Arguments,
		Rule: req.Decision.Rule, Message: req.Decision.Message, Since: now, Deadline: now.Add(a.timeout),
	}}
	a.mu.Lock()
	if _, dup := a.pending[id]; dup {
		a.mu.Unlock()
		return 0, fmt.Errorf("a call with id %s is already waiting for approval", id)
	}
	a.pending[id] = w
	a.mu.Unlock()
	if a.onPending != nil {
		a.onPending(w.info)
	}
	defer func() {
		a.mu.Lock()
		delete(a.pending, id)
		a.mu.Unlock()
	}()

	timer := time.NewTimer(a.timeout)
	defer timer.Stop()
	select {
	case ans := <-w.answer:
		return ans, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-timer.C:
		return 0, fmt.Errorf("nobody answered within %s", a.timeout)
	}
}

// Decide answers the call waiting under id.
func (a *Approvals) Decide(id string, ans policy.Answer) error {
	a.mu.Lock()
	w, ok := a.pending[id]
	if ok {
		delete(a.pending, id) // a second answer finds nothing
	}
	a.mu.Unlock()
	if !ok {
		return ErrUnknownApproval
	}
	w.answer <- ans
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
