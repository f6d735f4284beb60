package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/jsonscan"
	"github.com/toolmux/toolmux/internal/jsontype"
	"github.com/toolmux/toolmux/internal/toolglob"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

// MCP tasks (the io.modelcontextprotocol/tasks extension, SEP-2663): for a
// client that declared the extension (at initialize, or in a request's
// _meta), a tools/call still running after a threshold, or of a tool
// configured as long, is answered with a CreateTaskResult, and the call
// goes on detached from the HTTP request; the client polls it with
// tasks/get, answers its questions (approvals) with tasks/update, and
// cancels it with tasks/cancel, from any session or none. Every change of
// a task is written to the task log's journal (tasklog.PutMCPTask) before
// the client can see it, so tasks/get reads the journal's state, after the
// client reconnected or the gateway restarted.
//
// The go-sdk knows nothing of tasks and refuses tasks/* before any
// middleware, so the gateway takes these requests at the HTTP layer
// (jsonRPCErrors calls serveTasks first), doing for them the checks the
// go-sdk would do (headers against the body, the session).

// TasksExtension is the extension's name, under capabilities.extensions
// and in a client's _meta.
const TasksExtension = "io.modelcontextprotocol/tasks"

// The JSON-RPC codes of SEP-2243 and SEP-2575 the tasks surface answers.
const (
	codeHeaderMismatch     = -32020
	codeMissingCapability  = -32021
	metaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
)

// Tasks configure MCP tasks; the zero value (no Store) turns them off: the
// extension is not advertised and tasks/* are unknown methods.
type Tasks struct {
	// Store is where tasks live (the task log).
	Store TaskStore
	// Threshold is how long a call runs before it becomes a task; 0
	// means DefaultTaskThreshold.
	Threshold time.Duration
	// Thresholds override Threshold for the tools their pattern
	// (server/tool glob) matches; the first match wins.
	Thresholds []TaskThreshold
	// Long are tool patterns (server/tool globs) whose calls are tasks
	// at once.
	Long []string
	// Required are tool patterns whose calls are tasks at once and
	// refused (-32021) to a client that did not declare the extension.
	Required []string
	// MaxRunning bounds the tasks running at once; a call past it runs
	// as an ordinary call. 0 means DefaultMaxTasks.
	MaxRunning int
	// PollInterval is what clients are told to wait between polls; 0
	// means DefaultTaskPollInterval.
	PollInterval time.Duration
	// TTL is how long a task stays readable after its last change (the
	// journal's retention by age), told to clients as ttlMs; 0 means
	// unbounded (ttlMs null).
	TTL time.Duration
	// ApprovalTimeout bounds the wait for an answer to an approval
	// question of a task; 0 means policy's default.
	ApprovalTimeout time.Duration
}

// TaskThreshold is the threshold of the tools a pattern matches.
type TaskThreshold struct {
	Tools string
	After time.Duration
}

// The defaults of Tasks.
const (
	DefaultTaskThreshold    = time.Second
	DefaultMaxTasks         = 64
	DefaultTaskPollInterval = 500 * time.Millisecond
)

// TaskStore keeps MCP tasks (*tasklog.Log implements it).
type TaskStore interface {
	PutMCPTask(ctx context.Context, t tasklog.MCPTask) error
	MCPTask(ctx context.Context, id string) (*tasklog.MCPTask, error)
}

// taskRunner runs the gateway's MCP tasks.
type taskRunner struct {
	g          *Gateway
	o          Tasks
	long       []toolglob.Pattern
	required   []toolglob.Pattern
	thresholds []compiledThreshold

	ctx    context.Context // ends with Close: every task is cancelled
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	running map[string]*liveTask
	// keyed are the calls a re-issue of their request is answered with
	// (tasks_reissue.go), by the window's key.
	keyed     map[reissueKey]*keyedTask
	nextSweep time.Time // of keyed
}

type compiledThreshold struct {
	p     toolglob.Pattern
	after time.Duration
}

// errGatewayStopped ends the tasks still running when the gateway closes.
var errGatewayStopped = errors.New("interrupted: the gateway stopped")

func newTaskRunner(g *Gateway, o Tasks) *taskRunner {
	if o.Store == nil {
		return nil
	}
	o.Threshold = cmpDur(o.Threshold, DefaultTaskThreshold)
	o.PollInterval = cmpDur(o.PollInterval, DefaultTaskPollInterval)
	if o.MaxRunning <= 0 {
		o.MaxRunning = DefaultMaxTasks
	}
	tr := &taskRunner{g: g, o: o, running: map[string]*liveTask{}, keyed: map[reissueKey]*keyedTask{}}
	var err error
	if tr.long, err = toolglob.ParseAll(o.Long, true); err != nil {
		g.log.Error("toolmux: tasks: a long tool pattern is invalid; no tool is long", "err", err)
		tr.long = nil
	}
	if tr.required, err = toolglob.ParseAll(o.Required, true); err != nil {
		g.log.Error("toolmux: tasks: a required tool pattern is invalid; no tool requires tasks", "err", err)
		tr.required = nil
	}
	for _, th := range o.Thresholds {
		ps, err := toolglob.ParseAll([]string{th.Tools}, true)
		if err != nil || len(ps) != 1 {
			g.log.Error("toolmux: tasks: a threshold's tool pattern is invalid; ignored", "pattern", th.Tools, "err", err)
			continue
		}
		tr.thresholds = append(tr.thresholds, compiledThreshold{ps[0], th.After})
	}
	tr.ctx, tr.cancel = context.WithCancelCause(context.Background())
	return tr
}

func cmpDur(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// close cancels the running tasks and waits for each to write its end.
func (tr *taskRunner) close() {
	tr.mu.Lock()
	tr.cancel(errGatewayStopped)
	tr.mu.Unlock()
	tr.wg.Wait()
}

// threshold is how long a call of t may run before it becomes a task; 0
// for a long tool.
func (tr *taskRunner) threshold(t tool.Tool) time.Duration {
	if _, ok := toolglob.Any(tr.long, t.Server, t.Name); ok || tr.requires(t) {
		return 0
	}
	for _, th := range tr.thresholds {
		if th.p.Match(t.Server, t.Name) {
			return th.after
		}
	}
	return tr.o.Threshold
}

// requires reports whether calls of t must be tasks.
func (tr *taskRunner) requires(t tool.Tool) bool {
	_, ok := toolglob.Any(tr.required, t.Server, t.Name)
	return ok
}

// missingExtension answers a request that needs the extension the client
// did not declare (SEP-2575's -32021, naming what is missing).
func missingExtension(w http.ResponseWriter, status int, id json.RawMessage, what string) {
	data, _ := json.Marshal(map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}})
	writeRPCErrorData(w, status, id, codeMissingCapability,
		"toolmux: "+what+" needs the "+TasksExtension+" extension, which the client did not declare", data)
}

// liveTask is a task this process runs.
type liveTask struct {
	tr *taskRunner
	// done is closed when the call has ended (res is set).
	done   chan struct{}
	res    *mcp.CallToolResult
	cancel context.CancelCauseFunc
	// promote asks the request still waiting for the threshold to make
	// the call a task now (a question for the client came up).
	promote chan struct{}

	// wmu orders the task's writes: each is the whole state, the newest
	// is the task.
	wmu      sync.Mutex
	state    tasklog.MCPTask
	created  bool // the task was written: every change is written
	finished bool // the call ended before the task was created
	asks     map[string]*taskAsk
	// lastProgress is when progress was last written: a call reporting
	// progress often writes it at most once per progressEvery.
	lastProgress time.Time
}

// progressEvery bounds how often a task's progress is written to the
// task log; the newest report is in the next write anyway.
const progressEvery = time.Second

// progress notes the call's progress in the task.
func (lt *liveTask) progress(ctx context.Context, p tool.Progress) {
	b, err := json.Marshal(p)
	if err != nil {
		return
	}
	lt.wmu.Lock()
	defer lt.wmu.Unlock()
	lt.state.Progress = b
	if lt.state.Status == tasklog.MCPWorking {
		lt.state.StatusMessage = p.Message
	}
	if !lt.created || time.Since(lt.lastProgress) < progressEvery {
		return
	}
	lt.lastProgress = time.Now()
	_ = lt.setLocked(ctx, func(*tasklog.MCPTask) {})
}

// taskAsk is a question of the task waiting for the client's answer.
type taskAsk struct {
	form   *mcp.ElicitParams
	answer chan *mcp.ElicitResult // buffered, taken once
}

// set changes the task's state and writes it, once the task exists.
func (lt *liveTask) set(ctx context.Context, f func(*tasklog.MCPTask)) error {
	lt.wmu.Lock()
	defer lt.wmu.Unlock()
	return lt.setLocked(ctx, f)
}

func (lt *liveTask) setLocked(ctx context.Context, f func(*tasklog.MCPTask)) error {
	f(&lt.state)
	lt.state.Updated = time.Now().UTC()
	if !lt.created {
		return nil
	}
	return lt.tr.o.Store.PutMCPTask(context.WithoutCancel(ctx), lt.state)
}

// create writes the task, making it one; false when the call ended
// first (its result is the answer).
func (lt *liveTask) create(ctx context.Context) (bool, error) {
	lt.wmu.Lock()
	defer lt.wmu.Unlock()
	if lt.finished {
		return false, nil
	}
	if lt.created { // made a task already (for a re-issue, tasks_reissue.go)
		return true, nil
	}
	lt.created = true
	now := time.Now().UTC()
	lt.state.Created, lt.state.Updated = now, now
	if err := lt.tr.o.Store.PutMCPTask(context.WithoutCancel(ctx), lt.state); err != nil {
		lt.created = false
		return false, err
	}
	return true, nil
}

// ask puts a question to the client through the task (status
// input_required, the question under inputRequests) and waits for the
// answer (tasks/update), ctx, or timeout.
func (lt *liveTask) ask(ctx context.Context, key string, form *mcp.ElicitParams, timeout time.Duration) (*mcp.ElicitResult, error) {
	a := &taskAsk{form: form, answer: make(chan *mcp.ElicitResult, 1)}
	lt.wmu.Lock()
	if lt.asks == nil {
		lt.asks = map[string]*taskAsk{}
	}
	lt.asks[key] = a
	err := lt.setLocked(ctx, lt.pendingLocked)
	lt.wmu.Unlock()
	if err != nil {
		lt.forget(ctx, key)
		return nil, err
	}
	select {
	case lt.promote <- struct{}{}:
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case res := <-a.answer:
		return res, nil
	case <-ctx.Done():
		lt.forget(ctx, key)
		return nil, ctx.Err()
	case <-t.C:
		lt.forget(ctx, key)
		return nil, errUnanswered
	}
}

var errUnanswered = errors.New("unanswered")

// pendingLocked sets the status and input requests from the questions
// waiting.
func (lt *liveTask) pendingLocked(st *tasklog.MCPTask) {
	if len(lt.asks) == 0 {
		st.Status, st.InputRequests, st.StatusMessage = tasklog.MCPWorking, nil, ""
		return
	}
	m := mcp.InputRequestMap{}
	for k, a := range lt.asks {
		m[k] = a.form
	}
	b, _ := json.Marshal(m)
	st.Status, st.InputRequests, st.StatusMessage = tasklog.MCPInputRequired, b, "waiting for the client's answer"
}

func (lt *liveTask) forget(ctx context.Context, key string) {
	lt.wmu.Lock()
	defer lt.wmu.Unlock()
	if _, ok := lt.asks[key]; !ok {
		return
	}
	delete(lt.asks, key)
	_ = lt.setLocked(ctx, lt.pendingLocked)
}

// answer hands the client's answers to the questions they name; answers
// to no pending question are ignored (answered already, withdrawn, or
// never asked), whatever their shape, as SEP-2663 asks: only an answer to
// a pending question is decoded, as the elicitation result it must be.
func (lt *liveTask) answer(ctx context.Context, answers map[string]json.RawMessage) error {
	lt.wmu.Lock()
	defer lt.wmu.Unlock()
	n := 0
	for k, v := range answers {
		a, ok := lt.asks[k]
		if !ok {
			continue
		}
		res := new(mcp.ElicitResult)
		if err := json.Unmarshal(v, res); err != nil || res.Action == "" {
			return fmt.Errorf("the answer to %q is not an elicitation result (with an action)", k)
		}
		delete(lt.asks, k)
		a.answer <- res
		n++
	}
	if n == 0 {
		return nil
	}
	return lt.setLocked(ctx, lt.pendingLocked)
}

// newTaskID is an unguessable task id: whoever knows it may read the task
// where no authentication is configured; else only its caller (and those
// who see everything, owners.go).
func newTaskID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "mcptask-" + hex.EncodeToString(b[:])
}

// taskRequest is what serveTasks reads of a request.
type taskRequest struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Meta           map[string]json.RawMessage `json:"_meta"`
		Name           string                     `json:"name"`
		Arguments      json.RawMessage            `json:"arguments"`
		TaskID         *string                    `json:"taskId"`
		InputResponses json.RawMessage            `json:"inputResponses"`
	} `json:"params"`
}

// isTaskMethod reports whether a scanned method is one serveTasks may take.
func isTaskMethod(raw []byte) bool {
	switch string(raw) {
	case `"tools/call"`, `"tasks/get"`, `"tasks/update"`, `"tasks/cancel"`:
		return true
	}
	return false
}

// serveTasks answers what the tasks extension adds to route: tools/call
// of a client that declared it, and tasks/get, tasks/update and
// tasks/cancel. It reports false, having written nothing, for anything
// else, which goes the usual way.
func (g *Gateway) serveTasks(w http.ResponseWriter, r *http.Request, route string, body []byte, msg jsonscan.Message) bool {
	tr := g.tasks
	if tr == nil || msg.Method == nil || msg.ID == nil || msg.Array || !isTaskMethod(msg.Method) {
		return false
	}
	v := g.viewOf(route)
	if v == nil {
		return false
	}
	if string(msg.Method) == `"tools/call"` && len(tr.required) == 0 && !bytes.Contains(body, []byte(TasksExtension)) &&
		!g.sessionDeclares(r.Header.Get(sessionHeader), route) {
		// Not a task's call: a client that does not use tasks pays a
		// scan of its request, not a decode.
		return false
	}
	var req taskRequest
	if err := json.Unmarshal(body, &req); err != nil || rpcID(req.ID) == nil {
		if err != nil && string(msg.Method) != `"tools/call"` {
			// The go-sdk does not know tasks/*: unanswered here, they
			// would be "method not found", which tells a client the
			// server has no tasks.
			return g.badTaskParams(w, r, route, body, msg, err)
		}
		return false // a tools/call's params are the go-sdk's to judge
	}
	id := rpcID(req.ID)
	var version string
	_ = json.Unmarshal(req.Params.Meta[metaProtocolVersion], &version)
	header := r.Header.Get("Mcp-Protocol-Version")
	modern := version != "" || header >= multiRoundTrip
	var caps struct {
		Elicitation json.RawMessage            `json:"elicitation"`
		Extensions  map[string]json.RawMessage `json:"extensions"`
	}
	_ = json.Unmarshal(req.Params.Meta[metaClientCapabilities], &caps)
	declared := caps.Extensions[TasksExtension] != nil
	elicits := caps.Elicitation != nil
	status := http.StatusOK
	var rec *tracked
	if modern {
		// The checks the go-sdk's stateless handler makes of a
		// 2026-07-28 request (SEP-2575, SEP-2243).
		status = http.StatusBadRequest
		switch {
		case version == "" || req.Params.Meta[metaClientCapabilities] == nil:
			writeRPCError(w, status, id, codeInvalidParams, "toolmux: a "+multiRoundTrip+" request carries _meta."+metaProtocolVersion+" and _meta."+metaClientCapabilities)
			return true
		case !slices.Contains(mcp.SupportedProtocolVersions(), version):
			return false // the go-sdk says which versions it speaks
		case header != version:
			writeRPCError(w, status, id, codeHeaderMismatch, fmt.Sprintf("toolmux: the Mcp-Protocol-Version header (%q) does not match _meta.%s (%q)", header, metaProtocolVersion, version))
			return true
		case r.Header.Get("Mcp-Method") != req.Method:
			writeRPCError(w, status, id, codeHeaderMismatch, fmt.Sprintf("toolmux: the Mcp-Method header (%q) does not match the method (%q)", r.Header.Get("Mcp-Method"), req.Method))
			return true
		}
		name := req.Params.Name
		if req.Method != "tools/call" && req.Params.TaskID != nil {
			name = *req.Params.TaskID
		}
		if r.Header.Get("Mcp-Name") != name {
			writeRPCError(w, status, id, codeHeaderMismatch, fmt.Sprintf("toolmux: the Mcp-Name header (%q) does not match the request's name (%q)", r.Header.Get("Mcp-Name"), name))
			return true
		}
	} else {
		sid := r.Header.Get(sessionHeader)
		if sid == "" {
			return false
		}
		if rec = g.clients.lookup(sid, route); rec == nil {
			return false // the go-sdk answers for sessions it does not have
		}
		p := rec.ss.InitializeParams()
		if p == nil {
			return false
		}
		if p.Capabilities != nil {
			declared = declared || p.Capabilities.Extensions[TasksExtension] != nil
			elicits = elicits || p.Capabilities.Elicitation != nil
		}
	}
	if req.Method == "tools/call" {
		if !declared {
			// Only a tool that requires tasks is refused; looked up only
			// when some tool does.
			if len(tr.required) > 0 && v.sync(r.Context()) == nil {
				if tg, _, err := v.resolve(g.toolScope(identity.From(r.Context())), req.Params.Name); err == nil && tg.meta == "" && tr.requires(tg.t) {
					missingExtension(w, status, id, "the tool "+req.Params.Name)
					return true
				}
			}
			return false
		}
		return tr.call(w, r, v, rec, id, &req, modern, elicits)
	}
	if !declared {
		missingExtension(w, status, id, req.Method)
		return true
	}
	if req.Params.TaskID == nil || *req.Params.TaskID == "" {
		writeRPCError(w, status, id, codeInvalidParams, "toolmux: "+req.Method+" needs params.taskId")
		return true
	}
	tr.serveMethod(w, r, id, &req)
	return true
}

// badTaskParams answers a tasks/get, tasks/update or tasks/cancel whose
// params do not decode (err): params that are not an object, a taskId
// that is not a string, and the like, with -32602 (invalid params)
// naming the field, and the status of the request's era, as the go-sdk
// answers invalid params: 400 on 2026-07-28, 200 in a session. It
// reports false, having written nothing, for a body that is not JSON,
// a request without an id, or a request of a session the route does not
// have: those go the usual way.
func (g *Gateway) badTaskParams(w http.ResponseWriter, r *http.Request, route string, body []byte, msg jsonscan.Message, err error) bool {
	te, ok := errors.AsType[*json.UnmarshalTypeError](err)
	id := rpcID(msg.ID)
	if !ok || id == nil {
		return false
	}
	status := http.StatusOK
	if newEra(r.Header, body) {
		status = http.StatusBadRequest
	} else if g.clients.lookup(r.Header.Get(sessionHeader), route) == nil {
		return false
	}
	method, _ := unquote(msg.Method)
	field := te.Field
	if field == "" {
		field = "the request"
	}
	writeRPCError(w, status, id, codeInvalidParams, fmt.Sprintf("toolmux: %s: invalid params: %s: found %s where %s was expected",
		method, field, jsontype.Found(te.Value), jsontype.Of(te.Type)))
	return true
}

// sessionDeclares reports whether session sid of route declared the
// extension at initialize.
func (g *Gateway) sessionDeclares(sid, route string) bool {
	if sid == "" {
		return false
	}
	rec := g.clients.lookup(sid, route)
	if rec == nil {
		return false
	}
	p := rec.ss.InitializeParams()
	return p != nil && p.Capabilities != nil && p.Capabilities.Extensions[TasksExtension] != nil
}

// viewOf returns the view served at route; nil for a passthrough route.
func (g *Gateway) viewOf(route string) *view {
	if route == routeMCP {
		return g.main
	}
	for _, v := range g.virtual {
		if v.route == route {
			return v
		}
	}
	return nil
}

// serveMethod answers tasks/get, tasks/update and tasks/cancel.
func (tr *taskRunner) serveMethod(w http.ResponseWriter, r *http.Request, id json.RawMessage, req *taskRequest) {
	taskID := *req.Params.TaskID
	ctx := r.Context()
	st, err := tr.o.Store.MCPTask(ctx, taskID)
	if err == nil && !tr.g.scope(ctx).Sees(st.Caller) {
		// Another caller's task: not found, as an unknown id (owners.go).
		st, err = nil, &tasklog.NotFoundError{Task: taskID}
	}
	if errors.Is(err, tasklog.ErrNotFound) {
		writeRPCError(w, http.StatusOK, id, codeInvalidParams, fmt.Sprintf("toolmux: no task %q (unknown, or expired)", taskID))
		return
	}
	if err != nil {
		writeRPCError(w, http.StatusOK, id, codeInternalError, "toolmux: reading the task: "+err.Error())
		return
	}
	tr.mu.Lock()
	lt := tr.running[taskID]
	tr.mu.Unlock()
	switch req.Method {
	case "tasks/get":
		writeResult(w, id, detailedTask(st, tr.o))
	case "tasks/update":
		var answers map[string]json.RawMessage
		if len(req.Params.InputResponses) > 0 && string(req.Params.InputResponses) != "null" {
			if err := json.Unmarshal(req.Params.InputResponses, &answers); err != nil {
				writeRPCError(w, http.StatusOK, id, codeInvalidParams, "toolmux: params.inputResponses: "+err.Error())
				return
			}
		}
		if lt != nil {
			if err := lt.answer(ctx, answers); err != nil {
				writeRPCError(w, http.StatusOK, id, codeInvalidParams, "toolmux: "+err.Error())
				return
			}
		}
		writeResult(w, id, map[string]any{"resultType": "complete"})
	case "tasks/cancel":
		if lt != nil {
			lt.cancel(errTaskCancelled)
		}
		writeResult(w, id, map[string]any{"resultType": "complete"})
	}
}

// errTaskCancelled ends a call whose task the client cancelled.
var errTaskCancelled = errors.New("the client cancelled the task (tasks/cancel)")

// detailedTask is a task as tasks/get shows it (DetailedTask).
func detailedTask(st *tasklog.MCPTask, o Tasks) map[string]any {
	out := taskFields(st, o)
	out["resultType"] = "complete"
	switch {
	case st.Status == tasklog.MCPCompleted && len(st.Result) > 0:
		out["result"] = st.Result
	case st.Status == tasklog.MCPFailed && len(st.Error) > 0:
		out["error"] = st.Error
	case st.Status == tasklog.MCPInputRequired && len(st.InputRequests) > 0:
		out["inputRequests"] = st.InputRequests
	}
	if len(st.Progress) > 0 && !st.Status.Final() {
		// The call's last progress report ({progress, total, message}).
		out["_meta"] = map[string]any{"toolmux/progress": st.Progress}
	}
	return out
}

// taskFields are the fields of the Task base: the CreateTaskResult is
// them and resultType "task".
func taskFields(st *tasklog.MCPTask, o Tasks) map[string]any {
	out := map[string]any{
		"taskId":         st.ID,
		"status":         string(st.Status),
		"createdAt":      st.Created.UTC().Format(time.RFC3339Nano),
		"lastUpdatedAt":  st.Updated.UTC().Format(time.RFC3339Nano),
		"pollIntervalMs": o.PollInterval.Milliseconds(),
		"ttlMs":          nil,
	}
	if o.TTL > 0 {
		out["ttlMs"] = o.TTL.Milliseconds()
	}
	if st.StatusMessage != "" {
		out["statusMessage"] = st.StatusMessage
	}
	return out
}

// call serves a tools/call of a client that declared the extension.
func (tr *taskRunner) call(w http.ResponseWriter, r *http.Request, v *view, rec *tracked, id json.RawMessage, req *taskRequest,
	modern, elicits bool) bool {
	ctx := r.Context()
	if err := v.sync(ctx); err != nil {
		return false
	}
	tg, _, err := v.resolve(tr.g.toolScope(identity.From(ctx)), req.Params.Name)
	if err != nil || tg.meta != "" {
		return false // answered the usual way: an error, or a meta-tool
	}
	args, err := tr.g.decodeArgs(req.Params.Arguments)
	if err != nil {
		return false // the usual answer: invalid_tool_params
	}
	in := callInput{params: &mcp.CallToolParamsRaw{Name: req.Params.Name, Arguments: req.Params.Arguments, Meta: decodeMeta(req.Params.Meta)}}
	session := ""
	if rec != nil {
		in.session = rec.ss
		session = rec.Task
	}
	// A call that changes something is keyed as the window of re-issued
	// requests keys it (tasks_reissue.go).
	_, key, reqKey, keyed := tr.g.windowKey(ctx, tg.t, in, args)
	if keyed && tr.reanswer(w, r, id, key, Reissued{Route: v.route, Server: tg.t.Server, Tool: tg.t.Name, RequestID: string(id)}) {
		return true
	}
	tr.mu.Lock()
	if len(tr.running) >= tr.o.MaxRunning || tr.ctx.Err() != nil {
		// Past the bound (or closing): the call goes the usual way, an
		// ordinary call bound to its request (its approval asked as any
		// other's).
		tr.mu.Unlock()
		return false
	}
	lt := &liveTask{tr: tr, done: make(chan struct{}), promote: make(chan struct{}, 1),
		state: tasklog.MCPTask{ID: newTaskID(), Status: tasklog.MCPWorking, Route: v.route, Tool: req.Params.Name,
			Server: tg.t.Server, ServerTool: tg.t.Name, Session: session, Caller: identity.RefFrom(ctx)}}
	tr.running[lt.state.ID] = lt
	// Added under tr.mu, where close stops the runner: no call starts
	// once close waits.
	tr.wg.Add(1)
	tr.mu.Unlock()
	cctx, cancel := context.WithCancelCause(tr.ctx)
	lt.cancel = cancel
	// The task's call is its caller's, as an ordinary call is, though it
	// outlives its request: its caller, and the caller's token for token
	// exchange while it runs.
	cctx = identity.Carry(cctx, ctx)
	keyed = keyed && tr.keep(key, reqKey, lt)
	// Until it becomes a task, the call ends with its request; a keyed
	// call becomes a task then instead (below).
	stop := func() bool { return false }
	if !keyed {
		stop = context.AfterFunc(ctx, func() { cancel(errClientGone) })
	}
	// answered tells the keyed call's key whether its answer was
	// written to a client still there.
	answered := func() {
		if keyed {
			tr.answered(key, ctx.Err() == nil)
		}
	}
	// A long tool's call is a task at once, however soon it ends: the
	// task is made before the call starts, or a call quicker than the
	// request's goroutine would be answered as an ordinary one.
	threshold := tr.threshold(tg.t)
	var ok bool
	if threshold == 0 {
		ok, err = lt.create(ctx)
	}
	go func() {
		defer tr.wg.Done()
		defer cancel(nil)
		tr.run(cctx, lt, tg.t, in, args, elicits)
	}()
	if threshold > 0 {
		wait := time.NewTimer(threshold)
		defer wait.Stop()
		select {
		case <-lt.done:
			stop()
			answered()
			writeResult(w, id, completeResult(lt.res))
			return true
		case <-wait.C:
		case <-lt.promote:
		case <-ctx.Done():
			if !keyed {
				return true // the client is gone; the call is cancelled
			}
			// The client's stream broke: the call goes on as a task,
			// which a re-issue of its request is answered with.
			if _, err := lt.create(ctx); err != nil {
				cancel(err)
			}
			answered()
			return true
		}
		ok, err = lt.create(ctx)
	}
	if err != nil {
		cancel(err)
		tr.answered(key, true) // nothing to answer a re-issue with
		writeRPCError(w, http.StatusOK, id, codeInternalError, "toolmux: could not create the task: "+err.Error())
		return true
	}
	if !ok { // it ended meanwhile
		stop()
		<-lt.done
		answered()
		writeResult(w, id, completeResult(lt.res))
		return true
	}
	stop() // a task now: it outlives the request
	lt.wmu.Lock()
	out := taskFields(&lt.state, tr.o)
	lt.wmu.Unlock()
	out["resultType"] = "task"
	answered()
	writeResult(w, id, out)
	return true
}

// decodeMeta returns a request's _meta as the call's params carry it
// (its trace context, the client's identity); a key whose value does not
// decode is left out.
func decodeMeta(raw map[string]json.RawMessage) mcp.Meta {
	if len(raw) == 0 {
		return nil
	}
	m := make(mcp.Meta, len(raw))
	for k, v := range raw {
		var x any
		if json.Unmarshal(v, &x) == nil {
			m[k] = x
		}
	}
	return m
}

// run makes the call of a (possible) task and writes how it ended.
func (tr *taskRunner) run(ctx context.Context, lt *liveTask, t tool.Tool, in callInput, args map[string]any, elicits bool) {
	r := &request{session: in.session, task: lt, taskElicits: elicits, timeout: tr.o.ApprovalTimeout}
	pctx := tool.WithProgress(withRequest(ctx, r), func(p tool.Progress) { lt.progress(ctx, p) })
	rec := tr.g.callRecord(pctx, t, in, args)
	// The call has ended: its place among max_running is given back
	// before its end is written, so that a client that sees the task
	// complete and calls again at once finds the place free (given back
	// after, it was taken for a while by a task already completed, and
	// the new call ran as an ordinary one). A cancellation or an answer
	// that comes now finds no running task: there is nothing left to
	// cancel or answer.
	tr.mu.Lock()
	delete(tr.running, lt.state.ID)
	tr.mu.Unlock()
	res := toMCP(rec)
	// A client answered at once is sent the URL of a credential it
	// lacks; the task log keeps the result without it.
	lt.res = sentResult(rec)
	lt.wmu.Lock()
	defer lt.wmu.Unlock()
	defer close(lt.done)
	if !lt.created {
		lt.finished = true
		return
	}
	err := lt.setLocked(context.Background(), func(st *tasklog.MCPTask) {
		st.Call, st.InputRequests = rec.ID, nil
		st.Status, st.StatusMessage = tasklog.MCPCompleted, ""
		cause := context.Cause(ctx)
		switch {
		case errors.Is(cause, errTaskCancelled) && rec.Error != nil:
			// (A cancel that came after the tool answered changes
			// nothing: the call completed, its effect happened.)
			st.Status, st.StatusMessage = tasklog.MCPCancelled, errTaskCancelled.Error()
		case rec.Error != nil && (errors.Is(cause, errGatewayStopped) || tr.g.clients.stopping.Load()):
			st.Status, st.StatusMessage = tasklog.MCPFailed, errGatewayStopped.Error()
			st.Error, _ = json.Marshal(map[string]any{"code": codeInternalError, "message": errGatewayStopped.Error()})
		case rec.Error != nil && failedKind(rec.Error.Kind):
			st.Status, st.StatusMessage = tasklog.MCPFailed, string(rec.Error.Kind)+": "+rec.Error.Message
			st.Error, _ = json.Marshal(map[string]any{"code": codeInternalError, "message": st.StatusMessage,
				"data": map[string]any{"kind": rec.Error.Kind}})
		}
		if st.Status == tasklog.MCPCompleted {
			st.Result, _ = json.Marshal(res)
		}
	})
	if err != nil {
		// The task reads its last state written until the next process
		// to open the task log ends it failed, as a task of a gateway
		// that was killed.
		tr.g.log.Error("toolmux: tasks: the end of a task could not be written to the task log", "task", lt.state.ID, "err", err)
	}
}

// failedKind reports whether a call that failed so did not run to an
// answer of the tool's (a protocol-level failure: the task failed) rather
// than ran and reported an error (the task completed, isError).
func failedKind(k tool.Kind) bool {
	switch k {
	case tool.KindExecutionFailed, tool.KindServerUnavailable, tool.KindOutcomeUnknown, tool.KindTimeout, tool.KindFallbackFailed:
		return true
	}
	return false
}

// completeResult is a tool result as a 2026-07-28 client expects it:
// resultType "complete".
func completeResult(res *mcp.CallToolResult) json.RawMessage {
	b, _ := json.Marshal(res)
	return withResultType(b, `"complete"`)
}

// writeResult writes a JSON-RPC result.
func writeResult(w http.ResponseWriter, id json.RawMessage, result any) {
	b, err := json.Marshal(result)
	if err != nil {
		writeRPCError(w, http.StatusOK, id, codeInternalError, "toolmux: "+err.Error())
		return
	}
	var out bytes.Buffer
	out.WriteString(`{"jsonrpc":"2.0","id":`)
	out.Write(id)
	out.WriteString(`,"result":`)
	out.Write(b)
	out.WriteString("}")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out.Bytes())
}

// writeRPCErrorData writes a JSON-RPC error response with data.
func writeRPCErrorData(w http.ResponseWriter, status int, id json.RawMessage, code int, message string, data json.RawMessage) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id,
		"error": map[string]any{"code": code, "message": message, "data": data}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
