//go:build linux

package procgroup

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// setDeathSignal makes the kernel kill the leader if toolmux dies without
// ending it (SIGKILL from outside, a crash), so that it does not outlive
// toolmux.
//
// The death signal fires when the thread that started the process exits,
// not the process; the Go runtime does not end threads while the program
// runs (only those of goroutines that exit while locked to their thread,
// which callers starting commands must not do). It reaches only the
// leader: a grandchild outlives a killed toolmux unless the leader's death
// ends it.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

// liveMember reports whether the group pgid has a member that is not a
// zombie, reading the state of every process in /proc. When /proc cannot
// be read it says yes: a group wrongly thought alive only costs a wait,
// one wrongly thought gone would be left running.
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
