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

// MCP tasks are the gateway's answer to a client that declared the
// io.modelcontextprotocol/tasks extension (SEP-2663): a long tool call
// becomes a task the client polls. Each change of one (created, status,
// progress, input requests, result or error) is a record of type
// "mcp_task" holding the task's whole state, so the newest record is the
// task: the index keeps, per task, the columns a listing needs and where
// that newest record is, and reading one task reads that record. The
// records belong to no toolmux task (they name the toolmux task and call
// they came from instead), so they are never carried or fenced; they go
// with their segment under retention, which is how MCP tasks expire.

// recMCPTask is an MCP task's state.
const recMCPTask = "mcp_task"

// MCPTaskStatus is where an MCP task stands, as SEP-2663 names it.
type MCPTaskStatus string

// The statuses of an MCP task; completed, failed and cancelled are final.
const (
	MCPWorking       MCPTaskStatus = "working"
	MCPInputRequired MCPTaskStatus = "input_required"
	MCPCompleted     MCPTaskStatus = "completed"
	MCPFailed        MCPTaskStatus = "failed"
	MCPCancelled     MCPTaskStatus = "cancelled"
)

// Final reports whether s is a final status.
func (s MCPTaskStatus) Final() bool {
	return s == MCPCompleted || s == MCPFailed || s == MCPCancelled
}

// Valid reports whether s is one of the statuses.
func (s MCPTaskStatus) Valid() bool {
	return s == MCPWorking || s == MCPInputRequired || s.Final()
}

// MCPTask is an MCP task's state.
type MCPTask struct {
	// ID is the task's id, as the client names it: unguessable, since
	// whoever knows it may read the task where no authentication is
	// configured (else only its Caller may).
	ID     string        `json:"id"`
	Status MCPTaskStatus `json:"status"`
	// StatusMessage says more about the status (why it failed, what it
	// waits for).
	StatusMessage string `json:"status_message,omitempty"`
	// Route is the gateway route the call came in on; Tool the tool as
	// the client named it; Server and ServerTool the tool it reached.
	Route      string `json:"route,omitempty"`
	Tool       string `json:"tool"`
	Server     string `json:"server,omitempty"`
	ServerTool string `json:"server_tool,omitempty"`
	// Session is the toolmux task of the client's session the call
	// belongs to ("" for a sessionless request); Call the call's record
	// id, once it has one.
	Session string `json:"session,omitempty"`
	Call    string `json:"call,omitempty"`
	// Created is when the task was created; Updated its last change.
	Created time.Time `json:"created_at"`
	Updated time.Time `json:"updated_at"`
	// Progress is the latest progress the call reported, as MCP's
	// progress notification params ({progress, total, message}).
	Progress json.RawMessage `json:"progress,omitempty"`
	// InputRequests are the questions waiting for the client's answer,
	// by key (while input_required).
	InputRequests json.RawMessage `json:"input_requests,omitempty"`
	// Result is the tool's result (completed); Error the JSON-RPC error
	// object (failed).
	Result json.RawMessage `json:"result,omitempty"`
	Error  json.RawMessage `json:"error,omitempty"`
	// Owner is the process running the task (host/pid/start); set by
	// PutMCPTask.
	Owner string `json:"owner,omitempty"`
	// Caller is who the task belongs to (docs/identity.md): who made
	// the call; nil when no authentication is configured. Only its
	// caller (and those who see everything) may read, answer or cancel
	// it.
	Caller *identity.Ref `json:"caller,omitempty"`
}

// MCPTaskFilter selects MCP tasks for [Log.MCPTasks].
type MCPTaskFilter struct {
	// Status keeps only tasks of that status; empty keeps all.
	Status MCPTaskStatus
	// Limit caps the number of tasks (newest first); 0 or less means 100.
	Limit int
	// Caller keeps only the tasks of the caller of that key
	// (identity.Caller.Key); "" keeps every caller's and none's.
	Caller string
}

// PutMCPTask records an MCP task's state: the task as it now is, whole.
// It returns once the record is as durable as the log promises, and a
// read of this Log after it sees it (a client may ask for the task the
// moment it learns its id). Updated defaults to now, Created to Updated.
func (l *Log) PutMCPTask(ctx context.Context, t MCPTask) error {
	if t.ID == "" {
		return &ValidationError{Field: "id", Reason: "an MCP task needs an id"}
	}
	if !t.Status.Valid() {
		return &ValidationError{Field: "status", Value: string(t.Status), Reason: "must be working, input_required, completed, failed or cancelled"}
	}
	now := l.opts.now()
	if t.Updated.IsZero() {
		t.Updated = now
	}
	if t.Created.IsZero() {
		t.Created = t.Updated
	}
	if t.Owner == "" {
		t.Owner = l.ownerStr
	}
	b, err := json.Marshal(t)
	if err != nil {
		return &ValidationError{Field: "task", Value: t.ID, Reason: err.Error()}
	}
	_, err = l.appendRecs(ctx, &jrec{Type: recMCPTask, At: now.UnixNano(), Owner: t.Owner, MCP: b})
	return err
}

// MCPTask returns an MCP task, or a [*NotFoundError] for an id the log
// does not hold (never created, or expired under retention).
func (l *Log) MCPTask(ctx context.Context, id string) (*MCPTask, error) {
	var pos int64
	err := l.read(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `SELECT pos FROM mcp_tasks WHERE id = ?`, id).Scan(&pos)
		if errors.Is(err, sql.ErrNoRows) {
			return &NotFoundError{Task: id}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	payload, err := l.j.ReadAt(ctx, Pos(pos))
	if err != nil {
		// Dropped by retention between the query and the read.
		return nil, errors.Join(&NotFoundError{Task: id}, err)
	}
	return decodeMCPTask(payload)
}

func decodeMCPTask(payload []byte) (*MCPTask, error) {
	var r jrec
	if err := json.Unmarshal(payload, &r); err != nil {
		return nil, fmt.Errorf("tasklog: an MCP task record: %w", err)
	}
	if r.Type != recMCPTask || len(r.MCP) == 0 {
		return nil, fmt.Errorf("tasklog: not an MCP task record: %s", r.Type)
	}
	var t MCPTask
	if err := json.Unmarshal(r.MCP, &t); err != nil {
		return nil, fmt.Errorf("tasklog: an MCP task record: %w", err)
	}
	return &t, nil
}

// MCPTasks lists MCP tasks, newest first, without their result, error,
// progress or input requests (read one with [Log.MCPTask] for those).
func (l *Log) MCPTasks(ctx context.Context, f MCPTaskFilter) ([]MCPTask, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	q := `SELECT id, status, route, tool, server, server_tool, session, call, created_at, updated_at, owner, caller_key, caller_name FROM mcp_tasks`
	var where []string
	args := []any{}
	if f.Status != "" {
		where = append(where, `status = ?`)
		args = append(args, string(f.Status))
	}
	if f.Caller != "" {
		where = append(where, `caller_key = ?`)
		args = append(args, f.Caller)
	}
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	args = append(args, limit)
	out := []MCPTask{}
	err := l.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var t MCPTask
			var created, updated int64
			var caller callerCols
			if err := rows.Scan(&t.ID, &t.Status, &t.Route, &t.Tool, &t.Server, &t.ServerTool, &t.Session, &t.Call,
				&created, &updated, &t.Owner, &caller.key, &caller.name); err != nil {
				return err
			}
			t.Created, t.Updated = fromNS(created), fromNS(updated)
			t.Caller = caller.ref()
			out = append(out, t)
		}
		return rows.Err()
	})
	return out, err
}

// mcpInterrupted is the reason an MCP task whose process went away ends
// failed with.
const mcpInterrupted = "interrupted: the gateway stopped"

// recoverMCPTasks ends failed, with the reason, the MCP tasks left working
// or waiting for input by processes of this machine that are gone (see
// owner.orphaned): a client polling one learns it will not finish.
func (l *Log) recoverMCPTasks(ctx context.Context) ([]string, error) {
	now := l.opts.now()
	var found []int64
	err := l.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT pos, owner, updated_at FROM mcp_tasks WHERE status IN ('working', 'input_required')`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				pos, updated int64
				owner        string
			)
			if err := rows.Scan(&pos, &owner, &updated); err != nil {
				return err
			}
			// A task always has an owner: none is not a legacy task.
			if _, dead := l.owner.orphaned(owner, fromNS(updated), now); dead && owner != "" {
				found = append(found, pos)
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, pos := range found {
		payload, err := l.j.ReadAt(ctx, Pos(pos))
		if err != nil {
			continue
		}
		t, err := decodeMCPTask(payload)
		if err != nil {
			continue
		}
		t.Status, t.StatusMessage, t.InputRequests, t.Updated = MCPFailed, mcpInterrupted, nil, time.Time{}
		t.Error, _ = json.Marshal(map[string]any{"code": -32603, "message": mcpInterrupted})
		t.Owner = l.ownerStr
		if err := l.PutMCPTask(ctx, *t); err != nil {
			return ids, err
		}
		ids = append(ids, t.ID)
	}
	if len(ids) > 0 {
		return ids, l.sync(ctx)
	}
	return ids, nil
}

// indexMCPTask applies an MCP task's record: the newest record of a task
// is the task.
func (ix *indexer) indexMCPTask(r jrec, pos Pos) error {
	var t MCPTask
	if len(r.MCP) == 0 || json.Unmarshal(r.MCP, &t) != nil || t.ID == "" {
		return nil
	}
	// The caller is the first record's: a task changes hands never.
	c := colsOf(t.Caller)
	_, err := ix.exec(`INSERT INTO mcp_tasks (id, status, route, tool, server, server_tool, session, call, created_at, updated_at, owner, pos, caller_key, caller_name)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET status = excluded.status, call = excluded.call, updated_at = excluded.updated_at,
			owner = excluded.owner, pos = excluded.pos
		WHERE excluded.pos > mcp_tasks.pos`,
		t.ID, string(t.Status), t.Route, t.Tool, t.Server, t.ServerTool, t.Session, t.Call,
		t.Created.UnixNano(), t.Updated.UnixNano(), t.Owner, int64(pos), c.key, c.name)
	return err
}
