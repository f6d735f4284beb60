package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

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
		Long: `Call one tool of one server. Arguments are a JSON object, given inline or
read from standard input with "-"; without them the tool gets {}. Arguments
nested deeper than limits.max_depth (default 64) are refused (exit status 2).

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

Prints what the model would see: the result's text (and a line describing
each non-text part), or a sentence explaining the failure. With --json,
prints the whole call record: server, tool, arguments (as sent, secrets
masked), result or error {kind, message}, duration_ms, attempts, notes
(what each middleware did) and verdict.

Exit status: 0 success, 1 the tool reported an error or the call failed,
2 usage or configuration error, 3 internal failure.`,
		Example: `  toolmux call builtin read_file '{"path": "README.md", "limit": 20}'
  echo '{"pattern": "TODO", "include": "*.go"}' | toolmux call builtin grep -
  toolmux call everything echo '{"message": "hi"}' --json
  toolmux call builtin shell '{"command": "go test ./..."}' --yes`,
		Args: cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			var raw []byte
			if len(args) == 3 {
				raw = []byte(args[2])
				if args[2] == "-" {
					b, err := io.ReadAll(a.stdin)
					if err != nil {
						return usageError("reading arguments from stdin: %v", err)
					}
					raw = b
				}
			}
			callArgs, err := parseArgs(raw)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			rt, err := a.open(cmd.Context(), true)
			if err != nil {
				return err
			}
			defer rt.Close()
			if e := tool.CheckDepth(callArgs, rt.config.Limits.MaxDepth); e != nil {
				// Checked here too, so that --raw, which bypasses the
				// pipeline's own check, is bounded as well.
				return &exitError{code: exitUsage, err: fmt.Errorf("%s: %s", e.Kind, e.Message)}
			}
			var backend schedule.Backend = rt.pipeline
			if bypass {
				backend = rt.manager
			}
			approver := a.approver(len(args) < 3 || args[2] != "-")

			ctx := cmd.Context()
			if timeout > 0 {
				var cancel func()
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			// The spinner starts when the call starts executing, so it
			// never draws over an approval prompt.
			sp := &lazySpinner{w: a.stderr, label: args[0] + "/" + args[1]}
			ctx = tool.WithProgress(ctx, sp.progress)
			s := schedule.New(backend, schedule.WithGate(rt.gate(approver, false, a.logger())),
				schedule.WithSink(schedule.SinkFunc(func(e schedule.Event) {
					if e.Type == schedule.EventState && e.State == schedule.Executing {
						sp.start()
					}
				})))
			call := tool.Call{Server: args[0], Tool: args[1], Arguments: callArgs}
			if rt.log != nil {
				// One command, one task in the log: `toolmux logs` lists it.
				call.Task = tool.NewID()
				input := "toolmux call " + args[0] + " " + args[1]
				if len(args) == 3 && args[2] != "-" {
					input += " " + args[2]
				}
				if err := rt.log.StartTask(ctx, tasklog.Task{ID: call.Task, Input: input}); err != nil {
					fmt.Fprintln(a.stderr, "toolmux: task log:", err)
				}
			}
			rec := s.Call(ctx, call)
			sp.stop()
			if rt.log != nil {
				status, answer := tasklog.StatusSuccess, ""
				switch {
				case rec.Error == nil:
				case rec.Error.Kind == tool.KindCancelled:
					status, answer = tasklog.StatusCancelled, rec.Error.Message
				default:
					status, answer = tasklog.StatusFailed, string(rec.Error.Kind)+": "+rec.Error.Message
				}
				if err := rt.log.FinishTask(context.WithoutCancel(ctx), call.Task, status, answer); err != nil {
					fmt.Fprintln(a.stderr, "toolmux: task log:", err)
				}
			}

			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rec); err != nil {
					return &exitError{code: exitInternal, err: err}
				}
			} else if rec.Error == nil || rec.Error.Kind == tool.KindToolError {
				printResult(a.stdout, rec)
			}
			if rec.Error != nil {
				if asJSON {
					return &exitError{code: exitFailed, err: errors.New("")}
				}
				return &exitError{code: exitFailed, err: describe(rec.Error)}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the whole call record as JSON")
	cmd.Flags().BoolVar(&bypass, "raw", false, "bypass the governance pipeline (the manager's rules and the policy still apply)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (default: the configured timeout)")
	return cmd
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
