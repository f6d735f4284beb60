package jsjournal_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tasklog/jsjournal"
	"github.com/toolmux/toolmux/tool"
)

// fixedClock is a clock both logs of a comparison share the times of.
type fixedClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fixedClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

func newClock() *fixedClock { c := &fixedClock{}; c.reset(); return c }

// reset starts the clock again, so that two logs opened differently
// write the same times.
func (c *fixedClock) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC)
}

func openLog(t testing.TB, opts ...tasklog.Option) *tasklog.Log {
	t.Helper()
	l, err := tasklog.Open(bg, t.TempDir(), opts...)
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

// fill writes one task's life, as the agent and the pipeline do: start,
// steps, the histories of two sessions, calls, events, the end.
func fill(t testing.TB, l *tasklog.Log, task string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	start := time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC)
	must(l.StartTask(bg, tasklog.Task{ID: task, Input: "what is 6*7?", Metadata: map[string]any{"model": "m1"}}))
	must(l.Step(bg, task, tasklog.Step{Name: "Main Agent | Turn: 1 | LLM Call", Message: "thinking", Metadata: map[string]any{"k": "v"}}))
	must(l.AppendMessages(bg, task, tasklog.MainSession,
		tasklog.Message{Role: "system", Content: json.RawMessage(`"sys"`)},
		tasklog.Message{Role: "user", Content: json.RawMessage(`"what is 6*7?"`)}))
	must(l.AppendMessages(bg, task, "agent-browsing_1", tasklog.Message{Role: "user", Content: json.RawMessage(`"look it up"`)}))
	for i := range 3 {
		id := fmt.Sprintf("%s-call-%d", task, i)
		rec := &tool.Record{ID: id, Task: task, Session: "main", Server: "fx", Tool: "echo",
			Arguments: map[string]any{"message": fmt.Sprintf("m%d", i)},
			Started:   start.Add(time.Duration(i) * time.Second), Duration: 20 * time.Millisecond, Attempts: 1}
		if i == 2 {
			rec.Error = &tool.Error{Kind: tool.KindTimeout, Message: "too slow"}
		}
		l.Record(bg, rec)
		must(l.AppendEvents(bg,
			tasklog.Event{ID: int64(10*i + 1), Name: "tool_call", Task: task, Time: start, Data: json.RawMessage(fmt.Sprintf(`{"id":%q,"phase":"input"}`, id))},
			tasklog.Event{ID: int64(10*i + 2), Name: "tool_call", Task: task, Time: start, Data: json.RawMessage(fmt.Sprintf(`{"id":%q,"phase":"result"}`, id))}))
	}
	must(l.Step(bg, task, tasklog.Step{Name: "Main Agent | Turn: 2 | Final", Message: "42"}))
	must(l.FinishTask(bg, task, tasklog.StatusSuccess, "42"))
}

// comparable is a task's detail less what depends on where the journal
// put its records (positions order steps; they are not the same numbers
// in segment files and in a stream).
func comparable(t testing.TB, l *tasklog.Log, task string) (detail, export string, events []tasklog.Event) {
	t.Helper()
	d, err := l.Detail(bg, task)
	if err != nil {
		t.Fatal(err)
	}
	for i := range d.Steps {
		d.Steps[i].Seq = 0
	}
	b, _ := json.Marshal(d)
	x, err := l.Export(bg, task)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := l.EventsAfter(bg, 0, task, 100)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), string(x), evs
}

// The task log over a JetStream journal answers Detail, Export and
// EventsAfter exactly as over the local segment files; and a second
// process's log on another data directory, over the same stream (the
// serve node's projector), builds the same index from the stream alone.
func TestLogOverJetStreamLikeLocal(t *testing.T) {
	localClock := newClock()
	local := openLog(t, tasklog.WithClock(localClock.now))
	localClock.reset()
	fill(t, local, "run-1")

	s := startServer(t, t.TempDir(), 0)
	js := connect(t, s)
	jsClock := newClock()
	remote := openLog(t, tasklog.WithClock(jsClock.now), tasklog.WithJournal(openJournal(t, js, jsjournal.Config{})))
	jsClock.reset()
	fill(t, remote, "run-1")

	wantD, wantX, wantE := comparable(t, local, "run-1")
	if d, _ := local.Detail(bg, "run-1"); len(d.Steps) != 2 || len(d.Sessions) != 2 || len(d.Calls) != 3 || d.Status != tasklog.StatusSuccess {
		t.Fatalf("the local log's detail: %s", wantD)
	}
	gotD, gotX, gotE := comparable(t, remote, "run-1")
	if gotD != wantD {
		t.Errorf("Detail over JetStream:\n%s\nlocal:\n%s", gotD, wantD)
	}
	if gotX != wantX {
		t.Errorf("Export over JetStream:\n%s\nlocal:\n%s", gotX, wantX)
	}
	if len(wantE) != 6 || !reflect.DeepEqual(gotE, wantE) {
		t.Errorf("EventsAfter over JetStream:\n%+v\nlocal:\n%+v", gotE, wantE)
	}
	if after, err := remote.EventsAfter(bg, 11, "run-1", 2); err != nil || len(after) != 2 || after[0].ID != 12 || after[1].ID != 21 {
		t.Errorf("EventsAfter(11, limit 2): %+v %v", after, err)
	}

	// Another node: its own index, built from the stream.
	projector := openLog(t, tasklog.WithJournal(openJournal(t, connect(t, s), jsjournal.Config{})))
	pD, pX, pE := comparable(t, projector, "run-1")
	if pD != gotD || pX != gotX || !reflect.DeepEqual(pE, gotE) {
		t.Errorf("the projector's index differs:\n%s\nwriter's:\n%s", pD, gotD)
	}
	// It sees what the writer appends later.
	if err := remote.Step(bg, "run-1", tasklog.Step{Name: "late"}); err != nil {
		t.Fatal(err)
	}
	steps, err := projector.Steps(bg, "run-1")
	if err != nil || len(steps) != 3 || steps[2].Name != "late" {
		t.Fatalf("the projector's steps after a later write: %+v %v", steps, err)
	}
}

// Through the task log, a presumed-dead worker's writes to a run another
// worker has claimed fail with the journal's *OwnershipError, and the
// index holds only the new owner's.
func TestLogStaleOwnerRefused(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	oldJ := openJournal(t, connect(t, s), jsjournal.Config{})
	old := openLog(t, tasklog.WithJournal(oldJ))
	if _, err := oldJ.Claim(bg, "run-1", "worker-a"); err != nil {
		t.Fatal(err)
	}
	if err := old.StartTask(bg, tasklog.Task{ID: "run-1", Input: "q"}); err != nil {
		t.Fatal(err)
	}

	newJ := openJournal(t, connect(t, s), jsjournal.Config{})
	neu := openLog(t, tasklog.WithJournal(newJ))
	if _, err := newJ.Claim(bg, "run-1", "worker-b"); err != nil {
		t.Fatal(err)
	}
	if err := neu.Step(bg, "run-1", tasklog.Step{Name: "resumed"}); err != nil {
		t.Fatal(err)
	}
	var oe *jsjournal.OwnershipError
	if err := old.Step(bg, "run-1", tasklog.Step{Name: "stale"}); !errors.As(err, &oe) {
		t.Fatalf("the stale worker's step: %v", err)
	}
	if err := old.FinishTask(bg, "run-1", tasklog.StatusFailed, "stale"); !errors.As(err, &oe) {
		t.Fatalf("the stale worker's end: %v", err)
	}
	old.Record(bg, &tool.Record{ID: "stale-call", Task: "run-1", Server: "fx", Tool: "echo"})
	if st := old.Stats(); st.Lost != 1 {
		t.Errorf("the stale worker's call record: %+v", st)
	}
	d, err := neu.Detail(bg, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if d.Status != tasklog.StatusRunning || len(d.Steps) != 1 || d.Steps[0].Name != "resumed" || len(d.Calls) != 0 {
		t.Errorf("after the stale writes: status %s, steps %+v, %d calls", d.Status, d.Steps, len(d.Calls))
	}
}

// A run left running by a process of this host that has died is not
// marked interrupted by a Log opened over a fleet's journal (the work
// queue hands it to another worker, which resumes it); over the local
// journal it would be.
func TestLogLeavesOwnershipToTheFleet(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	now := time.Now().UnixNano()
	start := []byte(fmt.Sprintf(`{"v":1,"type":"task.start","id":"start-1","task":"run-9","at":%d,"owner":"%s/%d/1","start":{"created":%d,"input":"q"}}`,
		now, host, dead.Process.Pid, now))

	s := startServer(t, t.TempDir(), 0)
	j := openJournal(t, connect(t, s), jsjournal.Config{})
	if _, err := j.Append(bg, start); err != nil {
		t.Fatal(err)
	}
	l := openLog(t, tasklog.WithJournal(j))
	task, err := l.Task(bg, "run-9")
	if err != nil || task.Status != tasklog.StatusRunning {
		t.Fatalf("over the fleet's journal: %+v %v", task, err)
	}

	// The contrast: the same record in a local journal, by the same dead
	// process, is marked interrupted at Open.
	dir := t.TempDir()
	local, err := tasklog.Open(bg, dir, tasklog.WithJournal(plainJournal{j}))
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	task, err = local.Task(bg, "run-9")
	if err != nil || task.Status != tasklog.StatusInterrupted {
		t.Fatalf("over a journal that does not decide ownership: %+v %v", task, err)
	}
}

// plainJournal hides DecidesOwnership: a journal like the local one.
type plainJournal struct{ tasklog.Journal }

func (plainJournal) Close() error { return nil }
