package main_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// runOnTerminal starts toolmux in dir on a new pseudo-terminal (stdin,
// stdout and stderr) and returns what the terminal shows and a function
// waiting for the exit status.
func runOnTerminal(t *testing.T, dir string, args ...string) (scr *screen, ctl *os.File, wait func() int) {
	t.Helper()
	ctl, tty := openPTY(t)
	t.Cleanup(func() { ctl.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+t.TempDir())
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	scr, copied := watchTerminal(ctl)
	return scr, ctl, func() int {
		code := exitCode(t, cmd.Wait())
		ctl.Close()
		<-copied
		return code
	}
}

// On a terminal, each server has a line as it comes up, with its tools
// or its error and the time it took; a server slower than a few seconds
// is named while it is awaited.
func TestStartupOnATerminal(t *testing.T) {
	t.Parallel()
	dir := workspace(t, slowConfig(t))
	scr, _, wait := runOnTerminal(t, dir, "tools")
	// Exit 1: broken failed to come up.
	if code := wait(); code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, scr.String())
	}
	out := scr.String()
	for _, want := range []string{"✓ builtin: 9 tools (", "✓ fx: ", "✗ broken: server broken exited with status 2", "waiting for late (", "✓ late: "} {
		if !strings.Contains(out, want) {
			t.Errorf("the terminal lacks %q", want)
		}
	}
	if w, up := strings.Index(out, "waiting for late ("), strings.Index(out, "✓ late: "); w < 0 || up < w {
		t.Error("late was not named before it came up")
	}
	if t.Failed() {
		t.Log(out)
	}
}

// --timeout starts when the call runs, after the question on the terminal
// was answered, however long that took.
func TestCallTimeoutExcludesApproval(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "")
	scr, ctl, wait := runOnTerminal(t, dir, "call", "builtin", "shell", `{"command": "echo approved-and-ran"}`, "--timeout", "1s")
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(scr.String(), "[n/4] no") {
		if time.Now().After(deadline) {
			t.Fatalf("no approval prompt; the terminal shows:\n%s", scr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The person answers later than --timeout: the pause is the input
	// of this test, not a wait for anything.
	time.Sleep(1500 * time.Millisecond)
	if _, err := ctl.Write([]byte("y\n")); err != nil {
		t.Fatal(err)
	}
	if code := wait(); code != 0 || !strings.Contains(scr.String(), "approved-and-ran") {
		t.Errorf("exit %d; the terminal shows:\n%s", code, scr.String())
	}
}
