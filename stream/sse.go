package stream

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Defaults of the SSE handler.
const (
	// DefaultRetry is the reconnection delay the handler suggests to
	// clients in its retry: field.
	DefaultRetry = 3 * time.Second
	// DefaultWriteTimeout bounds one write to a client, so a client that
	// stops reading without closing does not hold its handler forever.
	DefaultWriteTimeout = 30 * time.Second
	// maxWriteBatch bounds how many queued events one write carries.
	maxWriteBatch = 64
)

// HandlerOptions configures the SSE handler.
type HandlerOptions struct {
	// Retry is the reconnection delay suggested to clients (default
	// DefaultRetry).
	Retry time.Duration
	// WriteTimeout bounds each write (default DefaultWriteTimeout).
	WriteTimeout time.Duration
	// Keep, when set, is asked of every event before it is sent (gap
	// markers and heartbeats aside): false leaves it out, as if it did
	// not match the filter (the API keeps a caller's own tasks' events,
	// docs/identity.md). It is called on the handler's goroutine, never
	// the hub's, so it may take its time (read a database).
	Keep func(Event) bool
}

// ServeHTTP serves the event stream with the default HandlerOptions; see
// Handler.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.serveSSE(w, r, HandlerOptions{})
}

// Handler returns the SSE endpoint: a GET answered with text/event-stream,
// one SSE message per event:
//
//	id: 42
//	event: tool_call
//	data: {"id":42,"event":"tool_call","task":"t-1","time":"…","data":{…}}
//
// It starts with a retry: field. The request selects what it receives:
// the Last-Event-ID header (or, for EventSource polyfills that cannot set
// it, the last_event_id query parameter; the header wins) replays every
// event after that id before the live ones; without either only live
// events are sent. ?task=ID keeps one task's events, ?events=a,b only
// those names. Gap markers (event: gap, no id: line) report lost events;
// a heartbeat event (no id: line) is written whenever the connection has
// been silent for the hub's heartbeat interval. The response ends when the
// client goes away, a write fails or times out, or the hub is closed.
//
// Errors before the stream starts: 400 for a malformed Last-Event-ID, 405
// for a method other than GET, 503 after the hub is closed, 500 when the
// store cannot be read for the replay.
func (h *Hub) Handler(opts HandlerOptions) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.serveSSE(w, r, opts) })
}

// RequestFilter reads the subscription an SSE request asks for: its
// filter (?task=, ?events=) and the id to resume after (Last-Event-ID
// header, else ?last_event_id=; Live when neither is given). The error is
// an *InvalidIDError.
func RequestFilter(r *http.Request) (Filter, int64, error) {
	q := r.URL.Query()
	f := Filter{Task: q.Get("task")}
	for _, v := range q["events"] {
		for n := range strings.SplitSeq(v, ",") {
			if n = strings.TrimSpace(n); n != "" {
				f.Names = append(f.Names, n)
			}
		}
	}
	v := r.Header.Get("Last-Event-ID")
	if strings.TrimSpace(v) == "" {
		v = q.Get("last_event_id")
	}
	after, err := ParseLastEventID(v)
	return f, after, err
}

// ParseLastEventID reads a Last-Event-ID value: "" (after trimming spaces)
// is Live, a decimal id from 0 is that id; anything else is an
// *InvalidIDError.
func ParseLastEventID(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return Live, nil
	}
	for i := 0; i < len(t); i++ {
		if t[i] < '0' || t[i] > '9' {
			return 0, &InvalidIDError{Value: s}
		}
	}
	id, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return 0, &InvalidIDError{Value: s}
	}
	return id, nil
}

func (h *Hub) serveSSE(w http.ResponseWriter, r *http.Request, opts HandlerOptions) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "the event stream answers GET only", http.StatusMethodNotAllowed)
		return
	}
	if opts.Retry <= 0 {
		opts.Retry = DefaultRetry
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	f, after, err := RequestFilter(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	sub, err := h.Subscribe(r.Context(), f, after)
	if err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, ErrClosed) {
			code = http.StatusServiceUnavailable
		}
		if r.Context().Err() != nil {
			return // the client is gone; nobody reads an answer
		}
		http.Error(w, err.Error(), code)
		return
	}
	defer sub.Close()

	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	buf := make([]byte, 0, 4096)
	write := func() bool {
		// A deadline per write replaces the server's WriteTimeout, which
		// would cut every long-lived stream, and still frees the handler
		// from a client that has stopped reading.
		if err := rc.SetWriteDeadline(time.Now().Add(opts.WriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return false
		}
		if _, err := w.Write(buf); err != nil {
			return false
		}
		buf = buf[:0]
		return rc.Flush() == nil
	}

	buf = append(buf, "retry: "...)
	buf = strconv.AppendInt(buf, opts.Retry.Milliseconds(), 10)
	buf = append(buf, "\n\n"...)
	if !write() {
		return
	}
	var beat <-chan time.Time
	var timer *time.Timer
	if d := h.cfg.heartbeat; d > 0 {
		timer = time.NewTimer(d)
		defer timer.Stop()
		beat = timer.C
	}
	var lastID int64
	for {
		select {
		case e, ok := <-sub.Events():
			if !ok {
				return
			}
			// Whatever else is already queued goes in the same write.
			for n := 0; ; n++ {
				if opts.Keep == nil || e.ID == 0 || opts.Keep(e) {
					buf = AppendSSE(buf, e)
				}
				if e.ID > 0 {
					lastID = e.ID
				}
				if n+1 == maxWriteBatch {
					break
				}
				select {
				case e, ok = <-sub.Events():
				default:
					ok = false
				}
				if !ok {
					break
				}
			}
			if len(buf) == 0 {
				continue // all left out: still silent, the heartbeat runs on
			}
			if !write() {
				return
			}
		case now := <-beat:
			data, _ := json.Marshal(HeartbeatData{Time: now.UTC(), LastEventID: lastID})
			buf = AppendSSE(buf, Event{Name: EventHeartbeat, Task: f.Task, Time: now.UTC(), Data: data})
			if !write() {
				return
			}
		case <-r.Context().Done():
			return
		}
		if timer != nil {
			timer.Reset(h.cfg.heartbeat)
		}
	}
}

// AppendSSE appends e to dst as one SSE message: an id: line unless e is a
// marker (ID 0), an event: line unless the name is empty, the JSON
// envelope on a data: line, and the blank line that ends the message.
// Line breaks in the name, which would end the field early, become
// spaces.
func AppendSSE(dst []byte, e Event) []byte {
	if e.ID > 0 {
		dst = append(dst, "id: "...)
		dst = strconv.AppendInt(dst, e.ID, 10)
		dst = append(dst, '\n')
	}
	if e.Name != "" {
		dst = append(dst, "event: "...)
		dst = appendField(dst, e.Name)
		dst = append(dst, '\n')
	}
	data, err := e.MarshalJSON()
	if err != nil {
		// Data that is not JSON cannot come from Publish; say so rather
		// than break the stream.
		msg, _ := json.Marshal(map[string]string{"encode_error": err.Error()})
		data, _ = Event{ID: e.ID, Name: e.Name, Task: e.Task, Time: e.Time, Data: msg}.MarshalJSON()
	}
	// Compact JSON has no line breaks; if one ever appears, each line gets
	// its own data: field and the reader joins them back.
	for line := range bytes.SplitSeq(data, []byte{'\n'}) {
		dst = append(dst, "data: "...)
		dst = append(dst, bytes.TrimSuffix(line, []byte{'\r'})...)
		dst = append(dst, '\n')
	}
	return append(dst, '\n')
}

func appendField(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\n' || c == '\r' {
			c = ' '
		}
		dst = append(dst, c)
	}
	return dst
}

// Frame is one message read from an SSE stream.
type Frame struct {
	// ID is the value of the message's id: field, when HasID.
	ID    string
	HasID bool
	// Event is the event: field ("" when absent; browsers call that
	// "message").
	Event string
	// Data is the data: fields joined by newlines.
	Data string
}

// DefaultMaxLine bounds one line a Decoder reads.
const DefaultMaxLine = 4 << 20

// Decoder reads an SSE stream as the WHATWG specification says: lines end
// in CR, LF or CRLF; a leading byte-order mark is skipped; lines starting
// with ':' are comments; "field: value" loses one space after the colon;
// a blank line ends a message, which is dispatched only when it has data;
// an id containing NUL is ignored; retry: takes digits only. Go clients of
// toolmux (and its tests) read the stream with it.
type Decoder struct {
	sc     *bufio.Scanner
	first  bool
	lastID string
	retry  time.Duration
}

// NewDecoder returns a decoder reading r, with lines of up to
// DefaultMaxLine bytes (a longer line is an error, bufio.ErrTooLong).
func NewDecoder(r io.Reader) *Decoder {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), DefaultMaxLine)
	sc.Split(scanSSELines)
	return &Decoder{sc: sc, first: true}
}

// Next returns the next message. At the end of the stream it returns
// io.EOF; a message not ended by a blank line is discarded.
func (d *Decoder) Next() (Frame, error) {
	var f Frame
	var data strings.Builder
	hasData := false
	for d.sc.Scan() {
		line := d.sc.Bytes()
		if d.first {
			line = bytes.TrimPrefix(line, []byte("\uFEFF"))
			d.first = false
		}
		if len(line) == 0 {
			if !hasData {
				f = Frame{} // nothing to dispatch; the event name resets too
				continue
			}
			f.Data = strings.TrimSuffix(data.String(), "\n")
			return f, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			value = bytes.TrimPrefix(value, []byte{' '})
		}
		switch string(field) {
		case "event":
			f.Event = string(value)
		case "data":
			data.Write(value)
			data.WriteByte('\n')
			hasData = true
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				f.ID, f.HasID = string(value), true
				d.lastID = f.ID
			}
		case "retry":
			if ms, err := strconv.ParseInt(string(value), 10, 64); err == nil && ms >= 0 && isDigits(value) {
				d.retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
	if err := d.sc.Err(); err != nil {
		return Frame{}, err
	}
	return Frame{}, io.EOF
}

// NextEvent returns the next message decoded as an Event: its data is the
// JSON envelope; when the envelope has no id the id: field gives it, and
// when it has no name the event: field does.
func (d *Decoder) NextEvent() (Event, error) {
	f, err := d.Next()
	if err != nil {
		return Event{}, err
	}
	var e Event
	if err := json.Unmarshal([]byte(f.Data), &e); err != nil {
		return Event{}, err
	}
	if e.ID == 0 && f.HasID {
		e.ID, _ = strconv.ParseInt(f.ID, 10, 64)
	}
	if e.Name == "" {
		e.Name = f.Event
	}
	return e, nil
}

// LastEventID returns the last id: field read, the value to send as
// Last-Event-ID when reconnecting.
func (d *Decoder) LastEventID() string { return d.lastID }

// Retry returns the last retry: field read, 0 if none.
func (d *Decoder) Retry() time.Duration { return d.retry }

func isDigits(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// scanSSELines splits at CRLF, LF or CR. A CR at the end of the data waits
// for the next byte, which may be its LF.
func scanSSELines(data []byte, atEOF bool) (int, []byte, error) {
	if atEOF && len(data) == 0 {
		return 0, nil, nil
	}
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		if data[i] == '\n' {
			return i + 1, data[:i], nil
		}
		if i+1 < len(data) {
			if data[i+1] == '\n' {
				return i + 2, data[:i], nil
			}
			return i + 1, data[:i], nil
		}
		if atEOF {
			return i + 1, data[:i], nil
		}
		return 0, nil, nil
	}
	if atEOF {
		return len(data), data, nil
	}
	return 0, nil, nil
}
