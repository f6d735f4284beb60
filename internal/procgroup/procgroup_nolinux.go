//go:build unix && !linux

package procgroup

import "syscall"

// setDeathSignal does nothing: only Linux has a parent-death signal. A
// caller that ends its groups still leaves nothing behind; only a toolmux
// killed from outside does.
func setDeathSignal(*syscall.SysProcAttr) {}

// liveMember trusts kill(2): without /proc, a zombie member cannot be told
// from a live one, and a caller waiting for the group to empty waits out
// its grace period for it.
func liveMember(int) bool { return true }
