//go:build linux

package mcpsource

import "syscall"

// setDeathSignal makes the kernel kill the server if toolmux dies without
// closing it (SIGKILL from outside, a crash), so no server outlives it.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
