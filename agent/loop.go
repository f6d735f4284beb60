package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/toolmux/toolmux/internal/jsonrepair"
	"github.com/toolmux/toolmux/llm"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

// session is one run of one agent: the main agent's, or one call of a
// sub-agent. It is used by one goroutine.
type session struct {
	a       *Agent
	task    string
	name    string // the session: "main", or the sub-agent's
	input   string
	history []entry
	// found are tools find_tools returned or the model called, offered
	// from then on even when the catalog is narrowed.
	found map[string]bool
	// sigs are the signatures of the committed turns' calls, for loop
	// detection; loopWarned is the repeat count last warned about.
	sigs       []string
	loopWarned int
	// shrunk is set once the model said the context was too long: from
	// then on only the last turn's results are sent whole.
	shrunk bool
	res    *Result
	msgs   int // message ids handed out
	// resumable: checkpoint each turn before its calls run (WithResume).
	resumable bool
	// prior are the call records of an earlier attempt of the run, by
	// id, while a resumed turn's calls run (codemode.go).
	prior map[string]*tool.Record
	// model is the model that answered the last turn, as it names itself,
	// for the observer's rollbacks.
	model string
}

// entry is one message of the history and what the budget needs to know
// of it.
type entry struct {
	msg    llm.Message
	turn   int
	result bool // a tool result, which may be elided
	name   string
	elided string // what is sent instead, once elided
}

// plannedCall is one call of a turn as the model asked it.
type plannedCall struct {
	modelID string // the model's id of the call, echoed in the result
	exposed string // the name the model used
	meta    string // "terminate", "find_tools", "run_code" or "" for a tool call
	call    tool.Call
	// text is the result as the model will see it, isError whether it
	// reports a failure.
	text    string
	isError bool
	rec     *tool.Record
}

// turnPlan is what the agent made of one reply.
type turnPlan struct {
	calls     []*plannedCall
	malformed []string // why calls could not be read
	content   string   // the reply's text (before any text-protocol block)
}

const (
	metaTerminate = "terminate"
	metaFindTools = "find_tools"
	// metaMalformed marks a native call whose arguments could not be read.
	metaMalformed = "malformed"
	// metaServer is the server of the meta-tools in the text protocol.
	metaServer = "toolmux"
)

func (a *Agent) run(ctx context.Context, task, name, input string, resumable bool) (*Result, error) {
	s := &session{a: a, task: task, name: name, input: input, found: map[string]bool{}, res: &Result{Task: task}, resumable: resumable}
	agentID := "ag-" + tool.NewID()
	display := a.cfg.DisplayName
	if display == "" {
		display = a.cfg.Name
	}
	a.publish(stream.EventStartOfAgent, task, stream.Agent(a.cfg.Name, display, agentID))
	defer a.publish(stream.EventEndOfAgent, task, stream.Agent(a.cfg.Name, display, agentID))
	// The prompt the model gets (the default one when none is
	// configured), not the configuration's; the text protocol's tool
	// listing, which changes with the offer, is left out.
	var (
		res  *Result
		err  error
		done bool
	)
	prior, err := s.priorAttempt(ctx)
	if err != nil {
		s.step(ctx, "failed", err.Error(), tasklog.LevelError, nil)
		return s.res, err
	}
	if prior != nil {
		done, res, err = s.resume(ctx, prior)
	} else {
		s.logMessages(ctx, llm.Message{Role: llm.RoleSystem, Content: a.prompt()})
		s.commit(ctx, 0, false, llm.Message{Role: llm.RoleUser, Content: input})
	}
	if !done {
		res, err = s.loop(ctx)
	}
	if err != nil {
		s.step(ctx, "failed", err.Error(), tasklog.LevelError, nil)
	} else {
		s.step(ctx, "final answer", res.Answer, tasklog.LevelInfo, map[string]any{"status": res.Status, "turns": res.Turns, "rollbacks": res.Rollbacks})
	}
	return res, err
}

func (s *session) loop(ctx context.Context) (*Result, error) {
	cfg := s.a.cfg
	consecutive := 0 // rollbacks in a row
	hint := ""
	for {
		if err := ctx.Err(); err != nil {
			return s.res, s.cancelled(ctx)
		}
		if s.res.Turns >= cfg.MaxTurns {
			return s.summarise(ctx, StatusMaxTurns, fmt.Sprintf("the limit of %d turns", cfg.MaxTurns))
		}
		turn := s.res.Turns + 1
		off, err := s.offer(ctx)
		if err != nil {
			return s.res, err
		}
		resp, err := s.think(ctx, turn, off, hint, llm.ToolChoiceAuto)
		if err != nil {
			if llm.KindOf(err) == llm.KindContextLength {
				if !s.shrunk {
					s.shrunk = true
					s.note(ctx, "the model's context was exceeded; older tool results are now elided")
					continue
				}
				return s.summarise(ctx, StatusContext, "the limit of the model's context")
			}
			return s.res, s.modelError(ctx, err)
		}
		hint = ""
		plan := s.parse(resp, off)
		cause := s.replyCause(resp, plan)
		if cause == "" && len(plan.calls) == 0 {
			return s.answer(ctx, turn, resp.Message, StatusAnswered)
		}
		if cause != "" && consecutive < cfg.MaxConsecutiveRollbacks {
			consecutive++
			s.rollback(ctx, turn, cause, resp.Message, consecutive)
			hint = rollbackHint(cause)
			continue
		}
		kept := cause
		if cause != "" && len(plan.calls) == 0 {
			// Kept after the last rollback allowed: a reply with nothing
			// to run is the answer (a refusal), or, malformed, is shown
			// its errors below.
			if len(plan.malformed) == 0 {
				s.keptNote(ctx, turn, cause)
				return s.answer(ctx, turn, resp.Message, StatusAnswered)
			}
		}
		s.checkpoint(ctx, turn, resp.Message, plan, kept)
		s.act(ctx, off, plan)
		if ctx.Err() != nil {
			s.keepCancelled(ctx, turn, resp.Message, plan)
			return s.res, s.cancelled(ctx)
		}
		if kept == "" {
			if cause = resultCause(plan); cause != "" && consecutive < cfg.MaxConsecutiveRollbacks {
				consecutive++
				s.rollback(ctx, turn, cause, resp.Message, consecutive)
				hint = rollbackHint(cause)
				continue
			}
			kept = cause
		}
		if kept != "" {
			s.keptNote(ctx, turn, kept)
		}
		consecutive = 0
		s.keep(ctx, turn, resp.Message, plan)
		for _, c := range plan.calls {
			if c.meta == metaTerminate {
				msg := llm.Message{Role: llm.RoleAssistant, Content: stringArg(c.call.Arguments, "answer")}
				return s.answer(ctx, 0, msg, StatusAnswered)
			}
		}
		if stop := s.detectLoop(ctx, plan); stop {
			return s.summarise(ctx, StatusLoop, "a loop: the same tool calls were repeated")
		}
	}
}

// think asks the model for one turn.
func (s *session) think(ctx context.Context, turn int, off *offer, hint string, choice llm.ToolChoice) (*llm.Response, error) {
	a := s.a
	system := s.system(off)
	msgs := s.window(system)
	if hint != "" {
		msgs = append(msgs, llm.Message{Role: llm.RoleUser, Content: hint})
	}
	req := llm.Request{System: system, Messages: msgs, ToolChoice: choice}
	if a.cfg.ToolProtocol != ProtocolText {
		req.Tools = off.llm
	}
	display := a.cfg.DisplayName
	if display == "" {
		display = a.cfg.Name
	}
	a.publish(stream.EventStartOfLLM, s.task, stream.LLM(a.cfg.Name, display))
	var onDelta func(llm.Delta)
	if a.rt.Events != nil {
		attempt, id := 0, ""
		onDelta = func(d llm.Delta) {
			if d.Content == "" {
				return
			}
			if d.Attempt != attempt || id == "" {
				attempt, id = d.Attempt, s.messageID()
			}
			a.publish(stream.EventMessage, s.task, stream.Message(id, d.Content))
		}
	}
	var resp *llm.Response
	var err error
	if a.rt.Tracer != nil {
		cctx, sp := a.startChatSpan(ctx, req)
		resp, err = a.model.Complete(cctx, req, onDelta)
		endChatSpan(sp, resp, err)
	} else {
		resp, err = a.model.Complete(ctx, req, onDelta)
	}
	a.publish(stream.EventEndOfLLM, s.task, stream.LLM(a.cfg.Name, display))
	if err != nil {
		return nil, err
	}
	s.res.Usage.InputTokens += resp.Usage.InputTokens
	s.res.Usage.OutputTokens += resp.Usage.OutputTokens
	s.model = resp.Model
	if o := a.rt.Observer; o != nil {
		o.ModelCall(resp.Model, resp.Usage)
	}
	calls := make([]string, 0, len(resp.Message.ToolCalls))
	for _, c := range resp.Message.ToolCalls {
		calls = append(calls, c.Name)
	}
	s.step(ctx, fmt.Sprintf("turn %d | llm", turn), resp.Message.Content, tasklog.LevelInfo, map[string]any{
		"stop_reason": resp.StopReason, "tool_calls": calls, "input_tokens": resp.Usage.InputTokens,
		"output_tokens": resp.Usage.OutputTokens, "attempts": resp.Attempts, "ms": resp.Duration.Milliseconds(),
		"tools_offered": len(off.llm), "reasoning": resp.Message.Reasoning,
	})
	return resp, nil
}

func (s *session) messageID() string {
	s.msgs++
	return fmt.Sprintf("msg-%s-%s-%d", s.task, s.name, s.msgs)
}

// parse reads the calls of a reply: native tool calls, or the text
// protocol's blocks.
func (s *session) parse(resp *llm.Response, off *offer) *turnPlan {
	plan := &turnPlan{content: resp.Message.Content}
	if s.a.cfg.ToolProtocol == ProtocolText {
		calls, before, errs := ParseTextCalls(resp.Message.Content)
		plan.content = before
		for _, err := range errs {
			plan.malformed = append(plan.malformed, err.Error())
		}
		for i, c := range calls {
			pc := &plannedCall{modelID: fmt.Sprintf("text-%d", i+1), exposed: c.Server + "/" + c.Tool}
			if c.Server == metaServer && (c.Tool == metaTerminate || c.Tool == metaFindTools || (c.Tool == metaRunCode && s.a.cfg.CodeMode.on())) {
				pc.meta = c.Tool
			}
			pc.call = tool.Call{Server: c.Server, Tool: c.Tool, Arguments: c.Arguments}
			plan.calls = append(plan.calls, pc)
		}
	} else {
		for i, tc := range resp.Message.ToolCalls {
			pc := &plannedCall{modelID: tc.ID, exposed: tc.Name}
			args, _, err := jsonrepair.Object(tc.Arguments)
			if err != nil {
				why := fmt.Sprintf("the arguments of tool call %d (%s) are not a JSON object: %v", i+1, tc.Name, err)
				plan.malformed = append(plan.malformed, why)
				// Kept (after the last rollback allowed), the call is
				// answered with the error, as every call must be.
				pc.meta, pc.text, pc.isError = metaMalformed, "Error: "+why+". Call the tool again with a JSON object.", true
				pc.call = tool.Call{Server: metaServer, Tool: tc.Name, Arguments: map[string]any{"raw": tc.Arguments}}
				plan.calls = append(plan.calls, pc)
				continue
			}
			switch {
			case tc.Name == metaTerminate || tc.Name == metaFindTools || (tc.Name == metaRunCode && s.a.cfg.CodeMode.on()):
				pc.meta = tc.Name
				pc.call = tool.Call{Server: metaServer, Tool: tc.Name, Arguments: args}
			default:
				server, name := splitExposed(off.cat, tc.Name)
				pc.call = tool.Call{Server: server, Tool: name, Arguments: args}
			}
			plan.calls = append(plan.calls, pc)
		}
	}
	for _, pc := range plan.calls {
		// A program has an id too: its record's, and its calls' parent.
		if pc.meta == "" || pc.meta == metaRunCode {
			pc.call.ID = tool.NewID()
			pc.call.Task = s.task
			pc.call.Session = s.session()
		}
	}
	return plan
}

// session is the name the calls of this run carry: duplicate detection
// counts per (task, session).
func (s *session) session() string { return s.name }

// splitExposed turns the name a model called into a server and a tool:
// the catalog's entry, or, for a name it does not know, the parts around
// the separator, so that the refusal can suggest the closest tool.
func splitExposed(cat *tool.Catalog, exposed string) (string, string) {
	if t, ok := cat.Lookup(exposed); ok {
		return t.Server, t.Name
	}
	if server, name, ok := strings.Cut(exposed, tool.Separator); ok {
		return server, name
	}
	return "", exposed
}

// replyCause says why a reply must be rolled back before anything runs:
// "" when it need not be.
func (s *session) replyCause(resp *llm.Response, plan *turnPlan) string {
	if len(plan.malformed) > 0 {
		return "malformed: " + strings.Join(plan.malformed, "; ")
	}
	if len(plan.calls) > 0 {
		return ""
	}
	text := strings.TrimSpace(plan.content)
	switch {
	case resp.StopReason == llm.StopContentFilter:
		return "refusal: the provider's content filter stopped the reply"
	case text == "" && resp.StopReason == llm.StopLength:
		return "malformed: the reply was cut off at the token limit before saying anything"
	case text == "":
		return "malformed: the reply was empty"
	}
	for _, re := range s.a.refusals {
		if re.MatchString(text) {
			return "refusal: the reply declines the task (" + re.String()[4:] + ")"
		}
	}
	return ""
}

// resultCause says why a turn must be rolled back after its calls ran: a
// repeated query, or a result the pipeline's rollback rules flagged.
func resultCause(plan *turnPlan) string {
	for _, c := range plan.calls {
		if c.rec == nil {
			continue
		}
		if c.rec.Error != nil && c.rec.Error.Kind == tool.KindDuplicateQuery {
			return "duplicate query: " + c.rec.Error.Message
		}
		if v := c.rec.Verdict; v != nil && v.Rollback {
			return "rollback verdict on " + c.exposed + ": " + v.Reason
		}
	}
	return ""
}

// rollbackHint is what the model is told when it retries a dropped turn.
func rollbackHint(cause string) string {
	return "Your previous reply was discarded (" + cause + "). Do not repeat it: " +
		"try a different approach, fix the tool call, or give your final answer."
}

// rollback drops a turn: the pipeline forgets its queries, the log keeps
// what was dropped and why.
func (s *session) rollback(ctx context.Context, turn int, cause string, msg llm.Message, n int) {
	if t := s.a.rt.Turns; t != nil {
		t.Discard(s.task, s.session())
	}
	s.res.Rollbacks++
	if o := s.a.rt.Observer; o != nil {
		o.Rollback(s.model)
	}
	s.step(ctx, fmt.Sprintf("turn %d | rollback %d", turn, n), cause, tasklog.LevelWarning, map[string]any{
		"reply": msg.Content, "tool_calls": toolCallsJSON(msg.ToolCalls), "consecutive": n,
	})
}

// keptNote records that a turn was kept although it had a rollback cause,
// because max_consecutive_rollbacks were already made.
func (s *session) keptNote(ctx context.Context, turn int, cause string) {
	s.note(ctx, fmt.Sprintf("turn %d was kept after %d consecutive rollbacks although it would be rolled back (%s)",
		turn, s.a.cfg.MaxConsecutiveRollbacks, cause))
}

func (s *session) note(ctx context.Context, text string) {
	s.res.Notes = append(s.res.Notes, text)
	s.step(ctx, "note", text, tasklog.LevelWarning, nil)
}

// keep commits a turn: the pipeline counts its queries, the history gets
// the reply and the results.
func (s *session) keep(ctx context.Context, turn int, msg llm.Message, plan *turnPlan) {
	if t := s.a.rt.Turns; t != nil {
		t.Commit(s.task, s.session())
	}
	s.counted()
	s.res.Calls += len(plan.calls)
	msg.Role = llm.RoleAssistant
	if s.a.cfg.ToolProtocol == ProtocolText {
		var b strings.Builder
		for i, c := range plan.calls {
			if i > 0 {
				b.WriteString("\n\n")
			}
			fmt.Fprintf(&b, "Result of %s:\n%s", c.exposed, c.text)
		}
		for _, m := range plan.malformed {
			if b.Len() > 0 {
				b.WriteString("\n\n")
			}
			b.WriteString("Error: " + m + ". Write the block again, correctly.")
		}
		results := llm.Message{Role: llm.RoleUser, Content: b.String()}
		s.commit(ctx, turn, false, msg)
		s.commit(ctx, turn, true, results)
		return
	} else {
		msg.ToolCalls = msg.ToolCalls[:0:0]
		for _, c := range plan.calls {
			msg.ToolCalls = append(msg.ToolCalls, llm.ToolCall{ID: c.modelID, Name: c.exposed, Arguments: argsJSON(c.call.Arguments)})
		}
		s.commit(ctx, turn, false, msg)
		for _, c := range plan.calls {
			s.commit(ctx, turn, true, llm.Message{Role: llm.RoleTool, ToolCallID: c.modelID, Name: c.exposed, Content: c.text, IsError: c.isError})
		}
	}
}

// commit appends messages to the history and the task log; result marks
// tool results, which the context budget may elide.
func (s *session) commit(ctx context.Context, turn int, result bool, msgs ...llm.Message) {
	for _, m := range msgs {
		s.history = append(s.history, entry{msg: m, turn: turn, result: result, name: m.Name})
	}
	s.logMessages(ctx, msgs...)
}

// answer ends the run with msg's text as the final answer.
func (s *session) answer(ctx context.Context, turn int, msg llm.Message, status Status) (*Result, error) {
	text := msg.Content
	if s.a.cfg.ToolProtocol == ProtocolText {
		_, before, _ := ParseTextCalls(text)
		text = before
	}
	text = strings.TrimSpace(text)
	if s.a.cfg.BoxedAnswer {
		if boxed, ok := Boxed(text); ok {
			text = boxed
		} else {
			s.note(ctx, "the final answer has no \\boxed{}; the whole reply is the answer")
		}
	}
	if turn > 0 && status == StatusAnswered && len(msg.ToolCalls) == 0 {
		// The answer's model call is a turn, kept without calls.
		s.commit(ctx, turn, false, llm.Message{Role: llm.RoleAssistant, Content: msg.Content, Reasoning: msg.Reasoning})
		s.counted()
	}
	s.res.Answer = text
	s.res.Status = status
	return s.res, nil
}

// summarise asks the model for a final answer without tools, after a
// limit was hit.
func (s *session) summarise(ctx context.Context, status Status, why string) (*Result, error) {
	s.step(ctx, "forced summary", "stopping at "+why, tasklog.LevelWarning, map[string]any{"status": status})
	off, err := s.offer(ctx)
	if err != nil {
		return s.res, err
	}
	prompt := "You have reached " + why + ". Do not call any more tools. Based on everything above, " +
		"summarise what you found and give your final answer now."
	if s.a.cfg.BoxedAnswer {
		prompt += " Put the final answer in \\boxed{}."
	}
	s.commit(ctx, s.res.Turns+1, false, llm.Message{Role: llm.RoleUser, Content: prompt})
	resp, err := s.think(ctx, s.res.Turns+1, off, "", llm.ToolChoiceNone)
	if err != nil {
		return s.res, s.modelError(ctx, err)
	}
	msg := resp.Message
	msg.ToolCalls = nil
	s.commit(ctx, s.res.Turns+1, false, llm.Message{Role: llm.RoleAssistant, Content: msg.Content, Reasoning: msg.Reasoning})
	// The summary is a turn too, one past the limit that forced it.
	s.counted()
	return s.answer(ctx, 0, msg, status)
}

// counted counts a kept turn: one model call and the tool calls it asked
// for, in the result, the observer's count and (as the assistant messages
// of the history) a resumed run's.
func (s *session) counted() {
	s.res.Turns++
	if o := s.a.rt.Observer; o != nil {
		o.Turn(s.model)
	}
}

func (s *session) modelError(ctx context.Context, err error) error {
	if ctx.Err() != nil || llm.KindOf(err) == llm.KindCancelled {
		return s.cancelled(ctx)
	}
	return &Error{Kind: ErrModel, Agent: s.a.cfg.Name, Message: "the model request failed", Err: err}
}

func (s *session) cancelled(ctx context.Context) error {
	cause := context.Cause(ctx)
	if cause == nil {
		cause = context.Canceled
	}
	return &Error{Kind: ErrCancelled, Agent: s.a.cfg.Name, Message: "the run was cancelled", Err: cause}
}

// detectLoop records the turn's calls and says whether the run must stop:
// the same calls, or the same cycle of turns, repeated Repeats times
// earns a warning, twice that many a stop.
func (s *session) detectLoop(ctx context.Context, plan *turnPlan) bool {
	n := s.a.cfg.LoopDetection.Repeats
	if n <= 0 {
		return false
	}
	sig := make([]string, 0, len(plan.calls))
	for _, c := range plan.calls {
		sig = append(sig, c.exposed+" "+argsJSON(c.call.Arguments))
	}
	sort.Strings(sig)
	s.sigs = append(s.sigs, strings.Join(sig, "\n"))
	reps := repeats(s.sigs)
	switch {
	case reps >= 2*n:
		return true
	case reps >= n && reps > s.loopWarned:
		s.loopWarned = reps
		text := fmt.Sprintf("You have made the same tool calls %d times in a row with the same results. "+
			"Change your approach, or give your final answer.", reps)
		s.commit(ctx, s.res.Turns, false, llm.Message{Role: llm.RoleUser, Content: text})
		s.note(ctx, fmt.Sprintf("loop: the same calls repeated %d times", reps))
	case reps < n:
		s.loopWarned = 0
	}
	return false
}

// repeats is how many times the last cycle of turns (of 1 to 4 turns)
// repeats at the end of sigs.
func repeats(sigs []string) int {
	best := 1
	for period := 1; period <= 4 && period <= len(sigs); period++ {
		r := 1
		for end := len(sigs) - period; end-period >= 0; end -= period {
			if !equal(sigs[end-period:end], sigs[len(sigs)-period:]) {
				break
			}
			r++
		}
		if r > best && (period == 1 || r >= 2) {
			best = r
		}
	}
	return best
}

func equal(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Boxed returns the content of the last \boxed{...} of text, braces
// balanced.
func Boxed(text string) (string, bool) {
	i := strings.LastIndex(text, `\boxed{`)
	for i >= 0 {
		start := i + len(`\boxed{`)
		depth := 1
		for j := start; j < len(text); j++ {
			switch text[j] {
			case '{':
				depth++
			case '}':
				depth--
				if depth == 0 {
					return strings.TrimSpace(text[start:j]), true
				}
			}
		}
		// Unbalanced (cut off): try an earlier one.
		i = strings.LastIndex(text[:i], `\boxed{`)
	}
	return "", false
}

// step writes one entry of the task's step log.
func (s *session) step(ctx context.Context, name, message string, level tasklog.Level, meta map[string]any) {
	l := s.a.rt.Log
	if l == nil {
		return
	}
	if meta == nil {
		meta = map[string]any{}
	}
	meta["session"] = s.name
	lctx, cancel := logContext(ctx)
	defer cancel()
	err := l.Step(lctx, s.task, tasklog.Step{Name: s.a.cfg.Name + " | " + name, Message: message, Level: level, Metadata: meta})
	if err != nil {
		s.a.log.Warn("could not record a step", "task", s.task, "error", err)
	}
}

// logMessages appends messages to the session's history in the task log.
func (s *session) logMessages(ctx context.Context, msgs ...llm.Message) {
	l := s.a.rt.Log
	if l == nil {
		return
	}
	out := make([]tasklog.Message, 0, len(msgs))
	for _, m := range msgs {
		content, _ := json.Marshal(m.Content)
		tm := tasklog.Message{Role: string(m.Role), Content: content, Name: m.Name, ToolCallID: m.ToolCallID}
		if len(m.ToolCalls) > 0 {
			tm.ToolCalls = toolCallsJSON(m.ToolCalls)
		}
		out = append(out, tm)
	}
	lctx, cancel := logContext(ctx)
	defer cancel()
	if err := l.AppendMessages(lctx, s.task, s.name, out...); err != nil {
		s.a.log.Warn("could not record messages", "task", s.task, "error", err)
	}
}

// logContext is the context of a task-log write: not cancelled with the
// run, so that the record of a cancelled run is complete, but bounded.
func logContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
}

// toolCallsJSON is tool calls in OpenAI's form, as the task log keeps them.
func toolCallsJSON(calls []llm.ToolCall) json.RawMessage {
	if len(calls) == 0 {
		return nil
	}
	type fn struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type call struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	out := make([]call, len(calls))
	for i, c := range calls {
		out[i] = call{ID: c.ID, Type: "function", Function: fn{Name: c.Name, Arguments: c.Arguments}}
	}
	b, _ := json.Marshal(out)
	return b
}

func argsJSON(args map[string]any) string {
	if args == nil {
		return "{}"
	}
	b, err := json.Marshal(args)
	if err != nil {
		return "{}"
	}
	return string(b)
}

func stringArg(args map[string]any, key string) string {
	switch v := args[key].(type) {
	case string:
		return v
	case nil:
		return ""
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

// formatRecord is a record as the model sees it: the result or the error
// sentence, with the pipeline's just-in-time instructions.
func formatRecord(rec *tool.Record) (string, bool) {
	return pipeline.FormatText(rec), rec.Error != nil
}
