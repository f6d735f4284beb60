package main_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY returns the controller and the terminal of a new pseudo-terminal,
// so that toolmux runs on a real TTY, as a person would run it.
func openPTY(t *testing.T) (ctl, tty *os.File) {
	t.Helper()
	ctl, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(ctl.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		ctl.Close()
		t.Fatalf("unlocking the pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(ctl.Fd()), unix.TIOCGPTN)
	if err != nil {
		ctl.Close()
		t.Fatalf("pty number: %v", err)
	}
	tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		ctl.Close()
		t.Fatalf("opening the terminal: %v", err)
	}
	return ctl, tty
}

// screen collects what toolmux writes to the terminal.
type screen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}
func (s *screen) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.buf.String() }

// watchTerminal copies what is written to the terminal of ctl into a
// screen until the terminal closes; copied is closed then.
func watchTerminal(ctl *os.File) (scr *screen, copied <-chan struct{}) {
	scr = &screen{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := ctl.Read(buf)
			scr.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	return scr, done
}

// On a terminal, a call the policy asks about is put to the user: the
// prompt shows the tool and its arguments, "n" refuses it, "y" runs it.
func TestCallAsksOnATerminal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		answer   string
		wantCode int
		ran      bool
	}{
		{"n", 1, false},
		{"y", 0, true},
	} {
		t.Run(tc.answer, func(t *testing.T) {
			dir := workspace(t, "")
			ctl, tty := openPTY(t)
			defer ctl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, binary, "call", "builtin", "shell", `{"command": "touch asked.txt"}`)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+t.TempDir())
			cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			tty.Close()
			scr, copied := watchTerminal(ctl)
			deadline := time.Now().Add(time.Minute)
			for !strings.Contains(scr.String(), "[n/4] no") {
				if time.Now().After(deadline) {
					t.Fatalf("no approval prompt on the terminal; it shows:\n%s", scr.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			if s := scr.String(); !strings.Contains(s, "builtin") || !strings.Contains(s, "touch asked.txt") {
				t.Errorf("the prompt does not show the tool and its arguments:\n%s", s)
			}
			if _, err := ctl.Write([]byte(tc.answer + "\n")); err != nil {
				t.Fatal(err)
			}
			code := exitCode(t, cmd.Wait())
			ctl.Close()
			<-copied
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d; the terminal shows:\n%s", code, tc.wantCode, scr.String())
			}
			_, statErr := os.Stat(filepath.Join(dir, "asked.txt"))
			if ran := statErr == nil; ran != tc.ran {
				t.Errorf("command ran: %v, want %v", ran, tc.ran)
			}
			if !tc.ran && !strings.Contains(scr.String(), "approval_denied") {
				t.Errorf("a refusal without its kind:\n%s", scr.String())
			}
		})
	}
}
