package tasklog

import (
	"bytes"
	"compress/flate"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"sync"
	"unicode/utf8"

	kflate "github.com/klauspost/compress/flate"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/jsonscan"
	"github.com/toolmux/toolmux/tool"
)

// FormatVersion is the version of the journal's record format, in every
// record's "v". docs/tasklog.md describes the format.
const FormatVersion = 1

// The record types.
const (
	recStart  = "task.start" // a task started (or resumed)
	recEnd    = "task.end"   // a task ended
	recStep   = "step"       // one step log entry
	recMsgs   = "messages"   // messages of one session, all or none
	recCall   = "call"       // one tool call's record
	recEvents = "events"     // stream events, all or none
	recCarry  = "task.carry" // a running task's state, carried past a dropped segment
	recDrop   = "retention"  // retention dropped segments, tasks and spill files
	recImport = "import"     // a legacy tasklog.db was imported
	// recMCPTask (mcptasks.go): an MCP task's whole state
)

// jrec is one journal record: one self-describing JSON message with a
// format version, a type, an id unique across processes (tool.NewID; a
// JetStream Msg-Id), the task it belongs to and the time it was appended
// (Unix nanoseconds). The fields of its type follow.
type jrec struct {
	V    int    `json:"v"`
	Type string `json:"type"`
	ID   string `json:"id"`
	Task string `json:"task,omitempty"`
	At   int64  `json:"at"`
	// Owner is the process writing (host/pid/start), on the first record
	// a process writes for a task and on task.start: the task's owner if
	// this record creates it.
	Owner string `json:"owner,omitempty"`
	// Ord orders steps and messages: their first record's position, kept
	// when carried (0: this record's own position).
	Ord int64 `json:"ord,omitempty"`

	Start *jStart         `json:"start,omitempty"`
	End   *jEnd           `json:"end,omitempty"`
	Step  *jStep          `json:"step,omitempty"`
	Msgs  *jMsgs          `json:"messages,omitempty"`
	Call  *jCall          `json:"call,omitempty"`
	Rec   json.RawMessage `json:"record,omitempty"`
	// EventIDs are the lowest and highest id of Events, ahead of them so
	// that the index reads them without decoding the events.
	EventIDs []int64  `json:"event_ids,omitempty"`
	Events   []jEvent `json:"events,omitempty"`
	// EventsZ holds the events instead, when there are enough of them to
	// be worth it: their JSON array, deflated (RFC 1951), in base64.
	EventsZ string  `json:"events_z,omitempty"`
	Carry   *jCarry `json:"carry,omitempty"`
	Drop    *jDrop  `json:"retention,omitempty"`
	// MCP is an MCP task's state (an MCPTask), on mcp_task records.
	MCP json.RawMessage `json:"mcp_task,omitempty"`
}

type jStart struct {
	Created  int64           `json:"created"`
	Input    string          `json:"input,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Caller is who started the task (its owner, docs/identity.md).
	Caller *identity.Ref `json:"caller,omitempty"`
}

type jEnd struct {
	Status Status `json:"status"`
	Answer string `json:"answer,omitempty"`
	// IfRunning ends the task only if it is still running when the
	// record is indexed (FinishOwned, interruptions).
	IfRunning bool `json:"if_running,omitempty"`
	// AtLastWrite sets the end time to the task's last write instead of
	// the record's time (interruptions).
	AtLastWrite bool `json:"at_last_write,omitempty"`
}

type jStep struct {
	Name     string          `json:"name"`
	Message  string          `json:"message,omitempty"`
	Level    Level           `json:"level"`
	Time     int64           `json:"time"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

type jMsgs struct {
	Session  string     `json:"session"`
	Messages []jMessage `json:"list"`
}

type jMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	ToolCalls  json.RawMessage `json:"tool_calls,omitempty"`
	Time       int64           `json:"time"`
}

// jCall holds what the index keeps of a call; the record itself is the
// record's "record" field, the tool.Record as `toolmux call --json`
// prints it (its id and task are the record's).
type jCall struct {
	Session  string `json:"session,omitempty"`
	Kind     string `json:"kind,omitempty"`
	Started  int64  `json:"started"`
	Ended    int64  `json:"ended"`
	Duration int64  `json:"duration"`
	// Caller is who made the call (tool.Record.Caller); the owner of
	// the task the record creates, if it does.
	Caller *identity.Ref `json:"caller,omitempty"`
}

// jEvent is one stream event. Data is the payload, or, for a tool_call
// event that a call's record can rebuild byte for byte, Ref names the
// call and Part says which event of it (input or result): the event does
// not repeat what the record holds.
type jEvent struct {
	ID   int64           `json:"id"`
	Name string          `json:"name"`
	Task string          `json:"task,omitempty"`
	Time int64           `json:"time"`
	Data json.RawMessage `json:"data,omitempty"`
	Ref  string          `json:"ref,omitempty"`
	Part string          `json:"part,omitempty"`
}

// The parts of a call an event may refer to.
const (
	partInput  = "input"
	partResult = "result"
)

// jCarry is what a running task keeps when the segment holding its
// beginning is dropped: its start, steps and messages.
type jCarry struct {
	Status   Status          `json:"status"`
	Created  int64           `json:"created"`
	Updated  int64           `json:"updated"`
	Input    string          `json:"input,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	Caller   *identity.Ref   `json:"caller,omitempty"`
	Steps    []jCarriedStep  `json:"steps,omitempty"`
	Messages []jCarriedMsg   `json:"messages,omitempty"`
}

type jCarriedStep struct {
	Seq int64 `json:"seq"`
	jStep
}

type jCarriedMsg struct {
	Ord     int64  `json:"ord"`
	I       int    `json:"i"`
	Session string `json:"session"`
	jMessage
}

// jDrop is what one retention pass dropped, and the totals so far.
type jDrop struct {
	// Segments are the journal segments dropped, Before the first kept.
	Segments []uint32 `json:"segments,omitempty"`
	Before   uint32   `json:"before,omitempty"`
	// Tasks were dropped whole (ended, and in a dropped segment).
	Tasks []string `json:"tasks,omitempty"`
	// Calls of running tasks dropped with their segment.
	Calls int64 `json:"calls,omitempty"`
	// SpillFiles and their bytes, dropped.
	SpillFiles int64 `json:"spill_files,omitempty"`
	Bytes      int64 `json:"bytes"`
	// Reason is "age" or "bytes".
	Reason string `json:"reason"`
	// Total is what retention has dropped since the journal began, this
	// pass included: the newest retention record tells an index rebuilt
	// from the journal what the dropped segments held.
	Total *jDropTotal `json:"total,omitempty"`
}

type jDropTotal struct {
	Segments   int64 `json:"segments"`
	Tasks      int64 `json:"tasks"`
	Calls      int64 `json:"calls"`
	SpillFiles int64 `json:"spill_files"`
	Bytes      int64 `json:"bytes"`
}

// envelope decodes what the index needs of a record. The bulky part of a
// call record (the tool.Record) and of an events record (the events) is
// last, after fields that hold no nested object, so its key cannot occur
// in a string or an object before it: the envelope is decoded without it.
func envelope(payload []byte, r *jrec) error {
	if fastEnvelope(payload, r) {
		return nil
	}
	*r = jrec{}
	b := payload
	for _, heavy := range []struct{ typ, key string }{{recCall, `,"record":`}, {recEvents, `,"events`}} {
		if !bytes.HasPrefix(b, []byte(`{"v":`)) {
			break
		}
		head := b[:min(len(b), 40)]
		if !bytes.Contains(head, []byte(`"type":"`+heavy.typ+`"`)) {
			continue
		}
		if i := bytes.Index(b, []byte(heavy.key)); i > 0 {
			cut := make([]byte, i+1)
			copy(cut, b[:i])
			cut[i] = '}'
			b = cut
		}
		break
	}
	return json.Unmarshal(b, r)
}

// fastEnvelope reads the envelope of a call or events record, the
// records of every call, by hand: what json.Unmarshal would, without its
// reflection. Anything else — another type, an escape in a string, a
// number, key or spacing it does not expect — makes it give up (false),
// and envelope decodes the record with encoding/json.
func fastEnvelope(payload []byte, r *jrec) bool {
	var h headReader
	heavy := false
	jsonscan.Members(payload, func(key, v []byte) bool {
		switch string(key) {
		case "v":
			r.V = int(h.num(v))
		case "type":
			if r.Type = h.str(v); r.Type != recCall && r.Type != recEvents {
				h.bad = true
			}
		case "id":
			r.ID = h.str(v)
		case "task":
			r.Task = h.str(v)
		case "at":
			r.At = h.num(v)
		case "owner":
			r.Owner = h.str(v)
		case "ord":
			r.Ord = h.num(v)
		case "call":
			r.Call = h.call(v)
		case "event_ids":
			inner, found := bytes.CutPrefix(v, []byte("["))
			inner, closed := bytes.CutSuffix(inner, []byte("]"))
			lo, hi, two := bytes.Cut(inner, []byte(","))
			h.bad = h.bad || !found || !closed || !two
			r.EventIDs = []int64{h.num(lo), h.num(hi)}
		case "record", "events", "events_z":
			heavy = true // the bulky part, last: the envelope is read
			return false
		default:
			h.bad = true
		}
		return !h.bad
	})
	return heavy && !h.bad
}

// headReader reads the plain values of an envelope as json.Unmarshal
// would; bad says that one was not plain enough.
type headReader struct{ bad bool }

func (h *headReader) str(v []byte) string {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' || bytes.IndexByte(v, '\\') >= 0 || !utf8.Valid(v) {
		h.bad = true
		return ""
	}
	return string(v[1 : len(v)-1])
}

func (h *headReader) num(v []byte) int64 {
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		h.bad = true
	}
	return n
}

// call reads a call record's "call" object.
func (h *headReader) call(b []byte) *jCall {
	c := &jCall{}
	h.object(b, func(key, v []byte) {
		switch string(key) {
		case "session":
			c.Session = h.str(v)
		case "kind":
			c.Kind = h.str(v)
		case "started":
			c.Started = h.num(v)
		case "ended":
			c.Ended = h.num(v)
		case "duration":
			c.Duration = h.num(v)
		case "caller":
			c.Caller = &identity.Ref{}
			h.object(v, func(key, v []byte) {
				switch string(key) {
				case "name":
					c.Caller.Name = h.str(v)
				case "key":
					c.Caller.Key = h.str(v)
				default:
					h.bad = true
				}
			})
		default:
			h.bad = true
		}
	})
	return c
}

// object calls f with the members of the object b, which must be read to
// its closing brace: jsonscan.Members stops quietly where it loses its
// way.
func (h *headReader) object(b []byte, f func(key, v []byte)) {
	end := 1 // after the '{' of an empty object
	jsonscan.Members(b, func(key, v []byte) bool {
		f(key, v)
		end = cap(b) - cap(v) + len(v) // v lies in b
		return !h.bad
	})
	if len(b) < 2 || b[0] != '{' || end != len(b)-1 {
		h.bad = true
	}
}

// minDeflate is the size of an events array below which it is stored as
// it is: deflating a few events saves little.
const minDeflate = 1024

// eventsPayload encodes events record r: its events as they are, or,
// when their JSON passes minDeflate, deflated (the events of a batch
// repeat their keys, task and call ids, and shrink several times: the
// stream's events are most of a simple call's bytes). r's version and id
// are set; its time is the caller's.
func eventsPayload(r *jrec) ([]byte, error) {
	r.V = FormatVersion
	if r.ID == "" {
		r.ID = tool.NewID()
	}
	bp := scratch.Get().(*[]byte)
	defer scratch.Put(bp)
	raw := appendEvents((*bp)[:0], r.Events)
	*bp = raw
	if len(raw) < minDeflate {
		return appendEventsRecord(make([]byte, 0, len(raw)+128), r, raw, nil), nil
	}
	zp := scratch.Get().(*[]byte)
	defer scratch.Put(zp)
	buf := bytes.NewBuffer((*zp)[:0])
	w, _ := deflaters.Get().(*kflate.Writer)
	if w == nil {
		var err error
		if w, err = kflate.NewWriter(buf, kflate.BestSpeed); err != nil {
			return nil, err
		}
	} else {
		w.Reset(buf)
	}
	defer deflaters.Put(w)
	if _, err := w.Write(raw); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	z := buf.Bytes()
	*zp = z
	r.Events = nil
	return appendEventsRecord(make([]byte, 0, base64.StdEncoding.EncodedLen(len(z))+128), r, nil, z), nil
}

// deflaters keeps flate writers between batches: a new one allocates and
// clears hundreds of KiB, which the profile of a busy gateway showed as 2 %
// of the process. They are klauspost/compress's, which write the same
// format (RFC 1951, read back by compress/flate) in about two thirds of
// the time of compress/flate's on a batch of a few events, where building
// the Huffman codes is most of the work (BENCHMARKS.md §28).
var deflaters sync.Pool

// events returns the events of an events record, inflated if need be.
func (r *jrec) events() ([]jEvent, error) {
	if r.EventsZ == "" {
		return r.Events, nil
	}
	z, err := base64.StdEncoding.DecodeString(r.EventsZ)
	if err != nil {
		return nil, fmt.Errorf("tasklog: events record %s: %w", r.ID, err)
	}
	raw, err := io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(z)), maxFrame))
	if err != nil {
		return nil, fmt.Errorf("tasklog: events record %s: %w", r.ID, err)
	}
	var evs []jEvent
	if err := json.Unmarshal(raw, &evs); err != nil {
		return nil, fmt.Errorf("tasklog: events record %s: %w", r.ID, err)
	}
	return evs, nil
}

// RecordHead is what a journal stored elsewhere than segment files needs
// of a record to place it: a JetStream journal files it under a subject of
// its task, de-duplicates it by its id and fences it by its task's owner.
type RecordHead struct {
	// V is the record's format version.
	V int
	// Type is the record's type (task.start, step, call, events, ...).
	Type string
	// ID is the record's id, unique across processes.
	ID string
	// Task is the task the record belongs to; "" for records of no task
	// (events batches, retention, import).
	Task string
}

// ParseRecordHead reads the head of a journal record (a payload the Log
// hands to [Journal.Append]) without decoding its bulky part.
func ParseRecordHead(payload []byte) (RecordHead, error) {
	var r jrec
	if err := envelope(payload, &r); err != nil {
		return RecordHead{}, &ValidationError{Field: "record", Value: short(string(payload)), Reason: "not a journal record: " + err.Error()}
	}
	if r.Type == "" || r.ID == "" {
		return RecordHead{}, &ValidationError{Field: "record", Value: short(string(payload)), Reason: "a journal record has a type and an id"}
	}
	return RecordHead{V: r.V, Type: r.Type, ID: r.ID, Task: r.Task}, nil
}
