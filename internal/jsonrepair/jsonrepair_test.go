package jsonrepair_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/toolmux/toolmux/internal/jsonrepair"
)

func TestRepair(t *testing.T) {
	for in, want := range map[string]string{
		`{"a": 1}`:                                         `{"a": 1}`, // valid: unchanged
		"```json\n{\"a\": 1}\n```":                         `{"a":1}`,
		"```\n{\"a\": 1}\n```":                             `{"a":1}`,
		`{'query': 'weather in Paris'}`:                    `{"query":"weather in Paris"}`,
		`{query: "x", limit: 5,}`:                          `{"query":"x","limit":5}`,
		`{"a": [1, 2, 3,],}`:                               `{"a":[1,2,3]}`,
		`{"flag": True, "none": None, "f": False}`:         `{"flag":true,"none":null,"f":false}`,
		"{\"text\": \"line one\nline two\"}":               `{"text":"line one\nline two"}`,
		`{"path": "a.txt", "content": "hi`:                 `{"path":"a.txt","content":"hi"}`,
		`{"a": {"b": [1, {"c": 2`:                          `{"a":{"b":[1,{"c":2}]}}`,
		`{"a": 1} and then I will read it`:                 `{"a":1}`,
		"{\n  // the file\n  \"path\": \"x\" /* why */\n}": `{"path":"x"}`,
		`{"n": +5, "m": .5, "k": 1., "z": 007}`:            `{"n":5,"m":0.5,"k":1,"z":7}`,
		`{"re": "\d+\.txt"}`:                               `{"re":"\\d+\\.txt"}`,
		`{'it\'s': 'ok'}`:                                  `{"it's":"ok"}`,
		`{'emoji': "\ud83d\ude00"}`:                        `{"emoji":"😀"}`,
		`{"a" = 1}`:                                        `{"a":1}`,
		`{"a":}`:                                           `{"a":null}`,
		`{"mode": fast}`:                                   `{"mode":"fast"}`,
		`[1, 'two', three]`:                                `[1,"two","three"]`,
	} {
		got, changed, err := jsonrepair.Repair(in)
		if err != nil {
			t.Errorf("Repair(%q): %v", in, err)
			continue
		}
		if got != want {
			t.Errorf("Repair(%q) = %s, want %s", in, got, want)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("Repair(%q) = %s: not JSON", in, got)
		}
		if changed != (in != want) {
			t.Errorf("Repair(%q): changed = %v", in, changed)
		}
	}
}

func TestRepairRefuses(t *testing.T) {
	for _, in := range []string{"", "   ", "I cannot help with that.", "{:}", "{\"a\" 1}", "@@@"} {
		if got, _, err := jsonrepair.Repair(in); err == nil {
			t.Errorf("Repair(%q) = %s, want an error", in, got)
		} else if _, ok := errors.AsType[*jsonrepair.Error](err); !ok {
			t.Errorf("Repair(%q): %T", in, err)
		}
	}
}

func TestObject(t *testing.T) {
	m, changed, err := jsonrepair.Object(`{'path': 'a.txt', limit: 3}`)
	if err != nil || !changed || m["path"] != "a.txt" || m["limit"] != json.Number("3") {
		t.Fatalf("%v %v %v", m, changed, err)
	}
	for _, in := range []string{"", "null"} {
		if m, _, err := jsonrepair.Object(in); err != nil || len(m) != 0 {
			t.Errorf("Object(%q) = %v, %v", in, m, err)
		}
	}
	if _, _, err := jsonrepair.Object(`[1, 2]`); !errors.Is(err, jsonrepair.ErrNotObject) {
		t.Errorf("array: %v", err)
	}
}

func FuzzRepair(f *testing.F) {
	for _, s := range []string{`{"a": 1}`, `{'a': [1, 2,], b: True}`, "```json\n{\"x\": \"y", `{"a": "\ud83d`, `[[[[`, `{"a": -}`, `{/* */}`, "{'a\\'': 1e999}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, changed, err := jsonrepair.Repair(s)
		if err != nil {
			return
		}
		if !json.Valid([]byte(got)) {
			t.Fatalf("Repair(%q) = %q: not JSON", s, got)
		}
		if json.Valid([]byte(s)) && (changed || got != s) {
			t.Fatalf("valid %q changed to %q", s, got)
		}
		// Repairing the repaired text changes nothing.
		again, changed2, err := jsonrepair.Repair(got)
		if err != nil || changed2 || again != got {
			t.Fatalf("not idempotent: %q → %q → %q (%v)", s, got, again, err)
		}
	})
}
