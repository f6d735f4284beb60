package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/toolmux/toolmux/codemode"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/llm"
	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

// Code mode (docs/codemode.md, "In toolmux run"): the agent offers the
// model run_code, a JavaScript program that calls tools as functions, so
// that many calls take one turn and only what the program returns enters
// the conversation. Each call the program makes is a call of the run
// through the runtime's Caller (the scheduler: policy, approvals,
// pipeline, the task log), recorded with the run_code call's id as its
// parent; the program itself is recorded too (server toolmux, tool
// run_code).
//
// A resumed run (WithResume) runs a planned turn's calls again; for a
// program, that would make its calls again. Instead, the program whose
// record says it completed is answered from that record, and a program
// cut short is run again with the calls it had completed answered from
// their records: a call is the same call when it comes at the same
// position in the program with the same name and arguments, which its id
// says (innerID), so that the fleet's call ledger recognises it too.

// The code modes of an agent, the values of CodeMode.Mode.
const (
	// CodeModeOff offers no run_code ("" too).
	CodeModeOff = config.AgentCodeModeOff
	// CodeModeBeside offers run_code beside the tools.
	CodeModeBeside = config.AgentCodeModeBeside
	// CodeModeOnly offers run_code instead of the tools: the model reaches
	// them through programs alone.
	CodeModeOnly = config.AgentCodeModeOnly
)

// metaRunCode is the code mode meta-tool.
const metaRunCode = codemode.ToolName

// CodeMode is an agent's code mode.
type CodeMode struct {
	// Mode is CodeModeOff (""), CodeModeBeside or CodeModeOnly.
	Mode string
	// Bounds bound each program (codemode's defaults for zeros).
	Bounds codemode.Options
}

// on says whether run_code is offered.
func (c CodeMode) on() bool { return c.Mode == CodeModeBeside || c.Mode == CodeModeOnly }

// CodeModeBounds are the bounds of programs of the configuration's
// code_mode: section, which the gateway's run_code and the agents' share.
func CodeModeBounds(c config.CodeMode) codemode.Options {
	return codemode.Options{Timeout: c.Timeout, MaxCalls: c.MaxCalls, MaxOutputBytes: int(c.MaxOutputBytes), MaxMemoryBytes: c.MaxMemoryBytes,
		Engine: c.Engine}
}

// only says whether run_code is offered instead of the tools.
func (c CodeMode) only() bool { return c.on() && c.Mode == CodeModeOnly }

// runCodeTool is run_code as the model is offered it, declaring the tools
// of the turn (all of them, or, narrowed, those chosen).
func runCodeTool(off *offer) llm.Tool {
	return llm.Tool{Name: metaRunCode, Description: codemode.Description(off.tools, off.narrowed), Parameters: codemode.InputSchema()}
}

// callRecords is a task log that reads back a task's call records, which
// a resumed program's calls are answered from; *tasklog.Log is one.
type callRecords interface {
	Calls(ctx context.Context, taskID string) ([]*tool.Record, error)
}

// recorder keeps a record the agent makes itself (a program's);
// *tasklog.Log is one.
type recorder interface {
	Record(ctx context.Context, rec *tool.Record)
}

// priorRecords loads, for a resumed turn with programs in it, the call
// records of the earlier attempts, by id; nil when there is none to read.
func (s *session) priorRecords(ctx context.Context, cp *checkpoint) map[string]*tool.Record {
	has := false
	for _, c := range cp.Calls {
		has = has || c.Meta == metaRunCode
	}
	l, ok := s.a.rt.Log.(callRecords)
	if !has || !ok {
		return nil
	}
	recs, err := l.Calls(ctx, s.task)
	var nf *tasklog.NotFoundError
	if err != nil && !errors.As(err, &nf) {
		s.a.log.Warn("could not read the records of an earlier attempt: its programs' calls are made again", "task", s.task, "error", err)
		return nil
	}
	out := make(map[string]*tool.Record, len(recs))
	for _, r := range recs {
		// A call cut short by the end of the earlier attempt has no
		// outcome to give: it is made again (under the same id).
		if r.Error != nil && r.Error.Kind == tool.KindCancelled {
			continue
		}
		out[r.ID] = r
	}
	return out
}

// runCode answers run_code: the program run with the tools the agent may
// use, each call through the runtime's Caller; or, resumed, the program's
// record from the earlier attempt.
func (s *session) runCode(ctx context.Context, off *offer, c *plannedCall) {
	a := s.a
	code := stringArg(c.call.Arguments, "code")
	a.publish(stream.EventToolCall, s.task, stream.ToolCallInput(c.call.ID, metaRunCode, c.call.Arguments))
	defer func() { a.publish(stream.EventToolCall, s.task, stream.ToolCallResult(c.call.ID, metaRunCode, c.text)) }()
	if prior := s.prior[c.call.ID]; prior != nil && prior.Server == metaServer && prior.Tool == metaRunCode {
		c.rec = prior
		c.text, c.isError = programText(prior)
		s.step(ctx, "run_code replayed", "the program completed in an earlier attempt of the run; its result is reused", tasklog.LevelInfo,
			map[string]any{"id": c.call.ID})
		return
	}
	rec := tool.NewRecord(&c.call, metaRunCode)
	if code == "" {
		rec.Ended = rec.Started
		rec.Error = &tool.Error{Kind: tool.KindInvalidParams, Tool: metaRunCode, Message: "run_code needs the program to run: {\"code\": \"...\"}"}
		c.rec, c.text, c.isError = rec, formatRecordText(rec), true
		s.record(ctx, rec)
		return
	}
	tools, _ := a.allowed(off.cat)
	names := make([]string, 0, len(tools))
	for _, t := range tools {
		names = append(names, t.Exposed)
	}
	pc := &programCaller{s: s, cat: off.cat, parent: c.call.ID}
	res, err := codemode.New(pc, a.cfg.CodeMode.Bounds).Run(ctx, code, names)
	rec.Ended = time.Now()
	rec.Duration = rec.Ended.Sub(rec.Started)
	rec.Attempts = 1
	structured, text := codemode.Answer(res, err)
	rec.Result = &tool.Result{Content: []tool.Content{{Type: tool.ContentText, Text: text}}, Structured: structured, IsError: err != nil}
	if err != nil {
		rec.Error = &tool.Error{Kind: codemode.ToolKind(err), Tool: metaRunCode, Message: err.Error()}
	}
	if n := pc.replays(); n > 0 {
		rec.Note("agent", fmt.Sprintf("%d of the program's calls completed in an earlier attempt of the run; their records were reused", n),
			map[string]any{"replayed": n})
	}
	c.rec = rec
	c.text, c.isError = programText(rec)
	if ctx.Err() != nil && s.resumable {
		// The run is being given up in the middle of the program: its
		// next attempt runs it again, and records it then.
		return
	}
	s.record(ctx, rec)
}

// programText is what the model is told of a program: its result's text
// (the result's JSON and the console), or its error.
func programText(rec *tool.Record) (string, bool) {
	if rec.Result != nil && len(rec.Result.Content) == 1 && rec.Result.Content[0].Type == tool.ContentText {
		return rec.Result.Content[0].Text, rec.Error != nil
	}
	return formatRecord(rec)
}

func formatRecordText(rec *tool.Record) string {
	t, _ := formatRecord(rec)
	return t
}

// record keeps a record the agent made, when its task log keeps records.
func (s *session) record(ctx context.Context, rec *tool.Record) {
	if r, ok := s.a.rt.Log.(recorder); ok {
		r.Record(context.WithoutCancel(ctx), rec)
	}
}

// programCaller is a program's codemode.Caller: each call one call of the
// run through the runtime's Caller, under an id of the program's.
type programCaller struct {
	s      *session
	cat    *tool.Catalog
	parent string
	// n counts the program's calls, in the order the engine makes them
	// (one at a time: a call's position is what names it in another
	// attempt); replayed those answered from an earlier attempt's
	// records.
	mu          sync.Mutex
	n, replayed int
}

func (p *programCaller) replays() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.replayed
}

func (p *programCaller) Call(ctx context.Context, name string, args map[string]any) *tool.Record {
	s := p.s
	p.mu.Lock()
	p.n++
	n := p.n
	p.mu.Unlock()
	t, ok := p.cat.Lookup(name)
	if !ok || !s.a.mayUse(t) {
		msg := fmt.Sprintf("no tool %q is available to this agent", name)
		if sug := p.cat.Suggest(name); sug != "" {
			msg += "; did you mean " + sug + "?"
		}
		return &tool.Record{Name: name, Error: &tool.Error{Kind: tool.KindToolNotRegistered, Tool: name, Message: msg}}
	}
	id := innerID(p.parent, n, name, args)
	if prior := s.prior[id]; prior != nil {
		p.mu.Lock()
		p.replayed++
		p.mu.Unlock()
		return prior
	}
	call := tool.Call{ID: id, Server: t.Server, Tool: t.Name, Arguments: args, Task: s.task, Session: s.session(), Parent: p.parent}
	out := s.a.rt.Calls.Run(ctx, []tool.Call{call})
	if len(out) == 0 || out[0].Record == nil {
		return &tool.Record{ID: id, Server: t.Server, Tool: t.Name, Name: name,
			Error: &tool.Error{Kind: tool.KindExecutionFailed, Server: t.Server, Tool: t.Name, Message: "the call had no outcome"}}
	}
	return out[0].Record
}

// innerID is the id of a program's nth call of name with args: the same
// call of the same program (parent) in another attempt of the run has
// the same id, a different call at that position another.
func innerID(parent string, n int, name string, args map[string]any) string {
	b, _ := json.Marshal(args) // map keys sorted: the same arguments, the same bytes
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write(b)
	return parent + "-" + strconv.Itoa(n) + "-" + hex.EncodeToString(h.Sum(nil)[:4])
}
