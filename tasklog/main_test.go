package tasklog_test

import (
	"context"
	"database/sql"
	"github.com/toolmux/toolmux/internal/testservers"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolmux/toolmux/tasklog"
)

func TestMain(m *testing.M) {
	// The crash test re-executes this binary as the process it kills.
	if dir := os.Getenv(crashDirEnv); dir != "" {
		os.Exit(crashWriter(dir))
	}
	if arg := os.Getenv(tasklog.JournalAppenderEnv); arg != "" {
		os.Exit(tasklog.JournalAppenderMain(arg))
	}
	goleak.VerifyTestMain(m)
}

// open opens a log in dir (a new temporary directory when empty), closed
// at the end of the test.
func open(t testing.TB, dir string, opts ...tasklog.Option) *tasklog.Log {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	l, err := tasklog.Open(context.Background(), dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})
	return l
}

// rawDB opens a legacy tasklog.db in dir directly, to write what an
// older toolmux wrote.
func rawDB(t testing.TB, dir string) *sql.DB {
	t.Helper()
	return sqliteDB(t, filepath.Join(dir, tasklog.FileName))
}

// indexDB opens the index of the journal in dir directly, for what the
// API does not expose (pragmas, integrity).
func indexDB(t testing.TB, dir string) *sql.DB {
	t.Helper()
	return sqliteDB(t, filepath.Join(dir, tasklog.JournalDir, tasklog.IndexName))
}

func sqliteDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

// clock is a settable clock for WithClock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

func bufferLogger() (*slog.Logger, *testservers.SyncBuffer) {
	b := &testservers.SyncBuffer{}
	return slog.New(slog.NewTextHandler(b, nil)), b
}
