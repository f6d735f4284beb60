package pipeline

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/tool"
)

// repairDeepCopy copies maps and slices of decoded JSON, so a test can tell
// whether Repair changed its input.
func repairDeepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if x == nil {
			return x
		}
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = repairDeepCopy(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = repairDeepCopy(e)
		}
		return s
	}
	return v
}

// checkRepair runs Repair and checks that args was left alone.
func checkRepair(t *testing.T, tl tool.Tool, args map[string]any, aliases map[string]string, schema bool) (map[string]any, []Repairment) {
	t.Helper()
	before := repairDeepCopy(args)
	got, reps := Repair(tl, args, aliases, schema)
	if !reflect.DeepEqual(args, before) {
		t.Errorf("Repair modified its input:\n%v\nwas\n%v", args, before)
	}
	if len(reps) == 0 && !reflect.DeepEqual(got, args) {
		t.Errorf("no repairs reported, but the arguments changed: %v", got)
	}
	return got, reps
}

func repairKinds(reps []Repairment) []string {
	var out []string
	for _, r := range reps {
		out = append(out, r.Kind+":"+r.From+">"+r.To)
	}
	return out
}

func TestRepairAliases(t *testing.T) {
	scrape := tool.Tool{Server: "web", Name: "scrape_and_extract_info"}
	aliases := map[string]string{"description": "info_to_extract", "introduction": "info_to_extract"}
	tests := []struct {
		name string
		args map[string]any
		want map[string]any
		reps []string
	}{
		{"description",
			map[string]any{"url": "u", "description": "prices"},
			map[string]any{"url": "u", "info_to_extract": "prices"},
			[]string{"alias:description>info_to_extract"}},
		{"introduction",
			map[string]any{"url": "u", "introduction": map[string]any{"x": 1}},
			map[string]any{"url": "u", "info_to_extract": map[string]any{"x": 1}},
			[]string{"alias:introduction>info_to_extract"}},
		{"target present: both kept",
			map[string]any{"description": "a", "info_to_extract": "b"},
			map[string]any{"description": "a", "info_to_extract": "b"},
			nil},
		{"two wrong keys: the first in order wins, the other is kept",
			map[string]any{"introduction": "i", "description": "d"},
			map[string]any{"introduction": "i", "info_to_extract": "d"},
			[]string{"alias:description>info_to_extract"}},
		{"nothing to rename",
			map[string]any{"info_to_extract": "x"},
			map[string]any{"info_to_extract": "x"},
			nil},
		{"nil args", nil, nil, nil},
	}
	for _, tc := range tests {
		got, reps := checkRepair(t, scrape, tc.args, aliases, false)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
		if k := repairKinds(reps); !slices.Equal(k, tc.reps) {
			t.Errorf("%s: repairs %q, want %q", tc.name, k, tc.reps)
		}
	}
	_, reps := Repair(scrape, map[string]any{"description": "d"}, aliases, false)
	if len(reps) != 1 || reps[0].Detail != `renamed argument "description" to "info_to_extract"` {
		t.Errorf("detail = %+v", reps)
	}
}

const nearMissSchema = `{
	"type": "object",
	"properties": {
		"query": {"type": "string"},
		"file_path": {"type": "string"},
		"message": {"type": "string"},
		"limit": {"type": "integer"}
	},
	"required": ["query", "file_path", "message"]
}`

func TestRepairNearMiss(t *testing.T) {
	tl := tool.Tool{Server: "fx", Name: "t", InputSchema: schemaJSON(t, nearMissSchema)}
	tests := []struct {
		name string
		args string
		want string
		reps []string
	}{
		{"case", `{"Query": "x", "file_path": "p", "message": "m"}`,
			`{"query": "x", "file_path": "p", "message": "m"}`, []string{"near_miss:Query>query"}},
		{"dash", `{"query": "x", "file-path": "p", "message": "m"}`,
			`{"query": "x", "file_path": "p", "message": "m"}`, []string{"near_miss:file-path>file_path"}},
		{"typo", `{"query": "x", "file_path": "p", "mesage": "m"}`,
			`{"query": "x", "file_path": "p", "message": "m"}`, []string{"near_miss:mesage>message"}},
		{"all three", `{"QUERY": "x", "File-Path": "p", "messsage": "m"}`,
			`{"query": "x", "file_path": "p", "message": "m"}`,
			[]string{"near_miss:QUERY>query", "near_miss:File-Path>file_path", "near_miss:messsage>message"}},
		{"two candidates: ambiguous", `{"Query": "a", "QUERY": "b", "file_path": "p", "message": "m"}`,
			`{"Query": "a", "QUERY": "b", "file_path": "p", "message": "m"}`, nil},
		{"present property untouched", `{"query": "x", "Query": "y", "file_path": "p", "message": "m"}`,
			`{"query": "x", "Query": "y", "file_path": "p", "message": "m"}`, nil},
		{"optional properties are not filled", `{"query": "x", "file_path": "p", "message": "m", "Limit": 5}`,
			`{"query": "x", "file_path": "p", "message": "m", "Limit": 5}`, nil},
		{"too far", `{"qry": "x", "file_path": "p", "message": "m"}`,
			`{"qry": "x", "file_path": "p", "message": "m"}`, nil},
		{"a declared property is no candidate", `{"limit": 1, "file_path": "p", "message": "m"}`,
			`{"limit": 1, "file_path": "p", "message": "m"}`, nil},
	}
	for _, tc := range tests {
		got, reps := checkRepair(t, tl, schemaJSON(t, tc.args), nil, true)
		if want := schemaJSON(t, tc.want); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, want)
		}
		if k := repairKinds(reps); !slices.Equal(k, tc.reps) {
			t.Errorf("%s: repairs %q, want %q", tc.name, k, tc.reps)
		}
	}

	// One key near two missing properties fills neither.
	two := tool.Tool{InputSchema: schemaJSON(t, `{"properties": {"filename1": {}, "filename2": {}}, "required": ["filename1", "filename2"]}`)}
	if got, reps := checkRepair(t, two, map[string]any{"filename": "x"}, nil, true); len(reps) != 0 {
		t.Errorf("ambiguous key renamed: %v %v", got, reps)
	}
	// One-letter names are never near misses.
	short := tool.Tool{InputSchema: schemaJSON(t, `{"properties": {"q": {}}, "required": ["q"]}`)}
	if _, reps := checkRepair(t, short, map[string]any{"x": "y"}, nil, true); len(reps) != 0 {
		t.Errorf("x taken for q: %v", reps)
	}
	// Nested objects, with pointers.
	nested := tool.Tool{InputSchema: schemaJSON(t, `{"properties": {"opts": {"type": "object",
		"properties": {"depth": {"type": "integer"}}, "required": ["depth"]}}}`)}
	got, reps := checkRepair(t, nested, schemaJSON(t, `{"opts": {"Depth": "2"}}`), nil, true)
	if want := map[string]any{"opts": map[string]any{"depth": json.Number("2")}}; !reflect.DeepEqual(got, want) {
		t.Errorf("nested: got %v", got)
	}
	if k := repairKinds(reps); !slices.Equal(k, []string{"near_miss:/opts/Depth>/opts/depth", "coerce:/opts/depth>/opts/depth"}) {
		t.Errorf("nested repairs %q", k)
	}
}

const coerceSchema = `{
	"type": "object",
	"properties": {
		"count": {"type": "integer"},
		"ratio": {"type": "number"},
		"flag": {"type": "boolean"},
		"maybe": {"type": ["integer", "null"]},
		"either": {"type": ["string", "integer"]},
		"opt": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
		"name": {"type": "string"},
		"filters": {"type": "object", "properties": {"min": {"type": "number"}}},
		"tags": {"type": "array", "items": {"type": "integer"}},
		"item": {"$ref": "#/$defs/Item"}
	},
	"$defs": {"Item": {"type": "object", "properties": {"n": {"type": "integer"}}}}
}`

func TestRepairCoerce(t *testing.T) {
	tl := tool.Tool{InputSchema: schemaJSON(t, coerceSchema)}
	tests := []struct {
		args any // one property, as {"<name>": value}
		want any // nil: unchanged
	}{
		{map[string]any{"count": "42"}, json.Number("42")},
		{map[string]any{"count": " -7 "}, json.Number("-7")},
		{map[string]any{"count": "3.0"}, json.Number("3")},
		{map[string]any{"count": "-1e3"}, json.Number("-1000")},
		{map[string]any{"count": "3.5"}, nil},
		{map[string]any{"count": "1e300"}, nil},
		{map[string]any{"count": "NaN"}, nil},
		{map[string]any{"count": "0x10"}, nil},
		{map[string]any{"count": "1_000"}, nil},
		{map[string]any{"count": "forty"}, nil},
		{map[string]any{"count": ""}, nil},
		{map[string]any{"count": 3.0}, nil},
		{map[string]any{"count": json.Number("3")}, nil},
		{map[string]any{"ratio": "3.5"}, json.Number("3.5")},
		{map[string]any{"ratio": "-1e3"}, json.Number("-1e3")},
		{map[string]any{"ratio": "Inf"}, nil},
		{map[string]any{"ratio": "1e999"}, nil},
		{map[string]any{"ratio": 2.5}, nil},
		{map[string]any{"flag": "true"}, true},
		{map[string]any{"flag": "FALSE"}, false},
		{map[string]any{"flag": "yes"}, nil},
		{map[string]any{"flag": true}, nil},
		{map[string]any{"maybe": "7"}, json.Number("7")},
		{map[string]any{"either": "7"}, nil},
		{map[string]any{"opt": "5"}, json.Number("5")},
		{map[string]any{"name": "42"}, nil},
		{map[string]any{"unknown": "42"}, nil},
		{map[string]any{"tags": []any{"1", 2.0, "x"}}, []any{json.Number("1"), 2.0, "x"}},
		{map[string]any{"filters": map[string]any{"min": "0.5"}}, map[string]any{"min": json.Number("0.5")}},
		{map[string]any{"item": map[string]any{"n": "9"}}, map[string]any{"n": json.Number("9")}},
	}
	for _, tc := range tests {
		args := tc.args.(map[string]any)
		got, reps := checkRepair(t, tl, args, nil, true)
		var key string
		for k := range args {
			key = k
		}
		if tc.want == nil {
			if len(reps) != 0 || !reflect.DeepEqual(got, args) {
				t.Errorf("%v: repaired to %v (%v)", args, got, reps)
			}
			continue
		}
		if !reflect.DeepEqual(got[key], tc.want) {
			t.Errorf("%v: got %#v, want %#v", args, got[key], tc.want)
		}
		if len(reps) == 0 || reps[0].Kind != RepairCoerce {
			t.Errorf("%v: repairs %+v", args, reps)
		}
	}
	_, reps := Repair(tl, map[string]any{"count": "3"}, nil, true)
	if len(reps) != 1 || reps[0].From != "/count" || reps[0].Detail != `converted /count from string "3" to integer 3` {
		t.Errorf("detail: %+v", reps)
	}
	// No schema repair when turned off.
	if _, reps := Repair(tl, map[string]any{"count": "3"}, nil, false); len(reps) != 0 {
		t.Errorf("schemaRepair=false repaired: %v", reps)
	}
}

func TestRepairUnwrapJSON(t *testing.T) {
	tl := tool.Tool{InputSchema: schemaJSON(t, `{
		"type": "object",
		"properties": {
			"q": {"type": "string"},
			"n": {"type": "integer"},
			"filters": {"type": "object", "properties": {"min": {"type": "integer"}}},
			"tags": {"type": "array"},
			"text": {"type": "string"}
		}
	}`)}
	tests := []struct {
		name string
		args string
		want string
		reps []string
	}{
		{"object property", `{"filters": "{\"min\": \"1\", \"x\": [1]}"}`, `{"filters": {"min": 1, "x": [1]}}`,
			[]string{"unwrap_json:/filters>/filters", "coerce:/filters/min>/filters/min"}},
		{"array property", `{"tags": " [\"a\", 2] "}`, `{"tags": ["a", 2]}`, []string{"unwrap_json:/tags>/tags"}},
		{"wrong kind of JSON", `{"filters": "[1]", "tags": "{}"}`, `{"filters": "[1]", "tags": "{}"}`, nil},
		{"not JSON", `{"filters": "{min: 1}"}`, `{"filters": "{min: 1}"}`, nil},
		{"trailing data", `{"filters": "{} {}"}`, `{"filters": "{} {}"}`, nil},
		{"string property keeps its JSON", `{"text": "{\"q\": 1}"}`, `{"text": "{\"q\": 1}"}`, nil},
		{"whole object", `{"input": "{\"q\": \"x\", \"n\": \"2\"}"}`, `{"q": "x", "n": 2}`,
			[]string{"unwrap_json:/input>", "coerce:/n>/n"}},
		{"whole object: no property in it", `{"input": "{\"z\": 1}"}`, `{"input": "{\"z\": 1}"}`, nil},
		{"whole object: key is a property", `{"q": "{\"n\": 1}"}`, `{"q": "{\"n\": 1}"}`, nil},
		{"whole object: more than one key", `{"input": "{\"q\": \"x\"}", "other": 1}`, `{"input": "{\"q\": \"x\"}", "other": 1}`, nil},
	}
	for _, tc := range tests {
		got, reps := checkRepair(t, tl, schemaJSON(t, tc.args), nil, true)
		if want := schemaJSON(t, tc.want); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, want)
		}
		if k := repairKinds(reps); !slices.Equal(k, tc.reps) {
			t.Errorf("%s: repairs %q, want %q", tc.name, k, tc.reps)
		}
	}
}

func TestRepairUnwrapJSONMore(t *testing.T) {
	// The unwrapped arguments get the aliases too.
	tl := tool.Tool{InputSchema: schemaJSON(t, `{"properties": {"code_block": {"type": "string"}, "timeout": {"type": "integer"}}}`)}
	got, reps := checkRepair(t, tl, map[string]any{"payload": ` {"code": "print(1)", "timeout": "30"} `}, map[string]string{"code": "code_block"}, true)
	if want := map[string]any{"code_block": "print(1)", "timeout": json.Number("30")}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if k := repairKinds(reps); !slices.Equal(k, []string{"unwrap_json:/payload>", "alias:code>code_block", "coerce:/timeout>/timeout"}) {
		t.Errorf("repairs %q", k)
	}
	// Optional[Model] from pydantic: anyOf null or a $ref to the model.
	tl = tool.Tool{InputSchema: schemaJSON(t, `{
		"properties": {"opts": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/Opts"}]}},
		"$defs": {"Opts": {"type": "object", "properties": {"deep": {"type": "boolean"}, "tags": {"type": "array", "items": {"type": "number"}}}}}
	}`)}
	got, _ = checkRepair(t, tl, schemaJSON(t, `{"opts": "{\"deep\": \"false\", \"tags\": \"[\\\"1\\\", 2]\"}"}`), nil, true)
	want := map[string]any{"opts": map[string]any{"deep": false, "tags": []any{json.Number("1"), json.Number("2")}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("anyOf $ref: got %v, want %v", got, want)
	}
}

// Repair copies what it changes, down to the nested maps and slices, and
// shares the rest.
func TestRepairNeverMutatesInput(t *testing.T) {
	tl := tool.Tool{InputSchema: schemaJSON(t, `{
		"properties": {
			"a": {"type": "object", "properties": {"b": {"type": "object", "properties": {"c": {"type": "integer"}}}}},
			"list": {"type": "array", "items": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}},
			"query": {"type": "string"}
		},
		"required": ["query"]
	}`)}
	args := schemaJSON(t, `{"Query": "x", "desc": "d", "a": {"b": {"c": "1"}, "keep": {"k": 1}},
		"list": [{"ok": "true"}, {"OK": false}, {"ok": true}]}`)
	got, reps := checkRepair(t, tl, args, map[string]string{"desc": "description"}, true)
	want := schemaJSON(t, `{"query": "x", "description": "d", "a": {"b": {"c": 1}, "keep": {"k": 1}},
		"list": [{"ok": true}, {"ok": false}, {"ok": true}]}`)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	wantReps := []string{"alias:desc>description", "near_miss:Query>query", "coerce:/a/b/c>/a/b/c",
		"coerce:/list/0/ok>/list/0/ok", "near_miss:/list/1/OK>/list/1/ok"}
	if k := repairKinds(reps); !slices.Equal(k, wantReps) {
		t.Errorf("repairs %q\nwant %q", k, wantReps)
	}
	// Writing to the result must not reach the input's changed parts.
	got["a"].(map[string]any)["b"].(map[string]any)["c"] = "changed"
	got["list"].([]any)[0].(map[string]any)["ok"] = "changed"
	if args["a"].(map[string]any)["b"].(map[string]any)["c"] != "1" || args["list"].([]any)[0].(map[string]any)["ok"] != "true" {
		t.Error("the result shares a changed map with the input")
	}
	// Nothing to repair: the input itself comes back, without copying.
	clean := map[string]any{"query": "x", "a": map[string]any{"b": map[string]any{"c": 1}}}
	same, reps := Repair(tl, clean, nil, true)
	if len(reps) != 0 || reflect.ValueOf(same).UnsafePointer() != reflect.ValueOf(clean).UnsafePointer() {
		t.Errorf("clean arguments were copied or repaired: %v", reps)
	}
}

func TestRepairSchemaShapes(t *testing.T) {
	// Odd but possible schemas must not panic or repair wrongly.
	for _, s := range []map[string]any{
		nil,
		{},
		{"properties": "no"},
		{"properties": map[string]any{"x": "no"}, "required": "x"},
		{"properties": map[string]any{"x": map[string]any{"type": 5}}, "required": []any{5, "x"}},
		{"properties": map[string]any{"x": map[string]any{"$ref": "#/nowhere"}}},
		{"properties": map[string]any{"x": map[string]any{"$ref": "#/properties/x"}}}, // a loop
		{"$ref": "#", "properties": map[string]any{"x": map[string]any{"anyOf": []any{"no", 1}}}},
		{"properties": map[string]any{"x": map[string]any{"type": []string{"integer"}}}, "required": []string{"x"}},
	} {
		tl := tool.Tool{InputSchema: s}
		checkRepair(t, tl, map[string]any{"x": "1", "X": "2", "y": map[string]any{"z": "[1]"}}, nil, true)
	}
	// Go-written schemas: []string types and required.
	tl := tool.Tool{InputSchema: map[string]any{"properties": map[string]any{"count": map[string]any{"type": []string{"integer", "null"}}}, "required": []string{"count"}}}
	got, _ := checkRepair(t, tl, map[string]any{"Count": "2"}, nil, true)
	if !reflect.DeepEqual(got, map[string]any{"count": json.Number("2")}) {
		t.Errorf("Go schema: %v", got)
	}
}

func TestRepairMiddleware(t *testing.T) {
	tools := newSchemaToolStub(
		tool.Tool{Server: "web", Name: "scrape_and_extract_info", InputSchema: schemaJSON(t, `{
			"type": "object",
			"properties": {"url": {"type": "string"}, "info_to_extract": {"type": "string"}, "depth": {"type": "integer"}},
			"required": ["url", "info_to_extract"]
		}`)},
		tool.Tool{Server: "py", Name: "run", InputSchema: schemaJSON(t, `{"properties": {"code_block": {"type": "string"}}}`)},
	)
	cfg := RepairOptions{Aliases: []Aliases{
		{Tools: "scrape_and_extract_info", Map: map[string]string{"description": "info_to_extract", "introduction": "info_to_extract"}},
		{Tools: "py/*", Map: map[string]string{"code": "code_block"}},
	}}
	mw, err := NewRepair(cfg, tools)
	if err != nil {
		t.Fatal(err)
	}
	spy := &callSpy{}
	h := mw(spy)

	args := map[string]any{"URL": "https://x", "description": "prices", "depth": "2"}
	before := repairDeepCopy(args)
	rec := h.Call(context.Background(), tool.Call{ID: "c", Server: "web", Tool: "scrape_and_extract_info", Arguments: args})
	want := map[string]any{"url": "https://x", "info_to_extract": "prices", "depth": json.Number("2")}
	if !reflect.DeepEqual(spy.lastArgs(), want) {
		t.Errorf("the tool got %v, want %v", spy.lastArgs(), want)
	}
	if !reflect.DeepEqual(rec.Arguments, want) {
		t.Errorf("record arguments %v, want the repaired ones", rec.Arguments)
	}
	if !reflect.DeepEqual(args, before) {
		t.Errorf("the caller's arguments changed: %v", args)
	}
	wantNotes := []tool.Note{
		{Layer: "repair", Message: `renamed argument "description" to "info_to_extract"`,
			Data: map[string]any{"kind": "alias", "from": "description", "to": "info_to_extract"}},
		{Layer: "repair", Message: `renamed argument "URL" to "url" (a near miss of the required property)`,
			Data: map[string]any{"kind": "near_miss", "from": "URL", "to": "url"}},
		{Layer: "repair", Message: `converted /depth from string "2" to integer 2`,
			Data: map[string]any{"kind": "coerce", "from": "/depth", "to": "/depth"}},
	}
	if !reflect.DeepEqual(rec.Notes, wantNotes) {
		t.Errorf("notes\n%+v\nwant\n%+v", rec.Notes, wantNotes)
	}

	// The second alias entry, by server pattern.
	rec = h.Call(context.Background(), tool.Call{Server: "py", Tool: "run", Arguments: map[string]any{"code": "print(1)"}})
	if !reflect.DeepEqual(rec.Arguments, map[string]any{"code_block": "print(1)"}) || len(rec.Notes) != 1 {
		t.Errorf("py/run: %v %+v", rec.Arguments, rec.Notes)
	}
	// Aliases of other tools do not apply.
	rec = h.Call(context.Background(), tool.Call{Server: "py", Tool: "run", Arguments: map[string]any{"description": "x"}})
	if !reflect.DeepEqual(rec.Arguments, map[string]any{"description": "x"}) || len(rec.Notes) != 0 {
		t.Errorf("foreign alias applied: %v %+v", rec.Arguments, rec.Notes)
	}
	// An unknown tool passes through unchanged.
	orig := map[string]any{"description": "x", "n": "1"}
	rec = h.Call(context.Background(), tool.Call{Server: "web", Tool: "nope", Arguments: orig})
	if !reflect.DeepEqual(spy.lastArgs(), orig) || len(rec.Notes) != 0 {
		t.Errorf("unknown tool: %v %+v", spy.lastArgs(), rec.Notes)
	}
	if spy.calls.Load() != 4 {
		t.Errorf("calls = %d", spy.calls.Load())
	}

	// NoSchema: aliases only.
	mw, _ = NewRepair(RepairOptions{Aliases: cfg.Aliases, NoSchema: true}, tools)
	rec = mw(spy).Call(context.Background(), tool.Call{Server: "web", Tool: "scrape_and_extract_info", Arguments: map[string]any{"URL": "u", "introduction": "i", "depth": "2"}})
	if want := map[string]any{"URL": "u", "info_to_extract": "i", "depth": "2"}; !reflect.DeepEqual(rec.Arguments, want) {
		t.Errorf("NoSchema: %v", rec.Arguments)
	}
	// Nothing configured and no schema repair: the middleware is a no-op.
	mw, _ = NewRepair(RepairOptions{NoSchema: true}, tools)
	if h := mw(spy); h != Handler(spy) {
		t.Error("an idle repair middleware wraps its next handler")
	}
	// A repaired call that validation then refuses keeps the repaired arguments and the notes.
	vmw, err := NewValidate(ValidateOptions{}, tools)
	if err != nil {
		t.Fatal(err)
	}
	mw, _ = NewRepair(cfg, tools)
	rec = Chain(spy, mw, vmw).Call(context.Background(), tool.Call{Server: "web", Tool: "scrape_and_extract_info", Arguments: map[string]any{"url": "u", "description": "d", "depth": "deep"}})
	if rec.Error == nil || !strings.Contains(rec.Error.Message, `/depth: got string "deep", want integer`) {
		t.Errorf("validation after repair: %v", rec.Error)
	}
	if rec.Arguments["info_to_extract"] != "d" || len(rec.Notes) != 2 || rec.Notes[0].Layer != "validate" || rec.Notes[1].Layer != "repair" {
		t.Errorf("refused record: %v %+v", rec.Arguments, rec.Notes)
	}
}

func TestNewRepairBadPattern(t *testing.T) {
	_, err := NewRepair(RepairOptions{Aliases: []Aliases{{Tools: "web/[", Map: map[string]string{"a": "b"}}}}, newSchemaToolStub())
	if err == nil {
		t.Error("a bad tool pattern was accepted")
	}
}

func FuzzRepair(f *testing.F) {
	f.Add(nearMissSchema, `{"Query": "x", "file-path": "p", "mesage": "m"}`)
	f.Add(coerceSchema, `{"count": "42", "ratio": "-1e3", "flag": "TRUE", "tags": ["1"], "item": {"n": "2"}, "filters": "{\"min\": \"1\"}"}`)
	f.Add(`{"properties": {"q": {"type": "string"}}}`, `{"input": "{\"q\": \"x\"}"}`)
	f.Add(`{"properties": {"a": {"type": "array", "items": {"$ref": "#"}}}}`, `{"a": [{"a": "[[]]"}]}`)
	f.Add(`{"required": ["description"], "properties": {"x": {"anyOf": [{"type": "integer"}, {"type": "object", "properties": {"y": {"type": "boolean"}}}]}}}`,
		`{"desc": 1, "x": "{\"y\": \"false\"}"}`)
	aliases := map[string]string{"desc": "description", "code": "code_block", "a": "b"}
	f.Fuzz(func(t *testing.T, schemaText, argsText string) {
		var schema, args map[string]any
		if decodeFuzzJSON(schemaText, &schema) != nil || decodeFuzzJSON(argsText, &args) != nil {
			return
		}
		schemaBefore, _ := json.Marshal(schema)
		argsBefore, err := json.Marshal(args)
		if err != nil {
			return
		}
		for _, schemaRepair := range []bool{true, false} {
			out, reps := Repair(tool.Tool{InputSchema: schema}, args, aliases, schemaRepair)
			argsAfter, _ := json.Marshal(args)
			if string(argsAfter) != string(argsBefore) {
				t.Fatalf("Repair modified its arguments:\n%s\nwas\n%s", argsAfter, argsBefore)
			}
			if after, _ := json.Marshal(schema); string(after) != string(schemaBefore) {
				t.Fatalf("Repair modified the schema")
			}
			b, err := json.Marshal(out)
			if err != nil {
				t.Fatalf("the repaired arguments do not encode: %v (%#v)", err, out)
			}
			if len(reps) == 0 && string(b) != string(argsBefore) {
				t.Fatalf("unreported change:\n%s\nwas\n%s", b, argsBefore)
			}
			for _, r := range reps {
				if r.Kind == "" || r.Detail == "" {
					t.Fatalf("incomplete repair %+v", r)
				}
			}
		}
	})
}

func decodeFuzzJSON(s string, v any) error {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	return dec.Decode(v)
}

func BenchmarkRepair(b *testing.B) {
	tl := tool.Tool{Server: "fx", Name: "echo", InputSchema: schemaJSON(b, `{
		"type": "object",
		"properties": {"message": {"type": "string"}, "count": {"type": "integer", "minimum": 0}},
		"required": ["message"],
		"additionalProperties": false
	}`)}
	aliases := map[string]string{"msg": "message"}
	b.Run("clean", func(b *testing.B) {
		args := map[string]any{"message": "hello world", "count": json.Number("3")}
		b.ReportAllocs()
		for b.Loop() {
			if _, reps := Repair(tl, args, aliases, true); len(reps) != 0 {
				b.Fatal(reps)
			}
		}
	})
	b.Run("repaired", func(b *testing.B) {
		args := map[string]any{"msg": "hello world", "count": "3"}
		b.ReportAllocs()
		for b.Loop() {
			if _, reps := Repair(tl, args, aliases, true); len(reps) != 2 {
				b.Fatal(reps)
			}
		}
	})
}
