package tasklog

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/toolmux/toolmux/tool"
)

// Record appends the record of one tool call to the journal; it
// implements pipeline.Recorder. It returns once the record is as durable
// as the log promises (written, or synced with [DurabilityFull]); the
// index learns of it later, off the call's path. The whole record is
// kept as JSON; the index keeps its id, task, start and outcome, and
// where it is. A record
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
	payload, id, owner, rc := l.callPayload(rec)
	ctx = context.WithoutCancel(ctx)
	var err error
	for attempt := 1; attempt <= 2; attempt++ {
		actx, cancel := context.WithTimeout(ctx, l.opts.recordTimeout)
		_, err = l.appendPayloads(actx, payload)
		cancel()
		if err == nil {
			l.stats.recorded.Add(1)
			if rc != nil {
				l.recent.add(id, rc)
			}
			return
		}
		l.noteErr(err)
		if attempt == 2 || errors.Is(err, ErrClosed) {
			break
		}
		l.stats.retried.Add(1)
		l.log.Warn("tasklog: storing a call record failed; retrying", "id", id, "task", rec.Task, "error", err)
		t := time.NewTimer(l.opts.retryDelay)
		select {
		case <-t.C:
		case <-l.done:
			t.Stop()
		}
	}
	if owner != "" {
		l.unclaim(rec.Task)
	}
	l.stats.lost.Add(1)
	kind := ""
	if rec.Error != nil {
		kind = string(rec.Error.Kind)
	}
	l.log.Error("tasklog: call record lost", "id", id, "task", rec.Task, "session", rec.Session,
		"server", rec.Server, "tool", rec.Tool, "error_kind", kind, "error", err)
}

// callPayload encodes rec as a call record, and returns with it what the
// call's tool_call events are rebuilt from (nil when the record is not
// the usual). A record that cannot be marshalled (an argument of a type
// JSON cannot hold, NaN) is stored without its arguments and result,
// with the reason, rather than not at all.
func (l *Log) callPayload(rec *tool.Record) (payload []byte, id, owner string, rc *recentCall) {
	c := *rec
	if c.ID == "" {
		c.ID = tool.NewID()
		l.log.Warn("tasklog: call record without an id; gave it one", "id", c.ID, "server", c.Server, "tool", c.Tool)
	}
	if c.Started.IsZero() {
		c.Started = l.opts.now()
	}
	if c.Ended.IsZero() {
		c.Ended = c.Started.Add(c.Duration)
	}
	jc := &jCall{Session: c.Session, Started: c.Started.UnixNano(), Ended: c.Ended.UnixNano(), Duration: int64(c.Duration), Caller: c.Caller}
	if c.Error != nil {
		jc.Kind = string(c.Error.Kind)
	}
	owner = l.claim(c.Task)
	r := &jrec{V: FormatVersion, Type: recCall, ID: c.ID, Task: c.Task, At: l.opts.now().UnixNano(), Owner: owner, Call: jc}
	// The envelope holds the id, task, session and caller: the record
	// does not repeat them (decodeCall puts them back).
	body := c
	body.ID, body.Task, body.Session, body.Caller = "", "", "", nil
	bp := scratch.Get().(*[]byte)
	defer scratch.Put(bp)
	b, cb, err := appendRecordBody((*bp)[:0], &body)
	if err == nil {
		*bp = b
		// One allocation for the payload, which the journal's writer
		// may hold until its group is written.
		payload = appendCallRecord(make([]byte, 0, len(cb.json)+256+len(c.ID)+len(c.Task)+len(owner)+len(c.Session)), r, cb.json)
		if utf8.ValidString(c.Server) && utf8.ValidString(c.Tool) {
			// (Names that are not valid UTF-8 read back changed from
			// the record, and so would the exposed name rebuilt from
			// them: such a call's events are kept whole.)
			rc = &recentCall{name: tool.ExposedName(c.Server, c.Tool), args: bytes.Clone(cb.args), text: cb.text, textOK: cb.textOK}
		}
		return payload, c.ID, owner, rc
	}
	// encoding/json's path, which says what it could not write.
	b, err = json.Marshal(body)
	if err != nil {
		body.Arguments, body.Result = nil, nil
		body.Notes = slices.Clone(body.Notes) // do not write into the caller's array
		body.Note("tasklog", "arguments and result not recorded: "+err.Error(), nil)
		if b, err = json.Marshal(body); err != nil {
			// Notes or the error itself hold the culprit: keep the columns.
			b, _ = json.Marshal(map[string]any{"id": c.ID, "task": c.Task, "session": c.Session,
				"server": c.Server, "tool": c.Tool, "unrecordable": err.Error()})
		}
		l.log.Warn("tasklog: call record partly unrecordable", "id", c.ID, "error", err)
	}
	r.Rec = b
	payload, err = l.encode(r)
	if err != nil {
		// Only a record field JSON cannot hold gets here; r is plain.
		payload, _ = l.encode(&jrec{Type: recCall, ID: c.ID, Task: c.Task, Owner: owner, Call: jc, Rec: json.RawMessage(`{}`)})
	}
	return payload, c.ID, owner, nil
}

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
		out, err = l.readCalls(ctx, tx, taskID)
		return err
	})
	return out, err
}

func (l *Log) readCalls(ctx context.Context, tx *sql.Tx, taskID string) ([]*tool.Record, error) {
	rows, err := tx.QueryContext(ctx, `SELECT id, pos FROM calls WHERE task_id = ? ORDER BY started_at, pos`, taskID)
	if err != nil {
		return nil, err
	}
	type row struct {
		id  string
		pos int64
	}
	var found []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.pos); err != nil {
			rows.Close()
			return nil, err
		}
		found = append(found, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([]*tool.Record, 0, len(found))
	for _, r := range found {
		rec, err := l.callAt(ctx, Pos(r.pos))
		var gone *GoneError
		if errors.As(err, &gone) {
			continue // dropped by retention since the query
		}
		if err != nil {
			rec = &tool.Record{ID: r.id, Task: taskID}
			rec.Note("tasklog", "stored record unreadable: "+err.Error(), nil)
		}
		out = append(out, rec)
	}
	return out, nil
}

// callAt reads the call record at pos in the journal.
func (l *Log) callAt(ctx context.Context, pos Pos) (*tool.Record, error) {
	payload, err := l.j.ReadAt(ctx, pos)
	if err != nil {
		return nil, err
	}
	return decodeCall(payload)
}

// decodeCall reads a call record's payload.
func decodeCall(payload []byte) (*tool.Record, error) {
	var r jrec
	if err := json.Unmarshal(payload, &r); err != nil {
		return nil, err
	}
	if r.Type != recCall || r.Call == nil {
		return nil, fmt.Errorf("tasklog: not a call record: %s", r.Type)
	}
	rec := &tool.Record{}
	if err := json.Unmarshal(r.Rec, rec); err != nil {
		// Keep what the envelope says rather than fail the whole read.
		rec = &tool.Record{}
		rec.Note("tasklog", "stored record unreadable: "+err.Error(), nil)
	}
	// The envelope is authoritative for what it holds.
	rec.ID, rec.Task, rec.Session, rec.Caller = r.ID, r.Task, r.Call.Session, r.Call.Caller
	rec.Started, rec.Ended, rec.Duration = fromNS(r.Call.Started), fromNS(r.Call.Ended), time.Duration(r.Call.Duration)
	if rec.Error == nil && r.Call.Kind != "" {
		rec.Error = &tool.Error{Kind: tool.Kind(r.Call.Kind)}
	}
	return rec, nil
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
