package tool_test

import (
	"encoding/base32"
	"encoding/binary"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/toolmux/toolmux/tool"
)

func TestRecordErrIsTrueNil(t *testing.T) {
	var r tool.Record
	if err := r.Err(); err != nil {
		t.Fatalf("Err() = %#v, want a nil interface", err)
	}
	// A typed nil (*Error)(nil) in an interface would make this comparison false.
	var iface error = r.Err()
	if iface != nil {
		t.Fatalf("Err() is a non-nil interface holding %T", iface)
	}
	var nilRec *tool.Record
	if nilRec.Err() != nil {
		t.Fatal("nil *Record Err() != nil")
	}

	r.Error = tool.NewError(tool.KindTimeout, "slow")
	err := r.Err()
	if err == nil {
		t.Fatal("Err() = nil with Error set")
	}
	var te *tool.Error
	if !errors.As(err, &te) || te != r.Error {
		t.Errorf("Err() is not the record's *Error: %#v", err)
	}
	if tool.KindOf(err) != tool.KindTimeout {
		t.Errorf("KindOf(Err()) = %q", tool.KindOf(err))
	}
}

func TestRecordNote(t *testing.T) {
	var r tool.Record
	r.Note("manager", "retried", map[string]any{"attempt": 2})
	r.Note("repair", "fixed arguments", nil)
	r.Note("manager", "done", nil)
	want := []tool.Note{
		{Layer: "manager", Message: "retried", Data: map[string]any{"attempt": 2}},
		{Layer: "repair", Message: "fixed arguments"},
		{Layer: "manager", Message: "done"},
	}
	if !reflect.DeepEqual(r.Notes, want) {
		t.Errorf("Notes = %+v, want %+v", r.Notes, want)
	}
}

func sampleRecord() *tool.Record {
	started := time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)
	return &tool.Record{
		ID: "01abc", Server: "fs", Tool: "read_file", Name: "fs__read_file",
		Arguments: map[string]any{"path": "a.txt", "limit": 10.0},
		Result:    tool.ErrorResult("no such file"),
		Error: &tool.Error{Kind: tool.KindToolError, Message: "tool failed", Server: "fs", Tool: "read_file",
			Detail: "stderr", Err: errors.New("not serialised")},
		Started:  started,
		Ended:    started.Add(1500 * time.Microsecond),
		Duration: 1500 * time.Microsecond,
		Attempts: 2,
		Notes:    []tool.Note{{Layer: "manager", Message: "retry", Data: map[string]any{"n": 1.0}}},
	}
}

func TestRecordJSON(t *testing.T) {
	b, err := json.Marshal(sampleRecord())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["duration_ms"] != 1.5 {
		t.Errorf("duration_ms = %v, want 1.5 (%s)", m["duration_ms"], b)
	}
	if _, ok := m["Duration"]; ok {
		t.Errorf("raw Duration field leaked: %s", b)
	}
	if m["started_at"] != "2025-03-04T05:06:07.123456789Z" || m["ended_at"] != "2025-03-04T05:06:07.124956789Z" {
		t.Errorf("started_at/ended_at = %v/%v", m["started_at"], m["ended_at"])
	}
	for k, v := range map[string]any{"id": "01abc", "server": "fs", "tool": "read_file", "name": "fs__read_file", "attempts": 2.0} {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	wantErr := map[string]any{"kind": "tool_error", "message": "tool failed", "server": "fs", "tool": "read_file", "detail": "stderr"}
	if !reflect.DeepEqual(m["error"], wantErr) {
		t.Errorf("error = %v, want %v", m["error"], wantErr)
	}
	res, _ := m["result"].(map[string]any)
	if res["isError"] != true {
		t.Errorf("result = %v", m["result"])
	}
	notes, _ := m["notes"].([]any)
	if len(notes) != 1 {
		t.Errorf("notes = %v", m["notes"])
	}
}

func TestRecordJSONFractionalMilliseconds(t *testing.T) {
	cases := []struct {
		d    time.Duration
		want float64
	}{
		{0, 0},
		{time.Microsecond, 0.001},
		{1500 * time.Microsecond, 1.5},
		{1234567 * time.Nanosecond, 1.234}, // sub-microsecond precision is dropped
		{2 * time.Second, 2000},
		{90 * time.Minute, 5400000},
	}
	for _, c := range cases {
		b, err := json.Marshal(&tool.Record{Duration: c.d})
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			DurationMS float64 `json:"duration_ms"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		if v.DurationMS != c.want {
			t.Errorf("%v: duration_ms = %v, want %v", c.d, v.DurationMS, c.want)
		}
	}
}

func TestRecordJSONOmitsEmpty(t *testing.T) {
	b, err := json.Marshal(&tool.Record{ID: "x", Server: "s", Tool: "t"})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	for _, k := range []string{"name", "result", "error", "notes"} {
		if _, ok := m[k]; ok {
			t.Errorf("%s should be omitted: %s", k, b)
		}
	}
	for _, k := range []string{"id", "server", "tool", "arguments", "started_at", "ended_at", "attempts", "duration_ms"} {
		if _, ok := m[k]; !ok {
			t.Errorf("%s missing: %s", k, b)
		}
	}
}

func TestRecordJSONRoundTrip(t *testing.T) {
	orig := sampleRecord()
	b, err := json.Marshal(orig)
	if err != nil {
		t.Fatal(err)
	}
	var back tool.Record
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Duration != orig.Duration {
		t.Errorf("Duration = %v, want %v", back.Duration, orig.Duration)
	}
	if !back.Started.Equal(orig.Started) || !back.Ended.Equal(orig.Ended) {
		t.Errorf("times = %v..%v, want %v..%v", back.Started, back.Ended, orig.Started, orig.Ended)
	}
	// Err is not serialised; everything else is.
	wantErr := *orig.Error
	wantErr.Err = nil
	if back.Error == nil || *back.Error != wantErr {
		t.Errorf("Error = %+v, want %+v", back.Error, wantErr)
	}
	if !reflect.DeepEqual(back.Result, orig.Result) || !reflect.DeepEqual(back.Arguments, orig.Arguments) ||
		!reflect.DeepEqual(back.Notes, orig.Notes) {
		t.Errorf("round trip changed the record:\n got %+v\nwant %+v", back, *orig)
	}
	if back.ID != orig.ID || back.Server != orig.Server || back.Tool != orig.Tool || back.Name != orig.Name || back.Attempts != orig.Attempts {
		t.Errorf("identity fields changed: %+v", back)
	}
	if back.Err() == nil || tool.KindOf(back.Err()) != tool.KindToolError {
		t.Errorf("Err() after round trip = %v", back.Err())
	}

	// Durations that are exact in binary floating point survive unchanged.
	for _, d := range []time.Duration{0, 1500 * time.Microsecond, 250 * time.Millisecond, 2 * time.Second, 3 * time.Minute} {
		b, _ := json.Marshal(&tool.Record{Duration: d})
		var r tool.Record
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		if r.Duration != d {
			t.Errorf("Duration %v round-tripped to %v", d, r.Duration)
		}
	}

	// A successful call round-trips to a record whose Err is a true nil.
	b, _ = json.Marshal(&tool.Record{ID: "ok", Result: tool.TextResult("fine")})
	var ok tool.Record
	if err := json.Unmarshal(b, &ok); err != nil {
		t.Fatal(err)
	}
	if ok.Err() != nil || ok.Error != nil {
		t.Errorf("Err() = %#v after round trip of a success", ok.Err())
	}
}

// Bug: UnmarshalJSON converts duration_ms back with a truncating float→int
// conversion, so microsecond durations whose millisecond value is not exact
// in binary (1.001 ms, about 1% of all values) come back 1 ns short.
func TestRecordDurationRoundTripIsExactToTheMicrosecond(t *testing.T) {
	for us := range int64(20000) {
		d := time.Duration(us) * time.Microsecond
		b, _ := json.Marshal(&tool.Record{Duration: d})
		var r tool.Record
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		if r.Duration != d {
			t.Fatalf("Duration %v round-tripped to %v", d, r.Duration)
		}
	}
}

func TestRecordUnmarshalRejectsBadJSON(t *testing.T) {
	var r tool.Record
	if err := json.Unmarshal([]byte(`{"duration_ms": "fast"}`), &r); err == nil {
		t.Error("a string duration_ms was accepted")
	}
	if err := json.Unmarshal([]byte(`{"id": 5}`), &r); err == nil {
		t.Error("a numeric id was accepted")
	}
}

func TestCallJSON(t *testing.T) {
	b, _ := json.Marshal(tool.Call{Server: "s", Tool: "t", Arguments: map[string]any{"a": 1.0}})
	if got, want := string(b), `{"server":"s","tool":"t","arguments":{"a":1}}`; got != want {
		t.Errorf("JSON = %s, want %s", got, want)
	}
}

// ---- NewID ----

var idPattern = regexp.MustCompile(`^[0-9a-z]{26}$`)

func TestNewIDFormatAndUniqueness(t *testing.T) {
	const n = 100_000
	seen := make(map[string]struct{}, n)
	for range n {
		id := tool.NewID()
		if !idPattern.MatchString(id) {
			t.Fatalf("NewID() = %q does not match %s", id, idPattern)
		}
		if _, dup := seen[id]; dup {
			t.Fatalf("duplicate id %q", id)
		}
		seen[id] = struct{}{}
	}
}

func TestNewIDConcurrentUniqueness(t *testing.T) {
	const workers, each = 8, 2000
	ids := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range each {
				ids[w] = append(ids[w], tool.NewID())
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, list := range ids {
		for _, id := range list {
			if seen[id] {
				t.Fatalf("duplicate id %q", id)
			}
			seen[id] = true
		}
	}
}

func TestNewIDSortsByTime(t *testing.T) {
	var ids []string
	for range 10 {
		ids = append(ids, tool.NewID())
		time.Sleep(2 * time.Millisecond)
	}
	if !slices.IsSorted(ids) {
		t.Errorf("ids made 2ms apart are not sorted: %v", ids)
	}
	if len(slices.Compact(slices.Clone(ids))) != len(ids) {
		t.Errorf("ids made 2ms apart repeat: %v", ids)
	}
}

func TestNewIDEncodesCreationTime(t *testing.T) {
	enc := base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)
	before := time.Now().UnixMilli()
	id := tool.NewID()
	after := time.Now().UnixMilli()
	raw, err := enc.DecodeString(id)
	if err != nil || len(raw) != 16 {
		t.Fatalf("decode %q: %v (%d bytes)", id, err, len(raw))
	}
	ms := int64(binary.BigEndian.Uint64(raw[:8]) >> 16)
	if ms < before || ms > after {
		t.Errorf("id time %d not in [%d, %d]", ms, before, after)
	}
	// The random part (80 bits, from byte 6 on) varies, in every byte.
	var seen [16]byte
	for range 64 {
		r, _ := enc.DecodeString(tool.NewID())
		for i := 6; i < 16; i++ {
			seen[i] |= r[i] ^ raw[i]
		}
	}
	for i := 6; i < 16; i++ {
		if seen[i] == 0 {
			t.Errorf("byte %d of the random part never changes", i)
		}
	}
}
