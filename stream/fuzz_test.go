package stream_test

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/toolmux/toolmux/stream"
)

// FuzzSSE checks the SSE writer against the decoder: any event written by
// AppendSSE reads back as one message with the same id, name (line breaks
// turned to spaces) and envelope; arbitrary bytes never make the decoder
// panic or loop; and ParseLastEventID accepts exactly decimal ids.
func FuzzSSE(f *testing.F) {
	f.Add(int64(1), "tool_call", "t-1", "hello", []byte("id: 1\nevent: x\ndata: {}\n\n"))
	f.Add(int64(0), "gap", "", "multi\nline\r\ntext", []byte("\uFEFFdata: a\r\ndata: b\r\rretry: 10\n\n"))
	f.Add(int64(math.MaxInt64), "bad\nname\r", "t\n2", "\x00\xff", []byte(": c\nid: 1\x002\ndata\n\n"))
	f.Add(int64(-7), " lead", "é", "\u2028", []byte("data: {\"id\":3,\"event\":\"e\",\"data\":{}}\n\n"))
	f.Fuzz(func(t *testing.T, id int64, name, task, text string, raw []byte) {
		id &= math.MaxInt64
		data, err := json.Marshal(map[string]string{"text": text})
		if err != nil {
			t.Fatal(err)
		}
		at := time.Date(2026, 11, 22, 10, 0, 0, int(id%1e9), time.UTC)
		e := stream.Event{ID: id, Name: name, Task: task, Time: at, Data: data}
		wire := stream.AppendSSE(nil, e)
		d := stream.NewDecoder(bytes.NewReader(wire))
		fr, err := d.Next()
		if err != nil {
			t.Fatalf("%q: %v", wire, err)
		}
		if fr.HasID != (id > 0) || (id > 0 && fr.ID != strconv.FormatInt(id, 10)) {
			t.Fatalf("id %d read as %q (%v)", id, fr.ID, fr.HasID)
		}
		if want := strings.NewReplacer("\r", " ", "\n", " ").Replace(name); fr.Event != want {
			t.Fatalf("name %q read as %q", name, fr.Event)
		}
		var back stream.Event
		if err := json.Unmarshal([]byte(fr.Data), &back); err != nil {
			t.Fatalf("envelope %q: %v", fr.Data, err)
		}
		if back.ID != id || !back.Time.Equal(at) || !bytes.Equal(back.Data, data) {
			t.Fatalf("event %+v read back as %+v", e, back)
		}
		if utf8.ValidString(name) && utf8.ValidString(task) && (back.Name != name || back.Task != task) {
			t.Fatalf("name/task %q/%q read back as %q/%q", name, task, back.Name, back.Task)
		}
		if _, err := d.Next(); err != io.EOF {
			t.Fatalf("more than one message in %q: %v", wire, err)
		}

		// Arbitrary input: every message ends the loop a line later at
		// most, and nothing panics.
		d = stream.NewDecoder(bytes.NewReader(raw))
		for range len(raw) + 1 {
			if _, err := d.NextEvent(); err == io.EOF {
				break
			}
		}

		// Last-Event-ID.
		got, err := stream.ParseLastEventID(name)
		trimmed := strings.TrimSpace(name)
		switch {
		case trimmed == "":
			if err != nil || got != stream.Live {
				t.Fatalf("empty id %q: %d %v", name, got, err)
			}
		case err == nil:
			if want, perr := strconv.ParseUint(trimmed, 10, 63); perr != nil || int64(want) != got || trimmed[0] == '+' {
				t.Fatalf("id %q accepted as %d", name, got)
			}
		default:
			// Only digits are an id: a sign is refused, even on "-0".
			if v, perr := strconv.ParseInt(trimmed, 10, 64); perr == nil && v >= 0 && trimmed[0] != '+' && trimmed[0] != '-' {
				t.Fatalf("id %q refused: %v", name, err)
			}
		}
	})
}
