package hooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"time"

	"github.com/toolmux/toolmux/internal/procgroup"
	"github.com/toolmux/toolmux/tool"
)

// input is what a hook reads on stdin and a guardrail receives: Claude
// Code's hook input, for toolmux's call.
type input struct {
	SessionID      string         `json:"session_id"`
	TranscriptPath string         `json:"transcript_path"`
	Cwd            string         `json:"cwd"`
	PermissionMode string         `json:"permission_mode,omitempty"`
	HookEventName  string         `json:"hook_event_name"`
	ToolName       string         `json:"tool_name"`
	ToolInput      map[string]any `json:"tool_input"`
	ToolUseID      string         `json:"tool_use_id,omitempty"`
	ToolResponse   *tool.Result   `json:"tool_response,omitempty"`
}

// output is a hook's JSON answer (every field optional).
type output struct {
	Continue       *bool  `json:"continue"`
	StopReason     string `json:"stopReason"`
	SuppressOutput bool   `json:"suppressOutput"`
	SystemMessage  string `json:"systemMessage"`
	// Decision and Reason: PostToolUse's "block"; PreToolUse's older
	// "approve" / "block".
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	Specific *struct {
		HookEventName            string         `json:"hookEventName"`
		PermissionDecision       string         `json:"permissionDecision"`
		PermissionDecisionReason string         `json:"permissionDecisionReason"`
		UpdatedInput             map[string]any `json:"updatedInput"`
		AdditionalContext        string         `json:"additionalContext"`
		// UpdatedToolOutput replaces a PostToolUse's result
		// (updatedMCPToolOutput, its older name, for MCP tools).
		UpdatedToolOutput    json.RawMessage `json:"updatedToolOutput"`
		UpdatedMCPToolOutput json.RawMessage `json:"updatedMCPToolOutput"`
	} `json:"hookSpecificOutput"`
}

// answer is one hook's answer, read.
type answer struct {
	decision string // PreToolUse: allow, deny, ask; PostToolUse: block; "" none
	reason   string
	input    map[string]any
	context  string
	output   *tool.Result // PostToolUse: the result that replaces the tool's
	message  string       // systemMessage: for the people, a note
}

// read turns a hook's stdout (exit code 0) into its answer. Plain text is
// no answer (Claude Code shows it in its transcript only).
func read(event string, stdout []byte) (answer, error) {
	s := bytes.TrimSpace(stdout)
	if len(s) == 0 || s[0] != '{' {
		return answer{}, nil
	}
	var o output
	if err := json.Unmarshal(s, &o); err != nil {
		return answer{}, err
	}
	a := answer{message: o.SystemMessage}
	switch o.Decision {
	case "block":
		a.decision, a.reason = "block", o.Reason
		if event == PreToolUse {
			a.decision = "deny"
		}
	case "approve":
		if event == PreToolUse {
			a.decision, a.reason = "allow", o.Reason
		}
	case "":
	default:
		return answer{}, fmt.Errorf("decision %q: want block", o.Decision)
	}
	if sp := o.Specific; sp != nil {
		switch sp.PermissionDecision {
		case "allow", "deny", "ask":
			if event == PreToolUse {
				a.decision, a.reason = sp.PermissionDecision, sp.PermissionDecisionReason
			}
		case "":
		default:
			return answer{}, fmt.Errorf("permissionDecision %q: want allow, deny or ask", sp.PermissionDecision)
		}
		if event == PreToolUse {
			a.input = sp.UpdatedInput
		}
		a.context = sp.AdditionalContext
		if event == PostToolUse {
			out := sp.UpdatedToolOutput
			if len(out) == 0 {
				out = sp.UpdatedMCPToolOutput
			}
			if len(out) > 0 {
				r, err := replacement(out)
				if err != nil {
					return answer{}, fmt.Errorf("updatedToolOutput: %w", err)
				}
				a.output = r
			}
		}
	}
	if o.Continue != nil && !*o.Continue {
		// "Stop": toolmux has no session of the model's to stop; the
		// call is what it can stop.
		a.decision, a.reason = "deny", o.StopReason
		if event == PostToolUse {
			a.decision = "block"
		}
		if a.reason == "" {
			a.reason = "the hook said not to continue"
		}
	}
	return a, nil
}

// replacement reads a PostToolUse's updatedToolOutput: an MCP result
// (an object with content), a list of content parts, a string (one text
// part), or any other JSON value (its text as one part).
func replacement(raw json.RawMessage) (*tool.Result, error) {
	raw = bytes.TrimSpace(raw)
	switch raw[0] {
	case '{':
		var probe struct {
			Content *json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(raw, &probe); err != nil {
			return nil, err
		}
		if probe.Content != nil {
			var r tool.Result
			if err := json.Unmarshal(raw, &r); err != nil {
				return nil, err
			}
			return &r, nil
		}
	case '[':
		var parts []tool.Content
		if err := json.Unmarshal(raw, &parts); err != nil {
			return nil, err
		}
		return &tool.Result{Content: parts}, nil
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		return tool.TextResult(s), nil
	}
	return tool.TextResult(string(raw)), nil
}

// capped keeps the first max bytes written to it and notes that more came.
type capped struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); len(p) > room {
		c.over = true
		p = p[:max(room, 0)]
	}
	c.buf.Write(p)
	return len(p), nil
}

// waitDelay bounds how long the output of a command is waited for once
// its group is killed (a grandchild that left the group may hold a pipe).
const waitDelay = 2 * time.Second

// runCommand runs one command hook with in on stdin: its answer, or the
// reason to block it (exit code 2: stderr), or its failure.
func (h *Hooks) runCommand(ctx context.Context, event string, c Command, in []byte) (answer, *Error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	timeout = min(timeout, h.o.MaxTimeout)
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	fail := func(k Kind, err error, format string, args ...any) (answer, *Error) {
		return answer{}, &Error{Kind: k, Event: event, Hook: "hook " + c.Command, Err: err, Message: fmt.Sprintf(format, args...)}
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", c.Command)
	cmd.Dir = h.o.Dir
	cmd.Env = h.env
	cmd.Stdin = bytes.NewReader(in)
	stdout, stderr := &capped{max: h.o.MaxOutputBytes}, &capped{max: h.o.MaxOutputBytes}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// A group of its own, killed whole on timeout: a hook's pipeline
	// (jq, python) must not outlive it.
	procgroup.Setup(cmd)
	cmd.Cancel = func() error {
		procgroup.Kill(cmd.Process.Pid)
		return nil
	}
	cmd.WaitDelay = waitDelay
	if err := cmd.Start(); err != nil {
		return fail(KindStart, err, "cannot start: %v", err)
	}
	err := cmd.Wait()
	// Whatever it left behind goes with it.
	procgroup.Kill(cmd.Process.Pid)
	if err := parent.Err(); err != nil {
		// The call ended first (its client went away): its own error
		// says so; the hook was stopped, not late.
		return fail(KindTimeout, err, "stopped: the call ended")
	}
	if ctx.Err() != nil {
		return fail(KindTimeout, ctx.Err(), "killed after %s", timeout)
	}
	if stdout.over || stderr.over {
		return fail(KindOutputTooLarge, nil, "wrote more than %d bytes", h.o.MaxOutputBytes)
	}
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return fail(KindExit, err, "%v", err)
		}
		code = ee.ExitCode()
		if c, sig := procgroup.ExitStatus(ee.ProcessState); sig != 0 {
			return fail(KindExit, err, "killed by %s", procgroup.SignalName(sig))
		} else {
			code = c
		}
	}
	switch code {
	case 0:
		a, err := read(event, stdout.buf.Bytes())
		if err != nil {
			return fail(KindBadOutput, err, "answered what is not a hook's JSON: %v", err)
		}
		return a, nil
	case 2:
		reason := strings.TrimSpace(stderr.buf.String())
		if reason == "" {
			reason = "exit code 2"
		}
		d := "deny"
		if event == PostToolUse {
			d = "block"
		}
		return answer{decision: d, reason: reason}, nil
	}
	return fail(KindExit, err, "exit code %d: %s", code, strings.TrimSpace(stderr.buf.String()))
}

// askGuardrail POSTs in to g and reads its answer as a hook's stdout.
func (h *Hooks) askGuardrail(ctx context.Context, event string, g *Guardrail, in []byte) (answer, *Error) {
	timeout := g.Timeout
	if timeout <= 0 {
		timeout = DefaultGuardrailTimeout
	}
	timeout = min(timeout, h.o.MaxTimeout)
	limit := g.MaxResponseBytes
	if limit <= 0 {
		limit = h.o.MaxOutputBytes
	}
	fail := func(k Kind, err error, format string, args ...any) (answer, *Error) {
		return answer{}, &Error{Kind: k, Event: event, Hook: "guardrail " + g.Name, Err: err, Message: fmt.Sprintf(format, args...)}
	}
	// Nothing of the caller's request is forwarded: the body is the
	// hook's input, the headers the configured ones.
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.URL, bytes.NewReader(in))
	if err != nil {
		return fail(KindUnavailable, err, "bad url")
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range g.Headers {
		req.Header.Set(k, v)
	}
	resp, err := h.o.Client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fail(KindTimeout, ctx.Err(), "no answer within %s", timeout)
		}
		// The URL error names the address, never the headers.
		return fail(KindUnavailable, err, "cannot be reached: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	if err != nil {
		if ctx.Err() != nil {
			return fail(KindTimeout, ctx.Err(), "no whole answer within %s", timeout)
		}
		return fail(KindUnavailable, err, "answer cut: %v", err)
	}
	if len(body) > limit {
		return fail(KindOutputTooLarge, nil, "answered more than %d bytes", limit)
	}
	if resp.StatusCode/100 != 2 {
		return fail(KindUnavailable, nil, "answered %s", resp.Status)
	}
	a, rerr := read(event, body)
	if rerr != nil {
		return fail(KindBadOutput, rerr, "answered what is not a hook's JSON: %v", rerr)
	}
	return a, nil
}

// verdict is what the hooks of one event said of a call, together.
type verdict struct {
	decision string // the strongest: deny (block) > ask > allow
	by       string // the hook whose decision it is
	reason   string
	input    map[string]any
	context  []string
	output   *tool.Result // PostToolUse: the result that replaces the tool's
	outputBy string       // the hook that replaced it
	notes    []string
	err      *Error // the failure that decided, when one did
}

// run runs the hooks and guardrails of event that match the call, in
// order, each seeing the arguments the previous ones rewrote. The first
// deny or block ends the run.
func (h *Hooks) run(ctx context.Context, event string, ms []matcher, call tool.Call, result *tool.Result, mode string) verdict {
	var v verdict
	name := exposed(call)
	in := input{SessionID: call.Task, Cwd: h.o.Dir, PermissionMode: mode, HookEventName: event, ToolName: name,
		ToolInput: call.Arguments, ToolUseID: call.ID, ToolResponse: result}
	if in.ToolInput == nil {
		in.ToolInput = map[string]any{}
	}
	for _, m := range ms {
		if !m.match(name) {
			continue
		}
		n := len(m.commands)
		if m.guardrail != nil {
			n = 1
		}
		for i := range n {
			body, err := json.Marshal(in)
			if err != nil {
				v.notes = append(v.notes, fmt.Sprintf("%s hooks: the call cannot be described in JSON: %v", event, err))
				return v
			}
			var (
				a    answer
				herr *Error
				open bool
			)
			if g := m.guardrail; g != nil {
				a, herr = h.askGuardrail(ctx, event, g, body)
				open = g.Fail == FailOpen
			} else {
				a, herr = h.runCommand(ctx, event, m.commands[i], body)
				open = h.o.OnError == Continue
			}
			if herr != nil {
				if open {
					v.notes = append(v.notes, herr.Error()+"; the call went on")
					continue
				}
				v.decision, v.by, v.reason, v.err = "deny", herr.Hook, herr.Error(), herr
				if event == PostToolUse {
					v.decision = "block"
				}
				return v
			}
			by := m.hookName(i)
			if a.message != "" {
				v.notes = append(v.notes, by+": "+a.message)
			}
			if a.context != "" {
				v.context = append(v.context, a.context)
			}
			if a.input != nil {
				in.ToolInput, v.input = a.input, a.input
				v.notes = append(v.notes, by+" rewrote the arguments")
			}
			if a.output != nil {
				in.ToolResponse, v.output, v.outputBy = a.output, a.output, by
				v.notes = append(v.notes, by+" replaced the result")
			}
			switch a.decision {
			case "deny", "block":
				v.decision, v.by, v.reason = a.decision, by, a.reason
				return v
			case "ask":
				v.decision, v.by, v.reason = "ask", by, a.reason
			case "allow":
				if v.decision == "" {
					v.decision, v.by, v.reason = "allow", by, a.reason
				}
			}
		}
	}
	return v
}

func (m matcher) hookName(i int) string {
	if m.guardrail != nil {
		return "guardrail " + m.guardrail.Name
	}
	return "hook " + m.commands[i].Command
}
