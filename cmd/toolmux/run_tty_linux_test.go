package main_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/internal/testservers"
)

// On a terminal, `toolmux run` puts a call the policy asks about to the
// user, showing the command; "y" runs it and the run goes on to its answer.
func TestRunAsksOnATerminal(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "")
	m := llmtest.OpenAI(t, shellThenAnswer("touch made.txt"))
	ctl, tty := openPTY(t)
	defer ctl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "run", "--model", "scripted", "--base-url", m.BaseURL(), "Make a file")
	cmd.Dir = dir
	cmd.Env = append(modelFreeEnv(), "XDG_DATA_HOME="+dataHome(t, dir))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	scr, copied := watchTerminal(ctl)
	if !testservers.Eventually(time.Minute, func() bool { return strings.Contains(scr.String(), "[n/4] no") }) {
		t.Fatalf("no approval prompt on the terminal; it shows:\n%s", scr.String())
	}
	if s := scr.String(); !strings.Contains(s, "shell") || !strings.Contains(s, "touch made.txt") {
		t.Errorf("the prompt does not show the tool and the command:\n%s", s)
	}
	if _, err := os.Stat(filepath.Join(dir, "made.txt")); err == nil {
		t.Fatal("the command ran before it was approved")
	}
	if _, err := ctl.Write([]byte("y\n")); err != nil {
		t.Fatal(err)
	}
	code := exitCode(t, cmd.Wait())
	ctl.Close()
	<-copied
	s := scr.String()
	if code != 0 {
		t.Fatalf("exit %d; the terminal shows:\n%s", code, s)
	}
	if _, err := os.Stat(filepath.Join(dir, "made.txt")); err != nil {
		t.Errorf("the approved command did not run: %v\n%s", err, s)
	}
	if !strings.Contains(s, "✓ builtin/shell") || !strings.Contains(s, "finished") {
		t.Errorf("the terminal does not show the call and the answer:\n%s", s)
	}
	if reqs := m.Requests(); len(reqs) != 2 {
		t.Errorf("%d model requests, want 2", len(reqs))
	}
}
