package tasklog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/toolmux/toolmux/identity"
)

// Status is where a task stands.
type Status string

// The statuses. Every status but running is final.
const (
	StatusRunning   Status = "running"
	StatusSuccess   Status = "success"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
	// StatusInterrupted marks a task whose process went away while it ran:
	// set by [Open] for tasks of processes that died, and by
	// [Log.RecoverInterrupted].
	StatusInterrupted Status = "interrupted"
	// The ends of a gateway client's session: the client closed it
	// (StatusClosed), it timed out with no request (StatusIdle), or the
	// gateway stopped (StatusShutdown; also every task a process still
	// owns when it stops, [Log.FinishOwned]).
	StatusClosed   Status = "closed"
	StatusIdle     Status = "idle"
	StatusShutdown Status = "shutdown"
)

// Statuses lists every status, running first.
func Statuses() []Status {
	return []Status{StatusRunning, StatusSuccess, StatusFailed, StatusCancelled, StatusInterrupted,
		StatusClosed, StatusIdle, StatusShutdown}
}

// Valid reports whether s is one of the statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusRunning, StatusSuccess, StatusFailed, StatusCancelled, StatusInterrupted,
		StatusClosed, StatusIdle, StatusShutdown:
		return true
	}
	return false
}

// Task is one task: an agent run, or a gateway client's session.
type Task struct {
	ID     string `json:"id"`
	Status Status `json:"status"`
	// Created is when the task started (or its first write, for a task the
	// log created on its own); Updated is its last write; Ended is when it
	// finished, zero while it runs.
	Created time.Time `json:"created_at"`
	Updated time.Time `json:"updated_at"`
	Ended   time.Time `json:"ended_at,omitzero"`
	// Input is what the task was asked.
	Input string `json:"input"`
	// FinalAnswer is what it answered (or why it failed).
	FinalAnswer string `json:"final_answer"`
	// Metadata is free-form JSON (model, agent, benchmark, ...).
	Metadata map[string]any `json:"metadata,omitempty"`
	// Caller is who the task belongs to (docs/identity.md): who started
	// it (StartTask), or who made the call whose record created it. nil
	// for a task of no caller (no authentication configured, an agent
	// run of the command line). A task's first caller stays its owner.
	Caller *identity.Ref `json:"caller,omitempty"`
}

// TaskSummary is a task as listed by [Log.Tasks].
type TaskSummary struct {
	ID      string    `json:"id"`
	Status  Status    `json:"status"`
	Created time.Time `json:"created_at"`
	Updated time.Time `json:"updated_at"`
	Ended   time.Time `json:"ended_at,omitzero"`
	Input   string    `json:"input"`
	// Caller is who the task belongs to, as Task.Caller.
	Caller *identity.Ref `json:"caller,omitempty"`
	// Calls counts the task's tool calls; Errors those that failed.
	Calls  int `json:"calls"`
	Errors int `json:"errors"`
}

// Filter selects tasks for [Log.Tasks].
type Filter struct {
	// Status keeps only tasks of that status; empty keeps all.
	Status Status
	// Limit caps the number of tasks; 0 or less is no cap.
	Limit int
	// Before keeps only tasks created strictly before it (for paging:
	// pass the Created of the last task of the previous page); zero keeps
	// all.
	Before time.Time
	// Caller keeps only the tasks of the caller of that key
	// (identity.Caller.Key); "" keeps every caller's and none's.
	Caller string
}

// StartTask records that a task started. A task of that id may already
// exist: created on its own by an earlier write (a gateway session's first
// call), or an earlier run being resumed. Then it is set running again, its
// end time cleared, and its input and metadata replaced when t gives them.
// t.Created defaults to now; t.Status must be empty or running.
func (l *Log) StartTask(ctx context.Context, t Task) error {
	if t.ID == "" {
		return &ValidationError{Field: "id", Reason: "a task needs an id"}
	}
	if t.Status != "" && t.Status != StatusRunning {
		return &ValidationError{Field: "status", Value: string(t.Status), Reason: "a task starts running; use FinishTask to end it"}
	}
	var meta json.RawMessage
	if len(t.Metadata) > 0 {
		b, err := json.Marshal(t.Metadata)
		if err != nil {
			return &ValidationError{Field: "metadata", Value: fmt.Sprint(t.Metadata), Reason: err.Error()}
		}
		meta = b
	}
	now := l.opts.now()
	created := t.Created
	if created.IsZero() {
		created = now
	}
	l.claim(t.ID)
	_, err := l.appendRecs(ctx, &jrec{Type: recStart, Task: t.ID, At: now.UnixNano(), Owner: l.ownerStr,
		Start: &jStart{Created: created.UnixNano(), Input: t.Input, Metadata: meta, Caller: t.Caller}})
	return err
}

// FinishTask records that a task ended with status (any but running) and
// its final answer. Finishing a task twice keeps the last call's values. A
// task not in the log is a [*NotFoundError].
func (l *Log) FinishTask(ctx context.Context, id string, status Status, finalAnswer string) error {
	if !status.Valid() || status == StatusRunning {
		return &ValidationError{Field: "status", Value: string(status), Reason: "must be one of the final statuses: " + finalStatuses()}
	}
	if err := l.read(ctx, func(tx *sql.Tx) error { return taskExists(ctx, tx, id) }); err != nil {
		return err
	}
	_, err := l.appendRecs(ctx, &jrec{Type: recEnd, Task: id, End: &jEnd{Status: status, Answer: finalAnswer}})
	return err
}

// Task returns one task, or a [*NotFoundError].
func (l *Log) Task(ctx context.Context, id string) (*Task, error) {
	var t *Task
	err := l.read(ctx, func(tx *sql.Tx) error {
		var err error
		t, err = readTask(ctx, tx, id)
		return err
	})
	return t, err
}

func readTask(ctx context.Context, tx *sql.Tx, id string) (*Task, error) {
	var (
		t                Task
		created, updated int64
		ended            sql.NullInt64
		meta             string
		caller           callerCols
	)
	err := tx.QueryRowContext(ctx, `SELECT id, status, created_at, updated_at, ended_at, input, final_answer, metadata, caller_key, caller_name
		FROM tasks WHERE id = ?`, id).Scan(&t.ID, &t.Status, &created, &updated, &ended, &t.Input, &t.FinalAnswer, &meta, &caller.key, &caller.name)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, &NotFoundError{Task: id}
	}
	if err != nil {
		return nil, err
	}
	t.Created, t.Updated, t.Ended = fromNS(created), fromNS(updated), fromNullNS(ended)
	t.Caller = caller.ref()
	if meta != "" && meta != "{}" {
		if err := json.Unmarshal([]byte(meta), &t.Metadata); err != nil {
			return nil, fmt.Errorf("task %s: metadata: %w", id, err)
		}
	}
	return &t, nil
}

// taskExists returns a [*NotFoundError] unless the task is in the log.
func taskExists(ctx context.Context, tx *sql.Tx, id string) error {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM tasks WHERE id = ?`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return &NotFoundError{Task: id}
	}
	return err
}

// maxCandidates bounds the ids an [AmbiguousError] lists.
const maxCandidates = 10

// ResolveID returns the id of the task id names: the task of that very
// id, else the one task whose id starts with it, so that people may type
// a short prefix of a long id. No match is a [*NotFoundError]; more than
// one is an [*AmbiguousError] listing them.
func (l *Log) ResolveID(ctx context.Context, id string) (string, error) {
	if id == "" {
		return "", &NotFoundError{Task: id}
	}
	var ids []string
	err := l.read(ctx, func(tx *sql.Tx) error {
		var exact string
		switch err := tx.QueryRowContext(ctx, `SELECT id FROM tasks WHERE id = ?`, id).Scan(&exact); {
		case err == nil:
			ids = []string{exact}
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		// GLOB is case-sensitive like ids, and uses the primary key's
		// index for a prefix.
		rows, err := tx.QueryContext(ctx, `SELECT id FROM tasks WHERE id GLOB ? ORDER BY created_at DESC, id DESC LIMIT ?`,
			globPrefix(id), maxCandidates+1)
		if err != nil {
			return err
		}
		ids, err = scanStrings(rows)
		return err
	})
	switch {
	case err != nil:
		return "", err
	case len(ids) == 0:
		return "", &NotFoundError{Task: id}
	case len(ids) > 1:
		e := &AmbiguousError{Prefix: id, Candidates: ids}
		if len(ids) > maxCandidates {
			e.Candidates, e.More = ids[:maxCandidates], true
		}
		return "", e
	}
	return ids[0], nil
}

// globPrefix is a GLOB pattern matching the strings that start with p.
func globPrefix(p string) string {
	var b strings.Builder
	for _, r := range p {
		switch r {
		case '*', '?', '[':
			b.WriteByte('[')
			b.WriteRune(r)
			b.WriteByte(']')
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('*')
	return b.String()
}

// Tasks lists tasks, newest first, with their call counts.
func (l *Log) Tasks(ctx context.Context, f Filter) ([]TaskSummary, error) {
	if f.Status != "" && !f.Status.Valid() {
		return nil, &ValidationError{Field: "status", Value: string(f.Status), Reason: "unknown status"}
	}
	var (
		where []string
		args  []any
	)
	if f.Status != "" {
		where = append(where, "status = ?")
		args = append(args, string(f.Status))
	}
	if !f.Before.IsZero() {
		where = append(where, "created_at < ?")
		args = append(args, f.Before.UnixNano())
	}
	if f.Caller != "" {
		where = append(where, "caller_key = ?")
		args = append(args, f.Caller)
	}
	q := `SELECT id, status, created_at, updated_at, ended_at, input, calls, errors, caller_key, caller_name FROM tasks t`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at DESC, id DESC"
	if f.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, f.Limit)
	}
	var out []TaskSummary
	err := l.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				s                TaskSummary
				created, updated int64
				ended            sql.NullInt64
				caller           callerCols
			)
			if err := rows.Scan(&s.ID, &s.Status, &created, &updated, &ended, &s.Input, &s.Calls, &s.Errors, &caller.key, &caller.name); err != nil {
				return err
			}
			s.Created, s.Updated, s.Ended = fromNS(created), fromNS(updated), fromNullNS(ended)
			s.Caller = caller.ref()
			out = append(out, s)
		}
		return rows.Err()
	})
	return out, err
}

// RecoverInterrupted marks as interrupted every task still running whose
// last write is older than olderThan, and returns their ids. Each gets a
// warning step saying so; its end time is its last write.
//
// Open never does this on its own, because another live process may share
// the file and be running those tasks. Call it when you know better: at
// startup of the only process using the data directory (olderThan 0), or
// with olderThan longer than any task stays silent (a task's every step,
// message and call record counts as a write).
func (l *Log) RecoverInterrupted(ctx context.Context, olderThan time.Duration) ([]string, error) {
	cutoff := l.opts.now().Add(-olderThan).UnixNano()
	var found []orphan
	err := l.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT id, updated_at FROM tasks WHERE status = 'running' AND updated_at <= ? ORDER BY created_at`, cutoff)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var o orphan
			var u int64
			if err := rows.Scan(&o.id, &u); err != nil {
				return err
			}
			o.why = fmt.Sprintf("no write since %s", fromNS(u).Format(time.RFC3339))
			found = append(found, o)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return l.interrupt(ctx, found)
}

// orphan is a running task to mark interrupted, and why.
type orphan struct{ id, why string }

// interrupt marks tasks interrupted (if still running when indexed),
// each with a warning step saying why, and waits until the index shows it.
func (l *Log) interrupt(ctx context.Context, found []orphan) ([]string, error) {
	ids := []string{}
	if len(found) == 0 {
		return ids, nil
	}
	now := l.opts.now().UnixNano()
	recs := make([]*jrec, 0, 2*len(found))
	for _, o := range found {
		recs = append(recs,
			&jrec{Type: recEnd, Task: o.id, At: now, End: &jEnd{Status: StatusInterrupted, IfRunning: true, AtLastWrite: true}},
			&jrec{Type: recStep, Task: o.id, At: now, Step: &jStep{Name: "interrupted", Message: o.why + "; marked interrupted", Level: LevelWarning, Time: now}})
		ids = append(ids, o.id)
	}
	if _, err := l.appendRecs(ctx, recs...); err != nil {
		return nil, err
	}
	return ids, l.sync(ctx)
}

// finalStatuses names the statuses a task can end with.
func finalStatuses() string {
	var names []string
	for _, st := range Statuses() {
		if st != StatusRunning {
			names = append(names, string(st))
		}
	}
	return strings.Join(names, ", ")
}

// FinishOwned ends every task this Log's process still runs (it started
// them, or created them by recording their calls) with status and
// message: what a process does as it stops, so that none of its tasks is
// left running (toolmux serve ends them as shutdown). It returns their
// ids.
func (l *Log) FinishOwned(ctx context.Context, status Status, message string) ([]string, error) {
	if !status.Valid() || status == StatusRunning {
		return nil, &ValidationError{Field: "status", Value: string(status), Reason: "must be one of the final statuses: " + finalStatuses()}
	}
	var ids []string
	err := l.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT id FROM tasks WHERE status = 'running' AND owner = ? ORDER BY created_at`, l.ownerStr)
		if err != nil {
			return err
		}
		ids, err = scanStrings(rows)
		return err
	})
	if err != nil || len(ids) == 0 {
		return ids, err
	}
	recs := make([]*jrec, len(ids))
	for i, id := range ids {
		recs[i] = &jrec{Type: recEnd, Task: id, End: &jEnd{Status: status, Answer: message, IfRunning: true}}
	}
	if _, err := l.appendRecs(ctx, recs...); err != nil {
		return nil, err
	}
	return ids, l.sync(ctx)
}

// scanStrings reads rows of one text column, and closes them.
func scanStrings(rows *sql.Rows) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// legacyOrphanAge is how long a running task with no owner (written
// before owners were recorded) must have been silent for Open to take it
// for interrupted.
const legacyOrphanAge = time.Hour

// recoverOrphans marks interrupted the running tasks whose process is
// gone: owned by a process of this machine that no longer runs (a pid
// reused by another program does not count: the process's start time is
// part of the owner), or, for tasks recorded before owners were, silent
// for legacyOrphanAge. Tasks of live processes and of other machines are
// left alone. Each gets a warning step saying why.
func (l *Log) recoverOrphans(ctx context.Context) ([]string, error) {
	now := l.opts.now()
	var found []orphan
	err := l.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT id, owner, updated_at FROM tasks WHERE status = 'running' ORDER BY created_at`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				id, owner string
				updated   int64
			)
			if err := rows.Scan(&id, &owner, &updated); err != nil {
				return err
			}
			if why, dead := l.owner.orphaned(owner, fromNS(updated), now); dead {
				found = append(found, orphan{id, why})
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return l.interrupt(ctx, found)
}

// callerCols are the index's columns of a caller: its key and name, ""
// for none.
type callerCols struct{ key, name string }

// ref returns the caller the columns hold; nil for none.
func (c callerCols) ref() *identity.Ref {
	if c.key == "" {
		return nil
	}
	return &identity.Ref{Name: c.name, Key: c.key}
}

// colsOf returns the columns of a caller.
func colsOf(r *identity.Ref) callerCols {
	if r == nil {
		return callerCols{}
	}
	return callerCols{key: r.Key, name: r.Name}
}
