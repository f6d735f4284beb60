package builtin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/toolmux/toolmux/internal/procgroup"
	"github.com/toolmux/toolmux/tool"
)

// Live-output streams of shell, as passed to a [tool.OutputFunc].
const (
	// StreamPID carries the process id of the command, in decimal, as
	// the first event of every call, before any output: a UI can show it
	// and a person can signal the process while it runs.
	StreamPID = "pid"
	// StreamStdout carries chunks of the command's standard output.
	StreamStdout = "stdout"
	// StreamStderr carries chunks of the command's standard error.
	StreamStderr = "stderr"
)

// shellDrain is how long the output pipes are still read after the
// process group has ended. Output written before the end is already in the
// pipes and takes microseconds to read; the bound is for a process that
// left the group (setsid) but kept the pipes open, whose end would
// otherwise never come.
const shellDrain = 500 * time.Millisecond

// shellReadSize is the size of one read from an output pipe, and so the
// largest chunk a live-output callback receives.
const shellReadSize = 32 << 10

// detailTail is how much of the output so far a timeout error quotes.
const detailTail = 1000

func (s *Source) shellTool() tool.Tool {
	return tool.Tool{
		Server: ServerName,
		Name:   Shell,
		Title:  "Run shell command",
		Description: fmt.Sprintf(`Runs a command with %s -c and returns its exit code and output (stdout and stderr interleaved as they were read). The working directory is cwd, which must be inside the workspace (default: the workspace root, %s); the command itself is not confined and runs with the user's permissions and environment. Stdin is empty (/dev/null): commands that ask for input fail, so pass flags such as --yes or -y, and disable pagers (git --no-pager).
A command that writes no output for %s is killed, as is one that runs longer than timeout_ms (default %s, at most %s). When the command finishes, any process it left running in the background is killed too: to start a server that must keep running, use setsid with its output redirected to a file (setsid cmd > server.log 2>&1 &).
A non-zero exit code is reported as an error result with the output. Output over %s is cut to its beginning and end, and the whole output is saved to a file whose path the result gives.
Prefer read_file, glob, grep, write_file and edit for reading, finding and changing files.`,
			shellPath(), s.ws.root, s.limits.shellInactivity, s.limits.shellTimeout, s.limits.shellMaxTimeout, size(int64(s.limits.shellMaxOutput))),
		InputSchema: objectSchema(map[string]any{
			"command": map[string]any{
				"type":        "string",
				"description": "The command line, run by the shell: pipes, redirections, && and ; work.",
			},
			"cwd": map[string]any{
				"type":        "string",
				"description": "The directory to run the command in: relative to the workspace root, or absolute inside it. Defaults to the workspace root.",
			},
			"timeout_ms": map[string]any{
				"type":        "integer",
				"minimum":     1,
				"description": fmt.Sprintf("The time limit in milliseconds (default %d, at most %d). The command and everything it started are killed when it passes.", s.limits.shellTimeout.Milliseconds(), s.limits.shellMaxTimeout.Milliseconds()),
			},
		}, "command"),
		Annotations: tool.Annotations{
			Title:       "Run shell command",
			ReadOnly:    tool.Bool(false),
			Destructive: tool.Bool(true),
			Idempotent:  tool.Bool(false),
			OpenWorld:   tool.Bool(true),
		},
	}
}

// shellPath is the shell commands run with: bash, which models write for,
// or sh where there is no bash (a minimal container).
func shellPath() string {
	if fi, err := os.Stat("/bin/bash"); err == nil && !fi.IsDir() {
		return "/bin/bash"
	}
	return "/bin/sh"
}

func (s *Source) shell(ctx context.Context, a args) (*tool.Result, error) {
	if err := a.Check("command", "cwd", "timeout_ms"); err != nil {
		return nil, err
	}
	if !shellSupported {
		return nil, &tool.Error{Kind: tool.KindToolError, Message: "shell is not supported on this operating system"}
	}
	command, _, err := a.String("command", true)
	if err != nil {
		return nil, err
	}
	if strings.IndexByte(command, 0) >= 0 {
		return nil, a.Invalid("argument \"command\" contains a NUL byte, which a command line cannot contain")
	}
	if strings.TrimSpace(command) == "" {
		return nil, a.Invalid("argument \"command\" is blank; give the command to run")
	}
	dir, p, err := s.pathArg(a, "cwd", false)
	if err != nil {
		return nil, err
	}
	ms, hasTimeout, err := a.Int("timeout_ms", 1)
	if err != nil {
		return nil, err
	}
	timeout, lowered := s.limits.shellTimeout, false
	if hasTimeout {
		// Compare in milliseconds: a huge timeout_ms would overflow a
		// Duration.
		if max := s.limits.shellMaxTimeout.Milliseconds(); int64(ms) > max {
			timeout, lowered = s.limits.shellMaxTimeout, true
		} else {
			timeout = time.Duration(ms) * time.Millisecond
		}
	}
	r, err := s.ws.open()
	if err != nil {
		return nil, err
	}
	fi, err := r.Stat(dir.rel)
	r.Close()
	if err != nil {
		return nil, fsError("cwd", p, err)
	}
	if !fi.IsDir() {
		return nil, &tool.Error{Kind: tool.KindInvalidParams,
			Message: fmt.Sprintf("cwd %q is a file, not a directory", p)}
	}

	run, err := s.runShell(ctx, command, dir, timeout)
	if err != nil {
		return nil, err
	}
	return run.result(dir, timeout, lowered), nil
}

// shellRun is the outcome of one command.
type shellRun struct {
	pid   int
	state *os.ProcessState
	out   *capture
}

// Why a command was stopped.
const (
	stopNone = iota
	stopCancelled
	stopTimeout
	stopInactive
)

// runShell runs command in dir and waits for it and its process group to
// end. The command runs in a process group of its own, so that the whole
// tree it starts can be signalled at once; it is stopped when ctx is done,
// when it runs past timeout, or when it is silent for longer than the
// inactivity limit, and every process left in its group is killed when it
// ends. Every goroutine started here has ended when it returns.
func (s *Source) runShell(ctx context.Context, command string, dir location, timeout time.Duration) (*shellRun, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, &tool.Error{Kind: tool.KindExecutionFailed, Err: err, Message: fmt.Sprintf("cannot create a pipe: %v", err)}
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, &tool.Error{Kind: tool.KindExecutionFailed, Err: err, Message: fmt.Sprintf("cannot create a pipe: %v", err)}
	}
	// Files, not io.Writers, so the child writes to the pipes directly and
	// exec starts no copying goroutines of its own; Stdin nil is /dev/null.
	cmd := exec.Command(shellPath(), "-c", command)
	cmd.Dir = dir.abs
	cmd.Env = s.limits.shellEnv
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	// A group of its own, so that the command and everything it starts can
	// be signalled at once.
	procgroup.Setup(cmd)
	err = cmd.Start()
	// The child has its own copies; ours must go, or the pipes never end.
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, &tool.Error{Kind: tool.KindExecutionFailed, Err: err, Message: fmt.Sprintf("cannot start %s: %v", shellPath(), err)}
	}
	run := &shellRun{pid: cmd.Process.Pid, out: newCapture(s.limits.shellMaxOutput, s.spillDir())}
	emit := tool.OutputFrom(ctx)
	if emit != nil {
		emit(StreamPID, strconv.Itoa(run.pid))
	}

	start := time.Now()
	var lastOutput atomic.Int64 // time since start of the last output
	var readers sync.WaitGroup
	// The callback is called by one reader at a time: it was written for
	// "the goroutine that reads the output", and need not be safe for
	// concurrent use. Both readers have ended before Call returns, so no
	// chunk arrives after the result.
	var emitMu sync.Mutex
	read := func(f *os.File, stream string) {
		defer readers.Done()
		buf := make([]byte, shellReadSize)
		for {
			n, err := f.Read(buf)
			if n > 0 {
				lastOutput.Store(int64(time.Since(start)))
				run.out.write(buf[:n])
				if emit != nil {
					emitMu.Lock()
					emit(stream, string(buf[:n]))
					emitMu.Unlock()
				}
			}
			if err != nil {
				return
			}
		}
	}
	readers.Add(2)
	go read(outR, StreamStdout)
	go read(errR, StreamStderr)

	exited := make(chan struct{})
	go func() {
		// Wait's error only repeats what the ProcessState says.
		cmd.Wait()
		close(exited)
	}()

	overall := time.NewTimer(timeout)
	defer overall.Stop()
	idle := time.NewTimer(s.limits.shellInactivity)
	defer idle.Stop()
	stop := stopNone
wait:
	for {
		select {
		case <-exited:
			break wait
		case <-ctx.Done():
			stop = stopCancelled
			break wait
		case <-overall.C:
			stop = stopTimeout
			break wait
		case <-idle.C:
			quiet := time.Since(start) - time.Duration(lastOutput.Load())
			if quiet < s.limits.shellInactivity {
				idle.Reset(s.limits.shellInactivity - quiet)
				continue
			}
			stop = stopInactive
			break wait
		}
	}

	// A command that ended as its time ran out ended by itself: its result
	// is worth more than a timeout.
	if stop == stopTimeout || stop == stopInactive {
		select {
		case <-exited:
			stop = stopNone
		default:
		}
	}

	// Whatever ended the wait, nothing of the command outlives the call.
	s.endGroup(run.pid, exited)
	deadline := time.Now().Add(shellDrain)
	outR.SetReadDeadline(deadline)
	errR.SetReadDeadline(deadline)
	readers.Wait()
	outR.Close()
	errR.Close()
	run.state = cmd.ProcessState
	run.out.close()

	switch stop {
	case stopCancelled:
		return nil, ctx.Err()
	case stopTimeout:
		return nil, run.timeoutError(fmt.Sprintf("the command did not finish within %s (timeout_ms) and was killed with its process group (pid %d); if it needs longer, raise timeout_ms, or run it in the background with its output in a file", timeout, run.pid))
	case stopInactive:
		return nil, run.timeoutError(fmt.Sprintf("no output for %s: the command was killed with its process group (pid %d). Commands that wait for input fail here (stdin is /dev/null): pass flags that make them non-interactive", s.limits.shellInactivity, run.pid))
	}
	return run, nil
}

// spillDir is where long outputs are saved.
func (s *Source) spillDir() string {
	if s.limits.spillDir != "" {
		return s.limits.spillDir
	}
	return filepath.Join(os.TempDir(), "toolmux-shell")
}

// endGroup makes sure no process of the group pgid is left: it sends
// SIGTERM to the group, gives it the grace period to exit, and then sends
// SIGKILL. The group leader (the shell) is reaped by the goroutine that
// closes exited; endGroup returns only after that, so the call never leaves
// a zombie behind. A group that is already empty is not signalled.
func (s *Source) endGroup(pgid int, exited <-chan struct{}) {
	select {
	case <-exited:
		if !procgroup.AliveIgnoringZombies(pgid) {
			return
		}
	default:
	}
	procgroup.Signal(pgid, syscall.SIGTERM)
	grace := time.NewTimer(s.limits.shellKillGrace)
	defer grace.Stop()
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	leaderDone := false
	for {
		select {
		case <-exited:
			leaderDone = true
			exited = nil
		case <-poll.C:
		case <-grace.C:
			procgroup.Kill(pgid)
			if !leaderDone {
				// SIGKILL cannot be caught; only a process stuck in the
				// kernel could delay this.
				<-exited
			}
			return
		}
		if leaderDone && !procgroup.AliveIgnoringZombies(pgid) {
			return
		}
	}
}

// exitSignal names the signal that killed the process, if one did, as
// "SIGSEGV (segmentation fault)": the name people look up and the
// description that says what it means.
func exitSignal(ps *os.ProcessState) (string, bool) {
	_, sig := procgroup.ExitStatus(ps)
	if sig == 0 {
		return "", false
	}
	return fmt.Sprintf("%s (%s)", procgroup.SignalName(sig), sig), true
}

// timeoutError builds the error of a killed command, quoting the end of its
// output so the model can see where it stopped.
func (run *shellRun) timeoutError(msg string) error {
	if run.out.total > detailTail {
		run.out.saveAll()
	}
	detail := run.out.ending(detailTail)
	if detail != "" {
		detail = "Last output before the command was killed:\n" + detail
	} else {
		detail = "The command wrote no output."
	}
	if run.out.spillPath != "" {
		detail += "\n[the whole output is in " + run.out.spillPath + "]"
	}
	return &tool.Error{Kind: tool.KindTimeout, Message: msg, Detail: detail}
}

// result describes a command that ended by itself.
func (run *shellRun) result(dir location, timeout time.Duration, lowered bool) *tool.Result {
	var b strings.Builder
	structured := map[string]any{
		"pid":          run.pid,
		"cwd":          dir.display(),
		"output_bytes": run.out.total,
		"truncated":    run.out.truncated(),
	}
	failed := false
	if sig, ok := exitSignal(run.state); ok {
		fmt.Fprintf(&b, "Killed by signal %s.\n", sig)
		structured["exit_code"] = nil
		structured["signal"] = sig
		failed = true
	} else {
		code := run.state.ExitCode()
		fmt.Fprintf(&b, "Exit code: %d\n", code)
		structured["exit_code"] = code
		failed = code != 0
	}
	fmt.Fprintf(&b, "Directory: %s\nPID: %d\n", dir.display(), run.pid)
	if run.out.total == 0 {
		b.WriteString("Output: (none)")
	} else {
		b.WriteString("Output:\n")
		b.WriteString(run.out.text())
	}
	if run.out.spillPath != "" {
		structured["output_file"] = run.out.spillPath
	}
	if lowered {
		fmt.Fprintf(&b, "\n[timeout_ms was lowered to the maximum, %d]", timeout.Milliseconds())
	}
	res := tool.TextResult(b.String())
	res.Structured = structured
	res.IsError = failed
	return res
}

// capture keeps a command's output: all of it up to the limit, and past
// the limit its first and last halves in memory and the whole of it in a
// spill file. The two pipe readers write to it concurrently.
type capture struct {
	mu    sync.Mutex
	limit int
	dir   string
	// all is the whole output while it fits the limit; nil after.
	all []byte
	// head and tail are the first and last limit/2 bytes once it does not.
	head, tail []byte
	total      int64

	spill     *os.File
	spillPath string
	spillErr  error
}

func newCapture(limit int, dir string) *capture {
	return &capture{limit: limit, dir: dir, all: []byte{}}
}

func (c *capture) write(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += int64(len(p))
	if c.all != nil {
		if len(c.all)+len(p) <= c.limit {
			c.all = append(c.all, p...)
			return
		}
		// Past the limit: keep the beginning, and start the file with
		// everything before this chunk.
		c.openSpill(c.all)
		joined := append(c.all, p...)
		half := c.limit / 2
		c.head = slices.Clone(joined[:half])
		c.tail = slices.Clone(joined[half:])
		c.all = nil
	} else {
		c.tail = append(c.tail, p...)
	}
	if c.spill != nil {
		if _, err := c.spill.Write(p); err != nil {
			c.spillErr = err
			c.spill.Close()
			c.spill = nil
		}
	}
	// Trim only when the tail is twice its size, so that appending stays
	// linear in the output.
	if keep := c.tailKeep(); len(c.tail) > 2*keep {
		c.tail = slices.Clone(c.tail[len(c.tail)-keep:])
	}
}

// tailKeep is how many bytes of the end of a long output are kept.
func (c *capture) tailKeep() int { return c.limit - c.limit/2 }

// saveAll saves an output that fits the limit to a spill file, so that a
// timeout error, which quotes only its end, can point to the whole.
func (c *capture) saveAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.all == nil || c.spillPath != "" {
		return
	}
	c.openSpill(c.all)
	if c.spill != nil {
		if err := c.spill.Close(); err != nil {
			c.spillErr = err
		}
		c.spill = nil
	}
}

// openSpill creates the spill file and writes prefix to it.
func (c *capture) openSpill(prefix []byte) {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		c.spillErr = err
		return
	}
	f, err := os.CreateTemp(c.dir, "shell-*.log")
	if err != nil {
		c.spillErr = err
		return
	}
	c.spill, c.spillPath = f, f.Name()
	if _, err := f.Write(prefix); err != nil {
		c.spillErr = err
		f.Close()
		c.spill = nil
	}
}

// close ends the spill file.
func (c *capture) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.spill != nil {
		if err := c.spill.Close(); err != nil {
			c.spillErr = err
		}
		c.spill = nil
	}
}

func (c *capture) truncated() bool { return c.all == nil }

// text is the output for the result: all of it, or its beginning and end
// with a marker saying what was left out and where the whole is.
func (c *capture) text() string {
	if !c.truncated() {
		return strings.ToValidUTF8(string(c.all), "\uFFFD")
	}
	tail := c.tail[max(0, len(c.tail)-c.tailKeep()):]
	head := trimRunes(c.head, false)
	tail = trimRunes(tail, true)
	omitted := c.total - int64(len(head)) - int64(len(tail))
	where := "the whole output is in " + c.spillPath + " (read parts of it with grep, head, tail or sed)"
	switch {
	case c.spillPath == "":
		where = fmt.Sprintf("the whole output could not be saved: %v", c.spillErr)
	case c.spillErr != nil:
		where = fmt.Sprintf("saving the whole output to %s failed: %v", c.spillPath, c.spillErr)
	}
	return fmt.Sprintf("%s\n\n[... %d of %d bytes of output omitted; %s ...]\n\n%s",
		strings.ToValidUTF8(string(head), "\uFFFD"), omitted, c.total, where, strings.ToValidUTF8(string(tail), "\uFFFD"))
}

// ending returns up to n bytes of the end of the output.
func (c *capture) ending(n int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	buf := c.all
	if buf == nil {
		buf = c.tail
	}
	buf = trimRunes(buf[max(0, len(buf)-n):], true)
	return strings.TrimSpace(strings.ToValidUTF8(string(buf), "\uFFFD"))
}

// trimRunes drops the partial UTF-8 character a cut left at the start
// (atStart) or end of b, so the cut does not show as a replacement
// character. Bytes that were never valid UTF-8 are left for the caller.
func trimRunes(b []byte, atStart bool) []byte {
	if atStart {
		for i := 0; i < len(b) && i < utf8.UTFMax; i++ {
			if utf8.RuneStart(b[i]) {
				return b[i:]
			}
		}
		return b
	}
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			return b
		}
	}
	return b
}
