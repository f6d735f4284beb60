package tasklog_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
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

func TestNewerSchemaIsRefused(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir)
	if err := l.StartTask(ctx, tasklog.Task{ID: "t"}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	db := rawDB(t, dir)
	if _, err := db.Exec(`UPDATE schema_version SET version = 99; CREATE TABLE from_the_future (x)`); err != nil {
		t.Fatal(err)
	}
	_, err := tasklog.Open(ctx, dir)
	var ve *tasklog.VersionError
	if !errors.As(err, &ve) || ve.Found != 99 || ve.Supported != tasklog.SchemaVersion {
		t.Fatalf("Open of a newer schema: %v", err)
	}
	t.Log(err)
	var v int
	if err := db.QueryRow(`SELECT version FROM schema_version`).Scan(&v); err != nil || v != 99 {
		t.Errorf("the file was changed: version %d %v", v, err)
	}
}

// Several processes opening a new file at once migrate it once.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	dir := t.TempDir()
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
	var n int
	if err := rawDB(t, dir).QueryRow(`SELECT count(*) FROM schema_version`).Scan(&n); err != nil || n != 1 {
		t.Errorf("schema_version rows: %d %v", n, err)
	}
}

// A database migrated from version 1 has exactly the schema of a new one.
func TestMigratedSchemaEqualsNewSchema(t *testing.T) {
	fresh := t.TempDir()
	open(t, fresh)
	old := t.TempDir()
	if _, err := rawDB(t, old).Exec(schemaV1); err != nil {
		t.Fatal(err)
	}
	open(t, old)
	a, b := schemaOf(t, fresh), schemaOf(t, old)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("new schema:\n%v\nmigrated schema:\n%v", a, b)
	}
}

// schemaOf describes the tables, columns and indexes of a database.
func schemaOf(t *testing.T, dir string) []string {
	db := rawDB(t, dir)
	rows, err := db.Query(`SELECT type, name, tbl_name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name`)
	if err != nil {
		t.Fatal(err)
	}
	var out, tables []string
	for rows.Next() {
		var typ, name, tbl string
		if err := rows.Scan(&typ, &name, &tbl); err != nil {
			t.Fatal(err)
		}
		out = append(out, typ+" "+name+" on "+tbl)
		if typ == "table" {
			tables = append(tables, name)
		}
	}
	rows.Close()
	for _, tbl := range tables {
		cols, err := db.Query(`SELECT name, type, "notnull", coalesce(dflt_value, ''), pk FROM pragma_table_info(?)`, tbl)
		if err != nil {
			t.Fatal(err)
		}
		for cols.Next() {
			var name, typ, dflt string
			var notnull, pk int
			if err := cols.Scan(&name, &typ, &notnull, &dflt, &pk); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("column %s.%s %s notnull=%d default=%s pk=%d", tbl, name, typ, notnull, dflt, pk))
		}
		cols.Close()
	}
	return out
}
