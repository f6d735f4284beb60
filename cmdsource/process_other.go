//go:build unix && !linux

package cmdsource

import "syscall"

// setDeathSignal does nothing: only Linux has a parent-death signal. Close
// still ends every command; only a toolmux killed from outside leaves them.
func setDeathSignal(*syscall.SysProcAttr) {}
