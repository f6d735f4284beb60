package tasklog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/toolmux/toolmux/tool"

	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tasklog"
)

// A hub persisting to the task log: a second hub on the same log (a
// restarted gateway) continues the ids, and a client resuming after an id
// of the first hub gets exactly what it missed, from the log.
func TestLogIsTheStreamStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := tasklog.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	h1, err := stream.NewHub(ctx, stream.WithStore(l.StreamStore()))
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for i := range 5 {
		ev := h1.Publish(stream.EventMessage, "t1", stream.Message("m", string(rune('a'+i))))
		ids = append(ids, ev.ID)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := h1.Close(cctx); err != nil { // drains the persistence queue
		t.Fatal(err)
	}

	h2, err := stream.NewHub(ctx, stream.WithStore(l.StreamStore()), stream.WithMemory(1, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close(cctx)
	next := h2.Publish(stream.EventMessage, "t1", stream.Message("m", "f"))
	if next.ID <= ids[len(ids)-1] {
		t.Fatalf("the restarted hub reused ids: %d after %v", next.ID, ids)
	}
	sub, err := h2.Subscribe(cctx, stream.Filter{Task: "t1"}, ids[1])
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	want := append(append([]int64{}, ids[2:]...), next.ID)
	for _, w := range want {
		select {
		case ev := <-sub.Events():
			if ev.ID != w {
				t.Fatalf("resumed with id %d, want %d (%v)", ev.ID, w, want)
			}
		case <-cctx.Done():
			t.Fatalf("waiting for event %d", w)
		}
	}
}

// The tool_call events of a call recorded a moment before are stored as
// references to its record and replayed byte for byte; an event the record
// does not rebuild keeps its own data.
func TestToolCallEventsReferToTheRecord(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := open(t, dir)
	ok := &tool.Record{ID: tool.NewID(), Task: "t", Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "hi <there>", "n": float64(3)},
		Result: tool.TextResult("Echo: hi <there>"), Started: time.Now(), Ended: time.Now(), Attempts: 1}
	failed := &tool.Record{ID: tool.NewID(), Task: "t", Server: "fx", Tool: "boom", Arguments: map[string]any{},
		Result: tool.TextResult("stack trace"), Error: &tool.Error{Kind: tool.KindToolError, Message: "it broke", Suggestion: "fx__echo"},
		Started: time.Now(), Ended: time.Now()}
	l.Record(ctx, ok)
	l.Record(ctx, failed)
	name := tool.ExposedName("fx", "echo")
	enc := func(v any) json.RawMessage {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	evs := []tasklog.Event{
		{ID: 1, Name: "tool_call", Task: "t", Data: enc(stream.ToolCallInput(ok.ID, name, ok.Arguments))},
		{ID: 2, Name: "tool_call", Task: "t", Data: enc(stream.ToolCallResult(ok.ID, name, "Echo: hi <there>"))},
		{ID: 3, Name: "tool_call", Task: "t", Data: enc(stream.ToolCallInput(failed.ID, tool.ExposedName("fx", "boom"), nil))},
		{ID: 4, Name: "tool_call", Task: "t", Data: enc(stream.ToolCallResult(failed.ID, tool.ExposedName("fx", "boom"),
			"tool_error: it broke (did you mean fx__echo?)\nstack trace"))},
		// Cut for the stream: not what the record rebuilds.
		{ID: 5, Name: "tool_call", Task: "t", Data: enc(stream.ToolCallResult(ok.ID, name, "Echo: h\n[… 9 more bytes not shown]"))},
		// A call this log did not record.
		{ID: 6, Name: "tool_call", Task: "t", Data: enc(stream.ToolCallResult("elsewhere", "x__y", "done"))},
	}
	if err := l.AppendEvents(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	check := func(l *tasklog.Log) {
		t.Helper()
		got, err := l.EventsAfter(ctx, 0, "t", 0)
		if err != nil || len(got) != len(evs) {
			t.Fatalf("%d events, %v", len(got), err)
		}
		for i := range evs {
			if string(got[i].Data) != string(evs[i].Data) {
				t.Errorf("event %d:\n got  %s\n want %s", evs[i].ID, got[i].Data, evs[i].Data)
			}
		}
	}
	check(l)
	// Replaying the batch is harmless: the references compare as events.
	if err := l.AppendEvents(ctx, evs...); err != nil {
		t.Errorf("replay: %v", err)
	}
	l.Close()
	// Four of the six were stored as references: the journal holds the
	// result text once.
	segs, _ := filepath.Glob(filepath.Join(dir, tasklog.JournalDir, "*.seg"))
	var all []byte
	for _, s := range segs {
		b, _ := os.ReadFile(s)
		all = append(all, b...)
	}
	if n := bytes.Count(all, []byte(`"ref":`)); n != 4 {
		t.Errorf("%d events stored as references, want 4", n)
	}
	if n := bytes.Count(all, []byte(`stack trace`)); n != 1 {
		t.Errorf("the result text is stored %d times", n)
	}
	os.Remove(filepath.Join(dir, tasklog.JournalDir, tasklog.IndexName))
	check(open(t, dir))
}

// A large batch of events is stored deflated, and comes back as it was,
// before and after the index is rebuilt.
func TestLargeEventBatchesAreDeflated(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := open(t, dir)
	var evs []tasklog.Event
	for i := range 300 {
		evs = append(evs, tasklog.Event{ID: int64(i + 1), Name: "tool_state", Task: "t" + string(rune('a'+i%3)),
			Time: time.Unix(0, int64(i)).UTC(), Data: json.RawMessage(`{"call_id":"06h0zgv50w76zanhayb81twqyg","state":"executing","n":` + strconv.Itoa(i) + `}`)})
	}
	if err := l.AppendEvents(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	check := func(l *tasklog.Log) {
		got, err := l.EventsAfter(ctx, 0, "", 0)
		if err != nil || len(got) != len(evs) {
			t.Fatalf("%d events, %v", len(got), err)
		}
		for i := range evs {
			if got[i].ID != evs[i].ID || got[i].Task != evs[i].Task || !got[i].Time.Equal(evs[i].Time) || string(got[i].Data) != string(evs[i].Data) {
				t.Fatalf("event %d: %+v, want %+v", i, got[i], evs[i])
			}
		}
		if got, _ := l.EventsAfter(ctx, 290, "tb", 2); len(got) != 2 || got[0].ID != 293 || got[1].ID != 296 {
			t.Errorf("after 290 in tb, 2: %+v", got)
		}
	}
	check(l)
	l.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, tasklog.JournalDir, "*.seg"))
	var size int64
	for _, s := range segs {
		st, _ := os.Stat(s)
		size += st.Size()
	}
	if raw, _ := json.Marshal(evs); size > int64(len(raw))/3 {
		t.Errorf("300 events take %d bytes in the journal; their JSON is %d", size, len(raw))
	}
	os.Remove(filepath.Join(dir, tasklog.JournalDir, tasklog.IndexName))
	check(open(t, dir))
}
