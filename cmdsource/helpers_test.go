package cmdsource_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolmux/toolmux/cmdsource"
	"github.com/toolmux/toolmux/internal/testservers"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// script writes an executable sh script with body into a new temporary
// directory and returns its path.
func script(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// printing returns the argv of a discovery command printing out exactly.
func printing(t *testing.T, out string) []string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "declarations.json")
	if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"cat", f}
}

// noCall is a call command for tests that only discover.
var noCall = []string{"false"}

// newSource returns a source closed at the end of the test.
func newSource(t *testing.T, cfg cmdsource.Config) *cmdsource.Source {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "discovered"
	}
	if cfg.Call == nil {
		cfg.Call = noCall
	}
	if cfg.KillGrace == 0 {
		cfg.KillGrace = 500 * time.Millisecond
	}
	s, err := cmdsource.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitPID waits for a script to write a process id into file.
func waitPID(t *testing.T, file string) int {
	t.Helper()
	var pid int
	ok := testservers.Eventually(10*time.Second, func() bool {
		b, err := os.ReadFile(file)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	if !ok {
		t.Fatalf("no pid appeared in %s", file)
	}
	return pid
}

func assertGone(t *testing.T, pid int) {
	t.Helper()
	if !testservers.Eventually(5*time.Second, func() bool { return testservers.ProcessGone(pid) }) {
		t.Errorf("process %d still runs", pid)
	}
}

// logBuffer is a logger whose output a test can read.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }
