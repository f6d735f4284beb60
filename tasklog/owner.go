package tasklog

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// owner names the process that runs a task: its machine, its pid and the
// time the process started (in the kernel's clock ticks since boot, as
// /proc/PID/stat gives it), so that a pid reused by another program is not
// taken for the process that died.
type owner struct {
	host  string
	pid   int
	start uint64 // 0 where the start time cannot be read
}

// self is this process as an owner.
func self() owner {
	host, _ := os.Hostname()
	return owner{host: host, pid: os.Getpid(), start: startTime(os.Getpid())}
}

// String is the owner as stored: host/pid/start.
func (o owner) String() string {
	return o.host + "/" + strconv.Itoa(o.pid) + "/" + strconv.FormatUint(o.start, 10)
}

// parseOwner reads a stored owner; ok is false for an empty or foreign
// value.
func parseOwner(s string) (owner, bool) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return owner{}, false
	}
	j := strings.LastIndexByte(s[:i], '/')
	if j < 0 {
		return owner{}, false
	}
	pid, err1 := strconv.Atoi(s[j+1 : i])
	start, err2 := strconv.ParseUint(s[i+1:], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return owner{}, false
	}
	return owner{host: s[:j], pid: pid, start: start}, true
}

// orphaned reports whether a task running under stored owner has lost its
// process, seen from o (this process), and says why.
func (o owner) orphaned(stored string, updated, now time.Time) (string, bool) {
	if stored == "" {
		if now.Sub(updated) >= legacyOrphanAge {
			return fmt.Sprintf("no write since %s and no process recorded as running it", updated.Format(time.RFC3339)), true
		}
		return "", false
	}
	w, ok := parseOwner(stored)
	if !ok || w.host != o.host {
		return "", false // another machine's, or unreadable: not ours to judge
	}
	if w.pid == o.pid && w.start == o.start {
		return "", false // this very process
	}
	if !alive(w.pid) {
		return fmt.Sprintf("the process that ran it (pid %d) is gone", w.pid), true
	}
	if w.start != 0 {
		if st := startTime(w.pid); st != 0 && st != w.start {
			return fmt.Sprintf("the process that ran it is gone (pid %d now belongs to another program)", w.pid), true
		}
	}
	return "", false
}

// alive reports whether a process with that pid exists (a process of
// another user counts).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}

// startTime reads when process pid started, in clock ticks since boot
// (field 22 of /proc/PID/stat); 0 where there is no /proc.
func startTime(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 {
		return 0
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0
	}
	return v
}
