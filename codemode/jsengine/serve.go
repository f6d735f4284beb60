package jsengine

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/toolmux/toolmux/codemode"
	"github.com/toolmux/toolmux/codemode/internal/wire"
	"github.com/toolmux/toolmux/tool"
)

// Serve is the engine process's side of code mode's protocol: it reads a
// program from in, runs it, asking for each call on out and reading its
// reply from in, and writes the program's end. The runner that started
// the process is trusted; the program is not.
func Serve(ctx context.Context, in io.Reader, out io.Writer) error {
	r := bufio.NewReader(in)
	w := bufio.NewWriter(out)
	var req wire.Request
	if err := readJSON(r, &req); err != nil {
		return fmt.Errorf("reading the program: %w", err)
	}
	o := codemode.Options{Timeout: time.Duration(req.TimeoutMS) * time.Millisecond, MaxCalls: req.MaxCalls,
		MaxOutputBytes: req.MaxOutputBytes, MaxMemoryBytes: req.MaxMemoryBytes}
	// Ended by the runner when it says the program's time is up.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	call := func(ctx context.Context, name string, args map[string]any) (any, *tool.Error) {
		if err := writeJSON(w, wire.FromEngine{Call: &wire.Call{Name: name, Args: args}}); err != nil {
			return nil, &tool.Error{Kind: tool.KindCancelled, Tool: name, Message: "the runner went away"}
		}
		var rep wire.Reply
		if err := readJSON(r, &rep); err != nil {
			return nil, &tool.Error{Kind: tool.KindCancelled, Tool: name, Message: "the runner went away"}
		}
		if rep.TimeUp {
			cancel(errTimeUp)
		}
		if rep.Error != nil {
			return nil, rep.Error
		}
		var v any
		if len(rep.Value) > 0 {
			if err := json.Unmarshal(rep.Value, &v); err != nil {
				return nil, &tool.Error{Kind: tool.KindExecutionFailed, Tool: name, Message: "the result has no JSON form: " + err.Error()}
			}
		}
		return v, nil
	}
	res, err := Run(ctx, req.Code, req.Names, call, o)
	done := &wire.Done{Value: res.Value, Console: res.Console, Calls: res.Calls}
	if err != nil {
		e, ok := errors.AsType[*codemode.Error](err)
		if !ok {
			e = &codemode.Error{Kind: codemode.KindThrown, Message: err.Error()}
		}
		done.Error = &wire.Error{Kind: string(e.Kind), Bound: e.Bound, Limit: e.Limit, ToolKind: e.ToolKind, Message: e.Message}
	}
	return writeJSON(w, wire.FromEngine{Done: done})
}

// Caller is c as a Run's CallFunc, for a program run in the caller's own
// process.
func Caller(c codemode.Caller) CallFunc {
	return func(ctx context.Context, name string, args map[string]any) (any, *tool.Error) {
		return codemode.Outcome(name, c.Call(ctx, name, args))
	}
}

func readJSON(r *bufio.Reader, v any) error {
	line, err := r.ReadBytes('\n')
	if err != nil && (len(line) == 0 || !errors.Is(err, io.EOF)) {
		return err
	}
	return json.Unmarshal(line, v)
}

func writeJSON(w *bufio.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.Write(b)
	w.WriteByte('\n')
	return w.Flush()
}
