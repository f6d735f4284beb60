//go:build linux

package cmdsource

import "syscall"

// setDeathSignal makes the kernel kill the command if toolmux dies without
// ending it (SIGKILL from outside, a crash), so no command outlives it.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
