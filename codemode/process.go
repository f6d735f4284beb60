package codemode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/toolmux/toolmux/codemode/internal/wire"
	"github.com/toolmux/toolmux/internal/procgroup"
)

// EngineName is the engine program's name: make build builds it beside
// toolmux, and `go install github.com/toolmux/toolmux/cmd/...` installs it
// beside toolmux too.
const EngineName = "toolmux-codemode"

// grace is how long past its timeout a program's engine has to end it
// itself (and say so, with its console) before it is killed.
const grace = 2 * time.Second

// stderrTail bounds what is kept of the engine's standard error, told
// when the engine fails.
const stderrTail = 4 << 10

// FindEngine returns the engine program to run: path when it is set (an
// error when it is not an executable file), else toolmux-codemode beside
// the running program, else on PATH.
func FindEngine(path string) (string, error) {
	if path != "" {
		if err := executable(path); err != nil {
			return "", fmt.Errorf("code mode's engine %s: %w", path, err)
		}
		return path, nil
	}
	if self, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(self), EngineName)
		if executable(beside) == nil {
			return beside, nil
		}
	}
	if p, err := exec.LookPath(EngineName); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("code mode's engine %s is neither beside this program nor on PATH (make build builds it in bin/; or set code_mode.engine)", EngineName)
}

func executable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return nil
}

// Run runs code, the body of an async function, with a typed function for
// each of names (the exposed names of the tools the caller sees) beside
// tools.call, in an engine process of its own. The Result is never nil: a
// failed program's console and calls are in it too (unless its engine
// had to be killed).
func (r *Runner) Run(ctx context.Context, code string, names []string) (*Result, error) {
	res := &Result{}
	path, err := FindEngine(r.opts.Engine)
	if err != nil {
		return res, &Error{Kind: KindUnavailable, Message: err.Error()}
	}
	if p := r.opts.Programs; p != nil {
		if !p.take() {
			return res, &Error{Kind: KindMaxPrograms, Bound: "max_programs", Limit: int64(p.Max()),
				Message: "as many programs as that are running: this one was not started"}
		}
		defer p.release()
	}
	// The engine ends a program at its timeout itself; this context
	// ends the calls it is making then.
	ctx, cancel := context.WithTimeoutCause(ctx, r.opts.Timeout, errTimeUp)
	defer cancel()

	cmd := exec.Command(path)
	cmd.Env = []string{} // nothing of the host's environment
	cmd.Dir = os.TempDir()
	procgroup.Setup(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return res, &Error{Kind: KindUnavailable, Message: err.Error()}
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return res, &Error{Kind: KindUnavailable, Message: err.Error()}
	}
	stderr := &tail{max: stderrTail}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return res, &Error{Kind: KindUnavailable, Message: fmt.Sprintf("code mode's engine %s: %v", path, err)}
	}
	var once sync.Once
	kill := func() { once.Do(func() { procgroup.Kill(cmd.Process.Pid) }) }
	defer func() {
		kill()
		_ = cmd.Wait()
	}()
	// The caller gone, the engine is killed; at the program's time, the
	// engine is given grace to end it itself.
	stopCtx := context.AfterFunc(ctx, func() {
		if context.Cause(ctx) == errTimeUp {
			time.AfterFunc(grace, kill)
			return
		}
		kill()
	})
	defer stopCtx()

	s := &session{r: r, ctx: ctx, res: res, in: stdin,
		out: bufio.NewReader(stdout), max: r.opts.MaxMemoryBytes + int64(r.opts.MaxOutputBytes)}
	err = s.run(code, names)
	if err == nil || KindOf(err) != KindEngine {
		return res, err
	}
	// The engine went away without ending the program: why, if it was
	// not its own failure.
	kill()
	_ = cmd.Wait()
	switch {
	case context.Cause(ctx) == errTimeUp:
		return res, &Error{Kind: KindTimeout, Bound: "timeout", Limit: r.opts.Timeout.Milliseconds(), Message: "the program ran out of time"}
	case ctx.Err() != nil:
		return res, &Error{Kind: KindCancelled, Message: "the program's caller went away"}
	}
	e := err.(*Error)
	if st := cmd.ProcessState; st != nil && !st.Success() {
		e.Message += " (" + st.String() + ")"
	}
	if t := bytes.TrimSpace(stderr.bytes()); len(t) > 0 {
		e.Message += ": " + string(t)
	}
	return res, e
}

// errTimeUp is the cause of a program's context ending at its timeout
// (and not at its caller's deadline).
var errTimeUp = errors.New("code mode: the program ran out of time")

// session is the runner's side of one engine process.
type session struct {
	r   *Runner
	ctx context.Context
	res *Result
	in  io.WriteCloser
	out *bufio.Reader
	max int64 // bytes of a line from the engine
}

// run sends the program, answers its calls, and reads its end.
func (s *session) run(code string, names []string) error {
	o := s.r.opts
	if err := s.send(wire.Request{Code: code, Names: names, TimeoutMS: o.Timeout.Milliseconds(),
		MaxCalls: o.MaxCalls, MaxOutputBytes: o.MaxOutputBytes, MaxMemoryBytes: o.MaxMemoryBytes}); err != nil {
		return err
	}
	for {
		line, err := readLine(s.out, s.max)
		if errors.Is(err, errLineTooLong) {
			return &Error{Kind: KindMaxMemory, Bound: "max_memory_bytes", Limit: o.MaxMemoryBytes,
				Message: fmt.Sprintf("the program sent a message longer than %d bytes", s.max)}
		}
		if err != nil {
			return &Error{Kind: KindEngine, Message: "the engine ended before the program did"}
		}
		var m wire.FromEngine
		if err := json.Unmarshal(line, &m); err != nil {
			return &Error{Kind: KindEngine, Message: "the engine wrote what is not code mode's protocol: " + err.Error()}
		}
		switch {
		case m.Done != nil:
			s.res.Value, s.res.Console, s.res.Calls = m.Done.Value, m.Done.Console, m.Done.Calls
			if e := m.Done.Error; e != nil {
				return &Error{Kind: Kind(e.Kind), Bound: e.Bound, Limit: e.Limit, ToolKind: e.ToolKind, Message: e.Message}
			}
			return nil
		case m.Call != nil:
			// The engine counts its calls against the bound; this count
			// holds it should the engine not.
			if s.res.Calls++; s.res.Calls > o.MaxCalls {
				return &Error{Kind: KindMaxCalls, Bound: "max_calls", Limit: int64(o.MaxCalls),
					Message: fmt.Sprintf("call %d (%s) is one too many", s.res.Calls, m.Call.Name)}
			}
			var rep wire.Reply
			rep.Value, rep.Error = outcomeJSON(m.Call.Name, s.r.caller.Call(s.ctx, m.Call.Name, m.Call.Args))
			rep.TimeUp = context.Cause(s.ctx) == errTimeUp
			if err := s.send(rep); err != nil {
				return err
			}
		default:
			return &Error{Kind: KindEngine, Message: "the engine wrote a line that is neither a call nor the end"}
		}
	}
}

func (s *session) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return &Error{Kind: KindEngine, Message: err.Error()}
	}
	if _, err := s.in.Write(append(b, '\n')); err != nil {
		return &Error{Kind: KindEngine, Message: "the engine ended before the program did"}
	}
	return nil
}

var errLineTooLong = errors.New("line too long")

// readLine reads one line of at most max bytes, without its newline.
func readLine(r *bufio.Reader, max int64) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if int64(len(line)+len(chunk)) > max+1 {
			return nil, errLineTooLong
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return nil, err
		}
	}
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tail) bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return bytes.Clone(t.b)
}
