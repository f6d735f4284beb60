package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/tool"
)

// Gate applies the policy to the calls of one session: the engine's
// decisions, the "always" answers given so far, and the approver. The
// scheduler calls Decide for each call, and Approve for those that ask (or
// Check, which does both). A Gate is safe for concurrent use.
//
// The caller of a call is the one its context carries (identity.From):
// the engine decides for it (DecideFor), the approver is told who asks
// (Request.Caller), and an "always" answer covers the later calls of the
// same caller only: one caller's approval is not another's.
type Gate struct {
	engine atomic.Pointer[Engine]

	approver       Approver
	persist        func(Rule) error
	persistAlways  bool
	onPersistError func(Rule, error)

	// turn admits one approval request at a time, so that an "always"
	// answer is known before the next request is put to anyone and calls
	// it covers are not asked about again. A channel rather than a mutex,
	// so that waiting for a turn ends with the caller's context. Unused
	// with concurrent approvals, where changed does that job instead.
	turn       chan struct{}
	concurrent bool

	mu      sync.RWMutex
	tools   map[toolKey]string   // remembered "always this tool": decision names
	servers map[serverKey]string // remembered "always this server"
	changed chan struct{}        // closed and replaced when an "always" is remembered
}

// The keys of remembered answers: the caller's (identity.Caller.Key, ""
// without one) and the tool's or server's.
type (
	toolKey   struct{ caller, server, name string }
	serverKey struct{ caller, server string }
)

// GateOption configures a Gate.
type GateOption func(*Gate)

// WithApprover sets who is asked when a decision is Ask. Nil (the default)
// makes the gate non-interactive: every Ask is refused at once, with a
// message saying how to allow the call.
func WithApprover(a Approver) GateOption {
	return func(g *Gate) {
		if f, ok := a.(ApproverFunc); ok && f == nil {
			a = nil
		}
		g.approver = a
	}
}

// WithPersist sets the function that saves the allow rule an "always"
// answer implies, typically to the configuration file with [SaveRule]. It
// is called only when persisting is on ([WithPersistAlways]).
func WithPersist(save func(Rule) error) GateOption {
	return func(g *Gate) { g.persist = save }
}

// WithPersistAlways turns persisting of "always" answers on or off (the
// `policy.persist` setting). Off, the default, an "always" answer lasts as
// long as the Gate.
func WithPersistAlways(on bool) GateOption {
	return func(g *Gate) { g.persistAlways = on }
}

// WithPersistError sets the function told when saving a rule fails. The
// call that was approved runs anyway: the person said yes, and the answer
// is still remembered for the session.
func WithPersistError(report func(Rule, error)) GateOption {
	return func(g *Gate) { g.onPersistError = report }
}

// WithConcurrentApprovals puts approval requests to the approver as they
// come, several at a time, for an approver that can show many questions at
// once (a web page's queue, MCP clients asked by elicitation) — a terminal
// cannot. A request still waiting when an "always" answer covering it is
// given elsewhere is withdrawn from the approver and approved. Off, the
// default, requests are put one at a time.
func WithConcurrentApprovals(on bool) GateOption {
	return func(g *Gate) { g.concurrent = on }
}

// NewGate returns a gate over e; a nil engine means the default mode with
// no rules of the user's.
func NewGate(e *Engine, opts ...GateOption) *Gate {
	if e == nil {
		e, _ = New(ModeDefault, nil)
	}
	g := &Gate{turn: make(chan struct{}, 1), tools: map[toolKey]string{}, servers: map[serverKey]string{},
		changed: make(chan struct{})}
	g.engine.Store(e)
	for _, o := range opts {
		o(g)
	}
	return g
}

// Engine returns the engine in use.
func (g *Gate) Engine() *Engine { return g.engine.Load() }

// SetEngine replaces the engine (a reloaded configuration's rules and
// mode); the "always" answers given so far are kept. Calls admitted from
// now on are decided by e; calls already admitted are not decided again.
func (g *Gate) SetEngine(e *Engine) {
	if e == nil {
		e, _ = New(ModeDefault, nil)
	}
	g.engine.Store(e)
}

// Requires says what the engine in use requires before a call of t
// (Engine.Requires).
func (g *Gate) Requires(t tool.Tool) Action { return g.engine.Load().Requires(t) }

// RequiresFor says what the engine in use requires before a call of t by
// c (Engine.RequiresFor).
func (g *Gate) RequiresFor(c *identity.Caller, t tool.Tool) Action {
	return g.engine.Load().RequiresFor(c, t)
}

// SetMode switches the session to another approval mode, keeping the user's
// rules and the "always" answers given so far.
func (g *Gate) SetMode(m Mode) error {
	for {
		old := g.engine.Load()
		e, err := old.WithMode(m)
		if err != nil {
			return err
		}
		if g.engine.CompareAndSwap(old, e) {
			return nil
		}
	}
}

// Decide returns the engine's decision for a call without a caller, with
// Ask turned into Allow for tools and servers the session has answered
// "always" for. A remembered answer never overrides Deny.
func (g *Gate) Decide(t tool.Tool, call tool.Call) Decision { return g.DecideFor(nil, t, call) }

// DecideFor is Decide for a call made by c: the engine decides for c
// (Engine.DecideFor), and only c's "always" answers count.
func (g *Gate) DecideFor(c *identity.Caller, t tool.Tool, call tool.Call) Decision {
	d := g.engine.Load().DecideFor(c, t, call)
	if d.Action != Ask {
		return d
	}
	server, name := toolID(t, call)
	if rule := g.remembered(c.Key(), server, name); rule != "" {
		return Decision{Action: Allow, Rule: rule, Message: d.Message}
	}
	return d
}

func (g *Gate) remembered(caller, server, name string) string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if r, ok := g.tools[toolKey{caller, server, name}]; ok {
		return r
	}
	return g.servers[serverKey{caller, server}]
}

// Check decides the call and, if the decision asks, gets approval: nil
// means the call may run. A denial is a *tool.Error of kind
// policy_violation; a refused approval one of kind approval_denied, or
// approval_unavailable when nobody could be asked. The caller is the one
// ctx carries.
func (g *Gate) Check(ctx context.Context, t tool.Tool, call tool.Call) error {
	return g.Approve(ctx, t, call, g.DecideFor(identity.From(ctx), t, call))
}

// Approve gets approval for a call whose decision d is Ask, and returns nil
// if the call may run. Without an approver it refuses at once (kind
// approval_unavailable, with a message saying how to allow the call). Requests
// are put to the approver one at a time (side by side with
// [WithConcurrentApprovals]); a request whose tool was answered
// "always" while it waited is approved without asking. If ctx ends first,
// the error is of kind cancelled (or timeout) and wraps ctx.Err().
//
// For convenience d may also be Allow (nil) or Deny (the policy_violation
// error Check would give).
func (g *Gate) Approve(ctx context.Context, t tool.Tool, call tool.Call, d Decision) error {
	server, name := toolID(t, call)
	caller := identity.From(ctx)
	switch d.Action {
	case Allow:
		return nil
	case Deny:
		return g.denied(caller, server, name, d)
	case Ask:
	default:
		return &tool.Error{Kind: tool.KindApprovalDenied, Server: server, Tool: name,
			Message: fmt.Sprintf("the policy gave no valid decision (%q) for %s/%s", d.Action, server, name)}
	}
	if !d.Once && g.remembered(caller.Key(), server, name) != "" {
		return nil
	}
	req := Request{Tool: t, Call: call, Decision: d, Caller: caller}
	if g.approver == nil {
		return g.refusal(tool.KindApprovalUnavailable, req, "no one can be asked in this run", nil)
	}
	if fn := approvalWaitFrom(ctx); fn != nil {
		// Before ctx is looked at: the watcher may end it.
		fn(true)
		defer fn(false)
	}
	if err := ctx.Err(); err != nil {
		return waitEnded(server, name, err)
	}
	if g.concurrent {
		return g.askConcurrently(ctx, req, server, name)
	}
	select {
	case g.turn <- struct{}{}:
	case <-ctx.Done():
		return waitEnded(server, name, ctx.Err())
	}
	defer func() { <-g.turn }()
	if !d.Once && g.remembered(caller.Key(), server, name) != "" {
		return nil
	}
	ans, err := g.approver.Approve(ctx, req)
	return g.answered(ctx, req, server, name, ans, err)
}

// askConcurrently puts req to the approver without waiting for other
// requests, and withdraws it (cancelling the approver's context) when an
// "always" answer given meanwhile covers it.
func (g *Gate) askConcurrently(ctx context.Context, req Request, server, name string) error {
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	type reply struct {
		ans Answer
		err error
	}
	replies := make(chan reply, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				replies <- reply{err: fmt.Errorf("approver panicked: %v", p)}
			}
		}()
		ans, err := g.approver.Approve(actx, req)
		replies <- reply{ans, err}
	}()
	for {
		// Take the channel before looking, so that an answer remembered
		// in between still wakes us.
		g.mu.RLock()
		changed := g.changed
		g.mu.RUnlock()
		if !req.Decision.Once && g.remembered(req.Caller.Key(), server, name) != "" {
			cancel(errCovered)
			<-replies
			return nil
		}
		select {
		case r := <-replies:
			return g.answered(ctx, req, server, name, r.ans, r.err)
		case <-changed:
		}
	}
}

// answered turns the approver's answer into the gate's verdict.
func (g *Gate) answered(ctx context.Context, req Request, server, name string, ans Answer, err error) error {
	d := req.Decision
	if errors.Is(err, ErrNoApprover) {
		var hints []string
		if ne, ok := errors.AsType[*NoApproverError](err); ok {
			hints = ne.Hints
		}
		return g.refusal(tool.KindApprovalUnavailable, req, "no one can be asked in this run", hints)
	}
	if ue, ok := errors.AsType[*UnansweredError](err); ok {
		if ce := ctx.Err(); ce != nil {
			return waitEnded(server, name, ce)
		}
		return g.refusal(tool.KindApprovalDenied, req, ue.Reason, nil)
	}
	if errors.Is(err, ErrInputRequired) {
		return &tool.Error{Kind: tool.KindApprovalDenied, Server: server, Tool: name, Err: err,
			Message: fmt.Sprintf("approval of %s/%s was asked of the client; the call runs when it answers", server, name)}
	}
	if err != nil {
		if ce := ctx.Err(); ce != nil {
			return waitEnded(server, name, ce)
		}
		return &tool.Error{Kind: tool.KindApprovalDenied, Server: server, Tool: name, Err: err,
			Message: fmt.Sprintf("could not ask for approval of %s/%s: %v", server, name, err)}
	}
	switch ans {
	case ProceedOnce:
	case AlwaysTool, AlwaysServer:
		if !d.Once {
			g.remember(req.Caller, server, name, ans, d)
		}
	case Decline:
		return &tool.Error{Kind: tool.KindApprovalDenied, Server: server, Tool: name,
			Message: fmt.Sprintf("the user denied the call to %s/%s", server, name)}
	default:
		return &tool.Error{Kind: tool.KindApprovalDenied, Server: server, Tool: name,
			Message: fmt.Sprintf("the approver gave no valid answer (%v) for %s/%s", ans, server, name)}
	}
	// An answer that came in as the context ended does not run the call.
	if ce := ctx.Err(); ce != nil {
		return waitEnded(server, name, ce)
	}
	return nil
}

// errCovered withdraws a request from its approver: an "always" answer
// given meanwhile approved it.
var errCovered = errors.New(`approved by an "always" answer given meanwhile`)

// ErrNoApprover is what an Approver returns when, for this request, there
// is nobody to ask (an MCP client that cannot show a question, say): the
// gate then refuses the call as a non-interactive run would, with the
// message that says how to allow it. An approver that knows where a
// person could be reached returns a [*NoApproverError] with a hint
// instead; it matches ErrNoApprover.
var ErrNoApprover = errors.New("nobody can be asked for approval")

// NoApproverError is an [ErrNoApprover] that says where approvals could
// be answered, had someone been there ("open the web page at
// http://127.0.0.1:8931/ and keep it open"), or why an approver could not
// ask (an MCP client that answered without showing the question). The
// gate quotes the hints in its refusal (approval_unavailable).
type NoApproverError struct {
	// Hints say where a person could answer, or why nobody could be
	// asked there; empty ones are skipped.
	Hints []string
}

func (e *NoApproverError) Error() string {
	if len(e.Hints) == 0 {
		return ErrNoApprover.Error()
	}
	return ErrNoApprover.Error() + " (" + strings.Join(e.Hints, "; ") + ")"
}

// Is makes a NoApproverError match ErrNoApprover.
func (e *NoApproverError) Is(target error) bool { return target == ErrNoApprover }

// UnansweredError is what an Approver returns when it put the question to
// someone who could answer but got no answer: nobody answered in time,
// or every person who could answer went away. The gate refuses the call
// (approval_denied) with the reason and how to allow such calls without
// asking.
type UnansweredError struct {
	// Reason says what happened, as a clause: "nobody answered within 45s".
	Reason string
}

func (e *UnansweredError) Error() string { return "no answer: " + e.Reason }

// ErrInputRequired is what an Approver returns when it has put the
// question to a client that answers in a later request (MCP's multi
// round-trip requests): this attempt of the call is refused, and the
// client's retry carries the answer.
var ErrInputRequired = errors.New("approval asked of the client; its answer comes with the retried request")

// remember records an "always" answer to a call of caller (nil: none)
// and, if persisting is on, saves the allow rule it implies: for that
// caller alone (callers: [its subject]) when there is one.
func (g *Gate) remember(caller *identity.Caller, server, name string, ans Answer, d Decision) {
	var r Rule
	if ans == AlwaysTool {
		r = Rule{Name: "always allow " + server + "/" + name, Tools: []string{escapeGlob(server) + "/" + escapeGlob(name)}, Action: Allow}
	} else {
		r = Rule{Name: "always allow server " + server, Server: escapeGlob(server), Action: Allow}
	}
	if caller != nil {
		r.Name += " for " + caller.Name
		r.Callers = []string{escapeGlob(caller.Subject)}
	}
	g.mu.Lock()
	if ans == AlwaysTool {
		g.tools[toolKey{caller.Key(), server, name}] = r.Name + " (this session)"
	} else {
		g.servers[serverKey{caller.Key(), server}] = r.Name + " (this session)"
	}
	close(g.changed)
	g.changed = make(chan struct{})
	g.mu.Unlock()
	if !g.persistAlways || g.persist == nil {
		return
	}
	// The saved rule must win over the rule that asked, as the session's
	// memory does, or the next session would ask again.
	r.Priority = g.above(d.Rule)
	if err := g.persist(r); err != nil && g.onPersistError != nil {
		g.onPersistError(r, err)
	}
}

// maxPriority is the largest priority a configuration file accepts.
const maxPriority = 1_000_000

// above returns the priority a new allow rule needs to be tried before the
// named rule: 0 for the mode's defaults, which come after every user rule.
func (g *Gate) above(rule string) int {
	p, user := g.engine.Load().priority(rule)
	if !user || p < 0 {
		return 0
	}
	return min(p+1, maxPriority)
}

func (g *Gate) denied(caller *identity.Caller, server, name string, d Decision) error {
	msg := d.Message
	if msg == "" {
		msg = fmt.Sprintf("%s/%s is denied by policy rule %q (mode %s)", server, name, d.Rule, g.engine.Load().ModeFor(caller))
	}
	return &tool.Error{Kind: tool.KindPolicyViolation, Server: server, Tool: name, Message: msg,
		Detail: "policy rule: " + d.Rule}
}

// refusal is the refusal of a call that needed approval and got none:
// why (nobody could be asked, nobody answered in time), where a person
// could have answered (hints), and exactly what to change to allow such
// calls without asking, since whoever reads it (a person reading a log, or
// a model) cannot ask. Its kind says which: approval_unavailable when
// nobody could be asked (no person saw the call), approval_denied when a
// person was asked and gave no answer in time.
func (g *Gate) refusal(kind tool.Kind, req Request, why string, hints []string) error {
	e, t, call, d := g.engine.Load(), req.Tool, req.Call, req.Decision
	server, name := toolID(t, call)
	pattern := escapeGlob(server) + "/" + escapeGlob(name)
	above := g.above(d.Rule)
	rule := "{tools: [" + yamlScalar(pattern) + "], action: allow"
	if above != 0 {
		rule += ", priority: " + strconv.Itoa(above)
	}
	rule += "}"
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%s needs approval (policy rule %q, mode %s), but %s", server, name, d.Rule, e.ModeFor(req.Caller), why)
	if hints = slices.DeleteFunc(slices.Clone(hints), func(h string) bool { return h == "" }); len(hints) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(hints, "; "))
	}
	fmt.Fprintf(&b, "; to allow it, run with --yes or --approval-mode yolo, or add a policy rule: `policy: {rules: [%s]}`", rule)
	if e.trustAllows(req.Caller, t, call) {
		fmt.Fprintf(&b, ", or set `trust: true` on server %s to allow all its tools", yamlScalar(server))
	}
	return &tool.Error{Kind: kind, Server: server, Tool: name, Message: b.String()}
}

func waitEnded(server, name string, err error) error {
	kind, what := tool.KindCancelled, "cancelled"
	if errors.Is(err, context.DeadlineExceeded) {
		kind, what = tool.KindTimeout, "timed out"
	}
	return &tool.Error{Kind: kind, Server: server, Tool: name, Err: err,
		Message: fmt.Sprintf("%s while waiting for approval of %s/%s", what, server, name)}
}

// escapeGlob escapes the glob metacharacters of a name, so the pattern
// matches exactly that name.
func escapeGlob(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// yamlScalar writes s as a YAML flow scalar, quoted unless it is plainly
// safe.
func yamlScalar(s string) string {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '/') {
			return strconv.Quote(s)
		}
	}
	if s == "" || s[0] == '-' {
		return strconv.Quote(s)
	}
	return s
}

// Admit decides the call and gets approval if needed, like Check, telling
// asking the question before it waits for an approver: the scheduler
// reports the call as awaiting_approval meanwhile. With no approver, or a
// remembered "always", nothing is asked and asking is not called.
// It makes a Gate a schedule.Gate.
func (g *Gate) Admit(ctx context.Context, t tool.Tool, call tool.Call, asking func(message string)) error {
	return g.AdmitDecision(ctx, t, call, g.DecideFor(identity.From(ctx), t, call), asking)
}

// AdmitDecision is Admit with the decision d taken elsewhere: the engine's
// as a PreToolUse hook changed it (package hooks: a hook's "ask" turns an
// Allow into an Ask, its "allow" an Ask into an Allow). An Ask goes the
// way of every Ask: the approver, the "always" answers, Availability.
func (g *Gate) AdmitDecision(ctx context.Context, t tool.Tool, call tool.Call, d Decision, asking func(message string)) error {
	caller := identity.From(ctx)
	server, name := toolID(t, call)
	if d.Action == Ask && g.approver != nil && g.remembered(caller.Key(), server, name) == "" {
		// Nobody who could answer is there: refuse now rather than
		// report a wait that cannot end in an answer.
		if av, ok := g.approver.(Availability); ok {
			req := Request{Tool: t, Call: call, Decision: d, Caller: caller}
			if err := av.Available(ctx, req); err != nil {
				return g.answered(ctx, req, server, name, 0, err)
			}
		}
	}
	if d.Action == Ask && g.approver != nil && asking != nil {
		msg := d.Message
		if msg == "" {
			msg = fmt.Sprintf("%s/%s needs approval (policy rule %q, mode %s)", server, name, d.Rule, g.engine.Load().ModeFor(caller))
		}
		asking(msg)
	}
	return g.Approve(ctx, t, call, d)
}
