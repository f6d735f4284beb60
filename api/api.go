// Package api is toolmux's HTTP API, served by the gateway under /api/:
// the servers and their health, the tools and what the policy does with
// them, calling a tool, the tasks of the task log with their calls, the
// calls waiting for approval (and answering them), and the event stream.
//
// Every answer is JSON; every error is {"error": {"kind", "message"}} with
// a status that fits it. docs/api.md lists the routes.
//
// What callers make belongs to them (docs/identity.md, "Ownership"): the
// caller a request carries (identity.From, put there by the gateway's
// authentication) is shown its own tasks, MCP tasks and approval
// questions only, and is answered 404, as for an id that does not exist,
// for another's; members of Options.AdminGroups see everything, and so
// does every request where no authentication is configured (no caller).
package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/ratelimit"
	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

// Catalog lists the tools: the pipeline (as a model may be shown them) or
// the manager (as their servers present them).
type Catalog interface {
	Tools(ctx context.Context) (*tool.Catalog, error)
}

// Caller makes one governed call: the scheduler.
type Caller interface {
	Call(ctx context.Context, call tool.Call) *tool.Record
}

// Options are what the API serves. Catalog and Caller are required; the
// routes of a missing optional part answer 404 with a sentence saying what
// is not configured.
type Options struct {
	Catalog Catalog
	Caller  Caller
	// Secrets serves each caller's own secrets (/api/secrets); nil: those
	// routes answer that there are none.
	Secrets *Secrets
	// Connections, when set, serve /api/connections: each caller's own
	// OAuth authorizations of the servers that take them.
	Connections *Connections
	// Health returns the servers' health (manager.Health).
	Health func() []tool.ServerHealth
	// Policy says what the policy does with each tool, for /api/tools: a
	// *policy.Engine, or a *policy.Gate, whose engine a reload replaces.
	Policy interface{ Requires(tool.Tool) policy.Action }
	// Approvals is the queue of calls waiting for an answer.
	Approvals *Approvals
	// Log is the task log, for /api/tasks.
	Log *tasklog.Log
	// Events serves the event stream (a *stream.Hub).
	Events http.Handler
	// Pins are the pinned tool definitions, for /api/pins; nil: those
	// routes answer 404.
	Pins *pipeline.Pins
	// Presented lists the tools as their servers present them now (the
	// manager), changed definitions included: what /api/pins compares with
	// the pins and what an acceptance pins. Catalog, the pipeline, lists a
	// held tool with its pinned definition (pipeline.Pins.Shown), against
	// which nothing would ever show as changed. nil: Catalog (which must
	// then be the manager).
	Presented Catalog
	// MaxCallBytes bounds the body of a call request; 0 means 16 MiB.
	MaxCallBytes int64
	// Version is toolmux's version, for /api/info.
	Version string
	// Run tells which agent run this process serves (toolmux run
	// --serve), for /api/info; nil for a gateway.
	Run func() *RunInfo
	// MaxDepth is the deepest nesting of a call's arguments accepted; a
	// deeper call is answered 400 (invalid_tool_params) without being
	// made. 0 means tool.DefaultMaxDepth.
	MaxDepth int
	// Fleet summarises the fleet this gateway shows (its workers, its
	// runs by status), for GET /api/fleet; nil: not a fleet's gateway
	// (404).
	Fleet func(ctx context.Context) (any, error)
	// Reload says how the reloads of the configuration file went, for
	// /api/info; nil: the process does not reload one.
	Reload func() *ReloadInfo
	// Limits admits each call within the limits of its caller and of its
	// caller's groups (a *ratelimit.Limiter, the gateway's): a call over
	// one is answered 429 rate_limited without being made. nil: no
	// limits.
	Limits Limiter
	// AdminGroups are the groups whose members see every caller's tasks,
	// MCP tasks and approval questions; nil means identity.AdminGroup.
	AdminGroups []string
	// ApproverGroups are the groups whose members see every caller's
	// approval questions (besides AdminGroups).
	ApproverGroups []string
	// Visibility says which tools each caller may see and call (the
	// groups section; a reload may change it): /api/tools, /api/pins and
	// /api/servers show a caller its tools only, and its call of another
	// tool is answered as the call of a tool that does not exist. nil,
	// or a nil result: every caller sees every tool.
	Visibility func() *policy.Visibility
}

// Limiter admits n calls of the caller ctx carries, or refuses them with
// a *ratelimit.Error; release gives their places back once they ended.
type Limiter interface {
	Admit(ctx context.Context, n int) (release func(), err error)
}

// Info is the answer of GET /api/info: what this process is, so that a
// page can tell a gateway from an agent run and show a run from its start.
type Info struct {
	Version string    `json:"version,omitempty"`
	Started time.Time `json:"started_at"`
	// Approvers is how many approvers are attached now (pages open with
	// their event stream); ApprovalTimeoutMS how long a call waits for an
	// answer. Both 0 when approvals are not asked through the API.
	Approvers         int   `json:"approvers"`
	ApprovalTimeoutMS int64 `json:"approval_timeout_ms"`
	// LastEventID is the id of the last event the event stream published
	// (0 before the first): a page opened on a gateway resumes a little
	// before it, to show the recent past rather than nothing.
	LastEventID int64 `json:"last_event_id"`
	// Run is the agent run this process serves; absent for a gateway.
	Run *RunInfo `json:"run,omitempty"`
	// Reload is how the reloads of serve's configuration file went;
	// absent when there is no file to reload.
	Reload *ReloadInfo `json:"reload,omitempty"`
	// Caller is who asked, as the gateway verified it: the page shows
	// whose it is, a script checks which key it holds. Absent where no
	// authentication is configured.
	Caller *CallerInfo `json:"caller,omitempty"`
}

// CallerInfo is the caller of a request: its name (an API key's, or a
// token's name claim), its groups, and how it proved who it is (key, jwt,
// introspection). Never its credential.
type CallerInfo struct {
	Name   string   `json:"name"`
	Groups []string `json:"groups"`
	Method string   `json:"method"`
}

// ReloadInfo is how the reloads of a gateway's configuration file went
// (docs/operations.md "Reload").
type ReloadInfo struct {
	// Path is the configuration file.
	Path string `json:"path"`
	// Applied and Refused count the reloads since the process started:
	// applied, or refused with the configuration in use kept.
	Applied uint64 `json:"applied"`
	Refused uint64 `json:"refused"`
	// Running says a reload runs now; Pending that one more is due (asked
	// for while one ran, or waiting for the file to be quiet).
	Running bool `json:"running"`
	Pending bool `json:"pending"`
	// Last is the last reload that ended; absent before the first.
	Last *ReloadOutcome `json:"last,omitempty"`
}

// ReloadOutcome is how one reload ended.
type ReloadOutcome struct {
	At time.Time `json:"at"`
	// Trigger is what asked for it: SIGHUP, a change of the file, or
	// several of those, coalesced.
	Trigger string `json:"trigger"`
	// Error is why it was refused; absent when it applied.
	Error *ReloadError `json:"error,omitempty"`
}

// ReloadError is why a reload was refused: Kind is invalid_config (the
// file does not load), no_servers (it has no server while some run, and
// does not say servers: {}) or reload_failed (a server, policy or
// pipeline could not be made of it).
type ReloadError struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// RunInfo is the agent run a process serves.
type RunInfo struct {
	// Task is the run's task id.
	Task string `json:"task"`
	// AfterEvent is the id of the last event before the run's first: a
	// page that resumes after it (Last-Event-ID) shows the whole run.
	AfterEvent int64 `json:"after_event"`
	// Ended says the run is over (the process stays up for the page).
	Ended bool `json:"ended"`
}

// New returns the API's handler, routes rooted at /api/.
func New(o Options) http.Handler {
	if o.MaxCallBytes <= 0 {
		o.MaxCallBytes = 16 << 20
	}
	if o.Presented == nil {
		o.Presented = o.Catalog
	}
	if o.AdminGroups == nil {
		o.AdminGroups = []string{identity.AdminGroup}
	}
	s := &server{o: o, started: time.Now(), approvers: append(slices.Clone(o.AdminGroups), o.ApproverGroups...)}
	if o.Approvals != nil {
		// Who answers the queue sees every question: its approvers and
		// admin groups too.
		s.approvers = append(s.approvers, o.Approvals.o.ApproversGroup, o.Approvals.o.AdminGroup)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/info", s.info)
	mux.HandleFunc("GET /api/servers", s.servers)
	mux.HandleFunc("GET /api/tools", s.tools)
	mux.HandleFunc("POST /api/tools/{server}/{tool}/call", s.call)
	mux.HandleFunc("GET /api/tasks", s.tasks)
	mux.HandleFunc("GET /api/tasks/{id}", s.task)
	mux.HandleFunc("GET /api/mcp-tasks", s.mcpTasks)
	mux.HandleFunc("GET /api/mcp-tasks/{id}", s.mcpTask)
	mux.HandleFunc("GET /api/approvals", s.approvals)
	mux.HandleFunc("POST /api/approvals/{id}", s.decide)
	mux.HandleFunc("GET /api/events", s.events)
	mux.HandleFunc("GET /api/fleet", s.fleet)
	mux.HandleFunc("GET /api/pins", s.pins)
	mux.HandleFunc("POST /api/pins/{server}/{tool}/accept", s.acceptPin)
	s.secretsRoutes(mux)
	s.connectionsRoutes(mux)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no API route %s %s (see docs/api.md)", r.Method, r.URL.Path))
	})
	return mux
}

type server struct {
	o       Options
	started time.Time
	// approvers are the groups that see every approval question.
	approvers []string
}

// scope is what the caller of r sees of what callers own.
func (s *server) scope(r *http.Request) identity.Scope {
	return identity.ScopeOf(identity.From(r.Context()), s.o.AdminGroups)
}

func (s *server) info(w http.ResponseWriter, r *http.Request) {
	in := Info{Version: s.o.Version, Started: s.started}
	if c := identity.From(r.Context()); c != nil {
		in.Caller = &CallerInfo{Name: c.Name, Groups: slices.Clone(c.Groups), Method: c.Method}
		if in.Caller.Groups == nil {
			in.Caller.Groups = []string{}
		}
	}
	if s.o.Approvals != nil {
		in.Approvers, in.ApprovalTimeoutMS = s.o.Approvals.Approvers(), s.o.Approvals.Timeout().Milliseconds()
	}
	// The hub (a *stream.Hub) knows its last id; another stream does not
	// say, and the page then starts with the live events.
	if h, ok := s.o.Events.(interface{ Stats() stream.Stats }); ok {
		in.LastEventID = h.Stats().LastID
	}
	if s.o.Run != nil {
		in.Run = s.o.Run()
	}
	if s.o.Reload != nil {
		in.Reload = s.o.Reload()
	}
	writeJSON(w, http.StatusOK, in)
}

func (s *server) fleet(w http.ResponseWriter, r *http.Request) {
	if s.o.Fleet == nil {
		writeError(w, http.StatusNotFound, "not_found", "this gateway is not in a fleet (serve --nats URL or --nats-listen ADDR)")
		return
	}
	v, err := s.o.Fleet(r.Context())
	if err != nil {
		writeError(w, http.StatusBadGateway, "fleet_unavailable", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// ToolInfo is one tool as /api/tools lists it.
type ToolInfo struct {
	*tool.Tool
	// Approval is what the policy does with a call of the tool by the
	// caller asking, in its mode: allow, ask or deny.
	Approval string `json:"approval,omitempty"`
}

// toolScope is what the caller of r may see of the tools (Options.Visibility).
func (s *server) toolScope(r *http.Request) policy.Scope {
	if s.o.Visibility == nil {
		return policy.Scope{}
	}
	return s.o.Visibility().For(identity.From(r.Context()))
}

func (s *server) servers(w http.ResponseWriter, r *http.Request) {
	sc := s.toolScope(r)
	var health []tool.ServerHealth
	var cat *tool.Catalog
	if s.o.Health == nil || sc.Limited() {
		var err error
		if cat, err = s.o.Catalog.Tools(r.Context()); err != nil {
			writeToolError(w, err)
			return
		}
	}
	if s.o.Health != nil {
		health = s.o.Health()
	} else {
		health = cat.Servers()
	}
	if sc.Limited() {
		// A server the caller sees no tool of is not there for it.
		health = slices.DeleteFunc(health, func(h tool.ServerHealth) bool {
			return !slices.ContainsFunc(cat.Tools(), func(t tool.Tool) bool { return t.Server == h.Name && sc.Sees(t.Server, t.Name) }) &&
				(h.State == tool.StateReady || !sc.SeesServer(h.Name))
		})
	}
	writeJSON(w, http.StatusOK, health)
}

func (s *server) tools(w http.ResponseWriter, r *http.Request) {
	cat, err := s.o.Catalog.Tools(r.Context())
	if err != nil {
		writeToolError(w, err)
		return
	}
	sc, caller := s.toolScope(r), identity.From(r.Context())
	out := make([]ToolInfo, 0, cat.Len())
	for _, t := range cat.Tools() {
		if !sc.Sees(t.Server, t.Name) {
			continue
		}
		info := ToolInfo{Tool: &t}
		if s.o.Policy != nil && !isNilPolicy(s.o.Policy) {
			if pf, ok := s.o.Policy.(interface {
				RequiresFor(*identity.Caller, tool.Tool) policy.Action
			}); ok {
				info.Approval = string(pf.RequiresFor(caller, t))
			} else {
				info.Approval = string(s.o.Policy.Requires(t))
			}
		}
		out = append(out, info)
	}
	writeJSON(w, http.StatusOK, out)
}

// pins answers the pin state of every tool as its server presents it
// (pinning the tools never seen, as a call would).
func (s *server) pins(w http.ResponseWriter, r *http.Request) {
	if s.o.Pins == nil {
		writeError(w, http.StatusNotFound, "not_found", "no pins are kept (no data directory)")
		return
	}
	cat, err := s.o.Presented.Tools(r.Context())
	if err != nil {
		writeToolError(w, err)
		return
	}
	sc := s.toolScope(r)
	out := make([]pipeline.PinStatus, 0, cat.Len())
	for _, t := range cat.Tools() {
		if !sc.Sees(t.Server, t.Name) {
			continue
		}
		st, err := s.o.Pins.Status(t)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "pin_failed", err.Error())
			return
		}
		out = append(out, st)
	}
	writeJSON(w, http.StatusOK, out)
}

// acceptRequest is the optional body of an acceptance: the sha256 of the
// definition the person reviewed (the current of GET /api/pins), so that
// a definition that changed again since is not accepted unseen. A pointer,
// so that a sha256 sent empty is told from none sent.
type acceptRequest struct {
	SHA256 *string `json:"sha256"`
}

// acceptBody is what an acceptance's body must be, for the errors.
const acceptBody = `the body must be empty or {"sha256": "<the current of GET /api/pins>"}`

// acceptPin pins the definition the server presents now. A body that is
// not what it takes (an unknown field, a sha256 that is not one, more than
// one object) is refused rather than read as no body: the person meant to
// accept a definition they reviewed, and a misspelt field would otherwise
// accept whatever the server presents now.
func (s *server) acceptPin(w http.ResponseWriter, r *http.Request) {
	if s.o.Pins == nil {
		writeError(w, http.StatusNotFound, "not_found", "no pins are kept (no data directory)")
		return
	}
	var req acceptRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	err := dec.Decode(&req)
	if err == nil {
		if _, more := dec.Token(); !errors.Is(more, io.EOF) {
			err = errors.New("more than one JSON value")
		}
	}
	if err != nil && !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, "bad_request", acceptBody+": "+err.Error())
		return
	}
	if req.SHA256 != nil && !isSHA256(*req.SHA256) {
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf(
			"sha256 %q is not a sha256 (64 lowercase hexadecimal digits); %s", *req.SHA256, acceptBody))
		return
	}
	cat, err := s.o.Presented.Tools(r.Context())
	if err != nil {
		writeToolError(w, err)
		return
	}
	server, name := r.PathValue("server"), r.PathValue("tool")
	def, ok := cat.Find(server, name)
	if !ok || !s.toolScope(r).Sees(server, name) {
		writeError(w, http.StatusNotFound, string(tool.KindToolNotRegistered), fmt.Sprintf("no tool %s/%s", server, name))
		return
	}
	if req.SHA256 != nil {
		canon, err := pipeline.Canonical(def)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "pin_failed", err.Error())
			return
		}
		if sum := sha256.Sum256(canon); hex.EncodeToString(sum[:]) != *req.SHA256 {
			writeError(w, http.StatusConflict, "pin_conflict", fmt.Sprintf(
				"%s/%s presents the definition %s now, not %s (the sha256 sent); nothing was accepted: review GET /api/pins again and send its current",
				server, name, hex.EncodeToString(sum[:]), *req.SHA256))
			return
		}
	}
	pin, err := s.o.Pins.Accept(def)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "pin_failed", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, pin)
}

// isSHA256 says whether s is a sha256 as the pins write it.
func isSHA256(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// callRequest is the body of a call: the arguments, and optionally the
// task and session it belongs to.
type callRequest struct {
	Arguments map[string]any `json:"arguments"`
	Task      string         `json:"task,omitempty"`
	Session   string         `json:"session,omitempty"`
}

func (s *server) call(w http.ResponseWriter, r *http.Request) {
	// The limits first: a call refused for them costs no decoding.
	if s.o.Limits != nil {
		release, err := s.o.Limits.Admit(r.Context(), 1)
		if err != nil {
			writeRateLimited(w, err)
			return
		}
		defer release()
	}
	var req callRequest
	body := http.MaxBytesReader(w, r.Body, s.o.MaxCallBytes)
	dec := json.NewDecoder(body)
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the request is larger than %d bytes", s.o.MaxCallBytes))
			return
		}
		// The body is not a call request: no call was made, so this is the
		// API's bad_request, not a call's invalid_tool_params.
		writeError(w, http.StatusBadRequest, "bad_request",
			`the body must be {"arguments": {...}} (optionally "task" and "session"): `+err.Error())
		return
	}
	if req.Arguments == nil {
		req.Arguments = map[string]any{}
	}
	if err := tool.CheckDepth(req.Arguments, s.o.MaxDepth); err != nil {
		writeError(w, http.StatusBadRequest, string(err.Kind), err.Message)
		return
	}
	call := tool.Call{Server: r.PathValue("server"), Tool: r.PathValue("tool"),
		Arguments: req.Arguments, Task: req.Task, Session: req.Session}
	if sc := s.toolScope(r); !sc.Sees(call.Server, call.Tool) {
		// As the call of a tool that does not exist: the caller learns
		// nothing of tools it may not see.
		s.unseen(w, r, sc, call)
		return
	}
	if call.Task != "" && s.o.Log != nil {
		// A call goes into a task of the caller's, or a new one (which
		// its record creates, the caller's): another's is not found.
		t, err := s.o.Log.Task(r.Context(), call.Task)
		if err == nil && !s.scope(r).Sees(t.Caller) {
			writeError(w, http.StatusNotFound, "not_found", (&tasklog.NotFoundError{Task: call.Task}).Error())
			return
		}
	}
	// Every call belongs to a task: one made without is a task of its own.
	own := call.Task == "" && s.o.Log != nil
	if own {
		call.Task = tool.NewID()
		err := s.o.Log.StartTask(r.Context(), tasklog.Task{ID: call.Task,
			Input:    "API call of " + call.Server + "/" + call.Tool,
			Metadata: map[string]any{"kind": "api_call", "server": call.Server, "tool": call.Tool},
			Caller:   identity.RefFrom(r.Context())})
		if err != nil {
			writeError(w, http.StatusInternalServerError, "internal", "the task log failed: "+err.Error())
			return
		}
	}
	rec := s.o.Caller.Call(r.Context(), call)
	if own {
		status, answer := tasklog.OneCallStatus(rec)
		// Recorded whatever became of the request.
		_ = s.o.Log.FinishTask(context.WithoutCancel(r.Context()), call.Task, status, answer)
	}
	// The call happened (or was refused by governance): its record is the
	// answer either way; the status says which.
	status := http.StatusOK
	if rec.Error != nil && rec.Error.Kind != tool.KindToolError {
		status = statusOf(rec.Error.Kind)
	}
	writeJSON(w, status, rec)
}

// unseen answers the call of a tool the caller may not see, whether the
// tool exists or not, as the manager answers the call of one that does
// not: no server of that name, or no tool of that name on it, with a
// suggestion among what the caller sees.
func (s *server) unseen(w http.ResponseWriter, r *http.Request, sc policy.Scope, call tool.Call) {
	cat, err := s.o.Catalog.Tools(r.Context())
	if err != nil {
		writeToolError(w, err)
		return
	}
	var servers, names []string
	for _, t := range cat.Tools() {
		if !sc.Sees(t.Server, t.Name) {
			continue
		}
		if !slices.Contains(servers, t.Server) {
			servers = append(servers, t.Server)
		}
		if t.Server == call.Server {
			names = append(names, t.Name)
		}
	}
	e := &tool.Error{Kind: tool.KindServerNotFound, Server: call.Server, Tool: call.Tool,
		Message: fmt.Sprintf("no server named %q is configured", call.Server), Suggestion: tool.Closest(call.Server, servers)}
	if slices.Contains(servers, call.Server) {
		e = &tool.Error{Kind: tool.KindToolNotRegistered, Server: call.Server, Tool: call.Tool,
			Message: fmt.Sprintf("server %s has no tool named %q", call.Server, call.Tool), Suggestion: tool.Closest(call.Tool, names)}
	}
	writeJSON(w, statusOf(e.Kind), tool.Refused(&call, e))
}

func (s *server) tasks(w http.ResponseWriter, r *http.Request) {
	if !s.haveLog(w) {
		return
	}
	f := tasklog.Filter{Status: tasklog.Status(r.URL.Query().Get("status")), Caller: s.scope(r).Key()}
	var ok bool
	if f.Limit, ok = listLimit(w, r); !ok {
		return
	}
	ts, err := s.o.Log.Tasks(r.Context(), f)
	if err != nil {
		var ve *tasklog.ValidationError
		if errors.As(err, &ve) {
			writeError(w, http.StatusBadRequest, "bad_request", err.Error())
			return
		}
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, ts)
}

// The limit of a listing (/api/tasks, /api/mcp-tasks): by default
// defaultListLimit, at most maxListLimit. An answer is built whole in
// memory before it is sent, so the server, not the request, bounds it.
const (
	defaultListLimit = 50
	maxListLimit     = 1000
)

// listLimit reads a listing's limit parameter; ok is false when it is not
// an integer from 1 to maxListLimit, the client having been answered 400
// bad_request.
func listLimit(w http.ResponseWriter, r *http.Request) (limit int, ok bool) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return defaultListLimit, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxListLimit {
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("limit must be an integer from 1 to %d, not %q", maxListLimit, v))
		return 0, false
	}
	return n, true
}

func (s *server) task(w http.ResponseWriter, r *http.Request) {
	if !s.haveLog(w) {
		return
	}
	id := r.PathValue("id")
	d, err := s.o.Log.Detail(r.Context(), id)
	if err == nil && !s.scope(r).Sees(d.Caller) {
		d, err = nil, &tasklog.NotFoundError{Task: id} // another caller's: as if it did not exist
	}
	writeFound(w, d, err, "")
}

// mcpTasks lists the MCP tasks (the tasks extension's, docs/gateway.md
// "Tasks"), newest first, without their results.
func (s *server) mcpTasks(w http.ResponseWriter, r *http.Request) {
	if !s.haveLog(w) {
		return
	}
	f := tasklog.MCPTaskFilter{Status: tasklog.MCPTaskStatus(r.URL.Query().Get("status")), Caller: s.scope(r).Key()}
	if f.Status != "" && !f.Status.Valid() {
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("status must be working, input_required, completed, failed or cancelled, not %q", f.Status))
		return
	}
	var ok bool
	if f.Limit, ok = listLimit(w, r); !ok {
		return
	}
	ts, err := s.o.Log.MCPTasks(r.Context(), f)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, ts)
}

// mcpTask is one MCP task, whole: its result or error, its questions.
func (s *server) mcpTask(w http.ResponseWriter, r *http.Request) {
	if !s.haveLog(w) {
		return
	}
	t, err := s.o.Log.MCPTask(r.Context(), r.PathValue("id"))
	if err == nil && !s.scope(r).Sees(t.Caller) {
		t, err = nil, &tasklog.NotFoundError{Task: r.PathValue("id")} // another caller's
	}
	writeFound(w, t, err, fmt.Sprintf("no MCP task %q (unknown, or expired)", r.PathValue("id")))
}

func (s *server) approvals(w http.ResponseWriter, r *http.Request) {
	if s.o.Approvals == nil {
		writeJSON(w, http.StatusOK, []Pending{})
		return
	}
	writeJSON(w, http.StatusOK, s.o.Approvals.PendingFor(identity.From(r.Context())))
}

// decisionRequest is the body of an answer.
type decisionRequest struct {
	Decision string `json:"decision"`
}

func (s *server) decide(w http.ResponseWriter, r *http.Request) {
	if s.o.Approvals == nil {
		writeError(w, http.StatusNotFound, "not_found", "approvals are not asked through the API here")
		return
	}
	var req decisionRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", `the body must be {"decision": "once" | "always_tool" | "always_server" | "deny"}: `+err.Error())
		return
	}
	ans, ok := policy.AnswerNamed(req.Decision)
	if !ok {
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("decision %q is not one of once, always_tool, always_server, deny", req.Decision))
		return
	}
	// Another caller's question is not found, waiting or not.
	if asker, ok := s.o.Approvals.Asker(r.PathValue("id")); ok &&
		!identity.ScopeOf(identity.From(r.Context()), s.approvers).Sees(asker) {
		writeError(w, http.StatusNotFound, "not_found", ErrUnknownApproval.Error())
		return
	}
	if err := s.o.Approvals.DecideAs(r.PathValue("id"), ans, identity.From(r.Context())); err != nil {
		if _, ok := errors.AsType[*ForbiddenError](err); ok {
			// The question still waits, for someone who may answer.
			writeError(w, http.StatusForbidden, "forbidden", err.Error())
			return
		}
		if _, ok := errors.AsType[*EndedError](err); ok {
			// It waited, and no longer does: withdrawn, timed out, or
			// answered by someone else.
			writeError(w, http.StatusGone, "gone", err.Error())
			return
		}
		writeError(w, http.StatusNotFound, "not_found", err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// events serves the event stream. A stream opened with ?approver=1 (the
// web page's) attaches an approver for as long as it is open: approval
// questions are put to the API's queue only while someone is there to
// answer them.
func (s *server) events(w http.ResponseWriter, r *http.Request) {
	if s.o.Events == nil {
		writeError(w, http.StatusNotFound, "not_configured", "there is no event stream here")
		return
	}
	h := s.o.Events
	// An approver sees every caller's events (the questions it may
	// answer, and their calls); anyone else its own tasks' only.
	if scope := identity.ScopeOf(identity.From(r.Context()), s.approvers); !scope.All() {
		// A caller who sees its own things only gets its own tasks'
		// events; a stream that cannot leave others' out is not its.
		f, ok := h.(interface {
			Handler(stream.HandlerOptions) http.Handler
		})
		if !ok || s.o.Log == nil {
			writeError(w, http.StatusNotFound, "not_configured", "there is no event stream of your tasks here")
			return
		}
		h = f.Handler(stream.HandlerOptions{Keep: s.ownEvents(r.Context(), scope)})
	}
	if s.o.Approvals != nil && r.Method == http.MethodGet && isTrue(r.URL.Query().Get("approver")) {
		// Only someone who may answer is counted as an approver.
		detach := s.o.Approvals.AttachAs(identity.From(r.Context()))
		defer detach()
	}
	h.ServeHTTP(w, r)
}

// maxOwnedTasks bounds the tasks one event stream remembers the owner
// of; past it, it forgets them all and asks the task log again.
const maxOwnedTasks = 4096

// ownEvents says, of an event, whether it belongs to a task of scope: an
// event of no task, or of a task the log does not hold, is no caller's.
// Each task's owner is read from the task log once per stream.
func (s *server) ownEvents(ctx context.Context, scope identity.Scope) func(stream.Event) bool {
	owned := map[string]bool{}
	return func(e stream.Event) bool {
		if e.Task == "" {
			return false
		}
		if v, ok := owned[e.Task]; ok {
			return v
		}
		t, err := s.o.Log.Task(ctx, e.Task)
		if err != nil {
			// Not there yet (a task its first call's record makes), or
			// unreadable now: left out, and asked again next time.
			return false
		}
		if len(owned) >= maxOwnedTasks {
			clear(owned)
		}
		owned[e.Task] = scope.Sees(t.Caller)
		return owned[e.Task]
	}
}

// isTrue reads a flag of a query: present and not "0" or "false".
func isTrue(v string) bool {
	return v != "" && v != "0" && v != "false"
}

// statusOf maps a refused or failed call to an HTTP status.
func statusOf(k tool.Kind) int {
	switch k {
	case tool.KindToolNotRegistered, tool.KindServerNotFound:
		return http.StatusNotFound
	case tool.KindInvalidParams, tool.KindDuplicateQuery:
		return http.StatusUnprocessableEntity
	case tool.KindPolicyViolation, tool.KindApprovalDenied, tool.KindApprovalUnavailable, tool.KindPathNotInWorkspace, tool.KindPermissionDenied:
		return http.StatusForbidden
	case tool.KindTimeout:
		return http.StatusGatewayTimeout
	case tool.KindServerUnavailable:
		return http.StatusServiceUnavailable
	case tool.KindCancelled:
		return 499 // client closed request, as nginx reports it
	case tool.KindFileNotFound:
		return http.StatusNotFound
	case tool.KindAuthRequired:
		// The caller is known; what is missing is their credential for
		// the upstream server, which no other toolmux credential gives.
		return http.StatusForbidden
	}
	return http.StatusBadGateway
}

// apiError is the body of every error answer.
type apiError struct {
	Error struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, status int, kind, msg string) {
	var e apiError
	e.Error.Kind, e.Error.Message = kind, msg
	writeJSON(w, status, e)
}

// writeRateLimited answers a call refused for a limit of its caller (err,
// a *ratelimit.Error): 429, Retry-After, kind rate_limited.
func writeRateLimited(w http.ResponseWriter, err error) {
	if e, ok := errors.AsType[*ratelimit.Error](err); ok && e.RetryAfterSeconds() > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfterSeconds()))
	}
	writeError(w, http.StatusTooManyRequests, ratelimit.Kind, err.Error())
}

func writeToolError(w http.ResponseWriter, err error) {
	te := tool.AsError(err)
	writeError(w, statusOf(te.Kind), string(te.Kind), te.Message)
}

// indentBelow is the size under which answers are indented for people
// reading them with curl. Larger answers are sent compact: indentation
// repeats once per line for every level of nesting, which for a large,
// deeply nested value multiplies its size many times over.
const indentBelow = 64 << 10

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	b, err := json.Marshal(v)
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		var e apiError
		e.Error.Kind, e.Error.Message = "internal", "the answer could not be encoded: "+err.Error()
		b, _ = json.Marshal(e)
		_, _ = w.Write(append(b, '\n'))
		return
	}
	w.WriteHeader(status)
	if len(b) < indentBelow {
		var out bytes.Buffer
		if json.Indent(&out, b, "", "  ") == nil {
			b = out.Bytes()
		}
	}
	_, _ = w.Write(append(b, '\n'))
}

// isNilPolicy reports whether p is a nil pointer in an interface (an
// Options literal given a nil *policy.Engine).
func isNilPolicy(p interface{ Requires(tool.Tool) policy.Action }) bool {
	switch v := p.(type) {
	case *policy.Engine:
		return v == nil
	case *policy.Gate:
		return v == nil
	}
	return false
}

// haveLog reports whether there is a task log to answer from, having
// answered 404 when there is none.
func (s *server) haveLog(w http.ResponseWriter) bool {
	if s.o.Log == nil {
		writeError(w, http.StatusNotFound, "not_configured", "there is no task log (no data directory)")
		return false
	}
	return true
}

// writeFound answers a lookup: v, or 404 when it is not there (notFound
// saying so; "" for the error's own words), or 500.
func writeFound(w http.ResponseWriter, v any, err error, notFound string) {
	switch {
	case errors.Is(err, tasklog.ErrNotFound):
		if notFound == "" {
			notFound = err.Error()
		}
		writeError(w, http.StatusNotFound, "not_found", notFound)
	case err != nil:
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
	default:
		writeJSON(w, http.StatusOK, v)
	}
}
