package stream

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
)

// sameAsEncodingJSON fails t unless the hand-written encoding of v is the
// one encoding/json gives, or both refuse v.
func sameAsEncodingJSON(t *testing.T, v any, got []byte, ok bool) {
	t.Helper()
	want, err := json.Marshal(v)
	if err != nil {
		if ok {
			t.Fatalf("%#v: encoded as %s, encoding/json refuses it: %v", v, got, err)
		}
		return
	}
	if ok && !bytes.Equal(got, want) {
		t.Fatalf("%#v:\n got  %s\n want %s", v, got, want)
	}
}

// FuzzAppendJSON holds the hand-written encoders of the events a tool call
// produces to encoding/json's output, byte for byte: strings of any bytes
// (escapes, HTML characters, invalid UTF-8, U+2028), floats of every
// magnitude, and any JSON document decoded as encoding/json decodes it.
func FuzzAppendJSON(f *testing.F) {
	f.Add("call-1", "<a href=\"x\">&amp;</a>\n\t\x00\x1f", "\u2028\u2029\xff\xfeé", 0.001, 1e21, []byte(`{"b":[1,2.5,"x",null,true,{"a":{}}],"a":-0.0000001}`))
	f.Add("", "", "", 0.0, -1e-7, []byte(`[1e400]`))
	f.Add("id", "m", "k", math.Inf(1), math.NaN(), []byte(`"\u00e9\ud800"`))
	f.Add("z", "\\\"", "\b\f\r", 123456789.125, 5e-324, []byte(`{"":"","\u2028":[[]],"é":1.5e300}`))
	f.Fuzz(func(t *testing.T, s1, s2, s3 string, f1, f2 float64, doc []byte) {
		st := ToolStateData{CallID: s1, Batch: s2, Index: len(s3), Server: s3, Tool: s1, Caller: s3, State: s2, Message: s3,
			Kind: s1, PreviousState: s2, PreviousMS: f1, TotalMS: f2}
		b, ok := st.appendJSON(nil)
		sameAsEncodingJSON(t, st, b, ok)
		ar := ApprovalResolvedData{CallID: s1, Batch: s2, Index: -len(s1), Server: s3, Tool: s2, Outcome: s1, Message: s3, WaitedMS: f1}
		b, ok = ar.appendJSON(nil)
		sameAsEncodingJSON(t, ar, b, ok)
		// Who asked and who answered, when callers are known.
		ar.Caller, ar.AnsweredBy = s2, s3
		b, ok = ar.appendJSON(nil)
		sameAsEncodingJSON(t, ar, b, ok)
		md := MessageData{MessageID: s1, Delta: MessageDelta{Content: s2}}
		b, ok = md.appendJSON(nil)
		sameAsEncodingJSON(t, md, b, ok)
		res := ToolCallData{ToolCallID: s1, ToolName: s2, ToolInput: resultInput{Result: s3}}
		b, ok = res.appendJSON(nil)
		sameAsEncodingJSON(t, res, b, ok)

		var v any
		if json.Unmarshal(doc, &v) != nil {
			return
		}
		b, ok = appendValue(nil, v)
		if !ok {
			t.Fatalf("%s: a decoded document not encoded", doc)
		}
		sameAsEncodingJSON(t, v, b, ok)
		// As a call's arguments, encoded once and carried in an input event.
		in := ToolCallData{ToolCallID: s1, ToolName: s2, ToolInput: encodedArgs(b), DeltaInput: map[string]any{s3: v}}
		got, ok := in.appendJSON(nil)
		sameAsEncodingJSON(t, in, got, ok)
	})
}

// Go's integers, which arguments built in Go may hold, are written as
// encoding/json writes them; other types are left to it.
func TestAppendValueTypes(t *testing.T) {
	v := map[string]any{"int": -3, "int64": int64(math.MaxInt64), "int32": int32(-7), "uint64": uint64(math.MaxUint64),
		"nil slice": []any(nil), "nil map": map[string]any(nil), "bool": false, "nested": []any{map[string]any{}, []any{}}}
	b, ok := appendValue(nil, v)
	if !ok {
		t.Fatal("not encoded")
	}
	sameAsEncodingJSON(t, v, b, ok)
	for _, other := range []any{float32(1.5), []string{"a"}, map[string]string{"a": "b"}, json.Number("1"), struct{}{}} {
		if b, ok := appendValue(nil, other); ok {
			t.Errorf("%#v encoded by hand as %s; encoding/json should", other, b)
		}
	}
}
