package testservers

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Process is a process as /proc shows it.
type Process struct {
	PID   int
	State byte // R, S, D, Z (zombie: exited, not yet reaped) ...
	// Args is the command line; empty for a zombie.
	Args []string
}

// Children returns the processes whose parent is ppid, read from /proc, so
// that a test can count the servers a process started and see that none is
// left unreaped. Processes that end while /proc is read are skipped.
func Children(ppid int) []Process {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []Process
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses,
		// so the fields are counted from the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(ppid) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		p := Process{PID: pid, State: f[0][0]}
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && len(cmd) > 0 {
			p.Args = strings.Split(strings.TrimSuffix(string(cmd), "\x00"), "\x00")
		}
		out = append(out, p)
	}
	return out
}
