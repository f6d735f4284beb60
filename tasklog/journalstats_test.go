package tasklog_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/tasklog"
)

// JournalStats counts the journal's segment files and their size, and the
// bytes written since the index last caught up: all of them across
// segments before a catch-up, none after.
func TestJournalStats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Small segments, so that the lag spans several; no catch-up but the
	// one asked for.
	l := open(t, "", tasklog.WithSegmentBytes(4096), tasklog.WithIndexInterval(time.Hour))
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	before, ok, err := l.JournalStats()
	if err != nil || !ok || before.IndexLagBytes != 0 {
		t.Fatalf("a new log: %+v %v %v", before, ok, err)
	}
	for i := range 20 {
		if err := l.Step(ctx, "t", tasklog.Step{Name: fmt.Sprint("step ", i), Message: strings.Repeat("x", 1000)}); err != nil {
			t.Fatal(err)
		}
	}
	st, _, err := l.JournalStats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Segments < 3 || st.Bytes < before.Bytes+20*1000 {
		t.Errorf("after 20 KB of steps in 4 KiB segments: %+v", st)
	}
	if st.IndexLagBytes < 20*1000 || st.IndexLagBytes > st.Bytes {
		t.Errorf("before the index caught up: lag %d of %d bytes", st.IndexLagBytes, st.Bytes)
	}
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _, err = l.JournalStats(); err != nil || st.IndexLagBytes != 0 {
		t.Errorf("after the index caught up: %+v %v", st, err)
	}
}
