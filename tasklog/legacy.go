package tasklog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// legacyVersion is the newest tasklog.db schema an import reads.
const legacyVersion = 3

// importLegacy imports DATA_DIR/tasklog.db, the task log of a toolmux
// before the journal (schema versions 1 to 3), into the journal, then
// renames it LegacyImportedName: nothing of it is lost, and it is read
// once. Steps and messages keep their order (their old sequence numbers
// sort before every journal position), so an import cut short by a crash
// runs again without duplicating anything: calls are kept once by id,
// steps and messages by their order, events after the last one indexed.
// A file of a newer schema is left alone and Open fails with a
// [*VersionError].
func (l *Log) importLegacy(ctx context.Context) error {
	path := filepath.Join(l.dir, FileName)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return fmt.Errorf("tasklog: importing %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	version, err := legacySchemaVersion(ctx, db)
	if err != nil {
		db.Close()
		return fmt.Errorf("tasklog: importing %s: %w", path, err)
	}
	if version > legacyVersion {
		db.Close()
		return &VersionError{Path: path, Found: version, Supported: legacyVersion}
	}
	n, err := l.importRows(ctx, db, version)
	// Closing checkpoints the file's write-ahead log into it.
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("tasklog: importing %s: %w", path, err)
	}
	if err := l.catchUp(ctx); err != nil {
		return err
	}
	if _, err := l.appendRecs(ctx, &jrec{Type: recImport, Task: "", Drop: nil}); err != nil {
		return err
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Rename(path+suffix, filepath.Join(l.dir, LegacyImportedName+suffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("tasklog: %w", err)
		}
	}
	l.log.Info("tasklog: imported the task log of an older toolmux into the journal", "from", path,
		"records", n, "kept_as", filepath.Join(l.dir, LegacyImportedName))
	return nil
}

func legacySchemaVersion(ctx context.Context, db *sql.DB) (int, error) {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'`).Scan(&n); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, nil
	}
	var v sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT max(version) FROM schema_version`).Scan(&v); err != nil {
		return 0, err
	}
	return int(v.Int64), nil
}

// importRows appends the rows of a legacy database, task by task, in
// chunks.
func (l *Log) importRows(ctx context.Context, db *sql.DB, version int) (int, error) {
	if version == 0 {
		return 0, nil
	}
	var batch []*jrec
	total := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		_, err := l.appendRecs(ctx, batch...)
		total += len(batch)
		batch = batch[:0]
		return err
	}
	add := func(r *jrec) error {
		batch = append(batch, r)
		if len(batch) >= 512 {
			return flush()
		}
		return nil
	}
	ownerCol := "''"
	if version >= 3 {
		ownerCol = "owner"
	}
	rows, err := db.QueryContext(ctx, `SELECT id, status, created_at, updated_at, ended_at, input, final_answer, metadata, `+ownerCol+` FROM tasks ORDER BY created_at, id`)
	if err != nil {
		return 0, err
	}
	type task struct {
		id, status, input, answer, meta, owner string
		created, updated                       int64
		ended                                  sql.NullInt64
	}
	var tasks []task
	for rows.Next() {
		var t task
		if err := rows.Scan(&t.id, &t.status, &t.created, &t.updated, &t.ended, &t.input, &t.answer, &t.meta, &t.owner); err != nil {
			rows.Close()
			return 0, err
		}
		tasks = append(tasks, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for _, t := range tasks {
		var meta json.RawMessage
		if t.meta != "" && t.meta != "{}" && json.Valid([]byte(t.meta)) {
			meta = json.RawMessage(t.meta)
		}
		if err := add(&jrec{Type: recStart, Task: t.id, At: t.created, Owner: t.owner,
			Start: &jStart{Created: t.created, Input: t.input, Metadata: meta}}); err != nil {
			return 0, err
		}
	}
	// Steps and messages, in their order.
	srows, err := db.QueryContext(ctx, `SELECT seq, task_id, name, message, level, time, metadata FROM steps ORDER BY seq`)
	if err != nil {
		return 0, err
	}
	for srows.Next() {
		var (
			seq, tm         int64
			task, name, msg string
			level           string
			meta            sql.NullString
		)
		if err := srows.Scan(&seq, &task, &name, &msg, &level, &tm, &meta); err != nil {
			srows.Close()
			return 0, err
		}
		st := &jStep{Name: name, Message: msg, Level: Level(level), Time: tm}
		if meta.Valid && json.Valid([]byte(meta.String)) {
			st.Metadata = json.RawMessage(meta.String)
		}
		if err := add(&jrec{Type: recStep, Task: task, At: tm, Ord: seq, Step: st}); err != nil {
			srows.Close()
			return 0, err
		}
	}
	srows.Close()
	callsCol := "NULL"
	if version >= 2 {
		callsCol = "tool_calls"
	}
	mrows, err := db.QueryContext(ctx, `SELECT seq, task_id, session, role, content, name, tool_call_id, `+callsCol+`, time FROM messages ORDER BY seq`)
	if err != nil {
		return 0, err
	}
	for mrows.Next() {
		var (
			seq, tm                          int64
			task, session, role, content, nm string
			callID                           string
			calls                            sql.NullString
		)
		if err := mrows.Scan(&seq, &task, &session, &role, &content, &nm, &callID, &calls, &tm); err != nil {
			mrows.Close()
			return 0, err
		}
		m := jMessage{Role: role, Content: json.RawMessage(content), Name: nm, ToolCallID: callID, Time: tm}
		if !json.Valid(m.Content) {
			m.Content = json.RawMessage("null")
		}
		if calls.Valid && json.Valid([]byte(calls.String)) {
			m.ToolCalls = json.RawMessage(calls.String)
		}
		if err := add(&jrec{Type: recMsgs, Task: task, At: tm, Ord: seq, Msgs: &jMsgs{Session: session, Messages: []jMessage{m}}}); err != nil {
			mrows.Close()
			return 0, err
		}
	}
	mrows.Close()
	crows, err := db.QueryContext(ctx, `SELECT id, coalesce(task_id, ''), session, error_kind, started_at, ended_at, duration_ns, record FROM calls ORDER BY started_at, rowid`)
	if err != nil {
		return 0, err
	}
	for crows.Next() {
		var (
			id, task, session, kind, record string
			started, ended, dur             int64
		)
		if err := crows.Scan(&id, &task, &session, &kind, &started, &ended, &dur, &record); err != nil {
			crows.Close()
			return 0, err
		}
		rec := json.RawMessage(record)
		if !json.Valid(rec) {
			rec = json.RawMessage(`{}`)
		}
		if err := add(&jrec{Type: recCall, ID: id, Task: task, At: ended,
			Call: &jCall{Session: session, Kind: kind, Started: started, Ended: ended, Duration: dur}, Rec: rec}); err != nil {
			crows.Close()
			return 0, err
		}
	}
	crows.Close()
	if version >= 2 {
		after := l.lastEvent.Load()
		erows, err := db.QueryContext(ctx, `SELECT id, name, task, time, data FROM events WHERE id > ? ORDER BY id`, after)
		if err != nil {
			return 0, err
		}
		var evs []jEvent
		for erows.Next() {
			var (
				e    jEvent
				data sql.NullString
			)
			if err := erows.Scan(&e.ID, &e.Name, &e.Task, &e.Time, &data); err != nil {
				erows.Close()
				return 0, err
			}
			if data.Valid && json.Valid([]byte(data.String)) {
				e.Data = json.RawMessage(data.String)
			}
			evs = append(evs, e)
			if len(evs) == 256 {
				if err := add(&jrec{Type: recEvents, Events: evs}); err != nil {
					erows.Close()
					return 0, err
				}
				evs = nil
			}
		}
		erows.Close()
		if len(evs) > 0 {
			if err := add(&jrec{Type: recEvents, Events: evs}); err != nil {
				return 0, err
			}
		}
	}
	for _, t := range tasks {
		if Status(t.status) == StatusRunning {
			continue
		}
		at := t.updated
		if t.ended.Valid {
			at = t.ended.Int64
		}
		if err := add(&jrec{Type: recEnd, Task: t.id, At: at, End: &jEnd{Status: Status(t.status), Answer: t.answer}}); err != nil {
			return 0, err
		}
	}
	return total + len(batch), flush()
}
