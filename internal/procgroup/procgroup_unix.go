//go:build unix

package procgroup

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// Setup makes cmd, once started, the leader of a process group of its own,
// whose id is the leader's pid. On Linux the kernel is also asked to kill
// the leader if toolmux dies first, so that a crash leaves no orphan behind.
// It must be called before cmd.Start.
func Setup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	setDeathSignal(cmd.SysProcAttr)
}

// Signal sends sig to every process of the group pgid. An error only means
// that the group is gone, which is what the caller wanted, so there is
// none. A pgid that is not positive is ignored: kill(2) would take 0 as
// toolmux's own group and -1 as every process it may signal.
func Signal(pgid int, sig syscall.Signal) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, sig)
	}
}

// Kill sends SIGKILL to every process of the group pgid.
func Kill(pgid int) { Signal(pgid, syscall.SIGKILL) }

// Alive reports whether any process of the group pgid still exists. A
// member that toolmux may no longer signal (one that changed its user)
// counts: it exists. So does a zombie; see [AliveIgnoringZombies].
func Alive(pgid int) bool {
	return pgid > 0 && syscall.Kill(-pgid, 0) != syscall.ESRCH
}

// AliveIgnoringZombies is [Alive], except that members that have exited
// but wait to be reaped by a parent outside toolmux do not count: they
// cannot be killed again, and a caller waiting for the group to empty
// would otherwise wait for them in vain (in a container, their parent is
// often a pid 1 that never reaps). Only Linux can tell zombies apart,
// through /proc; elsewhere this is Alive.
func AliveIgnoringZombies(pgid int) bool {
	return Alive(pgid) && liveMember(pgid)
}

// SignalName is the conventional name of sig ("SIGTERM"), which models and
// people know better than the number or syscall's own description
// ("terminated"), which does not say which signal it was. A signal without
// a name here is "signal N".
func SignalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	case syscall.SIGILL:
		return "SIGILL"
	case syscall.SIGTRAP:
		return "SIGTRAP"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGBUS:
		return "SIGBUS"
	case syscall.SIGFPE:
		return "SIGFPE"
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGUSR1:
		return "SIGUSR1"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGUSR2:
		return "SIGUSR2"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	case syscall.SIGALRM:
		return "SIGALRM"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGXCPU:
		return "SIGXCPU"
	case syscall.SIGXFSZ:
		return "SIGXFSZ"
	case syscall.SIGSYS:
		return "SIGSYS"
	}
	return fmt.Sprintf("signal %d", int(sig))
}

// ExitStatus says how a reaped process ended: its exit code and sig 0, or,
// when a signal killed it, code -1 and that signal.
func ExitStatus(ps *os.ProcessState) (code int, sig syscall.Signal) {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -1, ws.Signal()
	}
	return ps.ExitCode(), 0
}
