package tasklog_test

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

// schemaV1 is version 1 of the schema as released, written out here rather
// than taken from the package, so the test notices if a released step is
// edited.
const schemaV1 = `
CREATE TABLE schema_version (version INTEGER NOT NULL);
INSERT INTO schema_version VALUES (1);
CREATE TABLE tasks (
	id TEXT PRIMARY KEY,
	status TEXT NOT NULL CHECK (status IN ('running','success','failed','cancelled','interrupted')),
	created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, ended_at INTEGER,
	input TEXT NOT NULL DEFAULT '', final_answer TEXT NOT NULL DEFAULT '', metadata TEXT NOT NULL DEFAULT '{}');
CREATE INDEX tasks_created ON tasks (created_at, id);
CREATE INDEX tasks_status ON tasks (status, created_at, id);
CREATE TABLE steps (
	seq INTEGER PRIMARY KEY AUTOINCREMENT,
	task_id TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
	name TEXT NOT NULL, message TEXT NOT NULL DEFAULT '',
	level TEXT NOT NULL CHECK (level IN ('debug','info','warning','error')),
	time INTEGER NOT NULL, metadata TEXT);
CREATE INDEX steps_task ON steps (task_id, seq);
CREATE TABLE messages (
	seq INTEGER PRIMARY KEY AUTOINCREMENT,
	task_id TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
	session TEXT NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL,
	name TEXT NOT NULL DEFAULT '', tool_call_id TEXT NOT NULL DEFAULT '', time INTEGER NOT NULL);
CREATE INDEX messages_task ON messages (task_id, session, seq);
CREATE TABLE calls (
	id TEXT PRIMARY KEY,
	task_id TEXT REFERENCES tasks (id) ON DELETE CASCADE,
	session TEXT NOT NULL DEFAULT '', server TEXT NOT NULL, tool TEXT NOT NULL,
	error_kind TEXT NOT NULL DEFAULT '', started_at INTEGER NOT NULL, ended_at INTEGER NOT NULL,
	duration_ns INTEGER NOT NULL, record TEXT NOT NULL);
CREATE INDEX calls_task ON calls (task_id, started_at);
`

// rowsV1 are rows a version-1 toolmux wrote.
const rowsV1 = `
INSERT INTO tasks VALUES ('old', 'success', 1768824000000000000, 1768824060000000000, 1768824060000000000,
	'What is the capital of France?', 'Paris', '{"model":"m1"}');
INSERT INTO steps (task_id, name, message, level, time, metadata) VALUES
	('old', 'Main Agent | Turn: 1', 'calling the model', 'info', 1768824001000000000, NULL),
	('old', 'Main Agent | Turn: 1 | Tool Call', 'search', 'warning', 1768824002000000000, '{"q":"paris"}');
INSERT INTO messages (task_id, session, role, content, name, tool_call_id, time) VALUES
	('old', 'main', 'system', '"be brief"', '', '', 1768824000000000000),
	('old', 'main', 'user', '"What is the capital of France?"', '', '', 1768824000000000000);
INSERT INTO calls VALUES ('01call', 'old', 'main', 'search', 'google_search', 'timeout',
	1768824002000000000, 1768824003500000000, 1500000000,
	'{"id":"01call","task":"old","session":"main","server":"search","tool":"google_search","arguments":{"q":"paris"},"error":{"kind":"timeout","message":"slow"},"started_at":"2026-01-19T12:00:02Z","ended_at":"2026-01-19T12:00:03.5Z","attempts":1,"duration_ms":1500}');
`

func TestMigrateFromVersion1(t *testing.T) {
	dir := t.TempDir()
	db := rawDB(t, dir)
	for _, script := range []string{schemaV1, rowsV1} {
		if _, err := db.Exec(script); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	l := open(t, dir)
	if v, err := l.Version(ctx); err != nil || v != tasklog.SchemaVersion {
		t.Fatalf("version after migration: %d %v", v, err)
	}
	task, err := l.Task(ctx, "old")
	if err != nil || task.Status != tasklog.StatusSuccess || task.FinalAnswer != "Paris" || task.Metadata["model"] != "m1" ||
		!task.Ended.Equal(time.Date(2026, 1, 19, 12, 1, 0, 0, time.UTC)) {
		t.Fatalf("task %+v %v", task, err)
	}
	steps, err := l.Steps(ctx, "old")
	if err != nil || len(steps) != 2 || steps[1].Metadata["q"] != "paris" {
		t.Errorf("steps %+v %v", steps, err)
	}
	msgs, err := l.Messages(ctx, "old", "")
	if err != nil || len(msgs) != 2 || string(msgs[0].Content) != `"be brief"` || msgs[0].ToolCalls != nil {
		t.Errorf("messages %+v %v", msgs, err)
	}
	calls, err := l.Calls(ctx, "old")
	if err != nil || len(calls) != 1 || tool.KindOf(calls[0].Err()) != tool.KindTimeout || calls[0].Duration != 1500*time.Millisecond {
		t.Errorf("calls %+v %v", calls, err)
	}
	// What version 2 added works on the migrated file.
	if err := l.AppendEvents(ctx, tasklog.Event{ID: 1, Name: "heartbeat"}); err != nil {
		t.Error(err)
	}
	if err := l.AppendMessages(ctx, "old", "", tasklog.Message{Role: "assistant", ToolCalls: []byte(`[]`)}); err != nil {
		t.Error(err)
	}
	if _, err := l.Export(ctx, "old"); err != nil {
		t.Error(err)
	}
	// Opening again migrates nothing.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = open(t, dir)
	if v, _ := l.Version(ctx); v != tasklog.SchemaVersion {
		t.Errorf("version after reopening: %d", v)
	}
}

func TestMigrateEmptyFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, tasklog.FileName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	l := open(t, dir)
	if v, err := l.Version(ctx); err != nil || v != tasklog.SchemaVersion {
		t.Fatalf("version %d %v", v, err)
	}
	if err := l.StartTask(ctx, tasklog.Task{ID: "t"}); err != nil {
		t.Fatal(err)
	}
}

// schemaV1to3 is what versions 2 and 3 added, as released.
const schemaV1to3 = `
ALTER TABLE messages ADD COLUMN tool_calls TEXT;
CREATE TABLE events (id INTEGER PRIMARY KEY, name TEXT NOT NULL, task TEXT NOT NULL DEFAULT '', time INTEGER NOT NULL, data TEXT);
CREATE INDEX events_task ON events (task, id);
CREATE TABLE tasks_v3 (
	id TEXT PRIMARY KEY,
	status TEXT NOT NULL CHECK (status IN ('running','success','failed','cancelled','interrupted','closed','idle','shutdown')),
	created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, ended_at INTEGER,
	input TEXT NOT NULL DEFAULT '', final_answer TEXT NOT NULL DEFAULT '', metadata TEXT NOT NULL DEFAULT '{}',
	owner TEXT NOT NULL DEFAULT '');
INSERT INTO tasks_v3 (id, status, created_at, updated_at, ended_at, input, final_answer, metadata)
	SELECT id, status, created_at, updated_at, ended_at, input, final_answer, metadata FROM tasks;
DROP TABLE tasks;
ALTER TABLE tasks_v3 RENAME TO tasks;
UPDATE schema_version SET version = 3;
`

// legacyV3 writes a tasklog.db of schema version 3 in dir, with the rows
// of version 1 and events, and returns it open.
func legacyV3(t *testing.T, dir string) *sql.DB {
	t.Helper()
	db := rawDB(t, dir)
	for _, script := range []string{schemaV1, rowsV1, schemaV1to3,
		`INSERT INTO events VALUES (7, 'tool_call', 'old', 1768824002000000000, '{"tool_call_id":"01call"}'), (8, 'heartbeat', '', 1768824003000000000, NULL)`} {
		if _, err := db.Exec(script); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// A version-3 file is imported whole (events too), kept as
// tasklog.db.imported, and not imported again.
func TestImportVersion3(t *testing.T) {
	dir := t.TempDir()
	legacyV3(t, dir).Close()
	l := open(t, dir)
	if _, err := os.Stat(filepath.Join(dir, tasklog.FileName)); !os.IsNotExist(err) {
		t.Errorf("tasklog.db is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, tasklog.LegacyImportedName)); err != nil {
		t.Errorf("the imported file was not kept: %v", err)
	}
	evs, err := l.EventsAfter(ctx, 0, "", 0)
	if err != nil || len(evs) != 2 || evs[0].ID != 7 || string(evs[0].Data) != `{"tool_call_id":"01call"}` || evs[1].Data != nil {
		t.Fatalf("events %+v %v", evs, err)
	}
	if id, err := l.LastEventID(ctx); err != nil || id != 8 {
		t.Errorf("last event id %d %v", id, err)
	}
	d, err := l.Detail(ctx, "old")
	if err != nil || len(d.Steps) != 2 || len(d.Calls) != 1 || len(d.Sessions) != 1 || d.Status != tasklog.StatusSuccess {
		t.Fatalf("detail %+v %v", d, err)
	}
	l.Close()
	// A tasklog.db put back (say, from a backup) is imported again without
	// duplicating anything.
	if err := os.Rename(filepath.Join(dir, tasklog.LegacyImportedName), filepath.Join(dir, tasklog.FileName)); err != nil {
		t.Fatal(err)
	}
	l = open(t, dir)
	d2, err := l.Detail(ctx, "old")
	if err != nil || len(d2.Steps) != 2 || len(d2.Calls) != 1 || len(d2.Sessions[0].Messages) != 2 {
		t.Fatalf("after a second import: %+v %v", d2, err)
	}
	if evs, _ := l.EventsAfter(ctx, 0, "", 0); len(evs) != 2 {
		t.Errorf("events after a second import: %+v", evs)
	}
	if tasks, _ := l.Tasks(ctx, tasklog.Filter{}); len(tasks) != 1 || tasks[0].Calls != 1 || tasks[0].Errors != 1 {
		t.Errorf("tasks %+v", tasks)
	}
}

// A tasklog.db of a newer schema is refused and left as it was.
func TestNewerSchemaIsRefused(t *testing.T) {
	dir := t.TempDir()
	db := legacyV3(t, dir)
	if _, err := db.Exec(`UPDATE schema_version SET version = 99; CREATE TABLE from_the_future (x)`); err != nil {
		t.Fatal(err)
	}
	_, err := tasklog.Open(ctx, dir)
	var ve *tasklog.VersionError
	if !errors.As(err, &ve) || ve.Found != 99 || ve.Supported != 3 {
		t.Fatalf("Open of a newer schema: %v", err)
	}
	t.Log(err)
	var v int
	if err := db.QueryRow(`SELECT version FROM schema_version`).Scan(&v); err != nil || v != 99 {
		t.Errorf("the file was changed: version %d %v", v, err)
	}
}

// Several processes opening a directory with a legacy file at once import
// it once, and create one index.
func TestConcurrentOpenImportsOnce(t *testing.T) {
	dir := t.TempDir()
	legacyV3(t, dir).Close()
	errs := make(chan error, 8)
	logs := make(chan *tasklog.Log, 8)
	for range 8 {
		go func() {
			l, err := tasklog.Open(ctx, dir)
			errs <- err
			logs <- l
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
		if l := <-logs; l != nil {
			defer l.Close()
		}
	}
	l := open(t, dir)
	d, err := l.Detail(ctx, "old")
	if err != nil || len(d.Steps) != 2 || len(d.Calls) != 1 || len(d.Sessions[0].Messages) != 2 {
		t.Fatalf("detail %+v %v", d, err)
	}
	var n int
	if err := indexDB(t, dir).QueryRow(`SELECT count(*) FROM meta WHERE key = 'version'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("meta version rows: %d %v", n, err)
	}
}

// The index is derived: deleted, or corrupt, it is rebuilt from the
// journal with everything in it.
func TestIndexRebuiltFromTheJournal(t *testing.T) {
	for _, damage := range []string{"deleted", "garbage", "stale"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			l := open(t, dir)
			if err := l.StartTask(ctx, tasklog.Task{ID: "t", Input: "q"}); err != nil {
				t.Fatal(err)
			}
			if err := l.Step(ctx, "t", tasklog.Step{Name: "s1"}); err != nil {
				t.Fatal(err)
			}
			if err := l.AppendMessages(ctx, "t", "", tasklog.Message{Role: "user", Content: []byte(`"hi"`)}); err != nil {
				t.Fatal(err)
			}
			rec := fullRecord("t")
			l.Record(ctx, rec)
			if err := l.AppendEvents(ctx, tasklog.Event{ID: 1, Name: "message", Task: "t", Data: []byte(`{"x":1}`)}); err != nil {
				t.Fatal(err)
			}
			if err := l.FinishTask(ctx, "t", tasklog.StatusSuccess, "A"); err != nil {
				t.Fatal(err)
			}
			want, err := l.Detail(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			l.Close()
			index := filepath.Join(dir, tasklog.JournalDir, tasklog.IndexName)
			switch damage {
			case "deleted":
				os.Remove(index)
				os.Remove(index + "-wal")
				os.Remove(index + "-shm")
			case "garbage":
				if err := os.WriteFile(index, []byte(strings.Repeat("not a database ", 1000)), 0o600); err != nil {
					t.Fatal(err)
				}
			case "stale":
				if _, err := indexDB(t, dir).Exec(`UPDATE meta SET value = 3 WHERE key = 'version'`); err != nil {
					t.Fatal(err)
				}
			}
			l = open(t, dir)
			got, err := l.Detail(ctx, "t")
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("rebuilt:\n got  %+v %v\n want %+v", got, err, want)
			}
			if evs, err := l.EventsAfter(ctx, 0, "t", 0); err != nil || len(evs) != 1 {
				t.Errorf("events %+v %v", evs, err)
			}
		})
	}
}
