package tasklog

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tool"
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

// AppendEvents appends events to the journal as one record: all or none.
// An id this log already holds with the same name, task, time and data is
// skipped, so a replayed batch is harmless; an id it holds with different
// content fails the batch with a [*DuplicateEventError]. Events need no
// task. A tool_call event that the call's record rebuilds byte for byte
// (its input, or its result) is stored as a reference to that record.
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
	if l.closed() {
		return ErrClosed
	}
	now := l.opts.now()
	lowest, highest := evs[0].ID, evs[0].ID
	for _, e := range evs {
		lowest, highest = min(lowest, e.ID), max(highest, e.ID)
	}
	// An id at or below the highest known taken may be a replay: look.
	if lowest <= l.lastEvent.Load() {
		kept, err := l.withoutReplays(ctx, evs)
		if err != nil {
			return err
		}
		if evs = kept; len(evs) == 0 {
			return nil
		}
	}
	list := make([]jEvent, len(evs))
	for i, e := range evs {
		t := e.Time
		if t.IsZero() {
			t = now
		}
		list[i] = jEvent{ID: e.ID, Name: e.Name, Task: e.Task, Time: t.UnixNano(), Data: e.Data}
		if e.Name == stream.EventToolCall {
			l.referTo(&list[i])
		}
	}
	payload, err := eventsPayload(&jrec{Type: recEvents, At: now.UnixNano(), EventIDs: []int64{lowest, highest}, Events: list})
	if err != nil {
		return fmt.Errorf("tasklog: encoding events: %w", err)
	}
	if _, err := l.appendPayloads(ctx, payload); err != nil {
		return err
	}
	for {
		cur := l.lastEvent.Load()
		if highest <= cur || l.lastEvent.CompareAndSwap(cur, highest) {
			return nil
		}
	}
}

// withoutReplays drops the events already stored with the same content,
// and fails on an id stored with other content.
func (l *Log) withoutReplays(ctx context.Context, evs []Event) ([]Event, error) {
	var kept []Event
	err := l.read(ctx, func(tx *sql.Tx) error {
		for _, e := range evs {
			old, found, err := l.eventByID(ctx, tx, e.ID)
			if err != nil {
				return err
			}
			if !found {
				kept = append(kept, e)
				continue
			}
			same := old.Name == e.Name && old.Task == e.Task && bytes.Equal(old.Data, e.Data) &&
				(e.Time.IsZero() || old.Time.Equal(e.Time))
			if !same {
				return &DuplicateEventError{ID: e.ID}
			}
		}
		return nil
	})
	return kept, err
}

// eventByID finds a stored event.
func (l *Log) eventByID(ctx context.Context, tx *sql.Tx, id int64) (Event, bool, error) {
	rows, err := tx.QueryContext(ctx, `SELECT pos FROM event_records WHERE first_id <= ? AND last_id >= ?`, id, id)
	if err != nil {
		return Event{}, false, err
	}
	poss, err := scanInts(rows)
	if err != nil {
		return Event{}, false, err
	}
	for _, p := range poss {
		evs, err := l.eventsAt(ctx, tx, Pos(p))
		if err != nil {
			return Event{}, false, err
		}
		for _, e := range evs {
			if e.ID == id {
				return e, true, nil
			}
		}
	}
	return Event{}, false, nil
}

func scanInts(rows *sql.Rows) ([]int64, error) {
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// eventsAt reads the events record at pos, references resolved. A record
// dropped by retention has no events.
func (l *Log) eventsAt(ctx context.Context, tx *sql.Tx, pos Pos) ([]Event, error) {
	payload, err := l.j.ReadAt(ctx, pos)
	if _, gone := err.(*GoneError); gone {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r jrec
	if err := json.Unmarshal(payload, &r); err != nil {
		return nil, err
	}
	list, err := r.events()
	if err != nil {
		return nil, err
	}
	out := make([]Event, len(list))
	for i, e := range list {
		data := e.Data
		if e.Ref != "" {
			data = l.resolve(ctx, tx, e)
		}
		out[i] = Event{ID: e.ID, Name: e.Name, Task: e.Task, Time: fromNS(e.Time), Data: data}
	}
	return out, nil
}

// resolve rebuilds the payload of an event stored as a reference.
func (l *Log) resolve(ctx context.Context, tx *sql.Tx, e jEvent) json.RawMessage {
	var pos int64
	err := tx.QueryRowContext(ctx, `SELECT pos FROM calls WHERE id = ?`, e.Ref).Scan(&pos)
	if err == nil {
		var payload []byte
		if payload, err = l.j.ReadAt(ctx, Pos(pos)); err == nil {
			if b, ok := callEvent(payload, e.Part); ok {
				return b
			}
		}
	}
	// The record is gone (retention): say so in the event's own shape.
	b, _ := json.Marshal(stream.ToolCallResult(e.Ref, "", "[the call's record was dropped by retention]"))
	return b
}

// callEvent builds, from a call record's payload, the tool_call event the
// stream's scheduler sink publishes for it: the input (its arguments) or
// the result (its text, or "kind: message" for a failure).
func callEvent(payload []byte, part string) (json.RawMessage, bool) {
	var r struct {
		ID  string `json:"id"`
		Rec struct {
			Server    string          `json:"server"`
			Tool      string          `json:"tool"`
			Arguments json.RawMessage `json:"arguments"`
			Result    *tool.Result    `json:"result"`
			Error     *tool.Error     `json:"error"`
		} `json:"record"`
	}
	if json.Unmarshal(payload, &r) != nil {
		return nil, false
	}
	name := tool.ExposedName(r.Rec.Server, r.Rec.Tool)
	var d stream.ToolCallData
	switch part {
	case partInput:
		args := r.Rec.Arguments
		if len(args) == 0 || string(args) == "null" {
			args = json.RawMessage(`{}`)
		}
		d = stream.ToolCallData{ToolCallID: r.ID, ToolName: name, ToolInput: args}
	case partResult:
		d = stream.ToolCallResult(r.ID, name, resultText(&tool.Record{Result: r.Rec.Result, Error: r.Rec.Error}))
	default:
		return nil, false
	}
	b, err := json.Marshal(d)
	return b, err == nil
}

// resultText is what a tool_call result event shows for a record, as the
// stream's scheduler sink writes it (before its length limit).
func resultText(rec *tool.Record) string {
	if rec.Error == nil {
		return rec.Result.Text()
	}
	s := string(rec.Error.Kind) + ": " + rec.Error.Message
	if rec.Error.Suggestion != "" {
		s += " (did you mean " + rec.Error.Suggestion + "?)"
	}
	if text := rec.Result.Text(); text != "" && text != rec.Error.Message {
		s += "\n" + text
	}
	return s
}

// referTo turns a tool_call event into a reference to its call's record
// when the record, recorded by this log a moment ago, rebuilds the event
// exactly; otherwise the event keeps its data. It compares the event's
// bytes with what Record kept of the call: nothing is decoded.
func (l *Log) referTo(e *jEvent) {
	id, ok := toolCallID(e.Data)
	if !ok {
		return
	}
	c := l.recent.get(id)
	if c == nil {
		return
	}
	if part, ok := c.rebuilds(id, e.Data); ok {
		e.Data, e.Ref, e.Part = nil, id, part
	}
}

// recentCall is what referTo needs of a call this log recorded: what its
// tool_call events are rebuilt from (callEvent's inputs, as the record
// holds them).
type recentCall struct {
	name   string // the tool's exposed name
	args   []byte // the arguments' JSON
	text   string // the result event's text
	textOK bool   // the text reads back the same from the record
}

func (c *recentCall) size() int { return len(c.name) + len(c.args) + len(c.text) + 64 }

// recentCalls keeps the calls this log recorded last, for referTo: the
// events of a call follow its record by milliseconds. Bounded in count
// and bytes.
type recentCalls struct {
	mu    sync.Mutex
	m     map[string]*recentCall
	ring  []string
	next  int
	bytes int
}

const (
	recentCount = 4096
	recentBytes = 8 << 20
)

func (c *recentCalls) init() {
	c.m = make(map[string]*recentCall, recentCount)
	c.ring = make([]string, recentCount)
}

func (c *recentCalls) add(id string, rc *recentCall) {
	size := rc.size()
	if size > recentBytes/16 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.bytes+size > recentBytes || c.ring[c.next] != "" {
		old := c.ring[c.next]
		if old == "" {
			c.next = (c.next + 1) % recentCount
			continue
		}
		c.bytes -= c.m[old].size()
		delete(c.m, old)
		c.ring[c.next] = ""
		if c.bytes+size <= recentBytes {
			break
		}
		c.next = (c.next + 1) % recentCount
	}
	if _, dup := c.m[id]; dup {
		return
	}
	c.m[id] = rc
	c.ring[c.next] = id
	c.bytes += size
	c.next = (c.next + 1) % recentCount
}

func (c *recentCalls) get(id string) *recentCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[id]
}

// EventsAfter returns the events with an id greater than afterID, in id
// order: of one task, or of all when task is empty; at most limit of them
// (no cap when limit is 0 or less).
func (l *Log) EventsAfter(ctx context.Context, afterID int64, task string, limit int) ([]Event, error) {
	out := []Event{}
	err := l.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT pos, first_id FROM event_records WHERE last_id > ? ORDER BY first_id, pos`, afterID)
		if err != nil {
			return err
		}
		type block struct{ pos, first int64 }
		var blocks []block
		for rows.Next() {
			var b block
			if err := rows.Scan(&b.pos, &b.first); err != nil {
				rows.Close()
				return err
			}
			blocks = append(blocks, b)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, b := range blocks {
			if limit > 0 && len(out) >= limit {
				slices.SortStableFunc(out, func(a, b Event) int { return compareID(a.ID, b.ID) })
				if b.first > out[limit-1].ID {
					break
				}
			}
			evs, err := l.eventsAt(ctx, tx, Pos(b.pos))
			if err != nil {
				return err
			}
			for _, e := range evs {
				if e.ID > afterID && (task == "" || e.Task == task) {
					out = append(out, e)
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b Event) int { return compareID(a.ID, b.ID) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func compareID(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// LastEventID returns the greatest event id stored, 0 when there is none:
// where a stream hub starting up continues numbering.
func (l *Log) LastEventID(ctx context.Context) (int64, error) {
	if err := l.sync(ctx); err != nil {
		return 0, err
	}
	return l.lastEvent.Load(), nil
}
