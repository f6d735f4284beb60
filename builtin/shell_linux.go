package builtin

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// procAttr puts the command in a process group of its own, so that it and
// everything it starts can be signalled at once, and asks the kernel to
// kill it if toolmux dies first, so that a crash leaves no orphan shell.
//
// The death signal fires when the thread that started the process exits,
// not the process; the Go runtime does not end threads while the program
// runs (only those of goroutines that exit while locked to their thread,
// which the callers of Source.Call do not do). It reaches only the shell:
// a grandchild outlives a killed toolmux unless the shell's death ends it.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// liveMember reports whether the group pgid has a member that is not a
// zombie. A zombie whose parent is not toolmux waits for that parent (in a
// container, often a pid 1 that never reaps) and would otherwise make the
// group look alive until the grace period ends.
func liveMember(pgid int) bool {
	d, err := os.Open("/proc")
	if err != nil {
		return true
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return true
	}
	for _, n := range names {
		if n[0] < '0' || n[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + n + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: the command name may contain
		// anything, so the fields are counted from its closing parenthesis.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 3 {
			continue
		}
		if g, err := strconv.Atoi(string(f[2])); err != nil || g != pgid {
			continue
		}
		if f[0][0] != 'Z' && f[0][0] != 'X' {
			return true
		}
	}
	return false
}
