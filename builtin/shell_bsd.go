//go:build unix && !linux

package builtin

import "syscall"

// procAttr puts the command in a process group of its own, so that it and
// everything it starts can be signalled at once. These systems have no
// parent-death signal.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// liveMember trusts kill(2): without /proc, a zombie member cannot be told
// from a live one, and endGroup waits out its grace period for it.
func liveMember(int) bool { return true }
