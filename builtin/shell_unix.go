//go:build unix

package builtin

import (
	"fmt"
	"os"
	"syscall"
)

// shellSupported reports whether shell can run here: it needs process
// groups and signals.
const shellSupported = true

// signalGroup sends SIGTERM, or SIGKILL when kill is set, to every process
// of the group pgid. An error only means the group is already gone.
func signalGroup(pgid int, kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	syscall.Kill(-pgid, sig)
}

// groupAlive reports whether a process of the group pgid still runs.
// Members that have exited but wait to be reaped by a parent outside
// toolmux do not count: they cannot be killed again.
func groupAlive(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); err == syscall.ESRCH {
		return false
	}
	return liveMember(pgid)
}

// exitSignal names the signal that killed the process, if one did.
func exitSignal(ps *os.ProcessState) (string, bool) {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return "", false
	}
	return signalName(ws.Signal()), true
}

// signalNames are the conventional names of the signals a command dies
// of, which models and people know better than numbers.
var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP:  "SIGHUP",
	syscall.SIGINT:  "SIGINT",
	syscall.SIGQUIT: "SIGQUIT",
	syscall.SIGILL:  "SIGILL",
	syscall.SIGTRAP: "SIGTRAP",
	syscall.SIGABRT: "SIGABRT",
	syscall.SIGBUS:  "SIGBUS",
	syscall.SIGFPE:  "SIGFPE",
	syscall.SIGKILL: "SIGKILL",
	syscall.SIGUSR1: "SIGUSR1",
	syscall.SIGSEGV: "SIGSEGV",
	syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGPIPE: "SIGPIPE",
	syscall.SIGALRM: "SIGALRM",
	syscall.SIGTERM: "SIGTERM",
	syscall.SIGXCPU: "SIGXCPU",
	syscall.SIGXFSZ: "SIGXFSZ",
}

// signalName is "SIGSEGV (segmentation fault)": the name and the
// description.
func signalName(sig syscall.Signal) string {
	name, ok := signalNames[sig]
	if !ok {
		name = fmt.Sprintf("signal %d", int(sig))
	}
	return fmt.Sprintf("%s (%s)", name, sig.String())
}
