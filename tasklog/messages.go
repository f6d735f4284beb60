package tasklog

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"
)

// MainSession is the session of a task's main agent; messages appended
// with an empty session go there. Every other session is a sub-agent's.
const MainSession = "main"

// Message is one message of an agent session's history, in the chat form
// models take.
type Message struct {
	// Role is system, user, assistant or tool.
	Role string `json:"role"`
	// Content is the message's JSON content: a string, or an array of
	// parts ({"type": "text", ...}), kept byte for byte. Empty is null.
	Content json.RawMessage `json:"content"`
	// Name is the author's name, when the model API uses one.
	Name string `json:"name,omitempty"`
	// ToolCallID ties a tool message to the call it answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// ToolCalls is an assistant message's tool calls, when the model API
	// carries them beside the content (OpenAI's tool_calls array).
	ToolCalls json.RawMessage `json:"tool_calls,omitempty"`
	// Time defaults to now.
	Time time.Time `json:"timestamp,omitzero"`
}

// SessionHistory is the message history of one session.
type SessionHistory struct {
	Session  string    `json:"session"`
	Messages []Message `json:"messages"`
}

// AppendMessages appends messages to the history of one agent session of a
// task (MainSession when session is empty), in one transaction: all or
// none. A task nobody started is created, running.
func (l *Log) AppendMessages(ctx context.Context, taskID, session string, msgs ...Message) error {
	if taskID == "" {
		return &ValidationError{Field: "task", Reason: "messages need a task id"}
	}
	if session == "" {
		session = MainSession
	}
	for _, m := range msgs {
		if m.Role == "" {
			return &ValidationError{Field: "role", Reason: "a message needs a role"}
		}
		if len(m.Content) > 0 && !json.Valid(m.Content) {
			return &ValidationError{Field: "content", Value: short(string(m.Content)), Reason: "must be JSON (a string or an array of parts)"}
		}
		if len(m.ToolCalls) > 0 && !json.Valid(m.ToolCalls) {
			return &ValidationError{Field: "tool_calls", Value: short(string(m.ToolCalls)), Reason: "must be JSON"}
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	now := l.opts.now()
	list := make([]jMessage, len(msgs))
	for i, m := range msgs {
		content := m.Content
		if len(content) == 0 {
			content = json.RawMessage("null")
		}
		list[i] = jMessage{Role: m.Role, Content: content, Name: m.Name, ToolCallID: m.ToolCallID, ToolCalls: m.ToolCalls,
			Time: l.orNow(m.Time).UnixNano()}
		if m.Time.IsZero() {
			list[i].Time = now.UnixNano()
		}
	}
	owner := l.claim(taskID)
	_, err := l.appendRecs(ctx, &jrec{Type: recMsgs, Task: taskID, At: now.UnixNano(), Owner: owner,
		Msgs: &jMsgs{Session: session, Messages: list}})
	if err != nil && owner != "" {
		l.unclaim(taskID)
	}
	return err
}

// Messages returns the history of one session of a task (MainSession when
// session is empty), oldest first: empty for a session with no messages, a
// [*NotFoundError] for a task not in the log.
func (l *Log) Messages(ctx context.Context, taskID, session string) ([]Message, error) {
	if session == "" {
		session = MainSession
	}
	var out []Message
	err := l.read(ctx, func(tx *sql.Tx) error {
		if err := taskExists(ctx, tx, taskID); err != nil {
			return err
		}
		var err error
		out, err = readMessages(ctx, tx, taskID, session)
		return err
	})
	return out, err
}

func readMessages(ctx context.Context, tx *sql.Tx, taskID, session string) ([]Message, error) {
	rows, err := tx.QueryContext(ctx, `SELECT role, content, name, tool_call_id, tool_calls, time FROM messages
		WHERE task_id = ? AND session = ? ORDER BY ord, i`, taskID, session)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Message{}
	for rows.Next() {
		var (
			m       Message
			content string
			calls   sql.NullString
			t       int64
		)
		if err := rows.Scan(&m.Role, &content, &m.Name, &m.ToolCallID, &calls, &t); err != nil {
			return nil, err
		}
		m.Content = json.RawMessage(content)
		if calls.Valid {
			m.ToolCalls = json.RawMessage(calls.String)
		}
		m.Time = fromNS(t)
		out = append(out, m)
	}
	return out, rows.Err()
}

// Sessions lists the sessions of a task that have messages, in the order
// of their first message, or returns a [*NotFoundError].
func (l *Log) Sessions(ctx context.Context, taskID string) ([]string, error) {
	var out []string
	err := l.read(ctx, func(tx *sql.Tx) error {
		if err := taskExists(ctx, tx, taskID); err != nil {
			return err
		}
		var err error
		out, err = readSessions(ctx, tx, taskID)
		return err
	})
	return out, err
}

func readSessions(ctx context.Context, tx *sql.Tx, taskID string) ([]string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT session FROM messages WHERE task_id = ? GROUP BY session ORDER BY min(ord)`, taskID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
