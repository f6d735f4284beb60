package tasklog_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

// The index counts a task's calls per catch-up, not per call: records of
// several tasks, interleaved with a task's end and a step, a duplicate
// and failures, all indexed by one catch-up, count as one by one would,
// and an index rebuilt from the journal agrees.
func TestCallCountsInOneCatchUp(t *testing.T) {
	dir := t.TempDir()
	c := newClock()
	l, err := tasklog.Open(ctx, dir, tasklog.WithClock(c.now), tasklog.WithIndexInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ann := &tool.CallerRef{Name: "ann", Key: "key:ann"}
	bob := &tool.CallerRef{Name: "bob", Key: "key:bob"}
	rec := func(id, task string, caller *tool.CallerRef, failed bool) *tool.Record {
		at := c.advance(time.Second)
		r := &tool.Record{ID: id, Task: task, Server: "fx", Tool: "echo", Caller: caller, Started: at, Ended: at}
		if failed {
			r.Error = tool.NewError(tool.KindTimeout, "slow")
		}
		return r
	}
	first := rec("a1", "A", ann, false)
	l.Record(ctx, first)
	l.Record(ctx, rec("b1", "B", bob, false))
	l.Record(ctx, rec("a2", "A", bob, true))
	c.advance(time.Second)
	if err := l.FinishTask(ctx, "A", tasklog.StatusSuccess, "done"); err != nil {
		t.Fatal(err)
	}
	l.Record(ctx, rec("a3", "A", ann, false))
	l.Record(ctx, rec("a1", "A", ann, true)) // a duplicate: kept once, not counted
	last := c.now()
	if err := l.Step(ctx, "B", tasklog.Step{Name: "s", Level: tasklog.LevelInfo}); err != nil {
		t.Fatal(err)
	}
	l.Record(ctx, rec("b2", "B", bob, true))
	l.Record(ctx, rec("n1", "", nil, true)) // no task
	summaries := func(l *tasklog.Log) map[string]tasklog.TaskSummary {
		t.Helper()
		list, err := l.Tasks(ctx, tasklog.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]tasklog.TaskSummary{}
		for _, s := range list {
			out[s.ID] = s
		}
		return out
	}
	got := summaries(l)
	a, b := got["A"], got["B"]
	if len(got) != 2 || a.Calls != 3 || a.Errors != 1 || a.Status != tasklog.StatusSuccess || !a.Created.Equal(first.Started) ||
		!a.Updated.Equal(last) || a.Caller == nil || a.Caller.Key != "key:ann" {
		t.Errorf("A: %+v", a)
	}
	if b.Calls != 2 || b.Errors != 1 || b.Status != tasklog.StatusRunning || b.Caller == nil || b.Caller.Key != "key:bob" {
		t.Errorf("B: %+v", b)
	}
	if calls, err := l.Calls(ctx, "A"); err != nil || len(calls) != 3 || calls[0].Error != nil {
		t.Errorf("A's calls: %d %v", len(calls), err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, tasklog.JournalDir, tasklog.IndexName)); err != nil {
		t.Fatal(err)
	}
	l = open(t, dir, tasklog.WithClock(c.now))
	if again := summaries(l); !reflect.DeepEqual(again, got) {
		t.Errorf("rebuilt index:\n%+v\nwant\n%+v", again, got)
	}
}

// Events replay as they were appended: the calls of a real scheduler and
// pipeline recorded into the log, their events handed by a real stream
// hub to the log (tool_call events stored as references to the records)
// and to a plain copy, read back by EventsAfter, and by the hub's own
// replay to a client resuming after its memory moved on, are the copy.
func TestReplayedEventsAreTheAppended(t *testing.T) {
	l := open(t, "")
	cp := &captureStore{}
	h, err := stream.NewHub(ctx, stream.WithStore(teeStore{l.StreamStore(), cp}))
	if err != nil {
		t.Fatal(err)
	}
	echo := tool.Tool{Server: "fx", Name: "echo", InputSchema: map[string]any{"type": "object"}}
	p, err := pipeline.New(echoBackend{echo}, pipeline.WithRecorder(l))
	if err != nil {
		t.Fatal(err)
	}
	s := schedule.New(p, schedule.WithSink(stream.SchedulerSink(h)))
	for i, args := range []map[string]any{
		{"message": "hi"}, nil, {"message": "<b>&</b> \u2028 é", "n": 1.5}, {"message": "bad \xff"},
	} {
		s.Call(ctx, tool.Call{ID: tool.NewID(), Task: "session-r", Session: "main", Server: "fx", Tool: "echo", Arguments: args})
		if i == 1 {
			s.Call(ctx, tool.Call{ID: tool.NewID(), Task: "session-r", Server: "fx", Tool: "nope"}) // refused: unknown tool
		}
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	want := cp.events()
	if len(want) < 4*6 {
		t.Fatalf("%d events", len(want))
	}
	got, err := l.EventsAfter(ctx, 0, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d events replayed, %d appended", len(got), len(want))
	}
	for i := range want {
		w := tasklog.Event(want[i])
		if g := got[i]; g.ID != w.ID || g.Name != w.Name || g.Task != w.Task || !g.Time.Equal(w.Time) || string(g.Data) != string(w.Data) {
			t.Errorf("event %d replayed as\n%d %s %q %v %s\nappended\n%d %s %q %v %s", i,
				g.ID, g.Name, g.Task, g.Time, g.Data, w.ID, w.Name, w.Task, w.Time, w.Data)
		}
	}
	// The hub of a restarted gateway replays them from the log alike.
	h2, err := stream.NewHub(ctx, stream.WithStore(l.StreamStore()))
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close(context.Background())
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	sub, err := h2.Subscribe(rctx, stream.Filter{Task: "session-r"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for i := range want {
		if want[i].Task != "session-r" {
			continue
		}
		select {
		case e := <-sub.Events():
			if e.ID != want[i].ID || string(e.Data) != string(want[i].Data) {
				t.Fatalf("hub replay: event %d %s, want %d %s", e.ID, e.Data, want[i].ID, want[i].Data)
			}
		case <-rctx.Done():
			t.Fatalf("hub replay stopped before event %d", want[i].ID)
		}
	}
}

// teeStore persists to a store and keeps a copy.
type teeStore struct {
	stream.Store
	copy *captureStore
}

func (s teeStore) AppendEvents(ctx context.Context, evs ...stream.Event) error {
	if err := s.Store.AppendEvents(ctx, evs...); err != nil {
		return err
	}
	return s.copy.AppendEvents(ctx, evs...)
}

func (c *captureStore) events() []stream.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]stream.Event(nil), c.evs...)
}
