package tasklog_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

// A task belongs to its first caller: who started it, or who made the
// call whose record created it; a later call or a resumption by another
// caller does not hand it over. Listings keep one caller's own; a call's
// record names its caller; and all of it is read back from the journal
// when the index is lost, MCP tasks included.
func TestCallers(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir)
	ann := &identity.Ref{Name: "ann", Key: "https://idp.example u1"}
	bob := &identity.Ref{Name: "bob", Key: "key:bob"}
	if err := l.StartTask(ctx, tasklog.Task{ID: "a", Input: "ann's", Caller: ann}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	l.Record(ctx, &tool.Record{ID: "c1", Task: "a", Caller: bob, Server: "s", Tool: "t", Started: now, Ended: now})
	if err := l.StartTask(ctx, tasklog.Task{ID: "a", Caller: bob}); err != nil { // resumed by another
		t.Fatal(err)
	}
	l.Record(ctx, &tool.Record{ID: "c2", Task: "b", Caller: bob, Server: "s", Tool: "t", Started: now, Ended: now})
	if err := l.StartTask(ctx, tasklog.Task{ID: "none", Input: "no caller"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "none"} {
		if err := l.FinishTask(ctx, id, tasklog.StatusSuccess, ""); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []tasklog.MCPTask{
		{ID: "m-ann", Status: tasklog.MCPWorking, Tool: "x", Caller: ann},
		{ID: "m-bob", Status: tasklog.MCPWorking, Tool: "x", Caller: bob},
		{ID: "m-none", Status: tasklog.MCPWorking, Tool: "x"},
	} {
		if err := l.PutMCPTask(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	// A later state of a task names no other caller.
	if err := l.PutMCPTask(ctx, tasklog.MCPTask{ID: "m-ann", Status: tasklog.MCPCompleted, Tool: "x", Caller: ann}); err != nil {
		t.Fatal(err)
	}
	check := func(l *tasklog.Log) {
		t.Helper()
		owners := map[string]*identity.Ref{"a": ann, "b": bob, "none": nil}
		for id, want := range owners {
			task, err := l.Task(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if !sameRef(task.Caller, want) {
				t.Errorf("task %s belongs to %+v, want %+v", id, task.Caller, want)
			}
		}
		for who, want := range map[string][]string{"": {"none", "b", "a"}, ann.Key: {"a"}, bob.Key: {"b"}, "key:nobody": nil} {
			list, err := l.Tasks(ctx, tasklog.Filter{Caller: who})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range list {
				got = append(got, s.ID)
				if !sameRef(s.Caller, owners[s.ID]) {
					t.Errorf("listed %s of %+v", s.ID, s.Caller)
				}
			}
			if len(got) != len(want) || len(want) > 0 && got[len(got)-1] != want[len(want)-1] {
				t.Errorf("the tasks of %q: %v, want %v", who, got, want)
			}
		}
		d, err := l.Detail(ctx, "a")
		if err != nil || len(d.Calls) != 1 || !sameRef(d.Calls[0].Caller, bob) || !sameRef(d.Caller, ann) {
			t.Fatalf("detail of a: %+v %v", d, err)
		}
		for who, want := range map[string]int{"": 3, ann.Key: 1, bob.Key: 1} {
			list, err := l.MCPTasks(ctx, tasklog.MCPTaskFilter{Caller: who})
			if err != nil || len(list) != want {
				t.Errorf("the MCP tasks of %q: %+v %v", who, list, err)
			}
			if who != "" && len(list) == 1 && list[0].Caller.Key != who {
				t.Errorf("the MCP task of %q is %+v's", who, list[0].Caller)
			}
		}
		m, err := l.MCPTask(ctx, "m-ann")
		if err != nil || !sameRef(m.Caller, ann) || m.Status != tasklog.MCPCompleted {
			t.Errorf("m-ann: %+v %v", m, err)
		}
	}
	check(l)
	l.Close()
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(filepath.Join(dir, tasklog.JournalDir, tasklog.IndexName+suffix))
	}
	check(open(t, dir))
}

func sameRef(a, b *identity.Ref) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}
