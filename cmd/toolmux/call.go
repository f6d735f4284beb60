package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

func (a *app) callCommand() *cobra.Command {
	var (
		asJSON  bool
		bypass  bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "call SERVER TOOL [ARGS_JSON | -]",
		Short: "Call one tool and print its result",
		Long: `Call one tool of one server. Name the tool as SERVER TOOL, or by the
name models and MCP clients see, SERVER__TOOL (as toolmux tools lists it).
Arguments are a JSON object, given inline or read from standard input with
"-"; without them the tool gets {}. Arguments nested deeper than
limits.max_depth (default 64) are refused (exit status 2).

The call goes through the governance pipeline configured in the
configuration's pipeline section (argument repair, schema validation, URL
policy, duplicate detection, fallbacks, truncation, rollback verdict,
instructions, redaction); --raw sends it straight to the server instead.

The policy decides first (see docs/policy.md): in the default approval mode
a tool that is not read-only needs approval. On a terminal you are asked;
otherwise (arguments on stdin, a script, CI) the call is refused with a
message saying how to allow it: --yes approves, --approval-mode picks
another mode (plan, default, auto_edit, yolo), or a policy rule in the
configuration allows the tool.

--timeout bounds the call itself, from when it starts to run: not the
server's start-up (bounded by connect_timeout) nor the time an approval
takes. A call that runs out of time fails with the kind timeout.

Prints what the model would see: the result's text (and a line describing
each non-text part), or a sentence explaining the failure. With --json,
prints the whole call record: server, tool, arguments (as sent, secrets
masked), result or error {kind, message}, duration_ms, attempts, notes
(what each middleware did) and verdict.

Exit status: 0 success, 1 the tool reported an error or the call failed,
2 usage or configuration error, 3 internal failure.`,
		Example: `  toolmux call builtin read_file '{"path": "README.md", "limit": 20}'
  toolmux call builtin__read_file '{"path": "README.md", "limit": 20}'
  echo '{"pattern": "TODO", "include": "*.go"}' | toolmux call builtin grep -
  toolmux call everything echo '{"message": "hi"}' --json
  toolmux call builtin shell '{"command": "go test ./..."}' --yes`,
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return usageError("name the tool to call: SERVER TOOL, or SERVER__TOOL as toolmux tools lists it")
			case len(args) > 3:
				return usageError("too many arguments (%d): give the tool's arguments as one JSON object, quoted, like '{\"path\": \"README.md\"}'", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.callTool(cmd.Context(), args, callFlags{json: asJSON, raw: bypass, timeout: timeout})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the whole call record as JSON")
	cmd.Flags().BoolVar(&bypass, "raw", false, "bypass the governance pipeline (the manager's rules and the policy still apply)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up on the call after this long, once it runs (default: the configured timeout; start-up is bounded by connect_timeout)")
	return cmd
}

// callFlags are the flags of `toolmux call`.
type callFlags struct {
	json, raw bool
	timeout   time.Duration
}

// callTarget is what the command line of `toolmux call` names: a tool,
// as SERVER TOOL or by its exposed name, and its arguments.
type callTarget struct {
	server, tool string
	exposed      string // set when the tool was named SERVER__TOOL
	args         string // the arguments as given: JSON, "-" (stdin) or ""
	hasArgs      bool
}

// target reads the command line of `toolmux call`. Two words are
// SERVER__TOOL and its arguments when the second is arguments (JSON or
// "-"), else SERVER TOOL.
func target(args []string) callTarget {
	switch len(args) {
	case 1:
		return callTarget{exposed: args[0]}
	case 2:
		if looksLikeArgs(args[1]) {
			return callTarget{exposed: args[0], args: args[1], hasArgs: true}
		}
		return callTarget{server: args[0], tool: args[1]}
	}
	return callTarget{server: args[0], tool: args[1], args: args[2], hasArgs: true}
}

// looksLikeArgs reports whether a word is arguments rather than a tool
// name: "-", or JSON (no tool name starts with {, [ or ").
func looksLikeArgs(s string) bool {
	s = strings.TrimSpace(s)
	return s == "-" || strings.HasPrefix(s, "{") || strings.HasPrefix(s, "[") || strings.HasPrefix(s, `"`)
}

func (a *app) callTool(ctx context.Context, args []string, f callFlags) error {
	tg := target(args)
	label := tg.server + "/" + tg.tool
	if tg.exposed != "" {
		label = tg.exposed
	}
	// The spinner starts when the call starts executing, so it never
	// draws over an approval prompt.
	sp := &lazySpinner{w: a.stderr, label: label}
	// The scheduler drives the pipeline, or the manager alone with --raw,
	// each call bounded by --timeout; its events only start the spinner.
	var backend schedule.Backend
	rt, err := a.open(ctx, toolmux.Options{NoEvents: true, NoAgents: true, Approver: a.approver(tg.args != "-"),
		Sinks: []schedule.Sink{schedule.SinkFunc(func(e schedule.Event) {
			if e.Type == schedule.EventState && e.State == schedule.Executing {
				sp.start()
			}
		})},
		Backend: func(rt *toolmux.Runtime) schedule.Backend {
			backend = rt.Pipeline
			if f.raw {
				backend = rt.Manager
				if rt.Pins != nil {
					// --raw bypasses the pipeline's rewriting, not its
					// checks of what a server may do: a held tool stays
					// held.
					backend = handlerBackend{Backend: rt.Manager, h: pipeline.Chain(rt.Manager, rt.Pins.Middleware(rt.Manager))}
				}
			}
			if f.timeout > 0 {
				backend = timeoutBackend{Backend: backend, d: f.timeout}
			}
			return backend
		}})
	if err != nil {
		return err
	}
	defer closeRuntime(ctx, rt)
	if slices.Contains(rt.Manager.Servers(), tg.exposed) {
		return usageError("%s is a server: name one of its tools too, as in toolmux call %s TOOL (toolmux tools lists them)", tg.exposed, tg.exposed)
	}
	var raw []byte
	switch {
	case tg.args == "-":
		b, err := io.ReadAll(a.stdin)
		if err != nil {
			return usageError("reading arguments from stdin: %v", err)
		}
		raw = b
	case tg.hasArgs:
		raw = []byte(tg.args)
	}
	callArgs, err := parseArgs(raw)
	if err != nil {
		return &exitError{code: exitUsage, usage: true, err: err}
	}
	if e := tool.CheckDepth(callArgs, rt.Config.Limits.MaxDepth); e != nil {
		// Checked here too, so that --raw, which bypasses the pipeline's
		// own check, is bounded as well.
		return &exitError{code: exitUsage, err: fmt.Errorf("%s: %s", e.Kind, e.Message)}
	}
	// An exposed name is resolved before the call, so that the servers it
	// takes to find it start under their connect timeouts, never under
	// --timeout.
	var unresolved *tool.Error
	if tg.exposed != "" {
		tg.server, tg.tool, unresolved = resolveExposed(ctx, rt.Manager, tg.exposed)
	}
	ctx = tool.WithProgress(ctx, sp.progress)
	s := rt.Scheduler
	call := tool.Call{Server: tg.server, Tool: tg.tool, Arguments: callArgs}
	if rt.Log != nil {
		// One command, one task in the log: `toolmux logs` lists it.
		call.Task = tool.NewID()
		// The arguments (inline or read from stdin) are left out: they
		// are in the call's record, with secrets and personal data masked
		// as the pipeline's redact and pii settings say, while the task's
		// input is stored as written.
		words := args
		if tg.hasArgs {
			words = args[:len(args)-1] // the arguments are the last word
		}
		input := "toolmux call " + strings.Join(words, " ")
		if err := rt.Log.StartTask(ctx, tasklog.Task{ID: call.Task, Input: input}); err != nil {
			fmt.Fprintln(a.stderr, "toolmux: task log:", taskLogMessage(err))
		}
	}
	var rec *tool.Record
	if unresolved != nil {
		rec = refuse(ctx, backend, call, unresolved)
	} else {
		rec = s.Call(ctx, call)
	}
	sp.stop()
	if rt.Log != nil {
		status, answer := tasklog.OneCallStatus(rec)
		if err := rt.Log.FinishTask(context.WithoutCancel(ctx), call.Task, status, answer); err != nil {
			fmt.Fprintln(a.stderr, "toolmux: task log:", taskLogMessage(err))
		}
	}

	if f.json {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rec); err != nil {
			return &exitError{code: exitInternal, err: err}
		}
	} else if rec.Error == nil || rec.Error.Kind == tool.KindToolError {
		printResult(a.stdout, rec)
	}
	if rec.Error != nil {
		if f.json {
			return &exitError{code: exitFailed, err: errors.New("")}
		}
		return &exitError{code: exitFailed, err: describe(rec.Error)}
	}
	return nil
}

// resolveExposed finds the server and tool an exposed name stands for.
// It first tries the configured servers the name starts with, listing
// only those; then the whole catalog, which also knows the shortened and
// hashed names. A name found nowhere is tool_not_registered, with the
// closest exposed name; the error comes back with a best guess of the
// server and tool, so that the refusal is recorded under them.
func resolveExposed(ctx context.Context, m *manager.Manager, name string) (server, toolName string, _ *tool.Error) {
	for _, srv := range m.Servers() {
		prefix := tool.Sanitize(srv) + tool.Separator
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok || rest == "" {
			continue
		}
		t, err := m.Tool(ctx, srv, rest)
		switch {
		case err == nil && t.Exposed == name:
			return srv, rest, nil
		case err != nil && tool.KindOf(err) != tool.KindToolNotRegistered && tool.ExposedName(srv, rest) == name:
			// Denied, disabled or down: the call says so, and is recorded.
			return srv, rest, nil
		}
	}
	server, toolName, found := strings.Cut(name, tool.Separator)
	if !found {
		server, toolName = "", name
	}
	cat, err := m.Tools(ctx)
	if err != nil {
		return server, toolName, tool.AsError(err)
	}
	if t, ok := cat.Lookup(name); ok {
		return t.Server, t.Name, nil
	}
	msg := fmt.Sprintf("no tool is exposed as %q (toolmux tools lists them; name a tool as SERVER__TOOL or SERVER TOOL)", name)
	if _, configured := cat.Server(server); found && !configured {
		msg = fmt.Sprintf("no tool is exposed as %q: no server named %q is configured (toolmux tools lists the tools)", name, server)
	}
	return server, toolName, &tool.Error{Kind: tool.KindToolNotRegistered, Server: server, Tool: toolName,
		Message: msg, Suggestion: cat.Suggest(name)}
}

// refuse makes the record of a call refused before it was made: the
// backend's, which records it, when it has Refuse (the pipeline).
func refuse(ctx context.Context, b schedule.Backend, call tool.Call, err *tool.Error) *tool.Record {
	if call.ID == "" {
		call.ID = tool.NewID()
	}
	if r, ok := b.(schedule.Refuser); ok {
		if rec := r.Refuse(ctx, call, err); rec != nil {
			return rec
		}
	}
	return tool.Refused(&call, err)
}

// timeoutBackend bounds each call it makes by d, from when the scheduler
// runs it: after the tool was found (its server started) and the call
// approved, so that --timeout is the call's own time.
// handlerBackend is a backend whose calls go through h.
type handlerBackend struct {
	schedule.Backend
	h pipeline.Handler
}

func (b handlerBackend) Call(ctx context.Context, call tool.Call) *tool.Record {
	return b.h.Call(ctx, call)
}

type timeoutBackend struct {
	schedule.Backend
	d time.Duration
}

// errCallTimeout is the cause of a call's end at --timeout.
type errCallTimeout time.Duration

func (e errCallTimeout) Error() string { return fmt.Sprintf("--timeout %s ran out", time.Duration(e)) }

func (b timeoutBackend) Call(ctx context.Context, call tool.Call) *tool.Record {
	ctx, cancel := context.WithTimeoutCause(ctx, b.d, errCallTimeout(b.d))
	defer cancel()
	return b.Backend.Call(ctx, call)
}

// Refuse passes refusals on to the backend when it records them; nil
// leaves the record to the scheduler.
func (b timeoutBackend) Refuse(ctx context.Context, call tool.Call, err *tool.Error) *tool.Record {
	if r, ok := b.Backend.(schedule.Refuser); ok {
		return r.Refuse(ctx, call, err)
	}
	return nil
}

// parseArgs decodes the arguments object. Numbers keep their exact text, so
// large integers reach the tool unchanged.
func parseArgs(raw []byte) (map[string]any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("arguments are not valid JSON: %v (at byte %d)", err, se.Offset)
		}
		return nil, fmt.Errorf("arguments are not valid JSON: %v", err)
	}
	if dec.More() {
		return nil, errors.New("arguments must be one JSON object; found more after it")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("arguments must be a JSON object like {\"key\": \"value\"}, not %s", jsonKind(v))
	}
	return obj, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// printResult prints what a model would see of a call that produced a
// result.
func printResult(w io.Writer, rec *tool.Record) {
	if out := pipeline.FormatText(rec); out != "" {
		fmt.Fprintln(w, out)
	}
}

// describe renders a call error for a person: kind, message, suggestion and
// diagnostics.
func describe(e *tool.Error) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", e.Kind, e.Message)
	if e.Suggestion != "" {
		fmt.Fprintf(&b, " (did you mean %q?)", e.Suggestion)
	}
	if e.Detail != "" {
		b.WriteString("\n")
		b.WriteString(indent(e.Detail, "  "))
	}
	return errors.New(b.String())
}
