package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

type requestKey struct{}

// request is what the approver needs of the MCP request a call came from:
// the client session to check what it can show, the answers the client
// sent with a retried request, and where to leave a question for it.
type request struct {
	session *mcp.ServerSession
	// declared is what a client without a session declared in the
	// request's _meta (a 2026-07-28 request the gateway answers itself,
	// modern.go); nil means the session's initialize says.
	declared *mcp.InitializeParams
	answers  mcp.InputResponseMap
	// elicit asks the client, when the request came by the gateway's own
	// tools/call path (lean.go), on that request's stream; nil means
	// through the go-sdk's session.
	elicit func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error)
	// task, when set, is the MCP task the call runs as (tasks.go): the
	// question is put to the client through the task (input_required,
	// answered by tasks/update), if the client declared elicitation
	// (taskElicits); timeout bounds the wait (0: the approver's).
	task        *liveTask
	taskElicits bool
	timeout     time.Duration

	mu       sync.Mutex
	question mcp.InputRequestMap
	// approved holds the answers given in this request, by question
	// key: a call the gateway makes again within its request (once its
	// user gave a credential, authchan.go) is not asked twice.
	approved map[string]policy.Answer
}

// withRequest puts the MCP request a call came from into ctx, so that an
// approval can be asked of that request's client.
func withRequest(ctx context.Context, r *request) context.Context {
	return context.WithValue(ctx, requestKey{}, r)
}

// initParams is what the request's client declared of itself: its
// version, capabilities and name; nil when unknown.
func (r *request) initParams() *mcp.InitializeParams {
	switch {
	case r == nil:
		return nil
	case r.declared != nil:
		return r.declared
	case r.session != nil:
		return r.session.InitializeParams()
	}
	return nil
}

func requestFrom(ctx context.Context) *request {
	r, _ := ctx.Value(requestKey{}).(*request)
	return r
}

// ask leaves a question for the client, returned with the result.
func (r *request) ask(key string, q *mcp.ElicitParams) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.question == nil {
		r.question = mcp.InputRequestMap{}
	}
	r.question[key] = q
}

func (r *request) questions() mcp.InputRequestMap {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.question
}

// ElicitApprover asks for approval through MCP elicitation: the client
// shows the question to its user as a form, and the call runs (or is
// refused) on the answer. A client on a protocol version that has multi
// round-trip requests (2026-07-28 and later) gets the question in the
// call's result (inputRequests) and retries the call with the answer; an
// older client is asked directly (elicitation/create), the call waiting
// for the answer at most Timeout. A client that did not declare
// elicitation cannot be asked: the approver returns policy.ErrNoApprover,
// and the next approver is tried or the call is refused with the message
// that says how to allow it. Calls made outside an MCP request are
// treated the same way.
//
// A client that declared elicitation may still have nobody to show the
// question to: agent CLIs run headless in scripts and CI answer every
// elicitation at once, Claude Code's -p mode with "cancel", Codex's exec
// with "decline". So an answer "cancel", and a "decline" that came back
// sooner than instantDecline after the question was sent, are taken as
// "the client could not ask", not as a person's refusal: the approver
// returns a *policy.NoApproverError saying what the client answered, and
// the next approver (the web page, if one is open) is asked, or the call
// is refused with how to allow it. Only a decline that took a person's
// time is "the user denied".
type ElicitApprover struct {
	// Timeout bounds the wait for the client's answer; 0 means
	// policy.DefaultApprovalTimeout. When it passes, the question is
	// withdrawn (the client is told the request is cancelled) and the call
	// refused.
	Timeout time.Duration
	// Also, when set, is asked at the same time as the client of an MCP
	// task (tasks.go): serve's approval queue, so that the page can
	// answer a task's question too. The first answer wins; the other
	// question is withdrawn.
	Also policy.Approver
	// NoSelfApproval never asks the client of a call whose caller is
	// known (auth.self_approval: false): the client's user is the caller
	// itself, and someone else must approve its calls. The approver then
	// answers policy.ErrNoApprover with a hint, so that the next approver
	// (the page, where approvers answer) is asked. Calls without a caller
	// (no authentication) are asked as before.
	NoSelfApproval bool
}

// selfRefused is the approver's answer to a call of a caller who may not
// approve its own calls.
func (e ElicitApprover) selfRefused(req policy.Request) error {
	if !e.NoSelfApproval || req.Caller == nil {
		return nil
	}
	return &policy.NoApproverError{Hints: []string{fmt.Sprintf(
		"%s's own MCP client is not asked: callers do not approve their own calls here (auth.self_approval: false)", req.Caller.Name)}}
}

// answered tells the call's context (the scheduler's events) that the
// client's user, the caller itself, answered.
func answeredByCaller(ctx context.Context, req policy.Request) {
	if req.Caller != nil {
		tool.Answered(ctx, req.Caller.Name)
	}
}

// Available implements policy.Availability: a client can be asked when
// it declared elicitation.
func (e ElicitApprover) Available(ctx context.Context, req policy.Request) error {
	if err := e.selfRefused(req); err != nil {
		return err
	}
	if r := requestFrom(ctx); r != nil && r.task != nil {
		if r.taskElicits {
			return nil
		}
		return policy.ErrNoApprover
	}
	if p := requestFrom(ctx).initParams(); p != nil && p.Capabilities != nil && p.Capabilities.Elicitation != nil {
		return nil
	}
	return policy.ErrNoApprover
}

// multiRoundTrip is the first protocol version whose clients answer a
// server's questions by retrying their request.
const multiRoundTrip = "2026-07-28"

// instantDecline is how soon after an elicitation/create was sent a
// "decline" is taken for no person's answer. A person reads the question
// (a tool, its server, its arguments) and picks an answer in a second or
// more; a headless client declines without showing anything, Codex's exec
// in about 2 ms. A quarter of a second leaves the headless client's
// answer room for a loaded machine and a round trip over HTTP, and is
// still far below any person's reading time. It is a heuristic, so it is
// used only where the gateway itself sends the question and receives the
// answer (elicitation/create); an answer that comes with another request
// (a 2026-07-28 retry, a task's tasks/update) is not timed.
const instantDecline = 250 * time.Millisecond

// Approve implements policy.Approver.
func (e ElicitApprover) Approve(ctx context.Context, req policy.Request) (policy.Answer, error) {
	if err := e.selfRefused(req); err != nil {
		return 0, err
	}
	r := requestFrom(ctx)
	if r != nil && r.task != nil {
		return e.approveInTask(ctx, r, req)
	}
	p := r.initParams()
	if p == nil || p.Capabilities == nil || p.Capabilities.Elicitation == nil {
		return 0, policy.ErrNoApprover
	}
	form := approvalForm(req)
	if p.ProtocolVersion >= multiRoundTrip {
		key := approvalKey(req)
		if resp, ok := r.answers[key]; ok {
			res, ok := resp.(*mcp.ElicitResult)
			if !ok {
				return 0, fmt.Errorf("the client answered the approval of %s/%s with a %T", req.Call.Server, req.Call.Tool, resp)
			}
			// The question went out with an earlier request, of which
			// nothing is kept: how soon this answer came is not known.
			ans, err := r.answer(res, untimed)
			if err == nil {
				answeredByCaller(ctx, req)
			}
			return ans, err
		}
		r.ask(key, form)
		return 0, policy.ErrInputRequired
	}
	key := approvalKey(req)
	if ans, ok := r.approvedBefore(key); ok {
		answeredByCaller(ctx, req)
		return ans, nil
	}
	timeout := e.Timeout
	if timeout <= 0 {
		timeout = policy.DefaultApprovalTimeout
	}
	ectx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	elicit := r.elicit
	if elicit == nil {
		if r.session == nil {
			return 0, policy.ErrNoApprover
		}
		elicit = r.session.Elicit
	}
	sent := time.Now()
	res, err := elicit(ectx, form)
	if err != nil {
		if ce := ctx.Err(); ce != nil {
			return 0, ce
		}
		if ectx.Err() != nil {
			return 0, &policy.UnansweredError{Reason: fmt.Sprintf("the client's user did not answer within %s", timeout)}
		}
		return 0, fmt.Errorf("the client could not show the question: %w", err)
	}
	ans, err := r.answer(res, time.Since(sent))
	if err == nil {
		r.approve(key, ans)
		answeredByCaller(ctx, req)
	}
	return ans, err
}

// approve keeps the answer to the question key of this request.
func (r *request) approve(key string, ans policy.Answer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.approved == nil {
		r.approved = map[string]policy.Answer{}
	}
	r.approved[key] = ans
}

// approvedBefore returns the answer given to the question key earlier in
// this request.
func (r *request) approvedBefore(key string) (policy.Answer, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ans, ok := r.approved[key]
	return ans, ok
}

// approveInTask asks through the call's MCP task: the question shows on
// tasks/get (input_required) until the client answers it with
// tasks/update, or the timeout passes.
func (e ElicitApprover) approveInTask(ctx context.Context, r *request, req policy.Request) (policy.Answer, error) {
	if !r.taskElicits {
		return 0, policy.ErrNoApprover
	}
	timeout := cmpDur(r.timeout, cmpDur(e.Timeout, policy.DefaultApprovalTimeout))
	type verdict struct {
		ans    policy.Answer
		err    error
		client bool
		by     string // who answered, as the page's queue says
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := make(chan verdict, 2)
	go func() {
		res, err := r.task.ask(actx, approvalKey(req), approvalForm(req), timeout)
		if errors.Is(err, errUnanswered) {
			err = &policy.UnansweredError{Reason: fmt.Sprintf("the client did not answer within %s", timeout)}
		}
		v := verdict{err: err, client: true}
		if err == nil {
			// Answered by a tasks/update of the client's, after it
			// polled: not timed.
			v.ans, v.err = r.answer(res, untimed)
		}
		out <- v
	}()
	n := 1
	if e.Also != nil && availableNow(actx, e.Also, req) {
		n++
		go func() {
			// Who answered on the page is told the call only if that
			// answer is the one taken (below).
			v := verdict{}
			v.ans, v.err = e.Also.Approve(tool.WithAnswered(actx, func(by string) { v.by = by }), req)
			out <- v
		}()
	}
	// The first answer wins (the other question is withdrawn); a side
	// that could not answer leaves it to the other; if neither could,
	// the client's failure is the one reported, unless the client could
	// not show the question (it answered cancel) while the page was
	// asked and got no answer: then the page's is, for the question
	// waited there, and must not be put to the page again. Both sides
	// have ended when this returns.
	var first *verdict
	var clientErr, alsoErr error
	for range n {
		v := <-out
		switch {
		case v.err == nil && first == nil:
			first = &v
			cancel()
		case v.client && first == nil:
			clientErr = v.err
		case first == nil:
			alsoErr = v.err
		}
	}
	if first != nil {
		if first.client {
			answeredByCaller(ctx, req)
		} else if first.by != "" {
			tool.Answered(ctx, first.by)
		}
		return first.ans, nil
	}
	if alsoErr != nil && !errors.Is(alsoErr, policy.ErrNoApprover) && errors.Is(clientErr, policy.ErrNoApprover) {
		return 0, alsoErr
	}
	return 0, clientErr
}

// availableNow reports whether a can be asked now (policy.Availability).
func availableNow(ctx context.Context, a policy.Approver, req policy.Request) bool {
	if av, ok := a.(policy.Availability); ok {
		return av.Available(ctx, req) == nil
	}
	return true
}

// approvalForm is the question put to the client's user.
func approvalForm(req policy.Request) *mcp.ElicitParams {
	return &mcp.ElicitParams{
		Mode:    "form",
		Message: approvalMessage(req),
		RequestedSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"decision": map[string]any{
					"type":      "string",
					"title":     "Run this tool call?",
					"enum":      []string{"once", "always_tool", "always_server", "deny"},
					"enumNames": []string{"Yes, once", "Yes, always for this tool", "Yes, always for this server", "No"},
				},
			},
			"required": []string{"decision"},
		},
	}
}

// untimed is answer's "after" for an answer that came with a request of
// its own, whose delay after the question is not known.
const untimed time.Duration = -1

// answer reads the client's answer to the approval question, given after
// the question was sent (untimed if not known). "cancel", and a
// "decline" sooner than instantDecline, are no person's answer: the
// client could not ask (a *policy.NoApproverError, so that the next
// approver is tried). Any other answer is the user's.
func (r *request) answer(res *mcp.ElicitResult, after time.Duration) (policy.Answer, error) {
	switch {
	case res.Action == "cancel":
		return 0, &policy.NoApproverError{Hints: []string{fmt.Sprintf(
			"%s answered cancel, which says it could not show the question to anyone, as a client run headless such as claude -p does",
			r.client())}}
	case res.Action == "decline" && after >= 0 && after < instantDecline:
		return 0, &policy.NoApproverError{Hints: []string{fmt.Sprintf(
			"%s declined %s after being asked, too soon for anyone to have read the question, as a client run headless such as codex exec does",
			r.client(), after.Round(time.Millisecond))}}
	}
	return decision(res)
}

// client names the request's MCP client for messages: "the MCP client
// \"claude-code\"".
func (r *request) client() string {
	if p := r.initParams(); p != nil && p.ClientInfo != nil && p.ClientInfo.Name != "" {
		return fmt.Sprintf("the MCP client %q", p.ClientInfo.Name)
	}
	return "the MCP client"
}

// decision reads the client's answer to the approval form, the user's.
func decision(res *mcp.ElicitResult) (policy.Answer, error) {
	if res.Action != "accept" { // "decline": the user did not approve
		return policy.Decline, nil
	}
	d, _ := res.Content["decision"].(string)
	ans, ok := policy.AnswerNamed(d)
	if !ok {
		return 0, fmt.Errorf("the client answered %q, which is not one of once, always_tool, always_server, deny", d)
	}
	return ans, nil
}

// approvalKey names the question of one call: the same tool with the same
// arguments, retried, finds its answer under it. A client could answer a
// question it was never asked, but the client's user is whom the question
// goes to anyway.
func approvalKey(req policy.Request) string {
	b, _ := json.Marshal(req.Call.Arguments) // map keys are sorted
	sum := sha256.Sum256(append([]byte(req.Call.Server+"/"+req.Call.Tool+"\x00"), b...))
	return "toolmux-approval-" + hex.EncodeToString(sum[:8])
}

// approvalMessage is the question: the tool, its server, the policy's
// reason and the arguments, bounded.
func approvalMessage(req policy.Request) string {
	var b strings.Builder
	fmt.Fprintf(&b, "toolmux: approve the call to %s/%s?", req.Call.Server, req.Call.Tool)
	if req.Decision.Message != "" {
		fmt.Fprintf(&b, "\n%s", req.Decision.Message)
	}
	if args, err := json.MarshalIndent(req.Call.Arguments, "", "  "); err == nil {
		a := string(args)
		if len(a) > 2000 {
			a = a[:2000] + "\n…"
		}
		fmt.Fprintf(&b, "\nArguments:\n%s", a)
	}
	return b.String()
}
