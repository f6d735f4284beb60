package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/toolmux/toolmux/llm"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

// A resumable run (WithResume) writes a checkpoint before it runs a turn's
// calls: the model's reply and the calls as planned, with the ids they run
// under. A run taken over by another process (a fleet worker after the
// first one died) rebuilds its history from the task log's messages, which
// hold every committed turn, and, when the last turn was planned but not
// committed, runs that turn's calls again under the same ids instead of
// asking the model anew. The ids are what a call ledger (package fleet)
// recognises: a completed call's result is reused, a call that started
// and never finished is not run twice unless it is safe to.

// stepPlanned names the checkpoint step of a turn.
const stepPlanned = "calls planned"

// checkpoint is what a turn's checkpoint step holds, as JSON in its
// metadata's "plan".
type checkpoint struct {
	Turn    int              `json:"turn"`
	Content string           `json:"content,omitempty"`
	Reason  string           `json:"reasoning,omitempty"`
	Calls   []checkpointCall `json:"calls"`
	// Malformed are the reasons calls could not be read, kept with the
	// turn (after the last rollback allowed).
	Malformed []string `json:"malformed,omitempty"`
	// Kept is the cause the turn was kept with despite a rollback cause.
	Kept string `json:"kept,omitempty"`
}

type checkpointCall struct {
	ModelID   string         `json:"model_id"`
	Exposed   string         `json:"exposed"`
	Meta      string         `json:"meta,omitempty"`
	ID        string         `json:"id,omitempty"`
	Server    string         `json:"server"`
	Tool      string         `json:"tool"`
	Arguments map[string]any `json:"arguments,omitempty"`
	// Text and IsError are set for malformed calls, answered without
	// running.
	Text    string `json:"text,omitempty"`
	IsError bool   `json:"is_error,omitempty"`
}

// checkpoint records the turn's plan before its calls run.
func (s *session) checkpoint(ctx context.Context, turn int, msg llm.Message, plan *turnPlan, kept string) {
	if !s.resumable {
		return
	}
	cp := checkpoint{Turn: turn, Content: msg.Content, Reason: msg.Reasoning, Malformed: plan.malformed, Kept: kept}
	for _, c := range plan.calls {
		cc := checkpointCall{ModelID: c.modelID, Exposed: c.exposed, Meta: c.meta, ID: c.call.ID,
			Server: c.call.Server, Tool: c.call.Tool, Arguments: c.call.Arguments}
		if c.meta == metaMalformed {
			cc.Text, cc.IsError = c.text, c.isError
		}
		cp.Calls = append(cp.Calls, cc)
	}
	b, err := json.Marshal(cp)
	if err != nil {
		s.a.log.Warn("could not write a checkpoint", "task", s.task, "error", err)
		return
	}
	s.step(ctx, fmt.Sprintf("turn %d | %s", turn, stepPlanned), fmt.Sprintf("%d calls", len(cp.Calls)), tasklog.LevelDebug,
		map[string]any{"plan": string(b), "turn": turn})
}

// keepCancelled ends a turn cancelled in the middle of its calls. A run
// that is not resumable keeps it, so that the history matches the calls
// the task log recorded as cancelled. A resumable run leaves it planned
// and not committed: the run is being given up by this process (a fleet
// worker handing it back past its grace, or losing it to another), and
// the next attempt runs the turn's calls again under the same ids, where
// the call ledger reuses the finished ones and reports the ones cut short
// as of unknown outcome. Kept, the turn would show the model "cancelled",
// which a model retries under a new id: a second effect of a tool that
// may have had its first.
func (s *session) keepCancelled(ctx context.Context, turn int, msg llm.Message, plan *turnPlan) {
	if s.resumable {
		s.step(ctx, fmt.Sprintf("turn %d | cancelled", turn), "the run was cancelled during the turn's calls; they are run again when the run is resumed",
			tasklog.LevelWarning, nil)
		return
	}
	s.keep(ctx, turn, msg, plan)
}

// resumeState is what the task log holds of an earlier attempt of a run.
type resumeState struct {
	history []entry
	turns   int
	// pending is the last turn's plan when it was not committed.
	pending *checkpoint
}

// priorAttempt is the earlier attempt of a resumable run; nil for a run
// that is not resumable or has none.
func (s *session) priorAttempt(ctx context.Context) (*resumeState, error) {
	if !s.resumable {
		return nil, nil
	}
	st, err := s.loadResume(ctx)
	if err != nil {
		return nil, &Error{Kind: ErrConfig, Agent: s.a.cfg.Name, Message: "could not read the earlier attempt of the run from the task log", Err: err}
	}
	return st, nil
}

// loadResume reads the earlier attempt of the session's task from the
// task log; nil when there is none (a first attempt).
func (s *session) loadResume(ctx context.Context) (*resumeState, error) {
	l, ok := s.a.rt.Log.(History)
	if !ok {
		return nil, errors.New("the task log cannot be read back (it is not an agent.History)")
	}
	msgs, err := l.Messages(ctx, s.task, s.name)
	var nf *tasklog.NotFoundError
	if errors.As(err, &nf) {
		return nil, nil
	}
	if err != nil || len(msgs) == 0 {
		return nil, err
	}
	st := &resumeState{}
	turn := 0
	prev := ""
	for _, m := range msgs {
		lm := llm.Message{Role: llm.Role(m.Role), Name: m.Name, ToolCallID: m.ToolCallID}
		if len(m.Content) > 0 && string(m.Content) != "null" {
			if err := json.Unmarshal(m.Content, &lm.Content); err != nil {
				// Content parts: kept as their text.
				lm.Content = string(m.Content)
			}
		}
		if len(m.ToolCalls) > 0 {
			lm.ToolCalls = parseToolCalls(m.ToolCalls)
		}
		switch lm.Role {
		case llm.RoleSystem:
			// The prompt is the agent's own, not history.
			continue
		case llm.RoleAssistant:
			turn++
		}
		// A text-protocol turn's results are the user message after
		// the reply.
		result := lm.Role == llm.RoleTool || (lm.Role == llm.RoleUser && prev == string(llm.RoleAssistant) && strings.HasPrefix(lm.Content, "Result of "))
		st.history = append(st.history, entry{msg: lm, turn: turn, result: result, name: lm.Name})
		prev = m.Role
	}
	st.turns = turn
	steps, err := l.Steps(ctx, s.task)
	if err != nil {
		return nil, err
	}
	// The last word on turn turns+1: planned (and not committed, since
	// the history has only turns turns), or rolled back.
	prefix := fmt.Sprintf("%s | turn %d | ", s.a.cfg.Name, turn+1)
	for i := len(steps) - 1; i >= 0; i-- {
		st0 := steps[i]
		if st0.Metadata["session"] != s.name || !strings.HasPrefix(st0.Name, prefix) {
			continue
		}
		if strings.TrimPrefix(st0.Name, prefix) == stepPlanned {
			raw, _ := st0.Metadata["plan"].(string)
			var cp checkpoint
			if err := json.Unmarshal([]byte(raw), &cp); err == nil && cp.Turn == turn+1 {
				st.pending = &cp
			}
		}
		if strings.Contains(st0.Name, "| rollback") || st.pending != nil {
			break
		}
	}
	return st, nil
}

// parseToolCalls reads tool calls in OpenAI's form, as the task log keeps
// them.
func parseToolCalls(raw json.RawMessage) []llm.ToolCall {
	var calls []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &calls) != nil {
		return nil
	}
	out := make([]llm.ToolCall, len(calls))
	for i, c := range calls {
		out[i] = llm.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments}
	}
	return out
}

// resume restores the session from an earlier attempt and finishes its
// pending turn, if any. It reports whether the run ended there (a
// terminate call in that turn) with the result.
func (s *session) resume(ctx context.Context, st *resumeState) (done bool, res *Result, err error) {
	s.history = st.history
	s.res.Turns = st.turns
	for _, e := range st.history {
		if e.msg.Role == llm.RoleAssistant {
			s.res.Calls += len(e.msg.ToolCalls)
		}
	}
	s.step(ctx, "resumed", fmt.Sprintf("resumed after %d committed turns", st.turns), tasklog.LevelWarning,
		map[string]any{"turns": st.turns, "pending": st.pending != nil})
	cp := st.pending
	if cp == nil {
		return false, nil, nil
	}
	off, err := s.offer(ctx)
	if err != nil {
		return true, s.res, err
	}
	plan := &turnPlan{content: cp.Content, malformed: cp.Malformed}
	msg := llm.Message{Role: llm.RoleAssistant, Content: cp.Content, Reasoning: cp.Reason}
	for _, c := range cp.Calls {
		pc := &plannedCall{modelID: c.ModelID, exposed: c.Exposed, meta: c.Meta, text: c.Text, isError: c.IsError,
			call: tool.Call{ID: c.ID, Server: c.Server, Tool: c.Tool, Arguments: c.Arguments}}
		if pc.meta == "" || pc.meta == metaRunCode {
			pc.call.Task, pc.call.Session = s.task, s.session()
		}
		plan.calls = append(plan.calls, pc)
		msg.ToolCalls = append(msg.ToolCalls, llm.ToolCall{ID: c.ModelID, Name: c.Exposed, Arguments: argsJSON(c.Arguments)})
	}
	// The turn's programs answer the calls they completed in an earlier
	// attempt from their records (codemode.go).
	s.prior = s.priorRecords(ctx, cp)
	s.act(ctx, off, plan)
	s.prior = nil
	if ctx.Err() != nil {
		s.keepCancelled(ctx, cp.Turn, msg, plan)
		return true, s.res, s.cancelled(ctx)
	}
	if cp.Kept != "" {
		s.keptNote(ctx, cp.Turn, cp.Kept)
	}
	s.keep(ctx, cp.Turn, msg, plan)
	for _, c := range plan.calls {
		if c.meta == metaTerminate {
			res, err := s.answer(ctx, 0, llm.Message{Role: llm.RoleAssistant, Content: stringArg(c.call.Arguments, "answer")}, StatusAnswered)
			return true, res, err
		}
	}
	return false, nil, nil
}
