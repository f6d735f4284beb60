package pipeline

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/toolmux/toolmux/tool"
)

// schemaToolStub is a ToolLookup over literal tool definitions, keyed
// "server/tool"; set replaces one (as a catalog refresh would).
type schemaToolStub struct {
	mu    sync.Mutex
	tools map[string]tool.Tool
}

func newSchemaToolStub(tools ...tool.Tool) *schemaToolStub {
	s := &schemaToolStub{tools: map[string]tool.Tool{}}
	for _, t := range tools {
		s.set(t)
	}
	return s
}

func (s *schemaToolStub) set(t tool.Tool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tools[t.Server+"/"+t.Name] = t
}

func (s *schemaToolStub) Tool(_ context.Context, server, name string) (tool.Tool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tools[server+"/"+name]
	if !ok {
		return tool.Tool{}, &tool.Error{Kind: tool.KindToolNotRegistered, Server: server, Tool: name, Message: "no such tool"}
	}
	return t, nil
}

// callSpy is the next Handler: it records the calls that reach it.
type callSpy struct {
	calls atomic.Int32
	mu    sync.Mutex
	last  tool.Call
}

func (s *callSpy) Call(_ context.Context, call tool.Call) *tool.Record {
	s.calls.Add(1)
	s.mu.Lock()
	s.last = call
	s.mu.Unlock()
	return &tool.Record{ID: call.ID, Server: call.Server, Tool: call.Tool, Arguments: call.Arguments,
		Result: tool.TextResult("ok"), Attempts: 1}
}

func (s *callSpy) lastArgs() map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last.Arguments
}

// schemaJSON decodes a JSON object the way the gateway does (UseNumber).
func schemaJSON(t testing.TB, text string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("bad JSON %s: %v", text, err)
	}
	return m
}

const echoSchema = `{
	"type": "object",
	"properties": {
		"message": {"type": "string"},
		"count": {"type": "integer"},
		"limit": {"type": "integer", "minimum": 1},
		"mode": {"enum": ["fast", "slow"]},
		"opt": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
		"items": {"type": "array", "items": {
			"type": "object",
			"properties": {"name": {"type": "string"}},
			"required": ["name"],
			"additionalProperties": false
		}}
	},
	"required": ["message"],
	"additionalProperties": false
}`

func runValidate(t *testing.T, cfg ValidateOptions, tools ToolLookup, call tool.Call) (*tool.Record, *callSpy) {
	t.Helper()
	mw, err := NewValidate(cfg, tools)
	if err != nil {
		t.Fatal(err)
	}
	spy := &callSpy{}
	rec := mw(spy).Call(context.Background(), call)
	if rec == nil {
		t.Fatal("nil record")
	}
	return rec, spy
}

func TestValidateListsEveryViolation(t *testing.T) {
	tools := newSchemaToolStub(tool.Tool{Server: "fx", Name: "echo", InputSchema: schemaJSON(t, echoSchema)})
	args := schemaJSON(t, `{"count": "3", "limit": 0, "mode": "medium", "extra": 1, "opt": "x",
		"items": [{"name": "a"}, {"name": "b"}, {"name": 5}, {"nam": "d"}]}`)
	rec, spy := runValidate(t, ValidateOptions{}, tools, tool.Call{ID: "c1", Server: "fx", Tool: "echo", Arguments: args})
	if n := spy.calls.Load(); n != 0 {
		t.Fatalf("the tool was called %d times on invalid arguments", n)
	}
	if rec.Error == nil || rec.Error.Kind != tool.KindInvalidParams {
		t.Fatalf("error = %+v, want invalid_tool_params", rec.Error)
	}
	if rec.ID != "c1" || rec.Server != "fx" || rec.Tool != "echo" || rec.Error.Server != "fx" || rec.Error.Tool != "echo" {
		t.Errorf("record does not name the call: %+v / %+v", rec, rec.Error)
	}
	want := []string{
		`/count: got string "3", want integer`,
		`/extra: unknown property (allowed: count, items, limit, message, mode, opt)`,
		`/items/2/name: got number 5, want string`,
		`/items/3/nam: unknown property (allowed: name)`,
		`/items/3/name: missing (required property)`,
		`/limit: got 0, want at least 1`,
		`/message: missing (required property)`,
		`/mode: got "medium", want one of "fast", "slow"`,
		`/opt: got string "x", want integer or null`,
	}
	wantMsg := "arguments do not match the schema of fx/echo:\n- " + strings.Join(want, "\n- ")
	if rec.Error.Message != wantMsg {
		t.Errorf("message =\n%s\nwant\n%s", rec.Error.Message, wantMsg)
	}
	if len(rec.Notes) != 1 || rec.Notes[0].Layer != "validate" {
		t.Fatalf("notes = %+v", rec.Notes)
	}
	if got, _ := rec.Notes[0].Data["violations"].([]string); !slices.Equal(got, want) {
		t.Errorf("note violations = %q", got)
	}
	if !reflect.DeepEqual(rec.Arguments, args) {
		t.Errorf("record arguments = %v", rec.Arguments)
	}
}

func TestValidateViolationWording(t *testing.T) {
	schema := `{
		"type": "object",
		"properties": {
			"n": {"type": "number", "exclusiveMaximum": 10, "multipleOf": 0.5},
			"s": {"type": "string", "minLength": 3, "pattern": "^[a-z]+$"},
			"a": {"type": "array", "maxItems": 1, "uniqueItems": true},
			"c": {"const": "yes"},
			"o": {"type": "object", "minProperties": 1},
			"ecma": {"type": "string", "pattern": "^(?!x)"},
			"deep": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}
		},
		"dependentRequired": {"n": ["s"]}
	}`
	tools := newSchemaToolStub(tool.Tool{Server: "fx", Name: "w", InputSchema: schemaJSON(t, schema)})
	tests := []struct {
		args string
		want []string
	}{
		{`{"n": 10.25}`, []string{
			`/n: got 10.25, want a multiple of 0.5`,
			`/n: got 10.25, want less than 10`,
			`/s: missing (required when "n" is present)`,
		}},
		{`{"s": "A1"}`, []string{
			`/s: "A1" does not match the pattern "^[a-z]+$"`,
			`/s: 2 characters, want at least 3`,
		}},
		{`{"a": [1, 1]}`, []string{
			`/a: 2 items, want at most 1`,
			`/a: items 0 and 1 are equal, want unique items`,
		}},
		{`{"c": "no", "o": {}}`, []string{
			`/c: got "no", want "yes"`,
			`/o: 0 properties, want at least 1`,
		}},
		// Index order is numeric, not textual.
		{`{"deep": [[1], [2, "x"], [], [], [], [], [], [], [], [], [true]]}`, []string{
			`/deep/1/1: got string "x", want integer`,
			`/deep/10/0: got boolean true, want integer`,
		}},
		// A pattern Go's regexp cannot compile matches anything.
		{`{"ecma": "xyz"}`, nil},
	}
	for _, tc := range tests {
		rec, spy := runValidate(t, ValidateOptions{}, tools, tool.Call{Server: "fx", Tool: "w", Arguments: schemaJSON(t, tc.args)})
		if tc.want == nil {
			if rec.Error != nil || spy.calls.Load() != 1 {
				t.Errorf("%s: refused: %v", tc.args, rec.Error)
			}
			continue
		}
		if rec.Error == nil {
			t.Errorf("%s: accepted", tc.args)
			continue
		}
		got := rec.Notes[len(rec.Notes)-1].Data["violations"].([]string)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: violations\n%q\nwant\n%q", tc.args, got, tc.want)
		}
	}
}

func TestValidatePassesValidCalls(t *testing.T) {
	goSchema := map[string]any{ // as builtin tools write them: []string, ints
		"type":                 "object",
		"properties":           map[string]any{"path": map[string]any{"type": "string"}, "offset": map[string]any{"type": "integer", "minimum": 0}},
		"required":             []string{"path"},
		"additionalProperties": false,
	}
	tools := newSchemaToolStub(
		tool.Tool{Server: "fx", Name: "echo", InputSchema: schemaJSON(t, echoSchema)},
		tool.Tool{Server: "fx", Name: "open", InputSchema: map[string]any{"type": "object"}},
		tool.Tool{Server: "fx", Name: "none"},
		tool.Tool{Server: "b", Name: "read", InputSchema: goSchema},
		tool.Tool{Server: "fx", Name: "d7", InputSchema: schemaJSON(t, `{"$schema": "http://json-schema.org/draft-07/schema#",
			"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"], "definitions": {"x": {"type": "string"}}}`)},
	)
	tests := []struct {
		name   string
		call   tool.Call
		refuse bool
	}{
		{"valid", tool.Call{Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "hi", "count": json.Number("3"), "opt": nil}}, false},
		{"float integer", tool.Call{Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "hi", "count": 3.0, "limit": 2}}, false},
		{"nil map is {}", tool.Call{Server: "fx", Tool: "open"}, false},
		{"nil map missing required", tool.Call{Server: "fx", Tool: "echo"}, true},
		{"no schema", tool.Call{Server: "fx", Tool: "none", Arguments: map[string]any{"anything": []any{1}}}, false},
		{"unknown tool passes through", tool.Call{Server: "fx", Tool: "nope", Arguments: map[string]any{"x": 1}}, false},
		{"go schema ok", tool.Call{Server: "b", Tool: "read", Arguments: map[string]any{"path": "a", "offset": 2}}, false},
		{"go schema bad", tool.Call{Server: "b", Tool: "read", Arguments: map[string]any{"offset": -1}}, true},
		{"draft-07 ok", tool.Call{Server: "fx", Tool: "d7", Arguments: map[string]any{"q": "x"}}, false},
		{"draft-07 bad", tool.Call{Server: "fx", Tool: "d7", Arguments: map[string]any{"q": 1}}, true},
		{"go values ok", tool.Call{Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "hi", "items": []map[string]string{{"name": "a"}}}}, false},
		{"go values bad", tool.Call{Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "hi", "items": []map[string]int{{"name": 1}}}}, true},
	}
	for _, tc := range tests {
		rec, spy := runValidate(t, ValidateOptions{}, tools, tc.call)
		if refused := rec.Error != nil; refused != tc.refuse {
			t.Errorf("%s: refused = %v (%v), want %v", tc.name, refused, rec.Error, tc.refuse)
		}
		if want := int32(1); tc.refuse {
			if spy.calls.Load() != 0 {
				t.Errorf("%s: the tool was called", tc.name)
			}
		} else if spy.calls.Load() != want {
			t.Errorf("%s: the tool was called %d times", tc.name, spy.calls.Load())
		} else if !reflect.DeepEqual(spy.lastArgs(), tc.call.Arguments) {
			t.Errorf("%s: arguments changed on the way: %v", tc.name, spy.lastArgs())
		}
	}
	rec, _ := runValidate(t, ValidateOptions{}, tools, tool.Call{Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "hi", "items": []map[string]int{{"name": 1}}}})
	if !strings.Contains(rec.Error.Message, "/items/0/name: got number 1, want string") {
		t.Errorf("Go values: %s", rec.Error.Message)
	}
}

func TestValidateRejectsInvalidUTF8(t *testing.T) {
	tools := newSchemaToolStub(tool.Tool{Server: "fx", Name: "open", InputSchema: map[string]any{"type": "object"}})
	tests := []struct {
		name string
		args map[string]any
		want string
	}{
		{"value", map[string]any{"a": map[string]any{"b": []any{"ok", "bad\xff"}}},
			"the argument at /a/b/1 is not valid UTF-8 text"},
		{"key", map[string]any{"a": map[string]any{"b\xffc": 1}},
			"the name of the argument at /a/b\uFFFDc is not valid UTF-8 text"},
		{"top-level key", map[string]any{"\xfe": "x"},
			"the name of the argument at /\uFFFD is not valid UTF-8 text"},
		{"go slice", map[string]any{"list": []string{"x", "\xc3"}},
			"the argument at /list/1 is not valid UTF-8 text"},
		{"go map key", map[string]any{"m": map[string]string{"k\x80": "v"}},
			"the name of the argument at /m/k\uFFFD is not valid UTF-8 text"},
		{"escaped pointer", map[string]any{"a/b~c": "\xff"},
			"the argument at /a~1b~0c is not valid UTF-8 text"},
	}
	for _, tc := range tests {
		rec, spy := runValidate(t, ValidateOptions{}, tools, tool.Call{Server: "fx", Tool: "open", Arguments: tc.args})
		if spy.calls.Load() != 0 || rec.Error == nil || rec.Error.Kind != tool.KindInvalidParams {
			t.Errorf("%s: not refused: %+v", tc.name, rec.Error)
			continue
		}
		if !strings.HasPrefix(rec.Error.Message, tc.want) {
			t.Errorf("%s: message %q, want prefix %q", tc.name, rec.Error.Message, tc.want)
		}
		if len(rec.Notes) != 1 || rec.Notes[0].Layer != "validate" {
			t.Errorf("%s: notes %+v", tc.name, rec.Notes)
		}
	}
}

func TestValidateRejectsUnusableNumbers(t *testing.T) {
	tools := newSchemaToolStub(tool.Tool{Server: "fx", Name: "n", InputSchema: schemaJSON(t,
		`{"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}`)})
	for _, v := range []any{math.NaN(), math.Inf(1), json.Number("1e-999999999"), json.Number("abc"), json.Number(""),
		json.Number(strings.Repeat("9", 500))} {
		rec, spy := runValidate(t, ValidateOptions{}, tools, tool.Call{Server: "fx", Tool: "n", Arguments: map[string]any{"n": v}})
		if spy.calls.Load() != 0 || rec.Error == nil || !strings.HasPrefix(rec.Error.Message, "the argument at /n is not a") {
			t.Errorf("%v: not refused: %+v", v, rec.Error)
		}
	}
}

func TestValidateSizeLimit(t *testing.T) {
	tools := newSchemaToolStub(tool.Tool{Server: "fx", Name: "open", InputSchema: map[string]any{"type": "object"}})
	big := strings.Repeat("a", 2<<20)
	rec, spy := runValidate(t, ValidateOptions{}, tools, tool.Call{Server: "fx", Tool: "open", Arguments: map[string]any{"text": big}})
	if spy.calls.Load() != 0 || rec.Error == nil || rec.Error.Kind != tool.KindInvalidParams {
		t.Fatalf("2 MiB call not refused: %+v", rec.Error)
	}
	want := "the arguments are 2097163 bytes of JSON, over the limit of 1048576 bytes"
	if !strings.HasPrefix(rec.Error.Message, want) {
		t.Errorf("message %q, want prefix %q", rec.Error.Message, want)
	}
	if d := rec.Notes[0].Data; d["size"] != int64(2097163) || d["limit"] != int64(1048576) {
		t.Errorf("note data = %v", d)
	}
	// A configured limit; Go values are measured through json.Marshal.
	small := ValidateOptions{MaxArgumentBytes: 20}
	for _, args := range []map[string]any{
		{"text": strings.Repeat("x", 20)},
		{"list": []string{strings.Repeat("x", 20)}},
	} {
		if rec, _ := runValidate(t, small, tools, tool.Call{Server: "fx", Tool: "open", Arguments: args}); rec.Error == nil {
			t.Errorf("%v: over the configured limit, not refused", args)
		}
	}
	if rec, _ := runValidate(t, small, tools, tool.Call{Server: "fx", Tool: "open", Arguments: map[string]any{"t": "x"}}); rec.Error != nil {
		t.Errorf("small call refused: %v", rec.Error)
	}
}

// The size is measured without encoding; it must agree with json.Marshal.
func TestArgScanSizeMatchesJSON(t *testing.T) {
	for _, args := range []map[string]any{
		nil,
		{},
		{"a": "plain", "b": true, "c": false, "d": nil},
		{"html": "<a href='x'>&</a>", "ctl": "\x00\x01\b\f\n\r\t\"\\", "uni": "héllo \u2028\u2029 日本 😀"},
		{"f": 3.5, "g": 1e21, "h": 1e-7, "i": -0.0, "j": 123456789.0, "k": 1e20, "l": 5e-324, "m": float32(1e-7), "n": float32(3.25)},
		{"ints": []any{int8(-8), int16(16), int32(-32), int64(64), uint(1), uint8(8), uint16(16), uint32(32), uint64(math.MaxUint64), math.MinInt64}},
		{"num": json.Number("-1.5e+300"), "nested": map[string]any{"x": []any{map[string]any{}, []any{}, "y"}}},
	} {
		var s argScan
		if p := s.object(args); p != nil {
			t.Fatalf("%v: problem %s", args, p.message())
		}
		b, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		want := int64(len(b))
		if args == nil {
			want = 2 // {} rather than null
		}
		if s.foreign || s.size != want {
			t.Errorf("%v: size %d (foreign %v), json.Marshal gives %d: %s", args, s.size, s.foreign, want, b)
		}
	}
}

func TestValidateCachesCompiledSchemas(t *testing.T) {
	schema := schemaJSON(t, echoSchema)
	tools := newSchemaToolStub(
		tool.Tool{Server: "fx", Name: "echo", InputSchema: schema},
		tool.Tool{Server: "fy", Name: "echo", InputSchema: schema},
	)
	v, err := newSchemaValidator(ValidateOptions{}, tools)
	if err != nil {
		t.Fatal(err)
	}
	spy := &callSpy{}
	h := v.wrap(spy)
	call := func(server string, args map[string]any) *tool.Record {
		return h.Call(context.Background(), tool.Call{Server: server, Tool: "echo", Arguments: args})
	}
	for range 5 {
		call("fx", map[string]any{"message": "hi"})
		call("fx", map[string]any{"count": 1})
	}
	if n := v.compiles.Load(); n != 1 {
		t.Errorf("compiled %d times for repeated calls, want 1", n)
	}
	call("fy", map[string]any{"message": "hi"}) // another tool, same map: its own entry
	if n := v.compiles.Load(); n != 2 {
		t.Errorf("compiles = %d after a second tool, want 2", n)
	}
	// A refresh brings a new map, with a changed schema: recompiled.
	tools.set(tool.Tool{Server: "fx", Name: "echo", InputSchema: schemaJSON(t,
		`{"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}`)})
	if rec := call("fx", map[string]any{"message": "hi"}); rec.Error == nil || !strings.Contains(rec.Error.Message, "/text: missing") {
		t.Errorf("old schema still in use: %+v", rec.Error)
	}
	if rec := call("fx", map[string]any{"text": "hi"}); rec.Error != nil {
		t.Errorf("new schema refused a valid call: %v", rec.Error)
	}
	if n := v.compiles.Load(); n != 3 {
		t.Errorf("compiles = %d after a refresh, want 3", n)
	}
	// Even an identical schema in a new map is compiled afresh.
	tools.set(tool.Tool{Server: "fx", Name: "echo", InputSchema: schemaJSON(t, echoSchema)})
	call("fx", map[string]any{"message": "hi"})
	call("fx", map[string]any{"message": "hi"})
	if n := v.compiles.Load(); n != 4 {
		t.Errorf("compiles = %d, want 4", n)
	}
}

func TestValidateConcurrentCalls(t *testing.T) {
	tools := newSchemaToolStub(tool.Tool{Server: "fx", Name: "echo", InputSchema: schemaJSON(t, echoSchema)})
	v, err := newSchemaValidator(ValidateOptions{}, tools)
	if err != nil {
		t.Fatal(err)
	}
	spy := &callSpy{}
	h := v.wrap(spy)
	var wg sync.WaitGroup
	var refused atomic.Int32
	for i := range 32 {
		wg.Go(func() {
			for j := range 20 {
				args := map[string]any{"message": "hi"}
				if (i+j)%2 == 1 {
					args = map[string]any{"count": "x"}
				}
				if i == 0 && j == 10 {
					tools.set(tool.Tool{Server: "fx", Name: "echo", InputSchema: schemaJSON(t, echoSchema)})
				}
				if rec := h.Call(context.Background(), tool.Call{Server: "fx", Tool: "echo", Arguments: args}); rec.Error != nil {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if refused.Load() != 320 || spy.calls.Load() != 320 {
		t.Errorf("refused %d, passed %d; want 320 each", refused.Load(), spy.calls.Load())
	}
	// Two schemas, each compiled once for the cache; a call that read the
	// old schema just before the refresh and reaches the validator after
	// it compiles that one for itself alone (without evicting the
	// current one): at most once per caller racing the refresh, which a
	// loaded machine makes happen. Never once per call (640 calls).
	if n := v.compiles.Load(); n < 2 || n > 2+32 {
		t.Errorf("compiles = %d, want 2, plus at most one per caller racing the refresh (32)", n)
	}
}

func TestValidateBrokenSchemaDoesNotBlock(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"type": "string"}`))
	}))
	defer srv.Close()
	tests := []struct {
		name   string
		schema map[string]any
	}{
		{"bad type", map[string]any{"type": "nonsense"}},
		{"bad properties", map[string]any{"properties": 5}},
		{"remote $ref", map[string]any{"$ref": "http://127.0.0.1:1/x.json"}},
		{"remote $ref served", map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"$ref": srv.URL + "/x.json"}}}},
		{"remote $schema", map[string]any{"$schema": srv.URL + "/meta.json", "type": "object"}},
		{"file $ref", map[string]any{"$ref": "file:///etc/passwd"}},
		{"relative $ref", map[string]any{"$ref": "other.json"}},
		{"unencodable", map[string]any{"type": "object", "x": math.NaN()}},
	}
	for _, tc := range tests {
		tools := newSchemaToolStub(tool.Tool{Server: "fx", Name: "t", InputSchema: tc.schema})
		v, err := newSchemaValidator(ValidateOptions{}, tools)
		if err != nil {
			t.Fatal(err)
		}
		spy := &callSpy{}
		h := v.wrap(spy)
		for i := range 3 {
			rec := h.Call(context.Background(), tool.Call{Server: "fx", Tool: "t", Arguments: map[string]any{"q": 1}})
			if rec.Error != nil {
				t.Errorf("%s: call %d refused: %v", tc.name, i, rec.Error)
			}
			var notes []string
			for _, n := range rec.Notes {
				if n.Layer == "validate" {
					notes = append(notes, n.Message)
				}
			}
			if i == 0 && (len(notes) != 1 || !strings.HasPrefix(notes[0], "schema does not compile: ")) {
				t.Errorf("%s: first call notes %q", tc.name, notes)
			}
			if i > 0 && len(notes) != 0 {
				t.Errorf("%s: call %d noted again: %q", tc.name, i, notes)
			}
		}
		if spy.calls.Load() != 3 {
			t.Errorf("%s: the tool was called %d times, want 3", tc.name, spy.calls.Load())
		}
		if n := v.compiles.Load(); n != 1 {
			t.Errorf("%s: compiled %d times, want 1", tc.name, n)
		}
	}
	if hits.Load() != 0 {
		t.Errorf("the compiler fetched %d remote documents", hits.Load())
	}
}

func TestNewValidateNeedsLookup(t *testing.T) {
	if _, err := NewValidate(ValidateOptions{}, nil); err == nil {
		t.Error("newValidate accepted a nil ToolLookup")
	}
}

func BenchmarkValidate(b *testing.B) {
	tools := newSchemaToolStub(tool.Tool{Server: "fx", Name: "echo", InputSchema: schemaJSON(b, `{
		"type": "object",
		"properties": {"message": {"type": "string"}, "count": {"type": "integer", "minimum": 0}},
		"required": ["message"],
		"additionalProperties": false
	}`)})
	mw, err := NewValidate(ValidateOptions{}, tools)
	if err != nil {
		b.Fatal(err)
	}
	ok := HandlerFunc(func(_ context.Context, call tool.Call) *tool.Record { return &tool.Record{} })
	h := mw(ok)
	call := tool.Call{Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "hello world", "count": json.Number("3")}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if rec := h.Call(ctx, call); rec.Error != nil {
			b.Fatal(rec.Error)
		}
	}
}

// One schema is kept per tool, its latest listing's. A call that carries
// the definition it was admitted against just before a refresh is
// validated against that definition (compiled for it alone), and the
// current schema stays cached for the other calls.
func TestValidateAdmittedDefinitionAcrossARefresh(t *testing.T) {
	admitted := tool.Tool{Server: "fx", Name: "echo", InputSchema: schemaJSON(t, echoSchema)}
	tools := newSchemaToolStub(admitted)
	v, err := newSchemaValidator(ValidateOptions{}, tools)
	if err != nil {
		t.Fatal(err)
	}
	h := v.wrap(&callSpy{})
	call := func(def *tool.Tool, args map[string]any) *tool.Record {
		return h.Call(context.Background(), tool.Call{Server: "fx", Tool: "echo", Arguments: args, Definition: def})
	}
	if rec := call(&admitted, map[string]any{"message": "hi"}); rec.Error != nil {
		t.Fatal(rec.Error)
	}
	// The refresh: the tool now wants "text".
	tools.set(tool.Tool{Server: "fx", Name: "echo", InputSchema: schemaJSON(t,
		`{"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}`)})
	if rec := call(nil, map[string]any{"text": "hi"}); rec.Error != nil {
		t.Fatalf("a call looked up after the refresh: %v", rec.Error)
	}
	if n := v.compiles.Load(); n != 2 {
		t.Fatalf("compiles = %d after the refresh, want 2", n)
	}
	// A call admitted before the refresh keeps its definition.
	if rec := call(&admitted, map[string]any{"message": "hi"}); rec.Error != nil {
		t.Errorf("the admitted definition was not the one validated against: %v", rec.Error)
	}
	if rec := call(&admitted, map[string]any{"text": "hi"}); rec.Error == nil {
		t.Error("a call refused by its admitted definition went through")
	}
	// The current schema was not evicted by it.
	n := v.compiles.Load()
	for range 3 {
		call(nil, map[string]any{"text": "hi"})
	}
	if got := v.compiles.Load(); got != n {
		t.Errorf("the current schema was compiled %d more times after a stale call", got-n)
	}
	v.mu.Lock()
	entries := len(v.cache)
	v.mu.Unlock()
	if entries != 1 {
		t.Errorf("%d cached schemas for one tool", entries)
	}
}
