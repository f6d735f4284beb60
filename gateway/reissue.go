package gateway

import (
	"bytes"
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/internal/bound"
	"github.com/toolmux/toolmux/internal/jsonscan"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

// Re-issued requests (docs/gateway.md, "Re-issued requests"). From
// protocol 2026-07-28 on there are no sessions and no resumable streams:
// a client whose stream broke re-issues its request. A tools/call of a
// tool that is neither read-only nor idempotent must not run twice for
// it, so the gateway keeps a window of recent executions of such calls,
// keyed by the client's request identity (reissueKey), and answers a
// re-issue with the first execution's result, waiting for it while it
// still runs. The first execution runs on a goroutine of its own, so that
// it outlives the request it came in (for the grace, then it is
// cancelled if no re-issue came). Read-only and idempotent tools simply
// run again: running them twice is what their annotations say is
// harmless, and keeping their (often large) results would cost memory for
// nothing.

// Defaults of Reissue.
const (
	DefaultReissueWindow         = 10 * time.Minute
	DefaultReissueGrace          = 30 * time.Second
	DefaultReissueMaxEntries     = 1000
	DefaultReissueMaxResultBytes = 64 << 10
)

// Reissue configures the window of re-issued requests. Zero values mean
// the defaults.
type Reissue struct {
	// Disabled turns it off: every request runs, and a call ends with the
	// request it came in, as before.
	Disabled bool
	// Window is how long after the first execution ended its result
	// answers a re-issue.
	Window time.Duration
	// Grace is how long a call keeps running after its client left (its
	// request ended without an explicit cancellation), waiting for a
	// re-issue to attach to it; then it is cancelled (and a later re-issue
	// gets an outcome_unknown error when the call had reached its server,
	// else the cancellation).
	Grace time.Duration
	// MaxEntries bounds the executions held at once (running, or ended
	// within the window); the oldest ended one makes room for a new one.
	MaxEntries int
	// MaxResultBytes bounds a result kept (its text and data, and the
	// JSON of its structured content and _meta): a larger one is not
	// kept, and a re-issue gets an error of kind outcome_unknown instead
	// (never a second execution).
	MaxResultBytes int
}

// ReissueFromConfig returns the gateway's Reissue of a reissue section.
func ReissueFromConfig(c config.Reissue) Reissue {
	return Reissue{Disabled: c.Disabled, Window: c.Window, Grace: c.Grace, MaxEntries: c.MaxEntries, MaxResultBytes: int(c.MaxResultBytes)}
}

func (o Reissue) withDefaults() Reissue {
	if o.Window <= 0 {
		o.Window = DefaultReissueWindow
	}
	if o.Grace <= 0 {
		o.Grace = DefaultReissueGrace
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultReissueMaxEntries
	}
	if o.MaxResultBytes <= 0 {
		o.MaxResultBytes = DefaultReissueMaxResultBytes
	}
	return o
}

// ReissueLog is an optional interface of a SessionLog: told of every
// re-issued request answered from its first execution, which the task log
// shows as a step of the call's task, not as a second call.
type ReissueLog interface {
	Reissued(ctx context.Context, r Reissued)
}

// Reissued is a re-issued request answered from the first execution.
type Reissued struct {
	// Task is the task of the first execution's call.
	Task string
	// Route is where the request came: "/mcp", "/virtual/NAME/mcp",
	// "/servers/NAME/mcp".
	Route string
	// Server and Tool name the tool called.
	Server, Tool string
	// RequestID is the JSON-RPC id of the request, as the client wrote it.
	RequestID string
	// Running says the first execution still ran: the re-issue waited for
	// it.
	Running bool
	// Kept is false when the re-issue was answered with an
	// outcome_unknown error instead of the first execution's result: the
	// result was too large to keep, or (AfterGrace) there was none.
	Kept bool
	// AfterGrace says the first execution was cancelled after the grace
	// once it had reached the server, which may have acted (Kept is
	// false).
	AfterGrace bool
	At         time.Time
}

// ReissueStats counts the re-issued requests a gateway answered.
type ReissueStats struct {
	// Answered is how many re-issues were answered from a first
	// execution (waiting for it or not), NotKept included.
	Answered uint64
	// NotKept is how many of them got an outcome_unknown error because
	// the first execution's result was too large to keep.
	NotKept uint64
	// AfterGrace is how many of them got an outcome_unknown error because
	// the first execution was cancelled after the grace once it had
	// reached the server.
	AfterGrace uint64
}

// ReissueStats returns the counts of re-issued requests answered so far.
func (g *Gateway) ReissueStats() ReissueStats {
	if g.reissue == nil {
		return ReissueStats{}
	}
	return ReissueStats{Answered: g.reissue.answered.Load(), NotKept: g.reissue.notKept.Load(), AfterGrace: g.reissue.afterGrace.Load()}
}

// callOrigin is what the gateway knows of the HTTP request a tools/call came
// in (set by jsonRPCErrors, carried to the call by bind or serveLean).
type callOrigin struct {
	route string
	id    json.RawMessage // the JSON-RPC id, as the client wrote it (a copy: the body is not kept)
	auth  authHash        // who asked (requesterOf)
	// answered is the execution whose result this request was given:
	// once the answer went out whole (served), the execution no longer
	// answers re-issues.
	answered atomic.Pointer[execution]
}

// authHash says who made a request (requesterOf, owners.go): a SHA-256,
// never the credential itself.
type authHash [sha256.Size]byte

// maxWindowedID bounds the JSON-RPC id of a call the window keeps: a
// request with a longer id (clients send numbers and short strings) is
// not kept, so that an id cannot make an entry large.
const maxWindowedID = 256

type originKey struct{}

// withOrigin returns r carrying its origin, for a tools/call with an id.
func withOrigin(r *http.Request, route string, id json.RawMessage) *http.Request {
	if len(id) == 0 || len(id) > maxWindowedID {
		return r
	}
	o := &callOrigin{route: route, id: bytes.Clone(id), auth: requesterOf(r)}
	return r.WithContext(context.WithValue(r.Context(), originKey{}, o))
}

// served is told that the request r (as take returned it) was answered,
// and whether writing the answer failed. When the result was handed to
// a request whose client was still there (answered) and its answer was
// written without an error, the execution is forgotten, so that the
// same request made again later (a client that restarted and numbers its
// requests from 1 again) runs, rather than getting the answer its first
// making already got: only a result that did not reach its client is
// kept for a re-issue. (Whether the client is there is judged when the
// result is handed over, not after the answer: a client that read its
// answer and closed the connection at once ends the request's context
// as the handler returns.)
func (w *reissue) served(r *http.Request, failed bool) {
	o := originFrom(r.Context())
	if o == nil || failed {
		return
	}
	e := o.answered.Load()
	if e == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if e.ended.IsZero() {
		return
	}
	w.removeLocked(e)
	e.kept = false
	if e.waiters == 0 {
		e.result, e.err = nil, nil
	}
}

func originFrom(ctx context.Context) *callOrigin {
	o, _ := ctx.Value(originKey{}).(*callOrigin)
	return o
}

// carryOrigin returns ctx carrying the origin post carries, if any.
func carryOrigin(ctx, post context.Context) context.Context {
	if o := originFrom(post); o != nil {
		return context.WithValue(ctx, originKey{}, o)
	}
	return ctx
}

// reissueKey identifies a client's request: the SHA-256 of the route, its
// caller (requesterOf: the caller's key, else the Authorization header),
// the client (a
// 2026-07-28 request's clientInfo from _meta; an older client's session),
// the JSON-RPC id, the tool, its arguments and the answers to questions
// the request carries. A call that reuses an id with other arguments, or
// of another tool, is another request.
type reissueKey [sha256.Size]byte

// Keys of a 2026-07-28 request's _meta.
const (
	reissueMetaVersion    = "io.modelcontextprotocol/protocolVersion"
	reissueMetaClientInfo = "io.modelcontextprotocol/clientInfo"
)

// reissueKeyOf returns the key of a call, and the key of its request
// alone (what a cancellation names); ok is false when the call has no
// identity to key it by (no JSON-RPC id, no client).
func (g *Gateway) reissueKeyOf(o *callOrigin, t tool.Tool, in callInput, args map[string]any) (k, req reissueKey, ok bool) {
	sid := g.taskOf(in)
	req, ok = reissueRequestKey(o.route, o.auth, in.params.Meta, sid, o.id)
	if !ok {
		return k, req, false
	}
	a, err := json.Marshal(args) // map keys sorted: one encoding per arguments
	if err != nil {
		return k, req, false
	}
	var answers []byte
	if len(in.params.InputResponses) > 0 {
		if answers, err = json.Marshal(in.params.InputResponses); err != nil {
			return k, req, false
		}
	}
	h := sha256.New()
	for _, f := range [][]byte{req[:], []byte(t.Server), []byte(t.Name), a, answers} {
		writeField(h, f)
	}
	h.Sum(k[:0])
	return k, req, true
}

// reissueRequestKey returns the key of a client's request id: the route, the
// caller, the client (from a 2026-07-28 request's _meta, else its
// session sid) and the id.
func reissueRequestKey(route string, auth authHash, meta map[string]any, sid string, id json.RawMessage) (k reissueKey, ok bool) {
	var client string
	if _, new := meta[reissueMetaVersion]; new {
		ci, err := json.Marshal(meta[reissueMetaClientInfo])
		if err != nil {
			return k, false
		}
		client = "client " + string(ci)
	} else if sid != "" {
		client = "session " + sid
	}
	if client == "" || len(id) == 0 {
		return k, false
	}
	h := sha256.New()
	for _, f := range [][]byte{[]byte(route), auth[:], []byte(client), id} {
		writeField(h, f)
	}
	h.Sum(k[:0])
	return k, true
}

// looseKey identifies a request of a 2026-07-28 client without the
// client: its route, caller and id. A cancellation names its request
// by these alone when it carries no _meta (the go-sdk's client sends
// none), and there is no session to tell the client by.
func looseKey(route string, auth authHash, id json.RawMessage) (k reissueKey) {
	h := sha256.New()
	for _, f := range [][]byte{[]byte(route), auth[:], id} {
		writeField(h, f)
	}
	h.Sum(k[:0])
	return k
}

// take looks at a POST's message (body, scanned as msg) before it is
// answered: a tools/call gets its origin, the identity of its request; a
// notifications/cancelled cancels the call it names, if the window keeps
// it. It returns r, with its origin.
func (w *reissue) take(r *http.Request, route string, body []byte, msg jsonscan.Message) *http.Request {
	switch string(msg.Method) {
	case `"tools/call"`:
		return withOrigin(r, route, rpcID(msg.ID))
	case `"notifications/cancelled"`:
		w.cancelled(r, route, body)
	}
	return r
}

// cancelled takes a client's notifications/cancelled (body) on route: the
// call of the request it names, if the window keeps one running, is
// cancelled, even after the request itself ended (a client that cancels
// closes its stream, then says so). The message goes on to whoever
// answers it.
func (w *reissue) cancelled(r *http.Request, route string, body []byte) {
	var m struct {
		Params struct {
			RequestID json.RawMessage `json:"requestId"`
			Meta      map[string]any  `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &m) != nil {
		return
	}
	auth := requesterOf(r)
	sid := r.Header.Get(sessionHeader)
	k, ok := reissueRequestKey(route, auth, m.Params.Meta, sid, m.Params.RequestID)
	w.mu.Lock()
	defer w.mu.Unlock()
	var e *execution
	switch {
	case ok:
		e = w.byRequest[k]
	case sid == "" && len(m.Params.RequestID) > 0 && r.Header.Get("Mcp-Protocol-Version") >= multiRoundTrip:
		// A 2026-07-28 client's cancellation without _meta: the one
		// running call of that id and caller, if only one has it.
		if es := w.byLoose[looseKey(route, auth, m.Params.RequestID)]; len(es) == 1 {
			e = es[0]
		}
	}
	if e != nil {
		e.stopLocked(errCancelledByClient)
		return
	}
	if ok && w.tasks != nil {
		// A call of a client that uses MCP tasks (tasks_reissue.go).
		w.tasks.cancelRequest(k)
	}
}

// writeField writes f length-prefixed, so that fields cannot run into one
// another.
func writeField(h hash.Hash, f []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(f)))
	h.Write(n[:])
	h.Write(f)
}

// reissued answers a call through the window when it is one the window
// keeps: ok is false when the call must simply be made (the window is
// off, the tool is read-only or idempotent, the call is the window's own
// execution, or it has no request identity: stdio, in memory).
func (g *Gateway) reissued(ctx context.Context, t tool.Tool, in callInput, args map[string]any) (_ *mcp.CallToolResult, ok bool) {
	res, _, ok := g.windowed(ctx, t, in, args, func(ctx context.Context) (*mcp.CallToolResult, error) {
		return g.callArgs(ctx, t, in, args), nil
	})
	return res, ok
}

// windowed makes a call of t through the window, run making it, when it
// is one the window keeps; ok is false when run must simply be called
// (as for reissued). run's error (a JSON-RPC error a passthrough route
// answers as it is) is kept with its result.
func (g *Gateway) windowed(ctx context.Context, t tool.Tool, in callInput, args map[string]any,
	run func(context.Context) (*mcp.CallToolResult, error)) (_ *mcp.CallToolResult, _ error, ok bool) {
	o, key, req, ok := g.windowKey(ctx, t, in, args)
	if !ok {
		return nil, nil, false
	}
	note := Reissued{Task: g.taskOf(in), Route: o.route, Server: t.Server, Tool: t.Name, RequestID: string(o.id)}
	var loose *reissueKey
	if _, modern := in.params.Meta[reissueMetaVersion]; modern {
		k := looseKey(o.route, o.auth, o.id)
		loose = &k
	}
	res, err := g.reissue.call(ctx, key, req, loose, note, run)
	return res, err, true
}

// windowKey returns the origin and keys of a call the window keeps (of
// a tool neither read-only nor idempotent, whose request has an
// identity); ok is false when the call must simply be made, as for
// reissued.
func (g *Gateway) windowKey(ctx context.Context, t tool.Tool, in callInput, args map[string]any) (o *callOrigin, k, req reissueKey, ok bool) {
	if g.reissue == nil || t.IsIdempotent() || ctx.Value(outsideKey{}) != nil {
		return nil, k, req, false
	}
	if o = originFrom(ctx); o == nil {
		return nil, k, req, false
	}
	k, req, ok = g.reissueKeyOf(o, t, in, args)
	return o, k, req, ok
}

type executionKey struct{}

// reissueApproving tells the window that the call of ctx, if it is one of
// its executions, waits for its client's answer to an approval asked
// outside the policy gate (a passthrough session's elicitation): as for
// one the gate asks, a call whose client has left is withdrawn. The
// returned func says the wait ended.
func reissueApproving(ctx context.Context) func() {
	e, _ := ctx.Value(executionKey{}).(*execution)
	if e == nil {
		return func() {}
	}
	e.approvalWait(true)
	return func() { e.approvalWait(false) }
}

// reissueLeft reports whether the call of ctx is an execution of the
// window whose every request has ended (it goes on for the grace): what
// it would ask its client now nobody would read.
func reissueLeft(ctx context.Context) bool {
	e, _ := ctx.Value(executionKey{}).(*execution)
	if e == nil {
		return false
	}
	e.w.mu.Lock()
	defer e.w.mu.Unlock()
	return e.left
}

// reissueReached tells the window that the call of ctx, if it is one of
// its executions, went to the server (or may have): if the grace then
// cancels it, its outcome is unknown rather than a plain cancellation.
func reissueReached(ctx context.Context) {
	e, _ := ctx.Value(executionKey{}).(*execution)
	if e == nil {
		return
	}
	e.w.mu.Lock()
	e.reached = true
	e.w.mu.Unlock()
}

// reachedServer reports whether a call's record says it may have reached
// its server: the manager invoked the source (Attempts), and the source
// did not say the request never left (tool.ErrNotSent). A call cut short
// before that (in the policy gate, the pipeline, a server's lookup) has
// none.
func reachedServer(rec *tool.Record) bool {
	return rec.Attempts > 0 && (rec.Error == nil || !errors.Is(rec.Error, tool.ErrNotSent))
}

// reissue is the window of executions.
type reissue struct {
	opts  Reissue
	log   ReissueLog  // nil: not told
	tasks *taskRunner // nil: MCP tasks are off

	answered, notKept, afterGrace atomic.Uint64

	// stop ends every execution (Close).
	base context.Context
	stop context.CancelCauseFunc
	wg   sync.WaitGroup

	mu        sync.Mutex
	byKey     map[reissueKey]*execution
	byRequest map[reissueKey]*execution   // running ones, by reissueRequestKey
	byLoose   map[reissueKey][]*execution // running ones of 2026-07-28 clients, by looseKey
	order     list.List                   // of *execution, oldest first
	nextSweep time.Time
}

// execution is one call the window keeps: running, or ended within the
// window.
type execution struct {
	w   *reissue
	key reissueKey
	req reissueKey // reissueRequestKey, for cancellations
	// loose is the looseKey of a 2026-07-28 client's call, for
	// cancellations without _meta; nil for a session's.
	loose *reissueKey
	// session is the session of a session's call, whose end ends it.
	session string
	elem    *list.Element
	note    Reissued // the first request's, for the step
	done    chan struct{}
	// cancel ends the execution, with the cause its record quotes;
	// guarded by w.mu, nil once the execution ended (so that an entry
	// holds nothing of the request's context for the window).
	cancel context.CancelCauseFunc

	// Guarded by w.mu.
	waiters   int  // requests waiting for it: the first, and re-issues
	approving bool // waiting for an approver's answer
	left      bool // every request waiting for it has ended
	withdrawn bool // cancelled while it waited for approval: forgotten when it ends
	reached   bool // the call went to the server (reissueReached)
	grace     *time.Timer
	ended     time.Time // zero while it runs
	result    *mcp.CallToolResult
	err       error // run's error, kept with result
	kept      bool
	// unknown says it ended cancelled by the grace after it had reached
	// the server: whether its effect happened is unknown (a server may
	// act before, or despite, a cancellation), and a re-issue is told so.
	unknown bool
}

func newReissue(o Reissue, log SessionLog) *reissue {
	if o.Disabled {
		return nil
	}
	w := &reissue{opts: o.withDefaults(), byKey: map[reissueKey]*execution{}, byRequest: map[reissueKey]*execution{},
		byLoose: map[reissueKey][]*execution{}}
	w.log, _ = log.(ReissueLog)
	w.base, w.stop = context.WithCancelCause(context.Background())
	return w
}

// outsideKey marks the context of a call the window has taken, its own
// execution or a call it let through: the call is made.
type outsideKey struct{}

// Causes of an execution's end that the records quote.
var (
	errNoReissue = errors.New("the client's request ended and no re-issue of it came within the grace (reissue.grace)")
	errClosing   = errors.New("the gateway closed")
)

// call answers a request of key: from the execution of an earlier request
// with that key, else by making the call (run) as a new execution.
func (w *reissue) call(ctx context.Context, key, req reissueKey, loose *reissueKey, note Reissued, run func(context.Context) (*mcp.CallToolResult, error)) (*mcp.CallToolResult, error) {
	now := time.Now()
	w.mu.Lock()
	w.sweepLocked(now)
	if e := w.byKey[key]; e != nil {
		if e.ended.IsZero() || now.Sub(e.ended) <= w.opts.Window {
			return w.attachLocked(ctx, e, note)
		}
		w.removeLocked(e)
	}
	if w.base.Err() != nil || w.order.Len() >= w.opts.MaxEntries && !w.evictLocked() {
		// Closing, or every entry still runs: this call goes without the
		// window, as it would without one.
		w.mu.Unlock()
		return run(context.WithValue(ctx, outsideKey{}, true))
	}
	e := &execution{w: w, key: key, req: req, loose: loose, note: note, done: make(chan struct{}), waiters: 1}
	e.elem = w.order.PushBack(e)
	w.byKey[key] = e
	w.byRequest[req] = e
	if loose != nil {
		w.byLoose[*loose] = append(w.byLoose[*loose], e)
	} else {
		e.session = note.Task // a session's call: its task is the session's id
	}
	// The execution outlives the request: it ends by itself, by an
	// explicit cancellation, the grace, or Close.
	ectx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	e.cancel = cancel
	stop := context.AfterFunc(w.base, func() { cancel(context.Cause(w.base)) })
	ectx = context.WithValue(ectx, outsideKey{}, true)
	ectx = context.WithValue(ectx, executionKey{}, e)
	ectx = policy.WithApprovalWait(ectx, e.approvalWait)
	w.wg.Add(1)
	w.mu.Unlock()
	go func() {
		defer w.wg.Done()
		defer stop()
		res, err := run(ectx)
		cause := context.Cause(ectx) // before cancel: why it was cut short, if it was
		cancel(nil)
		w.finish(e, res, err, cause)
	}()
	return w.wait(ctx, e)
}

// attachLocked answers a re-issue of e's request; w.mu is held, and
// released.
func (w *reissue) attachLocked(ctx context.Context, e *execution, note Reissued) (*mcp.CallToolResult, error) {
	running := e.ended.IsZero()
	kept, unknown := e.kept, e.unknown
	res, err := e.result, e.err
	if running {
		e.waiters++
		e.left = false
		if e.grace != nil {
			e.grace.Stop()
			e.grace = nil
		}
	}
	w.mu.Unlock()
	w.answered.Add(1)
	switch {
	case running || kept:
	case unknown:
		w.afterGrace.Add(1)
	default:
		w.notKept.Add(1)
	}
	if w.log != nil {
		r := e.note
		r.Route, r.RequestID, r.Running, r.Kept, r.At = note.Route, note.RequestID, running, running || kept, time.Now()
		r.AfterGrace = !running && unknown
		w.log.Reissued(context.WithoutCancel(ctx), r)
	}
	switch {
	case running:
		return w.wait(ctx, e)
	case kept:
		handedOver(ctx, e)
		return copyResult(res), err
	case unknown:
		return w.unknownResult(e), nil
	}
	return errorResult(&tool.Error{Kind: tool.KindOutcomeUnknown, Server: e.note.Server, Tool: e.note.Tool, Message: fmt.Sprintf(
		"this request (id %s) was made before and %s/%s ran for it; its result was larger than reissue.max_result_bytes (%d bytes) and was not kept, "+
			"and the call is not idempotent, so it was not run again: its effect has happened, its result is lost",
		e.note.RequestID, e.note.Server, e.note.Tool, w.opts.MaxResultBytes)}), nil
}

// wait waits for e's result, or for ctx to end (then the request leaves
// e, which may go on for a re-issue).
func (w *reissue) wait(ctx context.Context, e *execution) (*mcp.CallToolResult, error) {
	select {
	case <-e.done:
		w.mu.Lock()
		defer w.mu.Unlock()
		res, err := e.result, e.err
		if e.waiters--; e.waiters == 0 && !e.kept {
			e.result, e.err = nil, nil
		}
		if e.unknown {
			// A re-issue that came as the grace ended.
			return w.unknownResult(e), nil
		}
		handedOver(ctx, e)
		return copyResult(res), err
	case <-ctx.Done():
		cause := context.Cause(ctx)
		w.leave(e, cause)
		return errorResult(&tool.Error{Kind: tool.KindCancelled, Server: e.note.Server, Tool: e.note.Tool,
			Message: fmt.Sprintf("%v; a re-issue of the request within %v gets the call's result", cause, w.opts.Grace), Err: cause}), nil
	}
}

// unknownResult is the answer to a request of e, which the grace cut short
// once it had reached the server (e.unknown).
func (w *reissue) unknownResult(e *execution) *mcp.CallToolResult {
	return errorResult(&tool.Error{Kind: tool.KindOutcomeUnknown, Server: e.note.Server, Tool: e.note.Tool, Message: fmt.Sprintf(
		"this request (id %s) was made before and the call of %s/%s was sent to the server for it; its client left, no re-issue came "+
			"within the grace (reissue.grace, %v), and the call was cancelled: whether its effect happened is unknown (the server may "+
			"have acted before, or despite, the cancellation); the call is not idempotent, so it was not run again",
		e.note.RequestID, e.note.Server, e.note.Tool, w.opts.Grace)})
}

// handedOver notes that e's result is handed to the request of ctx, for
// served, when its client is still there.
func handedOver(ctx context.Context, e *execution) {
	if o := originFrom(ctx); o != nil && ctx.Err() == nil {
		o.answered.Store(e)
	}
}

// leave notes a request of e that ended before e did: an explicit
// cancellation (or the end of the client's session) cancels e; the last
// request leaving a call that waits for approval withdraws it; else e
// goes on for the grace.
func (w *reissue) leave(e *execution, cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e.waiters--
	if !e.ended.IsZero() {
		if e.waiters == 0 && !e.kept {
			e.result, e.err = nil, nil
		}
		return
	}
	switch {
	case errors.Is(cause, errCancelledByClient) || errors.Is(cause, errSessionEnded):
		e.stopLocked(cause)
	case e.waiters > 0:
	case e.approving:
		// Nobody is there to answer: withdrawn, as without the window.
		e.withdrawn = true
		e.stopLocked(cause)
	default:
		e.left = true
		e.grace = time.AfterFunc(w.opts.Grace, func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			e.stopLocked(errNoReissue)
		})
	}
}

// stopLocked cancels e, if it still runs; w.mu is held.
func (e *execution) stopLocked(cause error) {
	if e.cancel != nil {
		e.cancel(cause)
	}
}

// copyResult returns a copy of res that its receiver may change: the
// go-sdk sets a 2026-07-28 answer's resultType and _meta on the result
// it is given, and one execution's result answers several requests.
func copyResult(res *mcp.CallToolResult) *mcp.CallToolResult {
	if res == nil {
		return nil
	}
	c := *res
	c.Meta = maps.Clone(res.Meta)
	return &c
}

// approvalWait is told by the policy gate when e starts and stops waiting
// for approval: one whose client has left is withdrawn at once.
func (e *execution) approvalWait(waiting bool) {
	w := e.w
	w.mu.Lock()
	defer w.mu.Unlock()
	e.approving = waiting
	if waiting && e.left {
		e.withdrawn = true
		e.stopLocked(errClientGone)
	}
}

// finish keeps e's result for the window, unless it is not a result to
// answer a re-issue with: the call was withdrawn before it ran, or it
// asked its client a question (the retry with the answer runs it). A
// result too large is not kept; an error (err, res nil) is, but for the
// cancellation of a call the grace cut short (cause) once it had reached
// the server: the gateway cannot know whether the server acted, and says
// so to a re-issue (unknown) rather than "cancelled".
func (w *reissue) finish(e *execution, res *mcp.CallToolResult, err error, cause error) {
	size := 0
	if res != nil {
		size = resultSize(res, w.opts.MaxResultBytes)
	}
	if err != nil {
		size += errorSize(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	e.ended = time.Now()
	e.cancel = nil
	if w.byRequest[e.req] == e {
		delete(w.byRequest, e.req)
	}
	if e.loose != nil {
		es := slices.DeleteFunc(w.byLoose[*e.loose], func(x *execution) bool { return x == e })
		if len(es) == 0 {
			delete(w.byLoose, *e.loose)
		} else {
			w.byLoose[*e.loose] = es
		}
	}
	if e.grace != nil {
		e.grace.Stop()
		e.grace = nil
	}
	e.result, e.err = res, err
	forget := e.withdrawn || res != nil && res.InputRequests != nil
	e.unknown = !forget && e.reached && errors.Is(cause, errNoReissue) && cancelledOutcome(res, err)
	e.kept = !forget && !e.unknown && size <= w.opts.MaxResultBytes
	if forget {
		w.removeLocked(e)
	}
	if e.waiters == 0 && !e.kept {
		e.result, e.err = nil, nil
	}
	close(e.done)
}

// cancelledOutcome reports whether a call ended cancelled: run's error,
// or the result's error kind (toMCP).
func cancelledOutcome(res *mcp.CallToolResult, err error) bool {
	if err != nil {
		return tool.KindOf(err) == tool.KindCancelled
	}
	return res != nil && res.IsError && res.Meta["toolmux/error_kind"] == string(tool.KindCancelled)
}

// resultSize returns the bytes res holds: its content's text and data,
// and what its structured content and _meta hold (bound.Size, walked
// rather than encoded), stopping once past max. Encoding the whole result
// would cost more than the call's other work in the gateway.
func resultSize(res *mcp.CallToolResult, max int) int {
	n := 0
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			n += len(c.Text)
		case *mcp.ImageContent:
			n += len(c.Data)
		case *mcp.AudioContent:
			n += len(c.Data)
		case *mcp.EmbeddedResource:
			if c.Resource != nil {
				n += len(c.Resource.Text) + len(c.Resource.Blob)
			}
		case *mcp.ResourceLink:
			n += len(c.URI) + len(c.Name) + len(c.Description)
		}
	}
	if res.StructuredContent != nil && n <= max {
		n += bound.Size(res.StructuredContent, max-n)
	}
	if len(res.Meta) > 0 && n <= max {
		n += bound.Size(map[string]any(res.Meta), max-n)
	}
	return n
}

// errorSize returns the bytes a kept error holds: its message, and the
// data of a JSON-RPC error (a passthrough route's upstream error, which
// may echo the call's arguments).
func errorSize(err error) int {
	n := len(err.Error())
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		n += len(je.Data)
	}
	return n
}

// sweepLocked forgets executions that ended more than the window ago, at
// most once a second.
func (w *reissue) sweepLocked(now time.Time) {
	if now.Before(w.nextSweep) {
		return
	}
	w.nextSweep = now.Add(time.Second)
	for el := w.order.Front(); el != nil; {
		next := el.Next()
		if e := el.Value.(*execution); !e.ended.IsZero() && now.Sub(e.ended) > w.opts.Window {
			w.removeLocked(e)
		}
		el = next
	}
}

// evictLocked forgets the oldest execution that has ended; false if every
// one still runs.
func (w *reissue) evictLocked() bool {
	for el := w.order.Front(); el != nil; el = el.Next() {
		if e := el.Value.(*execution); !e.ended.IsZero() {
			w.removeLocked(e)
			return true
		}
	}
	return false
}

func (w *reissue) removeLocked(e *execution) {
	if e.elem == nil {
		return
	}
	w.order.Remove(e.elem)
	e.elem = nil
	if w.byKey[e.key] == e {
		delete(w.byKey, e.key)
	}
}

// close cancels the executions still running and waits for them. The
// stop is made under w.mu, where call checks it before it adds an
// execution: none is added once the wait has begun.
func (w *reissue) close() {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.stop(errClosing)
	w.mu.Unlock()
	w.wg.Wait()
}

// sessionEnded cancels the executions of a session that ended which run
// on in their grace: no re-issue can come without the session.
func (w *reissue) sessionEnded(sid string) {
	if w == nil || sid == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for el := w.order.Front(); el != nil; el = el.Next() {
		if e := el.Value.(*execution); e.session == sid && e.ended.IsZero() {
			e.stopLocked(errSessionEnded)
		}
	}
}
