package tasklog

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tool"
)

// encodeRecords are records of every shape the hand encoder meets: the
// usual text result, and each optional field, odd strings and results
// only encoding/json writes.
func encodeRecords() map[string]*tool.Record {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 123456789, time.UTC)
	size := int64(7)
	return map[string]*tool.Record{
		"echo": {ID: "06h2e1h0sc89adrc6qqte4gpyr", Task: "session-7", Session: "main", Server: "fx", Tool: "echo", Name: "fx__echo",
			Arguments: map[string]any{"message": "hello"}, Result: tool.TextResult("Echo: hello"), Started: t0,
			Ended: t0.Add(1500 * time.Microsecond), Duration: 1500 * time.Microsecond, Attempts: 1},
		"no arguments": {ID: "c2", Server: "fx", Tool: "now", Result: tool.TextResult(""), Started: t0, Ended: t0},
		"empty arguments": {ID: "c3", Server: "fx", Tool: "now", Arguments: map[string]any{}, Result: tool.TextResult("x"),
			Started: t0, Ended: t0, Duration: 3 * time.Nanosecond},
		"odd strings": {ID: "c4", Task: "t<&>", Session: "agent-browsing_1", Server: "s p", Tool: "t\u2028\"\\",
			Arguments: map[string]any{"q": "<b>&amp;</b>\n\t\x01 é 日本 \u2029", "n": 1e21, "f": 0.000001, "list": []any{1.5, nil, true}},
			Result:    tool.TextResult("line\nline\r\n\"quoted\" <tag> & \u2028"), Started: t0, Ended: t0.Add(time.Hour),
			Duration: time.Hour, Attempts: 3},
		"tool error": {ID: "c5", Server: "fx", Tool: "fail", Arguments: map[string]any{"a": "b"},
			Result: tool.ErrorResult("it broke"), Error: &tool.Error{Kind: tool.KindToolError, Message: "it broke"},
			Started: t0, Ended: t0, Attempts: 1},
		"unknown tool": {ID: "c6", Server: "fx", Tool: "ech", Error: &tool.Error{Kind: tool.KindToolNotRegistered, Message: "no tool ech",
			Suggestion: "fx__echo", Server: "fx", Tool: "ech", Detail: "d"}, Started: t0, Ended: t0},
		"several parts": {ID: "c7", Server: "fx", Tool: "mix", Arguments: map[string]any{"x": 1},
			Result:  &tool.Result{Content: []tool.Content{{Type: tool.ContentText, Text: "one"}, {Type: tool.ContentText, Text: "two"}}},
			Started: t0, Ended: t0},
		"image and resource": {ID: "c8", Server: "fx", Tool: "img",
			Result: &tool.Result{Content: []tool.Content{{Type: tool.ContentImage, Data: []byte{1, 2, 3}, MIMEType: "image/png"},
				{Type: tool.ContentResource, Resource: &tool.ResourceContents{URI: "file:///a", Text: "inside"}},
				{Type: tool.ContentResourceLink, URI: "file:///b", Name: "b", Size: &size}}},
			Started: t0, Ended: t0},
		"structured": {ID: "c9", Server: "fx", Tool: "st", Result: &tool.Result{Content: []tool.Content{{Type: tool.ContentText, Text: "{}"}},
			Structured: map[string]any{"k": []any{"v"}}, Meta: map[string]any{"m": 1}}, Started: t0, Ended: t0},
		"text part with more": {ID: "c10", Server: "fx", Tool: "sp", Result: &tool.Result{Content: []tool.Content{{Type: tool.ContentText,
			Text: "head … tail", Spill: &tool.Spill{Path: "/d/spill/x", Bytes: 9, Chars: 9}, Annotations: &tool.ContentAnnotations{Priority: 1}}}},
			Started: t0, Ended: t0},
		"everything": {ID: "c11", Task: "task", Session: "main", Caller: &tool.CallerRef{Name: "ann", Key: "key:ann"},
			Server: "fx", Tool: "echo", Credential: tool.CredentialUserSecret, Name: "fx__echo", Parent: "c10",
			Arguments: map[string]any{"message": "hi"}, Result: tool.TextResult("Echo: hi"), Started: t0, Ended: t0.Add(time.Second),
			Duration: time.Second, Attempts: 2, Notes: []tool.Note{{Layer: "limits", Message: "cut", Data: map[string]any{"bytes": 10}}},
			Verdict: &tool.Verdict{Rollback: true, Reason: "why <not>"}, Instructions: []string{"use it <well>", "twice"}},
		"inner call": {ID: "c10-1-0a1b2c3d", Task: "task", Session: "main", Server: "fx", Tool: "echo", Name: "fx__echo", Parent: "c10",
			Arguments: map[string]any{"message": "hi"}, Result: tool.TextResult("Echo: hi"), Started: t0, Ended: t0, Attempts: 1},
		"empty verdict": {ID: "c12", Server: "fx", Tool: "echo", Verdict: &tool.Verdict{}, Started: t0, Ended: t0},
		"invalid utf-8": {ID: "c13", Server: "fx", Tool: "echo", Arguments: map[string]any{"q": "bad \xff"},
			Result: tool.TextResult("bad \xfe\xff text"), Started: t0, Ended: t0},
	}
}

// The hand encoder writes a record's body byte for byte as encoding/json
// (tool.Record's MarshalJSON) does, and its arguments as the body holds
// them.
func TestRecordBodyAsEncodingJSON(t *testing.T) {
	for name, rec := range encodeRecords() {
		want, err := json.Marshal(rec)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, cb, err := appendRecordBody([]byte("prefix"), rec)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got[len("prefix"):], want) || !bytes.Equal(cb.json, want) {
			t.Errorf("%s:\n got %s\nwant %s", name, cb.json, want)
		}
		args, _ := json.Marshal(rec.Arguments)
		if !bytes.Equal(cb.args, args) {
			t.Errorf("%s: arguments %s, want %s", name, cb.args, args)
		}
	}
	// What encoding/json cannot write, the hand encoder refuses too.
	for name, rec := range map[string]*tool.Record{
		"NaN":      {Server: "fx", Tool: "x", Arguments: map[string]any{"n": math.NaN()}},
		"channel":  {Server: "fx", Tool: "x", Result: &tool.Result{Structured: make(chan int)}},
		"year 1e5": {Server: "fx", Tool: "x", Started: time.Date(100000, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		if _, _, err := appendRecordBody(nil, rec); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// The hand encoder knows every field of what it writes: a new field
// fails here until it is written (encode.go) and tested (above).
func TestRecordFieldsKnown(t *testing.T) {
	for typ, n := range map[reflect.Type]int{
		reflect.TypeFor[tool.Record]():    19,
		reflect.TypeFor[tool.Content]():   13,
		reflect.TypeFor[tool.Verdict]():   2,
		reflect.TypeFor[tool.CallerRef](): 2,
		reflect.TypeFor[jrec]():           19,
		reflect.TypeFor[jCall]():          6,
		reflect.TypeFor[jEvent]():         7,
	} {
		if typ.NumField() != n {
			t.Errorf("%s has %d fields, the hand encoder knows %d", typ, typ.NumField(), n)
		}
	}
}

// A call record's payload and an events record's are what encode
// (encoding/json) writes.
func TestPayloadsAsEncodingJSON(t *testing.T) {
	l := &Log{opts: options{now: time.Now}, log: slog.New(slog.DiscardHandler), ownerStr: "host/1/2"}
	for name, rec := range encodeRecords() {
		payload, _, _, _ := l.callPayload(rec)
		var r jrec
		if err := json.Unmarshal(payload, &r); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(payload, want) {
			t.Errorf("%s:\n got %s\nwant %s", name, payload, want)
		}
		back, err := decodeCall(payload)
		if err != nil || back.ID != rec.ID || back.Task != rec.Task || back.Session != rec.Session || back.Server != rec.Server ||
			!back.Started.Equal(rec.Started) || back.Duration != rec.Duration {
			t.Errorf("%s: read back %+v, %v", name, back, err)
		}
	}
	for _, evs := range [][]jEvent{
		{{ID: 1, Name: "tool_state", Task: "t", Time: 5, Data: json.RawMessage(`{"call_id":"c","state":"executing","total_ms":0.5}`)}},
		{{ID: 2, Name: "tool_call", Time: 6, Ref: "c", Part: partResult}, {ID: 3, Name: "message", Time: 7}},
		{{ID: 4, Name: "x<y>", Task: "t&", Time: 8, Data: json.RawMessage(" { \"a\" : [ 1 , \"b c\" ] , \"h\": \"<&>\" } ")}},
		{{ID: 5, Name: "x", Time: 9, Data: json.RawMessage(`{"s":"\u2028 \"q\\\" \u2029","t":"\\"}`)}},
		{{ID: 6, Name: "x", Time: 9, Data: json.RawMessage(`"bad ` + "\xff" + ` utf-8"`)}},
	} {
		want, err := json.Marshal(evs)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendEvents(nil, evs); !bytes.Equal(got, want) {
			t.Errorf("events:\n got %s\nwant %s", got, want)
		}
		r := &jrec{Type: recEvents, At: 42, EventIDs: []int64{evs[0].ID, evs[len(evs)-1].ID}, Events: evs}
		payload, err := eventsPayload(r)
		if err != nil {
			t.Fatal(err)
		}
		r.Events = evs
		if want, _ = json.Marshal(r); !bytes.Equal(payload, want) {
			t.Errorf("events record:\n got %s\nwant %s", payload, want)
		}
	}
	// A batch large enough to be deflated reads back the same.
	var many []jEvent
	for i := range 40 {
		many = append(many, jEvent{ID: int64(i + 1), Name: "tool_state", Task: "t", Time: int64(i),
			Data: json.RawMessage(`{"call_id":"06h2e1h0sc89adrc6qqte4gpyr","state":"scheduled"}`)})
	}
	payload, err := eventsPayload(&jrec{Type: recEvents, At: 1, EventIDs: []int64{1, 40}, Events: many})
	if err != nil {
		t.Fatal(err)
	}
	var r jrec
	if err := json.Unmarshal(payload, &r); err != nil || r.EventsZ == "" {
		t.Fatalf("%v, events_z %q", err, r.EventsZ)
	}
	back, err := r.events()
	if err != nil || !reflect.DeepEqual(back, many) {
		t.Fatalf("deflated events read back %v: %+v", err, back)
	}
}

// A tool_call event becomes a reference only when the record rebuilds it
// (callEvent, what a replay does) byte for byte; the events the stream
// makes of a usual call do.
func TestReferencesRebuildTheEvent(t *testing.T) {
	l := &Log{opts: options{now: time.Now}, log: slog.New(slog.DiscardHandler)}
	for name, rec := range encodeRecords() {
		payload, id, _, rc := l.callPayload(rec)
		if rc == nil {
			t.Fatalf("%s: no rebuild kept", name)
		}
		exposed := tool.ExposedName(rec.Server, rec.Tool)
		streamed := map[string]stream.ToolCallData{
			partInput:  stream.ToolCallInput(id, exposed, rec.Arguments),
			partResult: stream.ToolCallResult(id, exposed, resultText(rec)),
		}
		for part, d := range streamed {
			data, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			candidates := [][]byte{data}
			if rebuilt, ok := callEvent(payload, part); ok {
				candidates = append(candidates, rebuilt)
			}
			for _, c := range candidates {
				got, ok := rc.rebuilds(id, c)
				if !ok {
					continue
				}
				if got != part {
					t.Errorf("%s: %s event taken for the %s", name, part, got)
				}
				if rebuilt, _ := callEvent(payload, got); !bytes.Equal(rebuilt, c) {
					t.Errorf("%s: %s event referred to, but the record rebuilds\n%s\nnot\n%s", name, part, rebuilt, c)
				}
			}
			_, ok := rc.rebuilds(id, data)
			if want := name != "invalid utf-8" || part == partInput; ok != want {
				t.Errorf("%s: the stream's %s event referred to: %v, want %v", name, part, ok, want)
			}
			// Another call's event, or the event cut short, is not the call's.
			if _, ok := rc.rebuilds("other", data); ok {
				t.Errorf("%s: another id's event taken", name)
			}
			if _, ok := rc.rebuilds(id, data[:len(data)-1]); ok {
				t.Errorf("%s: a cut %s event taken", name, part)
			}
		}
	}
}

// FuzzCallRecord holds the hand encoder to encoding/json, and references
// to what the record rebuilds, for any strings in a call.
func FuzzCallRecord(f *testing.F) {
	f.Add("fx", "echo", "hello", "Echo: hello", "", 1.5)
	f.Add("s<p>", "t&", "a\u2028b", "\xff", "kind", 1e-7)
	f.Add("", "", "", "", "msg \" \\", -0.0)
	l := &Log{opts: options{now: time.Now}, log: slog.New(slog.DiscardHandler)}
	f.Fuzz(func(t *testing.T, server, toolName, arg, text, errMsg string, num float64) {
		rec := &tool.Record{ID: "c1", Server: server, Tool: toolName, Arguments: map[string]any{"q": arg, "n": num, arg: true},
			Result: tool.TextResult(text), Started: time.Unix(0, 1).UTC(), Ended: time.Unix(0, 2).UTC(), Duration: 1}
		if errMsg != "" {
			rec.Error = &tool.Error{Kind: tool.KindToolError, Message: errMsg}
		}
		want, err := json.Marshal(rec)
		got, cb, gerr := appendRecordBody(nil, rec)
		if (err == nil) != (gerr == nil) {
			t.Fatalf("encoding/json: %v, hand: %v", err, gerr)
		}
		if err != nil {
			return
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
		payload, id, _, rc := l.callPayload(rec)
		if rc == nil {
			return // no references: the events are kept whole
		}
		exposed := tool.ExposedName(server, toolName)
		for _, d := range []stream.ToolCallData{stream.ToolCallInput(id, exposed, rec.Arguments), stream.ToolCallResult(id, exposed, resultText(rec))} {
			data, _ := json.Marshal(d)
			if part, ok := rc.rebuilds(id, data); ok {
				if rebuilt, _ := callEvent(payload, part); !bytes.Equal(rebuilt, data) {
					t.Fatalf("referred to %s, rebuilt %s", data, rebuilt)
				}
			}
		}
		_ = cb
	})
}

// The envelope of a call or events record is read by hand as
// encoding/json reads it; whatever the hand reader does not expect goes
// to encoding/json.
func TestFastEnvelope(t *testing.T) {
	l := &Log{opts: options{now: time.Now}, log: slog.New(slog.DiscardHandler), ownerStr: "host/1/2"}
	var payloads [][]byte
	for _, rec := range encodeRecords() {
		p, _, _, _ := l.callPayload(rec)
		payloads = append(payloads, p)
	}
	evs, err := eventsPayload(&jrec{Type: recEvents, At: 3, EventIDs: []int64{7, 9}, Events: []jEvent{{ID: 7, Name: "x", Time: 1}, {ID: 9, Name: "y", Time: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	payloads = append(payloads, evs)
	jsonEnvelope := func(p []byte) jrec {
		var r jrec
		if err := envelope(append([]byte(" "), p...), &r); err != nil { // a space: not the hand reader's
			t.Fatal(err)
		}
		return r
	}
	for _, p := range payloads {
		var fast jrec
		if !fastEnvelope(p, &fast) {
			// Only an escape in the envelope is left to encoding/json.
			if head, _, _ := bytes.Cut(p, []byte(`,"record":`)); bytes.IndexByte(head, '\\') < 0 {
				t.Errorf("not read by hand: %s", p)
			}
			continue
		}
		if slow := jsonEnvelope(p); !reflect.DeepEqual(fast, slow) {
			t.Errorf("%s:\nby hand %+v\n   json %+v", p, fast, slow)
		}
	}
	for _, p := range []string{
		`{"v":1,"type":"call","id":"a\"b","at":1,"call":{"started":1,"ended":1,"duration":0},"record":{}}`,
		`{"v":1,"type":"call","id":"a","at":1,"call":{"started":1,"ended":1,"duration":0,"caller":{"name":"a","key":"k","x":1}},"record":{}}`,
		`{"v":1,"type":"call","id":"a","at":1,"call":{"started":1.5,"ended":1,"duration":0},"record":{}}`,
		`{"v":1,"type":"call","id":"a","at":1,"call":{"started":1,"ended":1 "duration":0},"record":{}}`,
		`{"v":1,"type":"call","id":"a","at":1,"Call":{"started":1},"record":{}}`,
		`{"v":1,"type":"step","id":"a","at":1,"step":{"name":"s","level":"info","time":1}}`,
		`{"v":1,"type":"events","id":"a","at":1,"event_ids":[1, 2],"events":[]}`,
		`{"v":1,"type":"events","id":"a","at":1,"event_ids":[1,2]}`,
		`{"v":1,"type":"call","id":"` + "\xff" + `","at":1,"call":{"started":1,"ended":1,"duration":0},"record":{}}`,
	} {
		var r jrec
		if fastEnvelope([]byte(p), &r) {
			t.Errorf("read by hand: %s", p)
		}
	}
}
