package tasklog

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"time"
)

// Event is one stream event as the task log keeps it, so that a client
// reconnecting with Last-Event-ID gets what it missed.
type Event struct {
	// ID is the stream hub's id: unique, increasing in the order events
	// were emitted.
	ID int64 `json:"id"`
	// Name is the SSE event name (tool_call, message, ...).
	Name string `json:"name"`
	// Task is the task the event belongs to; empty for events of no task.
	Task string `json:"task,omitempty"`
	// Time defaults to now.
	Time time.Time `json:"time"`
	// Data is the event's JSON payload; empty is none.
	Data json.RawMessage `json:"data,omitempty"`
}

// AppendEvents stores events in one transaction: all or none. An id
// already stored with the same name, task, time and data is skipped, so a
// replayed batch is harmless; an id already stored with different content
// fails the batch with a [*DuplicateEventError]. Events need no task row.
func (l *Log) AppendEvents(ctx context.Context, evs ...Event) error {
	for _, e := range evs {
		if e.Name == "" {
			return &ValidationError{Field: "name", Reason: "an event needs a name"}
		}
		if len(e.Data) > 0 && !json.Valid(e.Data) {
			return &ValidationError{Field: "data", Value: short(string(e.Data)), Reason: "must be JSON"}
		}
	}
	if len(evs) == 0 {
		return nil
	}
	now := l.opts.now()
	return l.write(ctx, func(tx *sql.Tx) error {
		for _, e := range evs {
			t := e.Time
			if t.IsZero() {
				t = now
			}
			var data sql.NullString
			if len(e.Data) > 0 {
				data = sql.NullString{String: string(e.Data), Valid: true}
			}
			res, err := l.exec(ctx, tx, qInsertEvent, e.ID, e.Name, e.Task, ns(t), data)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 1 {
				continue
			}
			// The id is taken: harmless if it is this very event.
			var (
				old     Event
				oldT    int64
				oldData sql.NullString
			)
			if err := tx.QueryRowContext(ctx, `SELECT name, task, time, data FROM events WHERE id = ?`, e.ID).
				Scan(&old.Name, &old.Task, &oldT, &oldData); err != nil {
				return err
			}
			same := old.Name == e.Name && old.Task == e.Task && oldData.Valid == data.Valid &&
				bytes.Equal([]byte(oldData.String), []byte(data.String)) && (e.Time.IsZero() || oldT == ns(t))
			if !same {
				return &DuplicateEventError{ID: e.ID}
			}
		}
		return nil
	})
}

const qInsertEvent = `INSERT INTO events (id, name, task, time, data) VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`

// EventsAfter returns the events with an id greater than afterID, in id
// order: of one task, or of all when task is empty; at most limit of them
// (no cap when limit is 0 or less).
func (l *Log) EventsAfter(ctx context.Context, afterID int64, task string, limit int) ([]Event, error) {
	q := `SELECT id, name, task, time, data FROM events WHERE id > ?`
	args := []any{afterID}
	if task != "" {
		q += ` AND task = ?`
		args = append(args, task)
	}
	q += ` ORDER BY id`
	if limit > 0 {
		q += ` LIMIT ?`
		args = append(args, limit)
	}
	out := []Event{}
	err := l.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				e    Event
				t    int64
				data sql.NullString
			)
			if err := rows.Scan(&e.ID, &e.Name, &e.Task, &t, &data); err != nil {
				return err
			}
			e.Time = fromNS(t)
			if data.Valid {
				e.Data = json.RawMessage(data.String)
			}
			out = append(out, e)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// LastEventID returns the greatest event id stored, 0 when there is none:
// where a stream hub starting up continues numbering.
func (l *Log) LastEventID(ctx context.Context) (int64, error) {
	var id sql.NullInt64
	err := l.read(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `SELECT max(id) FROM events`).Scan(&id)
	})
	return id.Int64, err
}
