package cmdsource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/toolmux/toolmux/internal/procgroup"
)

// drainGrace is how long the output of a command that has ended is still
// read: a process outside its group (one that called setsid) may hold the
// pipes open forever, and must not hold the call with them.
const drainGrace = 500 * time.Millisecond

// errClosing stops the commands of a source that is being closed.
var errClosing = errors.New("the source was closed")

// output is what one run of a command left behind.
type output struct {
	stdout      []byte // the first MaxOutput bytes
	stdoutTotal int64
	stderr      []byte // the last MaxOutput bytes
	stderrTotal int64
	code        int            // exit status; -1 when killed by a signal
	signal      syscall.Signal // the signal that killed it, or 0
}

// truncated reports whether stdout was longer than what was kept.
func (o *output) truncated() bool { return o.stdoutTotal > int64(len(o.stdout)) }

// run runs argv in a process group of its own, with stdin (nil: /dev/null)
// as its input, and waits for it. When ctx ends or the source is closed
// first, it terminates the group — SIGTERM, KillGrace, SIGKILL — and
// returns why as stopped (ctx.Err() or errClosing) along with what the
// command printed until then (out is nil when ctx had ended before the
// start). Whatever the leader leaves behind in its
// group is killed when it exits: a call is one-shot, and a leftover process
// would hold the output pipes (and leak). err is set only when the command
// could not be started; out is nil then.
func (s *Source) run(ctx context.Context, argv []string, stdin []byte) (out *output, stopped, err error) {
	if err := s.track(); err != nil {
		return nil, nil, err
	}
	defer s.wg.Done()
	if err := ctx.Err(); err != nil {
		// Starting a command only to kill it at once helps nobody.
		return nil, err, nil
	}

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = s.cfg.Dir
	cmd.Env = append(os.Environ(), s.cfg.Env...)
	// A group of its own, so that everything the command starts (a shell's
	// pipelines, an interpreter's children) can be signalled together.
	procgroup.Setup(cmd)

	// The pipes are made here rather than by exec so that Wait does not
	// wait for them: the group is killed after the leader exits, and only
	// then is the rest of the output collected.
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		return nil, nil, err
	}
	var inR, inW *os.File
	if stdin != nil {
		if inR, inW, err = os.Pipe(); err != nil {
			closeAll(outR, outW, errR, errW)
			return nil, nil, err
		}
		cmd.Stdin = inR
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Start()
	// The child holds its own copies now; keeping only the parent's ends
	// lets EOF arrive once every process holding the other ends is gone.
	closeAll(outW, errW, inR)
	if err != nil {
		closeAll(outR, errR, inW)
		return nil, nil, err
	}
	pid := cmd.Process.Pid

	stdoutBuf := &headBuffer{limit: s.cfg.MaxOutput}
	stderrBuf := &tailBuffer{limit: s.cfg.MaxOutput}
	var pipes sync.WaitGroup
	pipes.Go(func() { copyAll(stdoutBuf, outR) })
	pipes.Go(func() { copyAll(stderrBuf, errR) })
	if inW != nil {
		pipes.Go(func() {
			// A command that exits without reading its input makes this
			// fail with EPIPE, which is its business, not an error.
			_, _ = inW.Write(stdin)
			_ = inW.Close()
		})
	}

	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	select {
	case <-exited:
	case <-ctx.Done():
		stopped = ctx.Err()
	case <-s.closing.Done():
		stopped = errClosing
	}
	if stopped != nil {
		select {
		case <-exited:
			// It finished just as it was stopped: its answer stands.
			stopped = nil
		default:
			s.terminate(pid, exited)
		}
	}
	procgroup.Kill(pid)

	drained := make(chan struct{})
	go func() {
		pipes.Wait()
		close(drained)
	}()
	t := time.NewTimer(drainGrace)
	select {
	case <-drained:
	case <-t.C:
		// Closing our ends unblocks the copiers (and a writer stuck on a
		// stdin nobody reads).
		closeAll(outR, errR, inW)
		<-drained
	}
	t.Stop()
	closeAll(outR, errR, inW)

	out = &output{
		stdout: stdoutBuf.b, stdoutTotal: stdoutBuf.total,
		stderr: stderrBuf.bytes(), stderrTotal: stderrBuf.total,
	}
	out.code, out.signal = procgroup.ExitStatus(cmd.ProcessState)
	return out, stopped, nil
}

// terminate asks the group to end, then makes it, and returns once the
// leader has been reaped.
func (s *Source) terminate(pid int, exited <-chan struct{}) {
	procgroup.Signal(pid, syscall.SIGTERM)
	t := time.NewTimer(s.cfg.KillGrace)
	defer t.Stop()
	select {
	case <-exited:
	case <-t.C:
		procgroup.Kill(pid)
		<-exited
	}
}

func copyAll(w io.Writer, r io.Reader) { _, _ = io.Copy(w, r) }

func closeAll(files ...*os.File) {
	for _, f := range files {
		if f != nil {
			_ = f.Close()
		}
	}
}

// headBuffer keeps the first limit bytes written to it and counts the rest:
// the start of a result is what a caller can use.
type headBuffer struct {
	b     []byte
	limit int
	total int64
}

func (h *headBuffer) Write(p []byte) (int, error) {
	h.total += int64(len(p))
	if room := h.limit - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// tailBuffer keeps the last limit bytes written to it: the end of stderr is
// where the error is. It grows only as far as the output does, unlike a
// ring allocated up front, since most commands print little or nothing.
type tailBuffer struct {
	b     []byte
	limit int
	total int64
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.total += int64(len(p))
	t.b = append(t.b, p...)
	if len(t.b) > 2*t.limit {
		// Copied, so the dropped head is freed.
		t.b = append([]byte(nil), t.b[len(t.b)-t.limit:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) bytes() []byte {
	if len(t.b) > t.limit {
		return t.b[len(t.b)-t.limit:]
	}
	return t.b
}

// quoteBytes bounds each stream quoted in an error. Both fit in the 1500
// characters of detail a model is shown of a failed call.
const quoteBytes = 700

// quoteOutput quotes both streams of a command for an error's detail,
// bounded: a long stream shows its head and its (longer) tail, since the
// start of stdout and the end of stderr are usually what explains a
// failure.
func quoteOutput(o *output) string {
	var b strings.Builder
	quoteStream(&b, "stdout", o.stdout, o.stdoutTotal, false)
	b.WriteByte('\n')
	quoteStream(&b, "stderr", o.stderr, o.stderrTotal, true)
	return b.String()
}

// quoteStream writes one stream. kept is what was captured of it: its
// first bytes, or its last when tail is set.
func quoteStream(b *strings.Builder, label string, kept []byte, total int64, tail bool) {
	text := strings.TrimRight(string(kept), "\n")
	lost := total > int64(len(kept))
	switch {
	case total == 0:
		fmt.Fprintf(b, "%s: (empty)", label)
		return
	case strings.TrimSpace(text) == "" && !lost:
		fmt.Fprintf(b, "%s: (%d bytes of white space)", label, total)
		return
	case len(text) <= quoteBytes && !lost:
		fmt.Fprintf(b, "%s:\n%s", label, strings.ToValidUTF8(text, "\uFFFD"))
		return
	}
	parts := []string{text}
	if len(text) > quoteBytes {
		parts = []string{
			text[:cutBefore(text, quoteBytes/4)],
			"[…]",
			text[cutAfter(text, len(text)-(quoteBytes-quoteBytes/4)):],
		}
	}
	if lost && tail {
		parts = append([]string{"[…]"}, parts...)
	} else if lost {
		parts = append(parts, "[…]")
	}
	fmt.Fprintf(b, "%s (%d bytes, shown in part):\n%s", label, total, strings.ToValidUTF8(strings.Join(parts, "\n"), "\uFFFD"))
}

// cutBefore moves i back to the start of a UTF-8 sequence.
func cutBefore(s string, i int) int {
	i = min(max(i, 0), len(s))
	for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}

// cutAfter moves i forward to the start of a UTF-8 sequence.
func cutAfter(s string, i int) int {
	i = min(max(i, 0), len(s))
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return i
}

// commandLine shows argv as a shell would take it, bounded, for messages.
func commandLine(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		parts[i] = shellQuote(a)
	}
	s := strings.Join(parts, " ")
	if len(s) > 200 {
		s = s[:cutBefore(s, 199)] + "…"
	}
	return s
}

func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-./:=@%+,", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
