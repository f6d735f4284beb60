package mcpsource

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/toolmux/toolmux/internal/procgroup"
	"github.com/toolmux/toolmux/internal/ringbuf"
)

// process is one stdio server process and its process group.
type process struct {
	cmd    *exec.Cmd
	pid    int
	stdin  *os.File // write end of the stdin pipe
	stderr *os.File // read end of the stderr pipe
	// exited is closed once the process has been reaped; state and waitErr
	// are valid after that.
	exited     chan struct{}
	state      *os.ProcessState
	waitErr    error
	stderrDone chan struct{}
}

// startProcess starts cmd in its own process group with pipes for stdin and
// stdout, copying stderr into ring. It returns the parent's ends of stdin and
// stdout.
func startProcess(cmd *exec.Cmd, ring *ringbuf.Buffer) (*process, io.WriteCloser, io.ReadCloser, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, nil, nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, nil, nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	// A group of its own, so that everything the server starts (npx starts
	// node, shells start pipelines) can be signalled together.
	procgroup.Setup(cmd)
	err = cmd.Start()
	// The child holds its own copies now; the parent keeps only its ends, so
	// that EOF arrives when the child (and every process it started) is gone.
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return nil, nil, nil, err
	}
	p := &process{
		cmd:        cmd,
		pid:        cmd.Process.Pid,
		stdin:      inW,
		stderr:     errR,
		exited:     make(chan struct{}),
		stderrDone: make(chan struct{}),
	}
	go func() {
		defer close(p.stderrDone)
		_, _ = io.Copy(ring, errR)
	}()
	go func() {
		p.waitErr = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.exited)
		// The leader is gone: whatever it started is orphaned. Killing the
		// group makes them release the pipes, so the session sees EOF.
		procgroup.Kill(p.pid)
	}()
	return p, inW, outR, nil
}

// closeStdin closes the write end of the process's stdin. A write blocked
// on a full pipe, because the server stopped reading, fails at once: the
// session's writes take no deadline, so this is what frees them.
func (p *process) closeStdin() { _ = p.stdin.Close() }

// stop ends the process politely, then less so: the caller has already closed
// stdin, which well-behaved servers take as the signal to exit; after grace
// the group gets SIGTERM, after another grace SIGKILL. It returns once the
// process has been reaped and its stderr drained.
func (p *process) stop(grace time.Duration) {
	select {
	case <-p.exited:
	case <-time.After(grace):
		procgroup.Signal(p.pid, syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(grace):
			procgroup.Kill(p.pid)
			<-p.exited
		}
	}
	procgroup.Kill(p.pid)
	// A process outside the group may still hold stderr (a daemonised
	// grandchild); give the copier a moment to take the last words, then cut.
	select {
	case <-p.stderrDone:
	case <-time.After(500 * time.Millisecond):
		p.stderr.Close()
		<-p.stderrDone
	}
	p.stderr.Close()
}

// drainStderr waits, at most max, for the stderr copier to take the last
// of what an exited process wrote: its last words are what an error about
// it must quote, and the copier may not have run yet when the exit is seen.
// A grandchild holding stderr open is why the wait is bounded.
func (p *process) drainStderr(max time.Duration) {
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-p.stderrDone:
	case <-t.C:
	}
}

// exitDescription says how the process ended, for error messages. It must
// only be called after exited is closed.
func (p *process) exitDescription() string {
	if p.state == nil {
		if p.waitErr != nil {
			return p.waitErr.Error()
		}
		return "exited"
	}
	code, sig := procgroup.ExitStatus(p.state)
	if sig != 0 {
		return fmt.Sprintf("killed by signal %d (%s)", int(sig), sig)
	}
	return fmt.Sprintf("exited with status %d", code)
}

// alive reports whether the process has not been reaped yet.
func (p *process) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}
