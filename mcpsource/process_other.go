//go:build unix && !linux

package mcpsource

import "syscall"

func setDeathSignal(*syscall.SysProcAttr) {}
