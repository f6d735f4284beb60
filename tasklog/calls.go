package tasklog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"github.com/toolmux/toolmux/tool"
)

// callRow is a record ready to be stored: the indexed columns and the JSON.
type callRow struct {
	id, task, session, server, tool, kind string
	started, ended                        time.Time
	duration                              time.Duration
	json                                  string
}

// Record stores the record of one tool call; it implements
// pipeline.Recorder. The whole record is kept as JSON, with its id, task,
// session, server, tool, error kind and times in indexed columns. A record
// whose task was never started creates that task, running (a gateway
// client's session is its task). A record without a task is kept too; see
// [Log.Calls]. Recording the same id twice keeps the first.
//
// Record has no error to return, so it never fails quietly instead: it
// ignores the cancellation of ctx (a cancelled call must be recorded too,
// each attempt bounded by [WithRecordTimeout]), retries a failed write once,
// and logs and counts ([Log.Stats]) every retry and every record it could
// not store. It never panics.
func (l *Log) Record(ctx context.Context, rec *tool.Record) {
	defer func() {
		if p := recover(); p != nil {
			l.stats.lost.Add(1)
			err := fmt.Errorf("panic while recording: %v", p)
			l.noteErr(err)
			l.log.Error("tasklog: call record lost", "error", err, "stack", string(debug.Stack()))
		}
	}()
	if rec == nil {
		l.stats.lost.Add(1)
		l.noteErr(errors.New("nil record"))
		l.log.Error("tasklog: call record lost", "error", "nil record")
		return
	}
	row := l.callRow(rec)
	ctx = context.WithoutCancel(ctx)
	var err error
	for attempt := 1; attempt <= 2; attempt++ {
		actx, cancel := context.WithTimeout(ctx, l.opts.recordTimeout)
		err = l.insertCall(actx, row)
		cancel()
		if err == nil {
			l.stats.recorded.Add(1)
			return
		}
		l.noteErr(err)
		if attempt == 2 || errors.Is(err, ErrClosed) {
			break
		}
		l.stats.retried.Add(1)
		l.log.Warn("tasklog: storing a call record failed; retrying", "id", row.id, "task", row.task, "error", err)
		t := time.NewTimer(l.opts.retryDelay)
		select {
		case <-t.C:
		case <-l.done:
			t.Stop()
		}
	}
	l.stats.lost.Add(1)
	l.log.Error("tasklog: call record lost", "id", row.id, "task", row.task, "session", row.session,
		"server", row.server, "tool", row.tool, "error_kind", row.kind, "error", err)
}

// callRow prepares rec for storage. A record that cannot be marshalled
// (an argument of a type JSON cannot hold, NaN) is stored without its
// arguments and result, with the reason, rather than not at all.
func (l *Log) callRow(rec *tool.Record) callRow {
	row := callRow{
		id: rec.ID, task: rec.Task, session: rec.Session, server: rec.Server, tool: rec.Tool,
		started: rec.Started, ended: rec.Ended, duration: rec.Duration,
	}
	if rec.Error != nil {
		row.kind = string(rec.Error.Kind)
	}
	if row.id == "" {
		row.id = tool.NewID()
		l.log.Warn("tasklog: call record without an id; gave it one", "id", row.id, "server", row.server, "tool", row.tool)
	}
	if row.started.IsZero() {
		row.started = l.opts.now()
	}
	if row.ended.IsZero() {
		row.ended = row.started.Add(row.duration)
	}
	c := *rec
	c.ID = row.id
	b, err := json.Marshal(c)
	if err != nil {
		c.Arguments, c.Result = nil, nil
		c.Notes = slices.Clone(c.Notes) // do not write into the caller's array
		c.Note("tasklog", "arguments and result not recorded: "+err.Error(), nil)
		if b, err = json.Marshal(c); err != nil {
			// Notes or the error itself hold the culprit: keep the columns.
			b, _ = json.Marshal(map[string]any{"id": row.id, "task": row.task, "session": row.session,
				"server": row.server, "tool": row.tool, "unrecordable": err.Error()})
		}
		l.log.Warn("tasklog: call record partly unrecordable", "id", row.id, "error", err)
	}
	row.json = string(b)
	return row
}

func (l *Log) insertCall(ctx context.Context, row callRow) error {
	now := l.opts.now()
	return l.write(ctx, func(tx *sql.Tx) error {
		var task sql.NullString
		if row.task != "" {
			task = sql.NullString{String: row.task, Valid: true}
			if err := l.ensureTask(ctx, tx, row.task, row.started, now); err != nil {
				return err
			}
		}
		_, err := l.exec(ctx, tx, qInsertCall, row.id, task, row.session, row.server, row.tool, row.kind, ns(row.started), ns(row.ended), int64(row.duration), row.json)
		return err
	})
}

const qInsertCall = `INSERT INTO calls (id, task_id, session, server, tool, error_kind, started_at, ended_at, duration_ns, record)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`

// Calls returns the call records of a task in the order the calls started,
// or a [*NotFoundError]. An empty taskID returns the calls made outside
// any task (the CLI's `toolmux call`).
func (l *Log) Calls(ctx context.Context, taskID string) ([]*tool.Record, error) {
	var out []*tool.Record
	err := l.read(ctx, func(tx *sql.Tx) error {
		if taskID != "" {
			if err := taskExists(ctx, tx, taskID); err != nil {
				return err
			}
		}
		var err error
		out, err = readCalls(ctx, tx, taskID)
		return err
	})
	return out, err
}

func readCalls(ctx context.Context, tx *sql.Tx, taskID string) ([]*tool.Record, error) {
	q := `SELECT id, coalesce(task_id, ''), session, server, tool, error_kind, started_at, ended_at, duration_ns, record
		FROM calls WHERE task_id = ? ORDER BY started_at, rowid`
	args := []any{taskID}
	if taskID == "" {
		q = `SELECT id, '', session, server, tool, error_kind, started_at, ended_at, duration_ns, record
			FROM calls WHERE task_id IS NULL ORDER BY started_at, rowid`
		args = nil
	}
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []*tool.Record{}
	for rows.Next() {
		var (
			row            callRow
			started, ended int64
			duration       int64
		)
		if err := rows.Scan(&row.id, &row.task, &row.session, &row.server, &row.tool, &row.kind, &started, &ended, &duration, &row.json); err != nil {
			return nil, err
		}
		rec := &tool.Record{}
		if err := json.Unmarshal([]byte(row.json), rec); err != nil {
			// Keep what the columns say rather than fail the whole read.
			rec = &tool.Record{}
			rec.Note("tasklog", "stored record unreadable: "+err.Error(), nil)
		}
		// The columns are authoritative for what they hold.
		rec.ID, rec.Task, rec.Session, rec.Server, rec.Tool = row.id, row.task, row.session, row.server, row.tool
		rec.Started, rec.Ended, rec.Duration = fromNS(started), fromNS(ended), time.Duration(duration)
		if rec.Error == nil && row.kind != "" {
			rec.Error = &tool.Error{Kind: tool.Kind(row.kind)}
		}
		out = append(out, rec)
	}
	return out, rows.Err()
}

// OneCallStatus is how a task made of one call ends: success, cancelled
// or failed, with the error as its final answer ("kind: message").
func OneCallStatus(rec *tool.Record) (Status, string) {
	switch {
	case rec == nil:
		return StatusFailed, "no record"
	case rec.Error == nil:
		return StatusSuccess, ""
	case rec.Error.Kind == tool.KindCancelled:
		return StatusCancelled, rec.Error.Message
	}
	return StatusFailed, string(rec.Error.Kind) + ": " + rec.Error.Message
}
