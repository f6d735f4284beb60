package tasklog_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

// writeMany has one goroutine per worker record n calls and write n steps
// and n messages, each worker in its own task; it returns the record ids.
func writeMany(t *testing.T, l *tasklog.Log, prefix string, workers, n int) [][]string {
	t.Helper()
	ids := make([][]string, workers)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			task := fmt.Sprintf("%s-%d", prefix, w)
			for i := range n {
				rec := &tool.Record{ID: tool.NewID(), Task: task, Session: "main", Server: "s", Tool: "t",
					Arguments: map[string]any{"i": float64(i)}, Started: time.Now(), Ended: time.Now()}
				l.Record(ctx, rec)
				ids[w] = append(ids[w], rec.ID)
				if err := l.Step(ctx, task, tasklog.Step{Name: fmt.Sprint(i)}); err != nil {
					errs <- err
					return
				}
				if i%10 == 0 {
					if err := l.AppendMessages(ctx, task, "", tasklog.Message{Role: "user", Content: []byte(fmt.Sprintf("%q", fmt.Sprint(i)))}); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	return ids
}

// checkAll verifies every write of writeMany is in the log, in order.
func checkAll(t *testing.T, l *tasklog.Log, prefix string, ids [][]string, n int) {
	t.Helper()
	for w, want := range ids {
		task := fmt.Sprintf("%s-%d", prefix, w)
		calls, err := l.Calls(ctx, task)
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, c := range calls {
			have[c.ID] = true
		}
		for _, id := range want {
			if !have[id] {
				t.Errorf("%s: record %s missing", task, id)
			}
		}
		steps, err := l.Steps(ctx, task)
		if err != nil || len(steps) != n {
			t.Fatalf("%s: %d steps, %v", task, len(steps), err)
		}
		for i, s := range steps {
			if s.Name != fmt.Sprint(i) {
				t.Fatalf("%s: step %d is %q", task, i, s.Name)
			}
		}
		if msgs, err := l.Messages(ctx, task, ""); err != nil || len(msgs) != (n+9)/10 {
			t.Errorf("%s: %d messages, %v", task, len(msgs), err)
		}
	}
}

func TestConcurrentWriters(t *testing.T) {
	const workers, n = 16, 200
	l := open(t, "", tasklog.WithDurability(tasklog.DurabilityProcess))
	// A reader runs alongside the writers and never fails.
	stop := make(chan struct{})
	var reader sync.WaitGroup
	for range 1 {
		reader.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				if _, err := l.Tasks(ctx, tasklog.Filter{Limit: 5}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	ids := writeMany(t, l, "w", workers, n)
	close(stop)
	reader.Wait()
	checkAll(t, l, "w", ids, n)
	if s := l.Stats(); s.Recorded != workers*n || s.Lost != 0 {
		t.Errorf("stats %+v", s)
	}
	sum, err := l.Tasks(ctx, tasklog.Filter{})
	if err != nil || len(sum) != workers {
		t.Fatalf("%d tasks, %v", len(sum), err)
	}
	for _, s := range sum {
		if s.Calls != n {
			t.Errorf("%s: %d calls", s.ID, s.Calls)
		}
	}
}

// Two Log values on one directory behave as two processes would: each has
// its own connections, and SQLite's locks (not the Go mutexes of one Log)
// keep them apart.
func TestTwoLogsOnOneDirectory(t *testing.T) {
	const workers, n = 4, 100
	dir := t.TempDir()
	a := open(t, dir)
	b := open(t, dir)
	var wg sync.WaitGroup
	var idsA, idsB [][]string
	wg.Go(func() { idsA = writeMany(t, a, "a", workers, n) })
	wg.Go(func() { idsB = writeMany(t, b, "b", workers, n) })
	wg.Go(func() {
		for i := range 200 {
			if err := a.AppendEvents(ctx, tasklog.Event{ID: int64(2*i + 1), Name: "tick"}); err != nil {
				t.Error(err)
				return
			}
			if err := b.AppendEvents(ctx, tasklog.Event{ID: int64(2*i + 2), Name: "tock"}); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
	// Each sees the other's writes.
	checkAll(t, a, "b", idsB, n)
	checkAll(t, b, "a", idsA, n)
	for _, l := range []*tasklog.Log{a, b} {
		if s := l.Stats(); s.Recorded != workers*n || s.Lost != 0 || s.Retried != 0 {
			t.Errorf("stats %+v", s)
		}
		if id, err := l.LastEventID(ctx); err != nil || id != 400 {
			t.Errorf("last event id %d %v", id, err)
		}
	}
	var check string
	if err := indexDB(t, dir).QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Errorf("integrity_check: %q %v", check, err)
	}
}

// Writes committed together (group commit) still fail only for their own
// reasons: a failing write in a batch does not take the others with it.
func TestFailingWriteDoesNotFailItsBatch(t *testing.T) {
	l := open(t, "")
	const workers, n = 8, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range n {
				if err := l.Step(ctx, fmt.Sprint("ok-", w), tasklog.Step{Name: fmt.Sprint(i)}); err != nil {
					t.Error(err)
				}
			}
		})
		wg.Go(func() {
			for i := range n {
				err := l.FinishTask(ctx, fmt.Sprint("missing-", w, "-", i), tasklog.StatusFailed, "")
				if !errors.Is(err, tasklog.ErrNotFound) {
					t.Errorf("finishing a missing task: %v", err)
				}
			}
		})
	}
	wg.Wait()
	for w := range workers {
		if steps, err := l.Steps(ctx, fmt.Sprint("ok-", w)); err != nil || len(steps) != n {
			t.Errorf("worker %d: %d steps, %v", w, len(steps), err)
		}
	}
	if tasks, _ := l.Tasks(ctx, tasklog.Filter{}); len(tasks) != workers {
		t.Errorf("%d tasks", len(tasks))
	}
}

// Closing while goroutines write: each write either lands or says the log
// is closed; nothing hangs, nothing is half-written.
func TestCloseDuringWrites(t *testing.T) {
	dir := t.TempDir()
	l, err := tasklog.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var landed sync.Map
	// writing is done by each writer once it has landed a step (or gave
	// up): Close then comes while every writer is at it.
	var writing sync.WaitGroup
	writing.Add(8)
	for w := range 8 {
		wg.Go(func() {
			first := sync.OnceFunc(writing.Done)
			defer first()
			for i := 0; ; i++ {
				name := fmt.Sprint(w, "-", i)
				err := l.Step(ctx, "t", tasklog.Step{Name: name})
				if errors.Is(err, tasklog.ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				landed.Store(name, true)
				first()
			}
		})
	}
	writing.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	l = open(t, dir)
	steps, err := l.Steps(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]bool{}
	for _, s := range steps {
		stored[s.Name] = true
	}
	n := 0
	landed.Range(func(k, _ any) bool {
		n++
		if !stored[k.(string)] {
			t.Errorf("step %s acknowledged but not stored", k)
		}
		return true
	})
	if n == 0 || len(stored) != n {
		t.Errorf("%d steps acknowledged, %d stored", n, len(stored))
	}
}
