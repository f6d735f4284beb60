package tasklog

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/toolmux/toolmux/internal/jsonenc"
	"github.com/toolmux/toolmux/internal/jsonfloat"
	"github.com/toolmux/toolmux/tool"
)

// The records on a call's path — a call record, an events record — are
// encoded by hand, byte for byte as encoding/json writes them (the tests
// hold them to it): encoding/json spends most of its time there on
// reflection and on validating and compacting again what a Marshaler or
// a json.RawMessage (the record's body, each event's data) has already
// written, three times over for a call record. What only encoding/json
// knows how to write (arguments, a structured result, notes) is still
// written by it, once.

// callBody is a call record's body, encoded, and what the call's tool_call
// events are rebuilt from: referTo compares the events the stream hands
// over with these instead of decoding the record it has just written.
type callBody struct {
	json []byte
	// args is the arguments' JSON within json ("null" for none).
	args []byte
	// text is what the call's result event shows (resultText); textOK
	// says that it reads back the same from the record (valid UTF-8:
	// encoding/json replaces invalid bytes, so a rebuild from the record
	// would not be the event).
	text   string
	textOK bool
}

// appendRecordBody appends rec as tool.Record's MarshalJSON writes it,
// with the id, task, session and caller that the envelope holds left out
// (rec has them empty). It fails where encoding/json fails (a value JSON
// cannot hold); the caller then takes encoding/json's path, which says
// why.
func appendRecordBody(b []byte, rec *tool.Record) ([]byte, callBody, error) {
	var cb callBody
	start := len(b)
	b = append(b, `{"id":`...)
	b = jsonenc.AppendString(b, rec.ID)
	b = appendOptString(b, `,"task":`, rec.Task)
	b = appendOptString(b, `,"session":`, rec.Session)
	b = appendCaller(b, rec.Caller)
	b = append(b, `,"server":`...)
	b = jsonenc.AppendString(b, rec.Server)
	b = append(b, `,"tool":`...)
	b = jsonenc.AppendString(b, rec.Tool)
	b = appendOptString(b, `,"credential":`, rec.Credential)
	b = appendOptString(b, `,"name":`, rec.Name)
	b = appendOptString(b, `,"parent":`, rec.Parent)
	b = append(b, `,"arguments":`...)
	argsAt := len(b)
	var err error
	if b, err = appendMarshal(b, rec.Arguments); err != nil {
		return b[:start], cb, err
	}
	argsEnd := len(b)
	if rec.Result != nil {
		b = append(b, `,"result":`...)
		if b, err = appendResult(b, rec.Result); err != nil {
			return b[:start], cb, err
		}
	}
	if rec.Error != nil {
		b = append(b, `,"error":`...)
		if b, err = appendMarshal(b, rec.Error); err != nil {
			return b[:start], cb, err
		}
	}
	if b, err = appendTime(b, `,"started_at":`, rec.Started); err != nil {
		return b[:start], cb, err
	}
	if b, err = appendTime(b, `,"ended_at":`, rec.Ended); err != nil {
		return b[:start], cb, err
	}
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(rec.Attempts), 10)
	if len(rec.Notes) > 0 {
		b = append(b, `,"notes":`...)
		if b, err = appendMarshal(b, rec.Notes); err != nil {
			return b[:start], cb, err
		}
	}
	if rec.Verdict != nil {
		b = append(b, `,"verdict":{"rollback":`...)
		b = strconv.AppendBool(b, rec.Verdict.Rollback)
		b = appendOptString(b, `,"reason":`, rec.Verdict.Reason)
		b = append(b, '}')
	}
	if len(rec.Instructions) > 0 {
		b = append(b, `,"instructions":[`...)
		for i, s := range rec.Instructions {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonenc.AppendString(b, s)
		}
		b = append(b, ']')
	}
	b = append(b, `,"duration_ms":`...)
	b = jsonfloat.Append(b, float64(rec.Duration.Microseconds())/1000, 64)
	b = append(b, '}')
	cb.json = b[start:]
	cb.args = b[argsAt:argsEnd]
	cb.text = resultText(rec)
	cb.textOK = utf8.ValidString(cb.text)
	return b, cb, nil
}

// appendResult appends a result as encoding/json writes it: by hand when
// it is text alone (most are), else by encoding/json.
func appendResult(b []byte, r *tool.Result) ([]byte, error) {
	plain := len(r.Content) > 0 && r.Structured == nil && !r.IsError && r.Meta == nil
	for i := 0; plain && i < len(r.Content); i++ {
		plain = textOnly(&r.Content[i])
	}
	if !plain {
		return appendMarshal(b, r)
	}
	b = append(b, `{"content":[`...)
	for i, c := range r.Content {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"type":"text","text":`...)
		b = jsonenc.AppendString(b, c.Text)
		b = append(b, '}')
	}
	return append(b, `]}`...), nil
}

// appendTime appends a time as encoding/json writes it (RFC 3339 with
// nanoseconds); a year it cannot hold fails.
func appendTime(b []byte, key string, t time.Time) ([]byte, error) {
	n := len(b)
	b = append(b, key...)
	b = append(b, '"')
	out, err := t.AppendText(b)
	if err != nil {
		return b[:n], err
	}
	return append(out, '"'), nil
}

// textOnly reports whether c is a text part and nothing more.
func textOnly(c *tool.Content) bool {
	return c.Type == tool.ContentText && c.Data == nil && c.MIMEType == "" && c.Resource == nil && c.URI == "" &&
		c.Name == "" && c.Title == "" && c.Description == "" && c.Size == nil && c.Annotations == nil && c.Meta == nil &&
		c.Spill == nil
}

// appendCaller appends a "caller" member, when there is one.
func appendCaller(b []byte, c *tool.CallerRef) []byte {
	if c == nil {
		return b
	}
	b = append(b, `,"caller":{"name":`...)
	b = jsonenc.AppendString(b, c.Name)
	b = append(b, `,"key":`...)
	b = jsonenc.AppendString(b, c.Key)
	return append(b, '}')
}

func appendOptString(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	b = append(b, key...)
	return jsonenc.AppendString(b, s)
}

func appendMarshal(b []byte, v any) ([]byte, error) {
	m, err := json.Marshal(v)
	if err != nil {
		return b, err
	}
	return append(b, m...), nil
}

// appendCallRecord appends the payload of call record r, whose body is
// body, as encode would write it: r's version, id and time are set.
func appendCallRecord(b []byte, r *jrec, body []byte) []byte {
	b = appendHead(b, r)
	c := r.Call
	b = append(b, `,"call":{`...)
	sep := false
	if c.Session != "" {
		b = append(b, `"session":`...)
		b = jsonenc.AppendString(b, c.Session)
		sep = true
	}
	if c.Kind != "" {
		if sep {
			b = append(b, ',')
		}
		b = append(b, `"kind":`...)
		b = jsonenc.AppendString(b, c.Kind)
		sep = true
	}
	if sep {
		b = append(b, ',')
	}
	b = append(b, `"started":`...)
	b = strconv.AppendInt(b, c.Started, 10)
	b = append(b, `,"ended":`...)
	b = strconv.AppendInt(b, c.Ended, 10)
	b = append(b, `,"duration":`...)
	b = strconv.AppendInt(b, c.Duration, 10)
	b = appendCaller(b, c.Caller)
	b = append(b, `},"record":`...)
	b = append(b, body...)
	return append(b, '}')
}

// appendHead appends the fields every record starts with, up to its
// owner: v, type, id, task, at, owner, ord.
func appendHead(b []byte, r *jrec) []byte {
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(r.V), 10)
	b = append(b, `,"type":`...)
	b = jsonenc.AppendString(b, r.Type)
	b = append(b, `,"id":`...)
	b = jsonenc.AppendString(b, r.ID)
	b = appendOptString(b, `,"task":`, r.Task)
	b = append(b, `,"at":`...)
	b = strconv.AppendInt(b, r.At, 10)
	b = appendOptString(b, `,"owner":`, r.Owner)
	if r.Ord != 0 {
		b = append(b, `,"ord":`...)
		b = strconv.AppendInt(b, r.Ord, 10)
	}
	return b
}

// appendEvents appends events as the JSON array encoding/json writes for
// them.
func appendEvents(b []byte, evs []jEvent) []byte {
	b = append(b, '[')
	for i := range evs {
		e := &evs[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = strconv.AppendInt(b, e.ID, 10)
		b = append(b, `,"name":`...)
		b = jsonenc.AppendString(b, e.Name)
		b = appendOptString(b, `,"task":`, e.Task)
		b = append(b, `,"time":`...)
		b = strconv.AppendInt(b, e.Time, 10)
		if len(e.Data) > 0 {
			b = append(b, `,"data":`...)
			b = appendRaw(b, e.Data)
		}
		b = appendOptString(b, `,"ref":`, e.Ref)
		b = appendOptString(b, `,"part":`, e.Part)
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendRaw appends JSON as encoding/json writes a json.RawMessage:
// compacted, with <, >, &, U+2028 and U+2029 escaped. JSON that is so
// already (what the stream hands over) is copied as it is; the rest goes
// through encoding/json.
func appendRaw(b, raw []byte) []byte {
	if !needsCompact(raw) {
		return append(b, raw...)
	}
	m, err := json.Marshal(json.RawMessage(raw))
	if err != nil {
		// Not JSON: AppendEvents checked it is. Keep the bytes.
		return append(b, raw...)
	}
	return append(b, m...)
}

// needsCompact reports whether encoding/json would change raw: space
// between its tokens, or a character it escapes for HTML.
func needsCompact(raw []byte) bool {
	inString := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; c {
		case '<', '>', '&':
			return true
		case 0xE2: // U+2028 and U+2029 are E2 80 A8 and E2 80 A9
			if i+2 < len(raw) && raw[i+1] == 0x80 && (raw[i+2] == 0xA8 || raw[i+2] == 0xA9) {
				return true
			}
		case '"':
			inString = !inString
		case '\\':
			if inString {
				i++ // the escaped character
			}
		case ' ', '\t', '\n', '\r':
			if !inString {
				return true
			}
		}
	}
	return false
}

// appendEventsRecord appends the payload of events record r as encode
// would write it: with events (their JSON array), or with z, the array
// deflated, as events_z in base64.
func appendEventsRecord(b []byte, r *jrec, events, z []byte) []byte {
	b = appendHead(b, r)
	if len(r.EventIDs) > 0 {
		b = append(b, `,"event_ids":[`...)
		for i, id := range r.EventIDs {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, id, 10)
		}
		b = append(b, ']')
	}
	switch {
	case z != nil:
		// base64 needs no escaping in a JSON string.
		b = append(b, `,"events_z":"`...)
		b = base64.StdEncoding.AppendEncode(b, z)
		b = append(b, '"')
	case len(events) > len("[]"):
		b = append(b, `,"events":`...)
		b = append(b, events...)
	}
	return append(b, '}')
}

// toolCallID reads the tool_call_id a tool_call event's data begins with,
// as the stream writes it; ok is false for anything else (then the event
// keeps its data).
func toolCallID(data []byte) (string, bool) {
	const head = `{"tool_call_id":"`
	if !bytes.HasPrefix(data, []byte(head)) {
		return "", false
	}
	rest := data[len(head):]
	end := bytes.IndexByte(rest, '"')
	if end <= 0 || bytes.IndexByte(rest[:end], '\\') >= 0 {
		return "", false
	}
	return string(rest[:end]), true
}

// rebuilds reports whether the tool_call event data of call id is what
// callEvent rebuilds from the call's record, and which part it is: the
// input (the arguments) or the result. It compares bytes; nothing is
// decoded.
func (c *recentCall) rebuilds(id string, data []byte) (part string, ok bool) {
	bp := scratch.Get().(*[]byte)
	defer scratch.Put(bp)
	b := append((*bp)[:0], `{"tool_call_id":`...)
	b = jsonenc.AppendString(b, id)
	b = append(b, `,"tool_name":`...)
	b = jsonenc.AppendString(b, c.name)
	b = append(b, `,"tool_input":`...)
	*bp = b
	if !bytes.HasPrefix(data, b) {
		return "", false
	}
	rest := data[len(b):]
	args := c.args
	if len(args) == 0 || string(args) == "null" {
		args = []byte(`{}`)
	}
	if len(rest) == len(args)+1 && rest[len(args)] == '}' && bytes.Equal(rest[:len(args)], args) {
		return partInput, true
	}
	if !c.textOK {
		return "", false
	}
	b = append(b[:0], `{"result":`...)
	b = jsonenc.AppendString(b, c.text)
	b = append(b, `}}`...)
	*bp = b
	if bytes.Equal(rest, b) {
		return partResult, true
	}
	return "", false
}

// scratch holds buffers for encoding records and comparing events.
var scratch = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}
