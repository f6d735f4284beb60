package jsonscan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestScan(t *testing.T) {
	for _, tc := range []struct {
		in                  string
		depth               int
		id, method          string
		result, err, closed bool
		object, array       bool
	}{
		{`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}`, 2, `7`, `"tools/call"`, false, false, true, true, false},
		{`{"params":{"arguments":{"a":[[1]]}},"id": "req-\"1\"" ,"jsonrpc":"2.0"}`, 5, `"req-\"1\""`, ``, false, false, true, true, false},
		{`{"method":"x","params":{"id":3,"s":"{[\"]}"}}`, 2, ``, `"x"`, false, false, true, true, false},
		{` {"jsonrpc":"2.0","id":3,"result":{"content":[]}} ` + "\n", 3, `3`, ``, true, false, true, true, false},
		{`{"id":1,"error":{"code":-1,"message":"m"}}`, 2, `1`, ``, false, true, true, true, false},
		{`[{"id":1}]`, 2, ``, ``, false, false, true, false, true},
		{`{"id":null}`, 1, `null`, ``, false, false, true, true, false},
		{`{"id":{"x":1},"method":5}`, 2, `{"x":1}`, `5`, false, false, true, true, false},
		{`{"id":1`, 1, ``, ``, false, false, false, true, false},
		{`{"method":"unterminated`, 1, ``, ``, false, false, false, true, false},
		{`{"id":1} x`, 1, `1`, ``, false, false, false, true, false},
		{`hello`, 0, ``, ``, false, false, true, false, false},
		{`hello world`, 0, ``, ``, false, false, false, false, false},
		{`"x" `, 0, ``, ``, false, false, true, false, false},
		{`42`, 0, ``, ``, false, false, true, false, false},
		{``, 0, ``, ``, false, false, false, false, false},
		{strings.Repeat("[", 2000) + strings.Repeat("]", 2000), 2000, ``, ``, false, false, true, false, true},
	} {
		m := Scan([]byte(tc.in))
		if m.Depth != tc.depth || string(m.ID) != tc.id || string(m.Method) != tc.method || m.HasResult != tc.result ||
			m.HasError != tc.err || m.Closed != tc.closed || m.Object != tc.object || m.Array != tc.array {
			t.Errorf("%.80s: got %+v", tc.in, m)
		}
	}
}

func TestScanAllocatesNothing(t *testing.T) {
	b := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":{"a":[1,2,{"b":"c"}]}}}`)
	if n := testing.AllocsPerRun(100, func() { Scan(b) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

// FuzzScan checks Scan against encoding/json on every valid JSON input:
// the same depth, the same top-level id and method, the same keys.
func FuzzScan(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}`,
		`{"id":"a\"b","result":{"content":[{"type":"text","text":"]}"}]}}`,
		`[{"id":1},{"id":2}]`, `{"id":1,"id":2}`, `"x"`, `{"a":{"b":[]},"error":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m := Scan(b) // never panics, whatever b is
		if !json.Valid(b) {
			return
		}
		if !m.Closed {
			t.Fatalf("valid JSON not seen closed: %+v", m)
		}
		if d := depthOf(t, b); d != m.Depth {
			t.Fatalf("depth %d, want %d", m.Depth, d)
		}
		var obj map[string]json.RawMessage
		// null decodes into a map without error, leaving it nil.
		if json.Unmarshal(b, &obj) != nil || obj == nil {
			if m.Object || m.ID != nil || m.Method != nil {
				t.Fatalf("not an object, but %+v", m)
			}
			return
		}
		if !m.Object {
			t.Fatalf("an object not seen as one")
		}
		if bytes.IndexByte(b, '\\') >= 0 {
			return // keys written with escapes are not recognised, by design
		}
		check := func(key string, got []byte, present bool) {
			want, ok := obj[key]
			if ok != present || ok && got != nil && !bytes.Equal(got, want) {
				t.Fatalf("%s: got %q (%v), want %q (%v)", key, got, present, want, ok)
			}
		}
		check("id", m.ID, m.ID != nil)
		check("method", m.Method, m.Method != nil)
		check("params", m.Params, m.Params != nil)
		check("result", m.Result, m.HasResult)
		check("error", nil, m.HasError)
	})
}

func depthOf(t *testing.T, b []byte) int {
	dec := json.NewDecoder(bytes.NewReader(b))
	depth, deepest := 0, 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return deepest
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
				deepest = max(deepest, depth)
			} else {
				depth--
			}
		}
	}
}
