package tasklog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"modernc.org/sqlite"

	"github.com/toolmux/toolmux/identity"
)

// IndexName is the index's file in the journal directory: SQLite, built
// from the journal, never written on a call's path, rebuilt when lost.
const IndexName = "index.db"

// indexSchema is the index's schema. The index is derived data: a change
// is a new SchemaVersion, and an index of another version is rebuilt from
// the journal rather than migrated.
var indexSchema = []string{
	`CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)`,
	`CREATE TABLE tasks (
		id           TEXT PRIMARY KEY,
		status       TEXT NOT NULL,
		created_at   INTEGER NOT NULL,
		updated_at   INTEGER NOT NULL,
		ended_at     INTEGER,
		input        TEXT NOT NULL DEFAULT '',
		final_answer TEXT NOT NULL DEFAULT '',
		metadata     TEXT NOT NULL DEFAULT '{}',
		owner        TEXT NOT NULL DEFAULT '',
		calls        INTEGER NOT NULL DEFAULT 0,
		errors       INTEGER NOT NULL DEFAULT 0,
		first_pos    INTEGER NOT NULL,
		caller_key   TEXT NOT NULL DEFAULT '',
		caller_name  TEXT NOT NULL DEFAULT ''
	)`,
	`CREATE INDEX tasks_created ON tasks (created_at, id)`,
	// A caller's own tasks, for its listings (docs/identity.md).
	`CREATE INDEX tasks_caller ON tasks (caller_key, created_at, id)`,
	`CREATE INDEX tasks_status ON tasks (status, created_at, id)`,
	`CREATE INDEX tasks_first ON tasks (first_pos)`,
	`CREATE TABLE steps (
		seq      INTEGER PRIMARY KEY,
		task_id  TEXT NOT NULL,
		name     TEXT NOT NULL,
		message  TEXT NOT NULL DEFAULT '',
		level    TEXT NOT NULL,
		time     INTEGER NOT NULL,
		metadata TEXT
	)`,
	`CREATE INDEX steps_task ON steps (task_id, seq)`,
	`CREATE TABLE messages (
		ord          INTEGER NOT NULL,
		i            INTEGER NOT NULL,
		task_id      TEXT NOT NULL,
		session      TEXT NOT NULL,
		role         TEXT NOT NULL,
		content      TEXT NOT NULL,
		name         TEXT NOT NULL DEFAULT '',
		tool_call_id TEXT NOT NULL DEFAULT '',
		tool_calls   TEXT,
		time         INTEGER NOT NULL,
		PRIMARY KEY (ord, i)
	) WITHOUT ROWID`,
	`CREATE INDEX messages_task ON messages (task_id, session, ord, i)`,
	// A call is its id, its task, when it started (the order of a task's
	// calls), whether it failed, and where its record is in the journal.
	`CREATE TABLE calls (
		id         TEXT PRIMARY KEY,
		task_id    TEXT NOT NULL,
		started_at INTEGER NOT NULL,
		pos        INTEGER NOT NULL,
		failed     INTEGER NOT NULL
	) WITHOUT ROWID`,
	// No index on pos: only retention looks calls up by position, a scan
	// per dropped segment, and the index would cost every call ~50 bytes.
	`CREATE INDEX calls_task ON calls (task_id, started_at, pos)`,
	// Events are found by the journal record holding them.
	`CREATE TABLE event_records (
		pos      INTEGER PRIMARY KEY,
		first_id INTEGER NOT NULL,
		last_id  INTEGER NOT NULL
	)`,
	`CREATE INDEX event_records_last ON event_records (last_id)`,
	// An MCP task (mcptasks.go) is where its newest record is, and what
	// a listing shows of it.
	`CREATE TABLE mcp_tasks (
		id          TEXT PRIMARY KEY,
		status      TEXT NOT NULL,
		route       TEXT NOT NULL DEFAULT '',
		tool        TEXT NOT NULL DEFAULT '',
		server      TEXT NOT NULL DEFAULT '',
		server_tool TEXT NOT NULL DEFAULT '',
		session     TEXT NOT NULL DEFAULT '',
		call        TEXT NOT NULL DEFAULT '',
		created_at  INTEGER NOT NULL,
		updated_at  INTEGER NOT NULL,
		owner       TEXT NOT NULL DEFAULT '',
		pos         INTEGER NOT NULL,
		caller_key  TEXT NOT NULL DEFAULT '',
		caller_name TEXT NOT NULL DEFAULT ''
	) WITHOUT ROWID`,
	`CREATE INDEX mcp_tasks_created ON mcp_tasks (created_at, id)`,
	`CREATE INDEX mcp_tasks_caller ON mcp_tasks (caller_key, created_at, id)`,
}

// SchemaVersion is the version of the index's schema (versions 1 to 3
// were tasklog.db's, before the journal; 5 added mcp_tasks, 6 the
// callers tasks belong to).
const SchemaVersion = 6

// The keys of meta.
const (
	metaVersion     = "version"
	metaPos         = "pos"           // every record before it is indexed
	metaLastEvent   = "last_event_id" // the highest event id indexed
	metaDroppedSegs = "dropped_segments"
	metaDroppedTask = "dropped_tasks"
	metaDroppedCall = "dropped_calls"
	metaDroppedSpil = "dropped_spill_files"
	metaDroppedByte = "dropped_bytes"
	metaDroppedLast = "dropped_last" // time of the last retention pass that dropped anything
	metaKeptFrom    = "kept_from"    // first segment kept
)

// openIndex opens the index database in dir, creating it with the schema
// when new. An index that is not a database, is corrupt, or has another
// schema version is removed and created anew (then catching up rebuilds
// it from the journal).
func (l *Log) openIndex(ctx context.Context) error {
	path := l.indexPath()
	if strings.ContainsAny(path, "?#") {
		return &ValidationError{Field: "dir", Value: path, Reason: "must not contain '?' or '#'"}
	}
	busyUntil := time.Now().Add(l.opts.busyTimeout)
	for rebuilt := false; ; {
		err := l.tryOpenIndex(ctx, path)
		if err == nil {
			return nil
		}
		if indexBusy(err) && time.Now().Before(busyUntil) {
			// Processes opening a new index at once all set its journal
			// mode, which needs the file to itself: SQLite answers BUSY at
			// once instead of waiting, so wait here, within the same bound.
			select {
			case <-ctx.Done():
				return err
			case <-time.After(busyRetry):
			}
			continue
		}
		if rebuilt || !indexBroken(err) {
			return err
		}
		rebuilt = true
		l.log.Warn("tasklog: the index is unusable; rebuilding it from the journal", "path", path, "error", err)
		for _, suffix := range []string{"", "-wal", "-shm"} {
			if rerr := os.Remove(path + suffix); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				return fmt.Errorf("tasklog: removing a broken index: %w", rerr)
			}
		}
	}
}

// busyRetry is how long opening the index waits before trying again when
// another process holds it.
const busyRetry = 20 * time.Millisecond

// indexBusy reports whether err is SQLite's "database is busy" or
// "locked", which opening the index retries.
func indexBusy(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED
			return true
		}
	}
	return false
}

// errStaleIndex says that an index has another schema version.
var errStaleIndex = errors.New("tasklog: the index has another schema version")

// indexBroken reports whether err means the index file must be rebuilt:
// not a database, corrupt, or of another schema version.
func indexBroken(err error) bool {
	if errors.Is(err, errStaleIndex) {
		return true
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case 11, 26: // SQLITE_CORRUPT, SQLITE_NOTADB
			return true
		}
	}
	return false
}

func (l *Log) tryOpenIndex(ctx context.Context, path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("tasklog: %w", err)
	}
	f.Close()
	base := url.Values{}
	base.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", l.opts.busyTimeout.Milliseconds()))
	// The index is rebuilt from the journal when lost: no sync is needed
	// for durability, only WAL's consistency.
	base.Add("_pragma", "synchronous(NORMAL)")
	wq := cloneValues(base)
	wq.Add("_pragma", "journal_mode(WAL)")
	// Keep the write-ahead log small on disk after checkpoints: it counts
	// in the data directory's size.
	wq.Add("_pragma", "journal_size_limit(1048576)")
	// Pages freed by retention are given back (incremental_vacuum after
	// a drop): the index counts in the retention's byte budget.
	wq.Add("_pragma", "auto_vacuum(2)")
	wq.Set("_txlock", "immediate")
	w, err := sql.Open("sqlite", path+"?"+wq.Encode())
	if err != nil {
		return fmt.Errorf("tasklog: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	rq := cloneValues(base)
	rq.Add("_pragma", "query_only(1)")
	r, err := sql.Open("sqlite", path+"?"+rq.Encode())
	if err != nil {
		w.Close()
		return fmt.Errorf("tasklog: %w", err)
	}
	r.SetMaxOpenConns(l.opts.readers)
	r.SetMaxIdleConns(l.opts.readers)
	if err := createIndex(ctx, w); err != nil {
		w.Close()
		r.Close()
		return err
	}
	l.w, l.r = w, r
	return nil
}

// createIndex creates the schema in a new index, once however many
// processes open it at once; an index of another version is stale.
func createIndex(ctx context.Context, w *sql.DB) error {
	tx, err := w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'`).Scan(&n); err != nil {
		return err
	}
	if n == 1 {
		var v int
		if err := tx.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = ?`, metaVersion).Scan(&v); err != nil || v != SchemaVersion {
			return errStaleIndex
		}
		return nil
	}
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master`).Scan(&n); err != nil {
		return err
	}
	if n != 0 {
		return errStaleIndex // another file in its place
	}
	for _, s := range indexSchema {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("tasklog: creating the index: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO meta (key, value) VALUES (?, ?)`, metaVersion, SchemaVersion); err != nil {
		return err
	}
	return tx.Commit()
}

// indexBatch bounds the records one catch-up transaction applies.
const indexBatch = 4096

// catchUp indexes every record appended before it was called. Any process
// may run it: the transaction (BEGIN IMMEDIATE) reads where the index
// stands and moves it on, so two processes catching up take turns and
// never apply a record twice.
func (l *Log) catchUp(ctx context.Context) error {
	l.imu.Lock()
	defer l.imu.Unlock()
	for {
		n, err := l.indexSome(ctx)
		if err != nil {
			if indexBroken(err) {
				// Corrupt under us: start a new index, from the journal.
				if rerr := l.rebuildIndex(ctx); rerr != nil {
					return errors.Join(err, rerr)
				}
				continue
			}
			return err
		}
		if n < indexBatch {
			return nil
		}
	}
}

// rebuildIndex replaces the index with a new one and indexes the journal.
func (l *Log) rebuildIndex(ctx context.Context) error {
	l.w.Close()
	l.r.Close()
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(l.indexPath() + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return l.openIndex(ctx)
}

// indexSome applies up to indexBatch records in one transaction and
// returns how many.
func (l *Log) indexSome(ctx context.Context) (int, error) {
	tx, err := l.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() //nolint:errcheck
	from := Pos(getMeta(ctx, tx, metaPos))
	var (
		n       int
		lastEv  = getMeta(ctx, tx, metaLastEvent)
		applyEr error
	)
	ix := &indexer{l: l, tx: tx, ctx: ctx, lastEvent: lastEv}
	end, err := l.j.Scan(ctx, from, func(pos Pos, payload []byte) bool {
		n++
		if err := ix.apply(pos, payload); err != nil {
			applyEr = err
			return false
		}
		return n < indexBatch
	})
	if err == nil {
		err = applyEr
	}
	if err == nil {
		err = ix.flushCalls()
	}
	if err != nil {
		return 0, err
	}
	if end != from {
		if err := setMeta(ctx, tx, metaPos, int64(end)); err != nil {
			return 0, err
		}
	}
	if ix.lastEvent != lastEv {
		if err := setMeta(ctx, tx, metaLastEvent, ix.lastEvent); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	l.indexed.Store(uint64(end))
	for {
		cur := l.lastEvent.Load()
		if ix.lastEvent <= cur || l.lastEvent.CompareAndSwap(cur, ix.lastEvent) {
			break
		}
	}
	return n, nil
}

func getMeta(ctx context.Context, tx *sql.Tx, key string) int64 {
	var v int64
	_ = tx.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = ?`, key).Scan(&v)
	return v
}

func setMeta(ctx context.Context, tx *sql.Tx, key string, v int64) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, v)
	return err
}

func addMeta(ctx context.Context, tx *sql.Tx, key string, v int64) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = value + excluded.value`, key, v)
	return err
}

// indexer applies records to the index inside one transaction.
type indexer struct {
	l         *Log
	tx        *sql.Tx
	ctx       context.Context
	lastEvent int64
	stmts     map[string]*sql.Stmt
	// tasks are what the call records applied since the last flush do to
	// their tasks, one row write per task instead of two per call: a
	// gateway session's calls are one task.
	tasks     map[string]*taskCalls
	taskOrder []string
}

// taskCalls is what call records do to their task: create it (as the
// first of them would have: its start, time, owner, caller and position),
// move its last write on, and count the calls and the failed ones.
type taskCalls struct {
	first, at     int64
	owner         string
	caller        *identity.Ref
	pos           Pos
	calls, errors int64
}

// addCall notes a call record of a task; flushCalls writes it.
func (ix *indexer) addCall(task string, r *jrec, pos Pos, inserted bool, failed int) {
	if ix.tasks == nil {
		ix.tasks = map[string]*taskCalls{}
	}
	tc := ix.tasks[task]
	if tc == nil {
		tc = &taskCalls{first: r.Call.Started, at: r.At, owner: r.Owner, caller: r.Call.Caller, pos: pos}
		ix.tasks[task] = tc
		ix.taskOrder = append(ix.taskOrder, task)
	}
	tc.at = max(tc.at, r.At)
	if inserted {
		tc.calls++
		tc.errors += int64(failed)
	}
}

// flushCalls writes what the call records noted since the last flush did
// to their tasks: before any other record touching tasks is applied, and
// before the transaction commits.
func (ix *indexer) flushCalls() error {
	for _, id := range ix.taskOrder {
		tc := ix.tasks[id]
		c := colsOf(tc.caller)
		if _, err := ix.exec(`INSERT INTO tasks (id, status, created_at, updated_at, owner, first_pos, caller_key, caller_name, calls, errors)
			VALUES (?, 'running', ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET updated_at = max(updated_at, excluded.updated_at),
				calls = calls + excluded.calls, errors = errors + excluded.errors`,
			id, tc.first, tc.at, tc.owner, int64(tc.pos), c.key, c.name, tc.calls, tc.errors); err != nil {
			return err
		}
		delete(ix.tasks, id)
	}
	ix.taskOrder = ix.taskOrder[:0]
	return nil
}

func (ix *indexer) exec(q string, args ...any) (sql.Result, error) {
	if ix.stmts == nil {
		ix.stmts = map[string]*sql.Stmt{}
	}
	st, ok := ix.stmts[q]
	if !ok {
		var err error
		if st, err = ix.tx.PrepareContext(ix.ctx, q); err != nil {
			return nil, err
		}
		ix.stmts[q] = st
	}
	return st.ExecContext(ix.ctx, args...)
}

// apply indexes one record. A record that cannot be read is skipped with
// a warning: the journal's CRC vouches for its bytes, so it was written
// so by a newer or broken writer, and nothing else depends on it.
func (ix *indexer) apply(pos Pos, payload []byte) error {
	var r jrec
	if err := envelope(payload, &r); err != nil {
		ix.l.log.Warn("tasklog: skipping an unreadable journal record", "pos", pos.String(), "error", err)
		return nil
	}
	if r.V > FormatVersion {
		ix.l.log.Warn("tasklog: skipping a journal record of a newer format", "pos", pos.String(), "version", r.V, "type", r.Type)
		return nil
	}
	ord := r.Ord
	if ord == 0 {
		ord = int64(pos)
	}
	if r.Type != recCall && r.Type != recEvents {
		// Records that touch tasks see the calls before them.
		if err := ix.flushCalls(); err != nil {
			return err
		}
	}
	switch r.Type {
	case recStart:
		if r.Start == nil {
			return nil
		}
		meta := string(r.Start.Metadata)
		if meta == "" {
			meta = "{}"
		}
		// A task's first caller stays its owner: resuming it, or a
		// record that created it first, does not hand it to another.
		c := colsOf(r.Start.Caller)
		_, err := ix.exec(`INSERT INTO tasks (id, status, created_at, updated_at, input, metadata, owner, first_pos, caller_key, caller_name)
			VALUES (?, 'running', ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET
				status = 'running',
				ended_at = NULL,
				updated_at = max(updated_at, excluded.updated_at),
				created_at = min(created_at, excluded.created_at),
				input = CASE WHEN excluded.input <> '' THEN excluded.input ELSE input END,
				metadata = CASE WHEN excluded.metadata <> '{}' THEN excluded.metadata ELSE metadata END,
				owner = excluded.owner,
				caller_name = CASE WHEN caller_key = '' THEN excluded.caller_name ELSE caller_name END,
				caller_key = CASE WHEN caller_key = '' THEN excluded.caller_key ELSE caller_key END`,
			r.Task, r.Start.Created, r.At, r.Start.Input, meta, r.Owner, int64(pos), c.key, c.name)
		return err
	case recEnd:
		if r.End == nil {
			return nil
		}
		q := `UPDATE tasks SET status = ?, final_answer = ?, ended_at = ?, updated_at = max(updated_at, ?) WHERE id = ?`
		if r.End.AtLastWrite {
			q = `UPDATE tasks SET status = ?, final_answer = ?, ended_at = updated_at, updated_at = max(updated_at, ?) WHERE id = ?`
		}
		if r.End.IfRunning {
			q += ` AND status = 'running'`
		}
		args := []any{string(r.End.Status), r.End.Answer, r.At, r.At, r.Task}
		if r.End.AtLastWrite {
			args = []any{string(r.End.Status), r.End.Answer, r.At, r.Task}
		}
		_, err := ix.exec(q, args...)
		return err
	case recStep:
		if r.Step == nil {
			return nil
		}
		if err := ix.ensureTask(r.Task, r.Step.Time, r.At, r.Owner, nil, pos); err != nil {
			return err
		}
		return ix.step(r.Task, ord, r.Step)
	case recMsgs:
		if r.Msgs == nil || len(r.Msgs.Messages) == 0 {
			return nil
		}
		if err := ix.ensureTask(r.Task, r.Msgs.Messages[0].Time, r.At, r.Owner, nil, pos); err != nil {
			return err
		}
		for i, m := range r.Msgs.Messages {
			if err := ix.message(r.Task, r.Msgs.Session, ord, i, m); err != nil {
				return err
			}
		}
		return nil
	case recCall:
		if r.Call == nil {
			return nil
		}
		failed := 0
		if r.Call.Kind != "" {
			failed = 1
		}
		res, err := ix.exec(`INSERT INTO calls (id, task_id, started_at, pos, failed) VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
			r.ID, r.Task, r.Call.Started, int64(pos), failed)
		if err != nil {
			return err
		}
		if r.Task != "" {
			n, _ := res.RowsAffected()
			ix.addCall(r.Task, &r, pos, n == 1, failed)
		}
		return nil
	case recEvents:
		if len(r.EventIDs) != 2 {
			// Written without them: decode the events.
			var full jrec
			if json.Unmarshal(payload, &full) != nil {
				return nil
			}
			evs, err := full.events()
			if err != nil || len(evs) == 0 {
				return nil
			}
			r.EventIDs = []int64{evs[0].ID, evs[0].ID}
			for _, e := range evs {
				r.EventIDs[0], r.EventIDs[1] = min(r.EventIDs[0], e.ID), max(r.EventIDs[1], e.ID)
			}
		}
		first, last := r.EventIDs[0], r.EventIDs[1]
		ix.lastEvent = max(ix.lastEvent, last)
		_, err := ix.exec(`INSERT INTO event_records (pos, first_id, last_id) VALUES (?, ?, ?) ON CONFLICT (pos) DO NOTHING`, int64(pos), first, last)
		return err
	case recCarry:
		return ix.carry(r, pos)
	case recDrop:
		return ix.drop(r)
	case recMCPTask:
		return ix.indexMCPTask(r, pos)
	}
	return nil
}

// ensureTask creates the task a record belongs to, if it is new: owned
// by caller, the caller of the call whose record creates it (nil for
// steps and messages).
func (ix *indexer) ensureTask(id string, first, at int64, owner string, caller *identity.Ref, pos Pos) error {
	c := colsOf(caller)
	_, err := ix.exec(`INSERT INTO tasks (id, status, created_at, updated_at, owner, first_pos, caller_key, caller_name) VALUES (?, 'running', ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET updated_at = max(updated_at, excluded.updated_at)`, id, first, at, owner, int64(pos), c.key, c.name)
	return err
}

func (ix *indexer) step(task string, seq int64, s *jStep) error {
	var meta sql.NullString
	if len(s.Metadata) > 0 {
		meta = sql.NullString{String: string(s.Metadata), Valid: true}
	}
	_, err := ix.exec(`INSERT INTO steps (seq, task_id, name, message, level, time, metadata) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (seq) DO NOTHING`,
		seq, task, s.Name, s.Message, string(s.Level), s.Time, meta)
	return err
}

func (ix *indexer) message(task, session string, ord int64, i int, m jMessage) error {
	content := string(m.Content)
	if content == "" {
		content = "null"
	}
	var calls sql.NullString
	if len(m.ToolCalls) > 0 {
		calls = sql.NullString{String: string(m.ToolCalls), Valid: true}
	}
	_, err := ix.exec(`INSERT INTO messages (ord, i, task_id, session, role, content, name, tool_call_id, tool_calls, time)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (ord, i) DO NOTHING`,
		ord, i, task, session, m.Role, content, m.Name, m.ToolCallID, calls, m.Time)
	return err
}

// carry re-creates a running task whose beginning was in a dropped
// segment (when the index is rebuilt) and moves its first position.
func (ix *indexer) carry(r jrec, pos Pos) error {
	c := r.Carry
	if c == nil {
		return nil
	}
	meta := string(c.Metadata)
	if meta == "" {
		meta = "{}"
	}
	who := colsOf(c.Caller)
	if _, err := ix.exec(`INSERT INTO tasks (id, status, created_at, updated_at, input, metadata, owner, first_pos, caller_key, caller_name)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET
			first_pos = excluded.first_pos,
			created_at = min(created_at, excluded.created_at),
			input = CASE WHEN excluded.input <> '' THEN excluded.input ELSE input END,
			metadata = CASE WHEN excluded.metadata <> '{}' THEN excluded.metadata ELSE metadata END,
			owner = CASE WHEN excluded.owner <> '' THEN excluded.owner ELSE owner END,
			caller_name = CASE WHEN excluded.caller_key <> '' THEN excluded.caller_name ELSE caller_name END,
			caller_key = CASE WHEN excluded.caller_key <> '' THEN excluded.caller_key ELSE caller_key END`,
		r.Task, string(c.Status), c.Created, c.Updated, c.Input, meta, r.Owner, int64(pos), who.key, who.name); err != nil {
		return err
	}
	for _, s := range c.Steps {
		if err := ix.step(r.Task, s.Seq, &s.jStep); err != nil {
			return err
		}
	}
	for _, m := range c.Messages {
		if err := ix.message(r.Task, m.Session, m.Ord, m.I, m.jMessage); err != nil {
			return err
		}
	}
	return nil
}

// drop applies a retention record: the tasks it names go, with their
// steps, messages and calls; the calls and events in dropped segments go.
func (ix *indexer) drop(r jrec) error {
	d := r.Drop
	if d == nil {
		return nil
	}
	for _, id := range d.Tasks {
		for _, q := range []string{`DELETE FROM tasks WHERE id = ?`, `DELETE FROM steps WHERE task_id = ?`,
			`DELETE FROM messages WHERE task_id = ?`, `DELETE FROM calls WHERE task_id = ?`} {
			if _, err := ix.exec(q, id); err != nil {
				return err
			}
		}
	}
	if d.Before > 0 {
		bound := int64(mkPos(d.Before, 0))
		// Calls of running tasks in the dropped segments: counted off
		// their task.
		if _, err := ix.exec(`UPDATE tasks SET calls = calls - (SELECT count(*) FROM calls c WHERE c.task_id = tasks.id AND c.pos < ?),
			errors = errors - (SELECT count(*) FROM calls c WHERE c.task_id = tasks.id AND c.pos < ? AND c.failed = 1)
			WHERE id IN (SELECT DISTINCT task_id FROM calls WHERE pos < ?)`, bound, bound, bound); err != nil {
			return err
		}
		// An MCP task whose newest record went with its segment has
		// expired.
		for _, q := range []string{`DELETE FROM calls WHERE pos < ?`, `DELETE FROM event_records WHERE pos < ?`,
			`DELETE FROM mcp_tasks WHERE pos < ?`} {
			if _, err := ix.exec(q, bound); err != nil {
				return err
			}
		}
		if err := setMeta(ix.ctx, ix.tx, metaKeptFrom, int64(d.Before)); err != nil {
			return err
		}
	}
	if t := d.Total; t != nil {
		for key, v := range map[string]int64{metaDroppedSegs: t.Segments, metaDroppedTask: t.Tasks,
			metaDroppedCall: t.Calls, metaDroppedSpil: t.SpillFiles, metaDroppedByte: t.Bytes} {
			if _, err := ix.exec(`INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = max(value, excluded.value)`, key, v); err != nil {
				return err
			}
		}
	} else {
		for key, v := range map[string]int64{metaDroppedSegs: int64(len(d.Segments)), metaDroppedTask: int64(len(d.Tasks)),
			metaDroppedCall: d.Calls, metaDroppedSpil: d.SpillFiles, metaDroppedByte: d.Bytes} {
			if err := addMeta(ix.ctx, ix.tx, key, v); err != nil {
				return err
			}
		}
	}
	return setMeta(ix.ctx, ix.tx, metaDroppedLast, r.At)
}

// sync makes the index hold every record appended before it was called,
// by this process or another: a read after a write sees it.
func (l *Log) sync(ctx context.Context) error {
	if l.closed() {
		return ErrClosed
	}
	end, err := l.j.End(ctx)
	if err != nil {
		return err
	}
	if uint64(end) <= l.indexed.Load() {
		return nil
	}
	return l.dbErr(l.catchUp(ctx))
}

// Sync makes every record appended so far, by any process sharing the
// journal, visible to this Log's queries. Queries call it themselves;
// it is for callers that want the cost paid now.
func (l *Log) Sync(ctx context.Context) error { return l.sync(ctx) }

// indexer is the background goroutine: it indexes what was appended
// (by this process or another) every interval, so the index lags the
// journal by about that much, and runs retention.
func (l *Log) background() {
	defer close(l.stopped)
	// A sync under way when Close is called is abandoned, not waited
	// for: on a journal behind a network (JetStream), a request whose
	// answer was lost in a server's restart would hold Close for the
	// sync's whole minute. Close indexes what is left itself, under a
	// bound of its own.
	life, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		select {
		case <-l.done:
			stop()
		case <-life.Done():
		}
	}()
	t := time.NewTicker(l.opts.indexInterval)
	defer t.Stop()
	nextMaint := time.Now().Add(l.opts.retentionInterval)
	var lastSeg Pos
	for {
		select {
		case <-l.done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(life, time.Minute)
		if err := l.sync(ctx); err != nil && !errors.Is(err, ErrClosed) && life.Err() == nil {
			l.log.Warn("tasklog: indexing the journal failed", "error", err)
		}
		// A new segment is a step retention may take at once: a busy
		// gateway does not overshoot its budget by an interval's writes.
		rotated := false
		if end := Pos(l.indexed.Load()); end.seg() != lastSeg.seg() {
			rotated, lastSeg = lastSeg != 0, end
		}
		if !l.opts.noBackgroundRetention && (rotated || time.Now().After(nextMaint)) {
			if _, err := l.enforceRetention(ctx); err != nil && !errors.Is(err, ErrClosed) && life.Err() == nil {
				l.log.Warn("tasklog: retention failed", "error", err)
			}
			nextMaint = time.Now().Add(l.opts.retentionInterval)
		}
		cancel()
	}
}
