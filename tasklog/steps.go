package tasklog

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// Level is how much a step log matters.
type Level string

// The levels.
const (
	LevelDebug   Level = "debug"
	LevelInfo    Level = "info"
	LevelWarning Level = "warning"
	LevelError   Level = "error"
)

// Step is one entry of a task's step log (MiroFlow's log_step).
type Step struct {
	// Seq orders the steps; the log assigns it.
	Seq int64 `json:"seq,omitempty"`
	// Name says which step ("Main Agent | Turn: 1 | LLM Call").
	Name    string `json:"name"`
	Message string `json:"message"`
	// Level is debug, info (the default), warning or error.
	Level Level `json:"level"`
	// Time defaults to now.
	Time     time.Time      `json:"time"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

func (lv Level) valid() bool {
	switch lv {
	case LevelDebug, LevelInfo, LevelWarning, LevelError:
		return true
	}
	return false
}

// Step appends one entry to a task's step log. A task nobody started is
// created, running.
func (l *Log) Step(ctx context.Context, taskID string, s Step) error {
	if taskID == "" {
		return &ValidationError{Field: "task", Reason: "a step needs a task id"}
	}
	if s.Level == "" {
		s.Level = LevelInfo
	}
	if !s.Level.valid() {
		return &ValidationError{Field: "level", Value: string(s.Level), Reason: "must be debug, info, warning or error"}
	}
	var meta json.RawMessage
	if len(s.Metadata) > 0 {
		b, err := json.Marshal(s.Metadata)
		if err != nil {
			return &ValidationError{Field: "metadata", Value: short(fmt.Sprint(s.Metadata)), Reason: err.Error()}
		}
		meta = b
	}
	now := l.opts.now()
	t := s.Time
	if t.IsZero() {
		t = now
	}
	owner := l.claim(taskID)
	_, err := l.appendRecs(ctx, &jrec{Type: recStep, Task: taskID, At: now.UnixNano(), Owner: owner,
		Step: &jStep{Name: s.Name, Message: s.Message, Level: s.Level, Time: t.UnixNano(), Metadata: meta}})
	if err != nil && owner != "" {
		l.unclaim(taskID)
	}
	return err
}

// Steps returns a task's step log in the order it was written, or a
// [*NotFoundError].
func (l *Log) Steps(ctx context.Context, taskID string) ([]Step, error) {
	var out []Step
	err := l.read(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = readSteps(ctx, tx, taskID)
		return err
	})
	return out, err
}

func readSteps(ctx context.Context, tx *sql.Tx, taskID string) ([]Step, error) {
	if err := taskExists(ctx, tx, taskID); err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, `SELECT seq, name, message, level, time, metadata FROM steps WHERE task_id = ? ORDER BY seq`, taskID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Step{}
	for rows.Next() {
		var (
			s    Step
			t    int64
			meta sql.NullString
		)
		if err := rows.Scan(&s.Seq, &s.Name, &s.Message, &s.Level, &t, &meta); err != nil {
			return nil, err
		}
		s.Time = fromNS(t)
		if meta.Valid {
			if err := json.Unmarshal([]byte(meta.String), &s.Metadata); err != nil {
				return nil, fmt.Errorf("step %d: metadata: %w", s.Seq, err)
			}
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
