//go:build !unix

package procgroup

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// Setup does nothing: there are no process groups here.
func Setup(*exec.Cmd) {}

// Signal does nothing: there are no process groups or signals here.
func Signal(int, syscall.Signal) {}

// Kill does nothing: there are no process groups here.
func Kill(int) {}

// Alive reports false: there are no process groups here to be alive.
func Alive(int) bool { return false }

// AliveIgnoringZombies reports false, as [Alive] does.
func AliveIgnoringZombies(int) bool { return false }

// SignalName is "signal N": there are no conventional names here.
func SignalName(sig syscall.Signal) string { return fmt.Sprintf("signal %d", int(sig)) }

// ExitStatus is the exit code of a reaped process; no signal kills a
// process here, so sig is always 0.
func ExitStatus(ps *os.ProcessState) (code int, sig syscall.Signal) { return ps.ExitCode(), 0 }
