package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"time"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/errkind"
	"github.com/toolmux/toolmux/internal/toolglob"
	"github.com/toolmux/toolmux/llm"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
	"go.opentelemetry.io/otel/trace"
)

// Caller runs the tool calls of one turn as one batch: a
// *schedule.Scheduler, so that the agent's calls take the same path as
// every other (policy, approval, pipeline, manager) and the outcomes come
// back in the model's order.
type Caller interface {
	Run(ctx context.Context, calls []tool.Call) []schedule.Outcome
}

// Catalog lists the tools an agent may be offered: a *pipeline.Pipeline
// or a *manager.Manager.
type Catalog interface {
	Tools(ctx context.Context) (*tool.Catalog, error)
}

// Turns is told whether each turn was kept or rolled back, so that the
// calls of a dropped turn leave no trace in duplicate detection: a
// *pipeline.Pipeline.
type Turns interface {
	Commit(task, session string)
	Discard(task, session string)
}

// Events receives the agent's events (workflow, agent, model turns,
// message deltas, meta-tool calls): a *stream.Hub.
type Events interface {
	Publish(name, task string, data any) stream.Event
}

// Log is where a run is recorded: the task, its steps and the message
// history of every session; a *tasklog.Log.
type Log interface {
	StartTask(ctx context.Context, t tasklog.Task) error
	FinishTask(ctx context.Context, id string, status tasklog.Status, finalAnswer string) error
	Step(ctx context.Context, taskID string, s tasklog.Step) error
	AppendMessages(ctx context.Context, taskID, session string, msgs ...tasklog.Message) error
}

// History is a task log that reads back what runs wrote, which a
// resumable run (WithResume) needs of its Log; *tasklog.Log is one.
type History interface {
	Messages(ctx context.Context, taskID, session string) ([]tasklog.Message, error)
	Steps(ctx context.Context, taskID string) ([]tasklog.Step, error)
}

// Runtime is what agents run on. Model, Calls and Catalog are required;
// the rest may be nil.
type Runtime struct {
	// Model is the model of every agent whose configuration names none of
	// its own (see Models).
	Model llm.Model
	// Models are the models of agents that have one of their own, by
	// agent name.
	Models map[string]llm.Model
	Calls  Caller
	// Catalog lists the tools; it is read at every turn, so a server's
	// tools/list_changed reaches the model at its next turn.
	Catalog Catalog
	Turns   Turns
	Events  Events
	Log     Log
	Logger  *slog.Logger
	// Tracer, when set, makes an invoke_agent span of every run and a
	// chat span of every model request (trace.go).
	Tracer trace.Tracer
	// Observer, when set, is told of every run's end, model turn and
	// rollback (the metrics); nil costs nothing.
	Observer Observer
}

// Observer is told what runs do, as they do it, for counting. Its methods
// are called on the run's goroutine and must return quickly. model is the
// model that answered, as the provider names it (llm.Response.Model).
type Observer interface {
	// RunEnded: a run (Agent.Run, not a sub-agent's) ended in state: its
	// Status when it has a result, else "failed" or "cancelled".
	RunEnded(state string)
	// ModelCall: the model answered one request, with this usage: a
	// turn's, kept or rolled back.
	ModelCall(model string, usage llm.Usage)
	// Turn: a turn of model's was kept: one model call and the tool calls
	// it asked for (none for the final answer), which the conversation
	// keeps. It is what Result.Turns counts.
	Turn(model string)
	// Rollback: a turn of model's was dropped: its model call is not a
	// turn.
	Rollback(model string)
}

// ErrorKind classifies why a run failed.
type ErrorKind string

// The kinds of failed runs.
const (
	// ErrNoModel: no model is configured.
	ErrNoModel ErrorKind = "no_model"
	// ErrConfig: the agent's configuration is unusable.
	ErrConfig ErrorKind = "invalid_config"
	// ErrModel: the model failed (Err is an *llm.Error).
	ErrModel ErrorKind = "model_failed"
	// ErrCatalog: the tools could not be listed.
	ErrCatalog ErrorKind = "catalog_failed"
	// ErrCancelled: the run's context ended.
	ErrCancelled ErrorKind = "cancelled"
)

// Error is a failed run, or an agent that cannot be built.
type Error struct {
	Kind    ErrorKind
	Agent   string
	Message string
	Err     error
}

// Error returns "agent NAME: KIND: MESSAGE".
func (e *Error) Error() string {
	s := "agent"
	if e.Agent != "" {
		s += " " + e.Agent
	}
	s += ": " + string(e.Kind)
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Status says how a run ended.
type Status string

// The ways a run ends.
const (
	// StatusAnswered: the model gave its final answer (a reply without
	// tool calls, or the terminate tool).
	StatusAnswered Status = "answered"
	// StatusMaxTurns: max_turns was reached; the answer is the forced
	// final summary.
	StatusMaxTurns Status = "max_turns"
	// StatusLoop: the model kept repeating the same calls; the answer is
	// the forced final summary.
	StatusLoop Status = "loop"
	// StatusContext: the conversation no longer fit the model's context;
	// the answer is the forced final summary.
	StatusContext Status = "context_exhausted"
)

// Result is what a run came to.
type Result struct {
	// Task is the task's id in the task log and on the event stream.
	Task   string `json:"task"`
	Answer string `json:"answer"`
	Status Status `json:"status"`
	// Turns counts the turns kept: each is one model call and the tool
	// calls it asked for, the final answer's and a forced summary's
	// included. Rollbacks counts the dropped ones, which are not turns:
	// the run made Turns+Rollbacks model calls.
	Turns     int `json:"turns"`
	Rollbacks int `json:"rollbacks"`
	// Calls counts the tool calls of committed turns.
	Calls int       `json:"calls"`
	Usage llm.Usage `json:"usage"`
	// Notes say what went unusually: a rollback limit reached, a loop
	// warning, elided results, an answer without \boxed{}.
	Notes []string `json:"notes,omitempty"`
	// Duration is the run's, from its start to its answer; its JSON form
	// is duration_ms (milliseconds), as a call record's is.
	Duration time.Duration `json:"-"`
	// Elided is the most tool results any one request had elided.
	Elided int `json:"elided,omitempty"`
}

// MarshalJSON writes Duration as duration_ms.
func (r Result) MarshalJSON() ([]byte, error) {
	type plain Result
	return json.Marshal(struct {
		plain
		DurationMS float64 `json:"duration_ms"`
	}{plain(r), float64(r.Duration.Microseconds()) / 1000})
}

// UnmarshalJSON reads the form MarshalJSON writes.
func (r *Result) UnmarshalJSON(b []byte) error {
	type plain Result
	v := struct {
		*plain
		DurationMS float64 `json:"duration_ms"`
	}{plain: (*plain)(r)}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	r.Duration = time.Duration(math.Round(v.DurationMS * float64(time.Millisecond)))
	return nil
}

// Agent runs tasks with one configuration. It is safe for concurrent
// use: each run has its own state.
type Agent struct {
	rt       Runtime
	cfg      Options
	model    llm.Model
	log      *slog.Logger
	tools    []toolglob.Pattern
	pinned   []toolglob.Pattern
	refusals []*regexp.Regexp
	// subAgents are the servers ("agent-NAME") of the sub-agents this
	// agent may call; nil: every sub-agent in the catalog.
	subAgents map[string]bool
	allAgents bool
	sel       selection
}

// DefaultRefusalPatterns are the phrases that make a reply without tool
// calls a refusal when the configuration gives none: MiroFlow's, and the
// usual openings of a model declining.
var DefaultRefusalPatterns = []string{
	"time constraint",
	"I'm sorry, but I can't",
	"I'm sorry, I cannot solve",
	"I cannot help with",
	"I can't help with",
	"I am unable to",
}

// New returns the main agent configured by cfg (DefaultOptions gives the
// defaults, FromConfig a configuration file's agent) running on rt. It may call every sub-agent in the catalog
// unless cfg.Agents names some.
func New(rt Runtime, cfg Options) (*Agent, error) {
	return newAgent(rt, cfg, false)
}

// newAgent builds an agent; a sub-agent calls only the sub-agents its
// configuration names.
func newAgent(rt Runtime, cfg Options, sub bool) (*Agent, error) {
	a := &Agent{rt: rt, cfg: cfg, log: rt.Logger}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	fail := func(kind ErrorKind, format string, args ...any) (*Agent, error) {
		return nil, &Error{Kind: kind, Agent: cfg.Name, Message: fmt.Sprintf(format, args...)}
	}
	if cfg.Name == "" {
		return fail(ErrConfig, "the agent has no name")
	}
	a.model = rt.Models[cfg.Name]
	if a.model == nil {
		a.model = rt.Model
	}
	if a.model == nil {
		return fail(ErrNoModel, "no model is configured: set the model: section, or --model and --base-url")
	}
	if rt.Calls == nil || rt.Catalog == nil {
		return fail(ErrConfig, "the runtime needs Calls and Catalog")
	}
	var err error
	if a.tools, err = toolglob.ParseAll(cfg.Tools, true); err != nil {
		return fail(ErrConfig, "tools: %v", err)
	}
	if a.pinned, err = toolglob.ParseAll(cfg.Selection.Pinned, true); err != nil {
		return fail(ErrConfig, "selection.pinned: %v", err)
	}
	patterns := cfg.RefusalPatterns
	if patterns == nil {
		patterns = DefaultRefusalPatterns
	}
	for _, p := range patterns {
		a.refusals = append(a.refusals, regexp.MustCompile(`(?i)`+regexp.QuoteMeta(p)))
	}
	switch cfg.ToolProtocol {
	case "", ProtocolNative, ProtocolText:
	default:
		return fail(ErrConfig, "tool_protocol %q is not native or text", cfg.ToolProtocol)
	}
	a.allAgents = !sub && len(cfg.Agents) == 0
	a.subAgents = map[string]bool{}
	for _, n := range cfg.Agents {
		a.subAgents[SubAgentServer(n)] = true
	}
	return a, nil
}

// Name is the agent's name.
func (a *Agent) Name() string { return a.cfg.Name }

// RunOption adjusts one run.
type RunOption func(*runOptions)

type runOptions struct {
	task     string
	metadata map[string]any
	resume   bool
}

// WithTask sets the task's id (default: a new id).
func WithTask(id string) RunOption { return func(o *runOptions) { o.task = id } }

// WithResume makes the run resumable: before a turn's calls run, the
// reply and the calls as planned are written to the task log as a
// checkpoint step ("turn N | calls planned"), and when the task log
// already holds messages of this task (an earlier attempt, interrupted),
// the run resumes from them instead of starting over: the committed turns
// are its history, and a turn planned but not committed has its calls run
// again under the same call ids (a call ledger in the pipeline decides
// what that means for each call) without asking the model again. It needs
// a task log; the fleet's workers run every run with it.
func WithResume() RunOption { return func(o *runOptions) { o.resume = true } }

// WithMetadata adds metadata to the task's record in the task log.
func WithMetadata(m map[string]any) RunOption { return func(o *runOptions) { o.metadata = m } }

// Run runs task as a new task of the task log: the workflow, this agent's
// loop, and every sub-agent it calls. The result is returned even when
// the run fails part-way (with what is known); the error is an *Error.
func (a *Agent) Run(ctx context.Context, task string, opts ...RunOption) (res *Result, err error) {
	o := runOptions{}
	for _, f := range opts {
		f(&o)
	}
	if o.task == "" {
		o.task = tool.NewID()
	}
	started := time.Now()
	meta := map[string]any{"agent": a.cfg.Name}
	for k, v := range o.metadata {
		meta[k] = v
	}
	if a.rt.Log != nil {
		// A run made for a caller (a fleet's run, its submitter's) is
		// that caller's task (docs/identity.md "Ownership").
		if err := a.rt.Log.StartTask(ctx, tasklog.Task{ID: o.task, Input: task, Metadata: meta, Caller: identity.RefFrom(ctx)}); err != nil {
			return &Result{Task: o.task}, &Error{Kind: ErrConfig, Agent: a.cfg.Name, Message: "the task log refused the task", Err: err}
		}
	}
	workflow := "wf-" + o.task
	a.publish(stream.EventStartOfWorkflow, o.task, stream.StartOfWorkflow(workflow, task))
	if a.rt.Tracer != nil {
		var sp trace.Span
		ctx, sp = a.startRunSpan(ctx, o.task)
		defer func() { endRunSpan(sp, res, err) }()
	}
	res, err = a.run(ctx, o.task, tasklog.MainSession, task, o.resume)
	res.Duration = time.Since(started)
	status, final := tasklog.StatusSuccess, res.Answer
	if err != nil {
		status, final = tasklog.StatusFailed, err.Error()
		if errors.Is(err, context.Canceled) || ctx.Err() != nil {
			status = tasklog.StatusCancelled
		}
		a.publish(stream.EventShowError, o.task, stream.ShowError(err.Error()))
	}
	a.publish(stream.EventEndOfWorkflow, o.task, stream.EndOfWorkflow(workflow))
	if obs := a.rt.Observer; obs != nil {
		state := string(res.Status)
		if err != nil || state == "" {
			state = string(status)
		}
		obs.RunEnded(state)
	}
	if a.rt.Log != nil {
		// The run's context may be gone (Ctrl-C); the record of how it
		// ended must still be written.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if ferr := a.rt.Log.FinishTask(lctx, o.task, status, final); ferr != nil {
			a.log.Warn("could not record the end of the task", "task", o.task, "error", ferr)
		}
		cancel()
	}
	if a.rt.Turns != nil {
		if e, ok := a.rt.Turns.(interface{ EndTask(string) }); ok {
			e.EndTask(o.task)
		}
	}
	return res, err
}

func (a *Agent) publish(name, task string, data any) {
	if a.rt.Events != nil {
		a.rt.Events.Publish(name, task, data)
	}
}

// KindOf returns the kind of err, by the convention of every error
// vocabulary in toolmux (tool.KindOf, llm.KindOf, agent.KindOf):
//   - a nil error: "";
//   - an error whose chain holds an *Error: the Kind of the first one,
//     however deeply wrapped, even when it wraps a context error;
//   - a context error (or one wrapping it) with no *Error in its chain:
//     ErrCancelled, for context.DeadlineExceeded and context.Canceled
//     alike (a run's context ended; the vocabulary has no timeout);
//   - any other error: "" (KindOf reports a classification, it does not
//     guess).
func KindOf(err error) ErrorKind {
	return errkind.Of(err, func(e *Error) (ErrorKind, bool) {
		if e == nil {
			return "", false
		}
		return e.Kind, true
	}, ErrCancelled, ErrCancelled)
}
