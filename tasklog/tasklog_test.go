package tasklog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

var ctx = context.Background()

// The log is what the pipeline records to.
var _ pipeline.Recorder = (*tasklog.Log)(nil)

func TestOpenCreatesPrivateFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data", "toolmux")
	l := open(t, dir)
	if err := l.StartTask(ctx, tasklog.Task{ID: "t"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Task(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if l.Path() != filepath.Join(dir, tasklog.JournalDir) {
		t.Errorf("path %s", l.Path())
	}
	want := map[string]fs.FileMode{dir: 0o700, l.Path(): 0o700}
	ents, err := os.ReadDir(l.Path())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		want[filepath.Join(l.Path(), e.Name())] = 0o600
	}
	if len(want) < 5 {
		t.Errorf("files in the journal: %v", ents)
	}
	for path, mode := range want {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != mode {
			t.Errorf("%s has mode %v, want %v", path, st.Mode().Perm(), mode)
		}
	}
	var mode string
	if err := indexDB(t, dir).QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("the index's journal_mode %q %v", mode, err)
	}
	if v, err := l.Version(ctx); err != nil || v != tasklog.SchemaVersion {
		t.Errorf("version %d %v", v, err)
	}
	if _, err := tasklog.Open(ctx, ""); err == nil {
		t.Error("Open with no directory succeeded")
	}
	if !tasklog.Exists(dir) || tasklog.Exists(t.TempDir()) {
		t.Error("Exists")
	}
}

func TestTaskLifecycle(t *testing.T) {
	c := newClock()
	l := open(t, "", tasklog.WithClock(c.now))
	meta := map[string]any{"model": "m1", "turns": float64(3), "tags": []any{"a", "b"}}
	if err := l.StartTask(ctx, tasklog.Task{ID: "t1", Input: "What is the capital of France?\nAnswer briefly.", Metadata: meta}); err != nil {
		t.Fatal(err)
	}
	got, err := l.Task(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	start := c.now()
	want := &tasklog.Task{ID: "t1", Status: tasklog.StatusRunning, Created: start, Updated: start,
		Input: "What is the capital of France?\nAnswer briefly.", Metadata: meta}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	end := c.advance(90 * time.Second)
	if err := l.FinishTask(ctx, "t1", tasklog.StatusSuccess, `\boxed{Paris}`); err != nil {
		t.Fatal(err)
	}
	got, _ = l.Task(ctx, "t1")
	want.Status, want.FinalAnswer, want.Ended, want.Updated = tasklog.StatusSuccess, `\boxed{Paris}`, end, end
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	// JSON round trip of the API type.
	b, _ := json.Marshal(got)
	var back tasklog.Task
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(&back, got) {
		t.Fatalf("JSON round trip: %s -> %+v (%v)", b, back, err)
	}

	var ve *tasklog.ValidationError
	if err := l.FinishTask(ctx, "t1", tasklog.StatusRunning, ""); !errors.As(err, &ve) || ve.Field != "status" {
		t.Errorf("finishing as running: %v", err)
	}
	if err := l.FinishTask(ctx, "t1", "completed", ""); !errors.As(err, &ve) {
		t.Errorf("unknown status: %v", err)
	}
	if err := l.StartTask(ctx, tasklog.Task{}); !errors.As(err, &ve) || ve.Field != "id" {
		t.Errorf("no id: %v", err)
	}
	if err := l.StartTask(ctx, tasklog.Task{ID: "x", Status: tasklog.StatusFailed}); !errors.As(err, &ve) {
		t.Errorf("starting failed: %v", err)
	}

	// Restarting resumes: running again, end cleared, input kept when not given.
	c.advance(time.Minute)
	if err := l.StartTask(ctx, tasklog.Task{ID: "t1"}); err != nil {
		t.Fatal(err)
	}
	got, _ = l.Task(ctx, "t1")
	if got.Status != tasklog.StatusRunning || !got.Ended.IsZero() || got.Input != want.Input || !got.Created.Equal(start) || !reflect.DeepEqual(got.Metadata, meta) {
		t.Errorf("resumed task %+v", got)
	}
}

func TestNotFound(t *testing.T) {
	l := open(t, "")
	checks := map[string]error{}
	_, checks["Task"] = l.Task(ctx, "nope")
	checks["FinishTask"] = l.FinishTask(ctx, "nope", tasklog.StatusFailed, "")
	_, checks["Steps"] = l.Steps(ctx, "nope")
	_, checks["Messages"] = l.Messages(ctx, "nope", "")
	_, checks["Sessions"] = l.Sessions(ctx, "nope")
	_, checks["Calls"] = l.Calls(ctx, "nope")
	_, checks["Detail"] = l.Detail(ctx, "nope")
	_, checks["Export"] = l.Export(ctx, "nope")
	for name, err := range checks {
		var nf *tasklog.NotFoundError
		if !errors.Is(err, tasklog.ErrNotFound) || !errors.As(err, &nf) || nf.Task != "nope" {
			t.Errorf("%s: %v, want a NotFoundError for nope", name, err)
		}
	}
	if _, err := l.Task(ctx, "nope"); err == nil || !strings.Contains(err.Error(), `"nope" not found`) {
		t.Errorf("message: %v", err)
	}
}

// A task is found by its id or by a prefix of it that no other task's id
// starts with; an ambiguous prefix lists the candidates, newest first and
// at most ten; GLOB's wildcards in a prefix are plain characters.
func TestResolveID(t *testing.T) {
	c := newClock()
	l := open(t, "", tasklog.WithClock(c.now))
	for _, id := range []string{"06ab1", "06ab2", "06b", "x*y", "xzy", "06ab"} {
		c.advance(time.Second)
		if err := l.StartTask(ctx, tasklog.Task{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	for in, want := range map[string]string{"06b": "06b", "06ab1": "06ab1", "06ab": "06ab", "x*": "x*y", "xz": "xzy"} {
		if got, err := l.ResolveID(ctx, in); err != nil || got != want {
			t.Errorf("ResolveID(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	var ae *tasklog.AmbiguousError
	_, err := l.ResolveID(ctx, "06a")
	if !errors.As(err, &ae) || errors.Is(err, tasklog.ErrNotFound) || ae.More ||
		strings.Join(ae.Candidates, ",") != "06ab,06ab2,06ab1" {
		t.Errorf("ambiguous prefix: %v %+v", err, ae)
	}
	for _, in := range []string{"", "07", "x?", "06ab3"} {
		var nf *tasklog.NotFoundError
		if _, err := l.ResolveID(ctx, in); !errors.As(err, &nf) || nf.Task != in {
			t.Errorf("ResolveID(%q): %v, want a NotFoundError", in, err)
		}
	}
	for i := range 12 {
		if err := l.StartTask(ctx, tasklog.Task{ID: fmt.Sprintf("many-%02d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.ResolveID(ctx, "many-"); !errors.As(err, &ae) || len(ae.Candidates) != 10 || !ae.More {
		t.Errorf("twelve matches: %v", err)
	}
}

func TestTasksListing(t *testing.T) {
	c := newClock()
	l := open(t, "", tasklog.WithClock(c.now))
	var created []time.Time
	for i, id := range []string{"a", "b", "c", "d", "e"} {
		created = append(created, c.advance(time.Second))
		if err := l.StartTask(ctx, tasklog.Task{ID: id, Input: "task " + id}); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < i; j++ {
			rec := &tool.Record{ID: tool.NewID(), Task: id, Server: "s", Tool: "t", Started: c.now(), Ended: c.now()}
			if j%2 == 1 {
				rec.Error = tool.NewError(tool.KindTimeout, "slow")
			}
			l.Record(ctx, rec)
		}
	}
	if err := l.FinishTask(ctx, "b", tasklog.StatusFailed, "no"); err != nil {
		t.Fatal(err)
	}
	if err := l.FinishTask(ctx, "d", tasklog.StatusFailed, "no"); err != nil {
		t.Fatal(err)
	}
	ids := func(s []tasklog.TaskSummary) string {
		var out []string
		for _, x := range s {
			out = append(out, x.ID)
		}
		return strings.Join(out, ",")
	}
	all, err := l.Tasks(ctx, tasklog.Filter{})
	if err != nil || ids(all) != "e,d,c,b,a" {
		t.Fatalf("all: %s %v", ids(all), err)
	}
	e := all[0]
	if e.Calls != 4 || e.Errors != 2 || e.Input != "task e" || e.Status != tasklog.StatusRunning || !e.Created.Equal(created[4]) {
		t.Errorf("summary of e: %+v", e)
	}
	if all[4].Calls != 0 || all[4].Errors != 0 {
		t.Errorf("summary of a: %+v", all[4])
	}
	for _, tc := range []struct {
		f    tasklog.Filter
		want string
	}{
		{tasklog.Filter{Limit: 2}, "e,d"},
		{tasklog.Filter{Status: tasklog.StatusFailed}, "d,b"},
		{tasklog.Filter{Status: tasklog.StatusRunning, Limit: 1}, "e"},
		{tasklog.Filter{Before: created[3]}, "c,b,a"},
		{tasklog.Filter{Before: created[3], Limit: 2}, "c,b"},
		{tasklog.Filter{Status: tasklog.StatusSuccess}, ""},
	} {
		got, err := l.Tasks(ctx, tc.f)
		if err != nil || ids(got) != tc.want {
			t.Errorf("%+v: %q %v, want %q", tc.f, ids(got), err, tc.want)
		}
	}
	var ve *tasklog.ValidationError
	if _, err := l.Tasks(ctx, tasklog.Filter{Status: "done"}); !errors.As(err, &ve) {
		t.Errorf("unknown status: %v", err)
	}
}

func TestSteps(t *testing.T) {
	l := open(t, "")
	at := time.Date(2026, 1, 19, 12, 0, 0, 123456789, time.UTC)
	steps := []tasklog.Step{
		{Name: "Main Agent | Turn: 1 | LLM Call", Message: "calling the model", Time: at},
		{Name: "Main Agent | Turn: 1 | Tool Call", Message: "web_search", Level: tasklog.LevelWarning, Time: at.Add(time.Second),
			Metadata: map[string]any{"query": "paris", "n": float64(3), "nested": map[string]any{"ok": true}}},
		{Name: "debug", Level: tasklog.LevelDebug, Time: at.Add(2 * time.Second)},
		{Name: "boom", Message: "failed", Level: tasklog.LevelError, Time: at.Add(time.Second)}, // out of time order: kept in write order
	}
	for _, s := range steps {
		if err := l.Step(ctx, "t", s); err != nil {
			t.Fatal(err)
		}
	}
	got, err := l.Steps(ctx, "t")
	if err != nil || len(got) != len(steps) {
		t.Fatalf("%d steps, %v", len(got), err)
	}
	for i := range steps {
		want := steps[i]
		if want.Level == "" {
			want.Level = tasklog.LevelInfo
		}
		if i > 0 && got[i].Seq <= got[i-1].Seq {
			t.Errorf("sequence not increasing: %d after %d", got[i].Seq, got[i-1].Seq)
		}
		want.Seq = got[i].Seq
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("step %d:\n got  %+v\n want %+v", i, got[i], want)
		}
	}
	// A step for a task nobody started creates it, running.
	task, err := l.Task(ctx, "t")
	if err != nil || task.Status != tasklog.StatusRunning || !task.Created.Equal(at) {
		t.Errorf("task made by a step: %+v %v", task, err)
	}
	var ve *tasklog.ValidationError
	if err := l.Step(ctx, "t", tasklog.Step{Name: "x", Level: "failed"}); !errors.As(err, &ve) || ve.Field != "level" {
		t.Errorf("bad level: %v", err)
	}
	if err := l.Step(ctx, "", tasklog.Step{Name: "x"}); !errors.As(err, &ve) {
		t.Errorf("no task: %v", err)
	}
	if err := l.Step(ctx, "t", tasklog.Step{Name: "x", Metadata: map[string]any{"f": math.Inf(1)}}); !errors.As(err, &ve) || ve.Field != "metadata" {
		t.Errorf("bad metadata: %v", err)
	}
	if got, _ := l.Steps(ctx, "t"); len(got) != len(steps) {
		t.Errorf("rejected steps were stored: %d", len(got))
	}
	// An unset time is the clock's.
	before := time.Now()
	if err := l.Step(ctx, "t", tasklog.Step{Name: "now"}); err != nil {
		t.Fatal(err)
	}
	got, _ = l.Steps(ctx, "t")
	if last := got[len(got)-1]; last.Time.Before(before) || last.Time.After(time.Now()) {
		t.Errorf("default time %v", last.Time)
	}
}

func TestMessages(t *testing.T) {
	l := open(t, "")
	at := time.Date(2026, 1, 19, 12, 0, 0, 0, time.UTC)
	main1 := []tasklog.Message{
		{Role: "system", Content: json.RawMessage(`"You are a helpful agent."`), Time: at},
		{Role: "user", Content: json.RawMessage(`[{"type":"text","text":"What is the capital of France?"}]`), Time: at},
	}
	main2 := []tasklog.Message{
		{Role: "assistant", Content: json.RawMessage(`null`), ToolCalls: json.RawMessage(`[{"id":"c1","type":"function","function":{"name":"search","arguments":"{\"q\":\"paris\"}"}}]`), Time: at},
		{Role: "tool", Name: "search", ToolCallID: "c1", Content: json.RawMessage(`"Paris is the capital."`), Time: at},
		{Role: "assistant", Content: json.RawMessage(`"\\boxed{Paris}"`), Time: at},
	}
	sub := []tasklog.Message{{Role: "user", Content: json.RawMessage(`"browse this"`), Time: at}}
	if err := l.AppendMessages(ctx, "t", "", main1...); err != nil {
		t.Fatal(err)
	}
	if err := l.AppendMessages(ctx, "t", "agent-browsing_1", sub...); err != nil {
		t.Fatal(err)
	}
	if err := l.AppendMessages(ctx, "t", tasklog.MainSession, main2...); err != nil {
		t.Fatal(err)
	}
	if err := l.AppendMessages(ctx, "t", "main"); err != nil {
		t.Fatal("appending nothing:", err)
	}
	got, err := l.Messages(ctx, "t", tasklog.MainSession)
	if err != nil {
		t.Fatal(err)
	}
	if want := append(append([]tasklog.Message{}, main1...), main2...); !reflect.DeepEqual(got, want) {
		t.Errorf("main history:\n got  %+v\n want %+v", got, want)
	}
	if got, _ := l.Messages(ctx, "t", "agent-browsing_1"); !reflect.DeepEqual(got, sub) {
		t.Errorf("sub history %+v", got)
	}
	if got, err := l.Messages(ctx, "t", "nobody"); err != nil || len(got) != 0 {
		t.Errorf("unknown session: %v %v", got, err)
	}
	sessions, err := l.Sessions(ctx, "t")
	if err != nil || strings.Join(sessions, ",") != "main,agent-browsing_1" {
		t.Errorf("sessions %v %v", sessions, err)
	}
	// JSON round trip of a message.
	b, _ := json.Marshal(got[2])
	if string(b) != `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"search","arguments":"{\"q\":\"paris\"}"}}],"timestamp":"2026-01-19T12:00:00Z"}` {
		t.Errorf("message JSON %s", b)
	}
	// Empty content is null; invalid JSON is refused, and nothing of the batch is stored.
	if err := l.AppendMessages(ctx, "t", "s2", tasklog.Message{Role: "assistant"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Messages(ctx, "t", "s2"); len(got) != 1 || string(got[0].Content) != "null" || got[0].Time.IsZero() {
		t.Errorf("empty content: %+v", got)
	}
	var ve *tasklog.ValidationError
	err = l.AppendMessages(ctx, "t", "s3", tasklog.Message{Role: "user", Content: json.RawMessage(`"ok"`)}, tasklog.Message{Role: "user", Content: json.RawMessage(`not json`)})
	if !errors.As(err, &ve) || ve.Field != "content" {
		t.Errorf("invalid content: %v", err)
	}
	if got, _ := l.Messages(ctx, "t", "s3"); len(got) != 0 {
		t.Errorf("half a refused batch stored: %+v", got)
	}
	if err := l.AppendMessages(ctx, "t", "s3", tasklog.Message{Content: json.RawMessage(`"x"`)}); !errors.As(err, &ve) || ve.Field != "role" {
		t.Errorf("no role: %v", err)
	}
}

// fullRecord is a record with every field set, times in UTC as stored.
func fullRecord(task string) *tool.Record {
	start := time.Date(2026, 2, 3, 4, 5, 6, 789000000, time.UTC)
	return &tool.Record{
		ID: tool.NewID(), Task: task, Session: "agent-browsing_1", Server: "search", Tool: "google_search", Name: "search__google_search",
		Arguments: map[string]any{"q": "capital of France", "num": float64(10), "opts": map[string]any{"safe": true}},
		Result: &tool.Result{Content: []tool.Content{{Type: tool.ContentText, Text: "Paris"}, {Type: tool.ContentText, Text: "second part"}},
			Structured: map[string]any{"organic": []any{"x"}}, IsError: true},
		Error:        &tool.Error{Kind: tool.KindToolError, Message: "quota", Server: "search", Tool: "google_search", Detail: "stderr tail"},
		Started:      start,
		Ended:        start.Add(1500 * time.Millisecond),
		Duration:     1500 * time.Millisecond,
		Attempts:     2,
		Notes:        []tool.Note{{Layer: "repair", Message: "renamed query to q", Data: map[string]any{"from": "query"}}},
		Verdict:      &tool.Verdict{Rollback: true, Reason: "empty results"},
		Instructions: []string{"use fewer words"},
	}
}

func TestRecordRoundTrip(t *testing.T) {
	l := open(t, "")
	rec := fullRecord("t")
	l.Record(ctx, rec)
	calls, err := l.Calls(ctx, "t")
	if err != nil || len(calls) != 1 {
		t.Fatalf("%d calls, %v", len(calls), err)
	}
	want, _ := json.Marshal(rec)
	got, _ := json.Marshal(calls[0])
	if string(got) != string(want) {
		t.Errorf("record changed on the way:\n got  %s\n want %s", got, want)
	}
	if calls[0].Duration != rec.Duration {
		t.Errorf("duration %v", calls[0].Duration)
	}
	// The call created its task, running, created when the call started.
	task, err := l.Task(ctx, "t")
	if err != nil || task.Status != tasklog.StatusRunning || !task.Created.Equal(rec.Started) {
		t.Errorf("task made by a record: %+v %v", task, err)
	}
	// The same id twice keeps the first.
	again := *rec
	again.Tool = "other"
	l.Record(ctx, &again)
	if calls, _ := l.Calls(ctx, "t"); len(calls) != 1 || calls[0].Tool != "google_search" {
		t.Errorf("duplicate id: %+v", calls)
	}
	if s := l.Stats(); s.Recorded != 2 || s.Lost != 0 || s.Retried != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestRecordEdgeCases(t *testing.T) {
	logger, logs := bufferLogger()
	l := open(t, "", tasklog.WithLogger(logger))

	// A cancelled call's context does not stop its record.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	cancelled := &tool.Record{ID: tool.NewID(), Task: "t", Server: "s", Tool: "slow", Error: tool.NewError(tool.KindCancelled, "cancelled"),
		Started: time.Now(), Ended: time.Now()}
	l.Record(cctx, cancelled)

	// A call outside any task is kept, and listed under the empty task.
	loose := &tool.Record{ID: tool.NewID(), Server: "s", Tool: "t", Started: time.Now(), Ended: time.Now()}
	l.Record(ctx, loose)

	// Arguments JSON cannot hold: the record is kept without them.
	nan := &tool.Record{ID: tool.NewID(), Task: "t", Server: "s", Tool: "calc", Arguments: map[string]any{"x": math.NaN()},
		Started: time.Now(), Ended: time.Now()}
	l.Record(ctx, nan)

	// No id: one is given.
	noID := &tool.Record{Task: "t", Server: "s", Tool: "anon", Started: time.Now()}
	l.Record(ctx, noID)

	// nil: counted and logged, no panic.
	l.Record(ctx, nil)

	calls, err := l.Calls(ctx, "t")
	if err != nil || len(calls) != 3 {
		t.Fatalf("%d calls, %v", len(calls), err)
	}
	if calls[0].ID != cancelled.ID || tool.KindOf(calls[0].Err()) != tool.KindCancelled {
		t.Errorf("cancelled call: %+v", calls[0])
	}
	if calls[1].ID != nan.ID || calls[1].Arguments != nil || len(calls[1].Notes) != 1 || !strings.Contains(calls[1].Notes[0].Message, "unsupported value") {
		t.Errorf("unmarshallable call: %+v", calls[1])
	}
	if nan.Arguments == nil || len(nan.Notes) != 0 {
		t.Error("the caller's record was modified")
	}
	if calls[2].ID == "" || calls[2].Tool != "anon" || noID.ID != "" {
		t.Errorf("call without id: %+v (caller's id %q)", calls[2], noID.ID)
	}
	taskless, err := l.Calls(ctx, "")
	if err != nil || len(taskless) != 1 || taskless[0].ID != loose.ID || taskless[0].Task != "" {
		t.Errorf("taskless calls %+v %v", taskless, err)
	}
	s := l.Stats()
	if s.Recorded != 4 || s.Lost != 1 || s.LastError != "nil record" {
		t.Errorf("stats %+v", s)
	}
	if !strings.Contains(logs.String(), "call record lost") {
		t.Errorf("the nil record was not logged:\n%s", logs)
	}
}

// A write that fails (a full disk) is retried once; if the retry fails
// too the record is counted and logged as lost.
func TestRecordRetriesOnceThenCountsTheLoss(t *testing.T) {
	dir := t.TempDir()
	logger, logs := bufferLogger()
	l := open(t, dir, tasklog.WithLogger(logger))
	if err := l.StartTask(ctx, tasklog.Task{ID: "t"}); err != nil {
		t.Fatal(err)
	}
	full := errors.New("no space left on device")
	failures := 0
	failNext := func(n int) {
		failures = n
		tasklog.SetJournalFaults(l, func(b []byte) (int, error) {
			if failures > 0 {
				failures--
				return 0, full
			}
			return len(b), nil
		})
	}

	// One failed write: the retry succeeds.
	failNext(1)
	first := &tool.Record{ID: tool.NewID(), Task: "t", Server: "s", Tool: "a", Started: time.Now()}
	l.Record(ctx, first)
	if s := l.Stats(); s.Recorded != 1 || s.Retried != 1 || s.Lost != 0 || !strings.Contains(s.LastError, "no space") {
		t.Errorf("after a retried write: %+v", s)
	}
	if !strings.Contains(logs.String(), "retrying") {
		t.Errorf("the retry was not logged:\n%s", logs)
	}

	// Both attempts fail.
	failNext(2)
	second := &tool.Record{ID: tool.NewID(), Task: "t", Server: "s", Tool: "b", Started: time.Now()}
	l.Record(ctx, second)
	tasklog.SetJournalFaults(l, nil)
	if s := l.Stats(); s.Recorded != 1 || s.Retried != 2 || s.Lost != 1 {
		t.Errorf("after a lost record: %+v", s)
	}
	if !strings.Contains(logs.String(), "call record lost") || !strings.Contains(logs.String(), second.ID) {
		t.Errorf("the loss was not logged with the id:\n%s", logs)
	}
	calls, _ := l.Calls(ctx, "t")
	if len(calls) != 1 || calls[0].ID != first.ID {
		t.Errorf("calls %+v", calls)
	}
}

func TestEvents(t *testing.T) {
	l := open(t, "")
	if id, err := l.LastEventID(ctx); err != nil || id != 0 {
		t.Fatalf("empty log: %d %v", id, err)
	}
	at := time.Date(2026, 1, 19, 12, 0, 0, 0, time.UTC)
	evs := []tasklog.Event{
		{ID: 1, Name: "start_of_workflow", Task: "t1", Time: at, Data: json.RawMessage(`{"workflow_id":"t1","input":[{"role":"user","content":"hi"}]}`)},
		{ID: 2, Name: "heartbeat", Time: at},
		{ID: 3, Name: "tool_call", Task: "t2", Time: at, Data: json.RawMessage(`{"tool_call_id":"c1","tool_name":"search","tool_input":{"q":"x"}}`)},
		{ID: 5, Name: "end_of_workflow", Task: "t1", Time: at, Data: json.RawMessage(`{"workflow_id":"t1"}`)},
	}
	if err := l.AppendEvents(ctx, evs[:2]...); err != nil {
		t.Fatal(err)
	}
	if err := l.AppendEvents(ctx, evs[2:]...); err != nil {
		t.Fatal(err)
	}
	got, err := l.EventsAfter(ctx, 0, "", 0)
	if err != nil || !reflect.DeepEqual(got, evs) {
		t.Fatalf("all events:\n got  %+v\n want %+v\n %v", got, evs, err)
	}
	for _, tc := range []struct {
		after int64
		task  string
		limit int
		want  []int64
	}{
		{1, "", 0, []int64{2, 3, 5}},
		{0, "t1", 0, []int64{1, 5}},
		{1, "t1", 0, []int64{5}},
		{0, "", 2, []int64{1, 2}},
		{5, "", 0, nil},
		{0, "nobody", 0, nil},
	} {
		got, err := l.EventsAfter(ctx, tc.after, tc.task, tc.limit)
		var ids []int64
		for _, e := range got {
			ids = append(ids, e.ID)
		}
		if err != nil || !reflect.DeepEqual(ids, tc.want) || got == nil {
			t.Errorf("after %d task %q limit %d: %v %v, want %v", tc.after, tc.task, tc.limit, ids, err, tc.want)
		}
	}
	if id, err := l.LastEventID(ctx); err != nil || id != 5 {
		t.Errorf("last id %d %v", id, err)
	}
	// JSON round trip.
	b, _ := json.Marshal(got[0])
	var back tasklog.Event
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, got[0]) {
		t.Errorf("JSON round trip %s: %+v %v", b, back, err)
	}
	// Replaying a batch is harmless; a different event under a taken id
	// fails the whole batch.
	if err := l.AppendEvents(ctx, evs...); err != nil {
		t.Errorf("replay: %v", err)
	}
	var de *tasklog.DuplicateEventError
	err = l.AppendEvents(ctx, tasklog.Event{ID: 6, Name: "message", Time: at}, tasklog.Event{ID: 3, Name: "tool_call", Task: "t2", Time: at, Data: json.RawMessage(`{}`)})
	if !errors.As(err, &de) || de.ID != 3 {
		t.Errorf("conflicting id: %v", err)
	}
	if id, _ := l.LastEventID(ctx); id != 5 {
		t.Errorf("a failed batch was partly stored: last id %d", id)
	}
	var ve *tasklog.ValidationError
	if err := l.AppendEvents(ctx, tasklog.Event{ID: 7, Name: "x", Data: json.RawMessage(`{`)}); !errors.As(err, &ve) {
		t.Errorf("invalid data: %v", err)
	}
	if err := l.AppendEvents(ctx, tasklog.Event{ID: 7}); !errors.As(err, &ve) {
		t.Errorf("no name: %v", err)
	}
	if err := l.AppendEvents(ctx); err != nil {
		t.Errorf("no events: %v", err)
	}
}

func TestRecoverInterrupted(t *testing.T) {
	c := newClock()
	l := open(t, "", tasklog.WithClock(c.now))
	for _, id := range []string{"old", "done"} {
		if err := l.StartTask(ctx, tasklog.Task{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.FinishTask(ctx, "done", tasklog.StatusSuccess, "ok"); err != nil {
		t.Fatal(err)
	}
	lastOld := c.now()
	c.advance(10 * time.Minute)
	if err := l.StartTask(ctx, tasklog.Task{ID: "fresh"}); err != nil {
		t.Fatal(err)
	}
	c.advance(time.Minute)
	ids, err := l.RecoverInterrupted(ctx, 5*time.Minute)
	if err != nil || strings.Join(ids, ",") != "old" {
		t.Fatalf("recovered %v %v", ids, err)
	}
	old, _ := l.Task(ctx, "old")
	if old.Status != tasklog.StatusInterrupted || !old.Ended.Equal(lastOld) || !old.Updated.Equal(c.now()) {
		t.Errorf("old: %+v", old)
	}
	steps, _ := l.Steps(ctx, "old")
	if len(steps) != 1 || steps[0].Name != "interrupted" || steps[0].Level != tasklog.LevelWarning {
		t.Errorf("steps %+v", steps)
	}
	for id, want := range map[string]tasklog.Status{"fresh": tasklog.StatusRunning, "done": tasklog.StatusSuccess} {
		if task, _ := l.Task(ctx, id); task.Status != want {
			t.Errorf("%s: %s", id, task.Status)
		}
	}
	if ids, err := l.RecoverInterrupted(ctx, 0); err != nil || strings.Join(ids, ",") != "fresh" {
		t.Errorf("olderThan 0: %v %v", ids, err)
	}
}

func TestClose(t *testing.T) {
	l, err := tasklog.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	checks := map[string]error{}
	_, checks["Task"] = l.Task(ctx, "x")
	checks["StartTask"] = l.StartTask(ctx, tasklog.Task{ID: "x"})
	checks["Step"] = l.Step(ctx, "x", tasklog.Step{Name: "x"})
	checks["AppendEvents"] = l.AppendEvents(ctx, tasklog.Event{ID: 1, Name: "x"})
	_, checks["Tasks"] = l.Tasks(ctx, tasklog.Filter{})
	_, checks["LastEventID"] = l.LastEventID(ctx)
	for name, err := range checks {
		if !errors.Is(err, tasklog.ErrClosed) {
			t.Errorf("%s after Close: %v", name, err)
		}
	}
	l.Record(ctx, &tool.Record{ID: "x", Server: "s", Tool: "t"})
	if s := l.Stats(); s.Lost != 1 || s.Retried != 0 {
		t.Errorf("Record after Close: %+v", s)
	}
}
