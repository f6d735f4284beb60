package tasklog_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

// fillTasks writes n finished tasks of calls calls each, every call's
// result pad bytes long.
func fillTasks(t *testing.T, l *tasklog.Log, prefix string, n, calls, pad int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("%s-%03d", prefix, i)
		if err := l.StartTask(ctx, tasklog.Task{ID: id, Input: "task " + id}); err != nil {
			t.Fatal(err)
		}
		for range calls {
			l.Record(ctx, &tool.Record{ID: tool.NewID(), Task: id, Server: "s", Tool: "t", Started: time.Now(), Ended: time.Now(),
				Result: tool.TextResult(strings.Repeat("r", pad))})
		}
		if err := l.FinishTask(ctx, id, tasklog.StatusSuccess, "done"); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// Over its byte budget, the log drops its oldest segments: the tasks that
// ended there go whole, a task still running keeps its start, steps and
// messages (carried forward) and loses only its oldest calls, and an index
// rebuilt from what is left of the journal shows the same.
func TestRetentionByBytes(t *testing.T) {
	dir := t.TempDir()
	const budget = 512 << 10
	opts := []tasklog.Option{tasklog.WithSegmentBytes(16 << 10), tasklog.WithDurability(tasklog.DurabilityProcess),
		tasklog.WithRetention(tasklog.Retention{MaxBytes: budget}), tasklog.NoBackgroundRetention()}
	l := open(t, dir, opts...)
	owner := &identity.Ref{Name: "ann", Key: "key:ann"}
	if err := l.StartTask(ctx, tasklog.Task{ID: "long", Input: "runs throughout", Metadata: map[string]any{"k": "v"}, Caller: owner}); err != nil {
		t.Fatal(err)
	}
	if err := l.Step(ctx, "long", tasklog.Step{Name: "first step"}); err != nil {
		t.Fatal(err)
	}
	if err := l.AppendMessages(ctx, "long", "", tasklog.Message{Role: "user", Content: []byte(`"first message"`)}); err != nil {
		t.Fatal(err)
	}
	var longCalls []string
	var all []string
	for round := range 20 {
		all = append(all, fillTasks(t, l, fmt.Sprint("r", round), 5, 4, 2000)...)
		rec := &tool.Record{ID: tool.NewID(), Task: "long", Server: "s", Tool: "t", Started: time.Now(), Ended: time.Now()}
		l.Record(ctx, rec)
		longCalls = append(longCalls, rec.ID)
	}
	if err := l.Step(ctx, "long", tasklog.Step{Name: "last step"}); err != nil {
		t.Fatal(err)
	}
	before, err := l.RetentionStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if before.Bytes <= budget {
		t.Fatalf("the test wrote only %d bytes", before.Bytes)
	}
	rep, err := l.EnforceRetention(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after, err := l.RetentionStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("before %d bytes in %d segments; dropped %d segments, %d tasks, %d calls; after %d bytes in %d segments",
		before.Bytes, before.Segments, len(rep.Segments), len(rep.Tasks), rep.Calls, after.Bytes, after.Segments)
	if after.Bytes > budget || len(rep.Segments) == 0 || len(rep.Tasks) == 0 || rep.Calls == 0 {
		t.Fatalf("after retention: %+v, report %+v", after, rep)
	}
	if after.DroppedTasks != int64(len(rep.Tasks)) || after.DroppedSegments != int64(len(rep.Segments)) || after.DroppedCalls != rep.Calls || after.LastDrop.IsZero() {
		t.Errorf("status %+v after report %+v", after, rep)
	}
	// Oldest first: the dropped tasks are a prefix of the tasks written.
	if !reflect.DeepEqual(rep.Tasks, all[:len(rep.Tasks)]) {
		t.Errorf("dropped %v, want the oldest", rep.Tasks)
	}
	for _, id := range rep.Tasks {
		if _, err := l.Task(ctx, id); !errors.Is(err, tasklog.ErrNotFound) {
			t.Fatalf("dropped task %s: %v", id, err)
		}
	}
	check := func(l *tasklog.Log) {
		t.Helper()
		d, err := l.Detail(ctx, "long")
		if err != nil {
			t.Fatal(err)
		}
		if d.Status != tasklog.StatusRunning || d.Input != "runs throughout" || d.Metadata["k"] != "v" || !sameRef(d.Caller, owner) ||
			len(d.Steps) != 2 || d.Steps[0].Name != "first step" || d.Steps[1].Name != "last step" ||
			len(d.Sessions) != 1 || len(d.Sessions[0].Messages) != 1 {
			t.Fatalf("the running task: %+v", d)
		}
		if n := int64(len(d.Calls)); n+rep.Calls != int64(len(longCalls)) || d.Calls[len(d.Calls)-1].ID != longCalls[len(longCalls)-1] {
			t.Errorf("the running task has %d calls, %d dropped, of %d", n, rep.Calls, len(longCalls))
		}
		tasks, err := l.Tasks(ctx, tasklog.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(tasks) != len(all)-len(rep.Tasks)+1 {
			t.Errorf("%d tasks listed, want %d", len(tasks), len(all)-len(rep.Tasks)+1)
		}
		for _, s := range tasks {
			if s.ID == "long" && s.Calls != len(d.Calls) {
				t.Errorf("the running task's summary counts %d calls, has %d", s.Calls, len(d.Calls))
			}
		}
	}
	check(l)
	l.Close()
	// What is left of the journal rebuilds the same index.
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(filepath.Join(dir, tasklog.JournalDir, tasklog.IndexName+suffix))
	}
	l = open(t, dir, opts...)
	check(l)
	if st, err := l.RetentionStatus(ctx); err != nil || st.DroppedTasks != int64(len(rep.Tasks)) {
		t.Errorf("status after a rebuild %+v %v", st, err)
	}
}

// Records and spill files older than the maximum age go, the recent stay;
// spill files count in the byte budget and go oldest first with the
// segments.
func TestRetentionByAgeAndSpill(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, tasklog.WithSegmentBytes(8<<10), tasklog.WithRetention(tasklog.Retention{MaxAge: 24 * time.Hour}), tasklog.NoBackgroundRetention())
	old := fillTasks(t, l, "old", 10, 3, 1000)
	spill := filepath.Join(dir, "spill")
	writeSpill := func(name string, age time.Duration) string {
		p := filepath.Join(spill, "task", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(strings.Repeat("s", 10000)), 0o600); err != nil {
			t.Fatal(err)
		}
		mt := time.Now().Add(-age)
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Two days pass: what was written so far is old (a segment's time is
	// its last write).
	segs, _ := filepath.Glob(filepath.Join(dir, tasklog.JournalDir, "*.seg"))
	for _, s := range segs {
		mt := time.Now().Add(-48 * time.Hour)
		os.Chtimes(s, mt, mt)
	}
	oldSpill := writeSpill("old.txt", 48*time.Hour)
	newSpill := writeSpill("new.txt", 2*time.Minute)
	fresh := fillTasks(t, l, "new", 2, 1, 10)
	rep, err := l.EnforceRetention(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The old tasks go, but for those that share the segment the new ones
	// were written to (segments are dropped whole).
	if len(rep.Tasks) < len(old)-2 || !reflect.DeepEqual(rep.Tasks, old[:len(rep.Tasks)]) || rep.SpillFiles != 1 {
		t.Fatalf("report %+v", rep)
	}
	if _, err := os.Stat(oldSpill); !os.IsNotExist(err) {
		t.Errorf("the old spill file is still there: %v", err)
	}
	if _, err := os.Stat(newSpill); err != nil {
		t.Errorf("the new spill file is gone: %v", err)
	}
	for _, id := range fresh {
		if _, err := l.Task(ctx, id); err != nil {
			t.Errorf("recent task %s: %v", id, err)
		}
	}
	st, err := l.RetentionStatus(ctx)
	if err != nil || st.DroppedSpillFiles != 1 || st.DroppedTasks != int64(len(rep.Tasks)) {
		t.Errorf("status %+v %v", st, err)
	}

	// Over a byte budget, an old spill file goes before newer segments.
	l.Close()
	l = open(t, dir, tasklog.WithSegmentBytes(8<<10), tasklog.WithRetention(tasklog.Retention{MaxBytes: 1 << 20}), tasklog.NoBackgroundRetention())
	big := filepath.Join(spill, "task", "big.txt")
	if err := os.WriteFile(big, []byte(strings.Repeat("b", 2<<20)), 0o600); err != nil {
		t.Fatal(err)
	}
	mt := time.Now().Add(-72 * time.Hour)
	os.Chtimes(big, mt, mt)
	rep, err = l.EnforceRetention(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(big); !os.IsNotExist(err) || rep.SpillFiles < 1 {
		t.Errorf("the big spill file: %v, report %+v", err, rep)
	}
	if _, err := l.Task(ctx, fresh[len(fresh)-1]); err != nil {
		t.Errorf("the newest task went with the spill file: %v", err)
	}
}
