package jsonscan

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

func TestMembers(t *testing.T) {
	b := []byte(` { "name" : "x", "arguments":{"a":[1,"]}",{"b":"c\"}"}]} ,"n":-1.5e3,"t":true, "o":{} } `)
	var got []string
	Members(b, func(k, v []byte) bool {
		got = append(got, string(k)+"="+string(v))
		return true
	})
	want := []string{`name="x"`, `arguments={"a":[1,"]}",{"b":"c\"}"}]}`, `n=-1.5e3`, `t=true`, `o={}`}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("member %d: got %q, want %q", i, got[i], want[i])
		}
	}
	n := 0
	Members(b, func(k, v []byte) bool { n++; return false })
	if n != 1 {
		t.Fatalf("f returned false and was called %d times", n)
	}
	for _, bad := range []string{``, `[]`, `"x"`, `{"a"}`, `{"a":`, `{"a":"b`, `{"a":{"b":1}`} {
		Members([]byte(bad), func(k, v []byte) bool { return true }) // never panics
	}
}

func TestSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{
		{` { "a" : [ 1 , 2.50 , "x" ] } `, len(`{"a":[1,2.50,"x"]}`)},
		{`"<&>"`, len(`"\u003c\u0026\u003e"`)},
		{`"\u00e9\/\n"`, len(`"é/\n"`)},
		{`"\ud83d\ude00"`, 2 + 4}, // one rune of four bytes
		{`"\ud83d"`, 2 + 3},       // a lone surrogate is U+FFFD
		{"\"\xff\"", 2 + 3},       // so is an invalid byte
		{"\"\u2028\"", 2 + 6},     // escaped by encoding/json
		{`"\u0001"`, 2 + 6},
	} {
		n, ok := Size([]byte(c.in))
		if !ok || n != int64(c.want) {
			t.Errorf("Size(%s) = %d, %v; want %d", c.in, n, ok, c.want)
		}
	}
	for _, bad := range []string{`{"a":1`, `"abc`, `[1]]`, `{}x`} {
		if _, ok := Size([]byte(bad)); ok {
			t.Errorf("Size(%s) ok", bad)
		}
	}
}

func TestMembersAndSizeAllocateNothing(t *testing.T) {
	b := []byte(`{"name":"x","arguments":{"a":[1,2,{"b":"c\u00e9"}]}}`)
	if n := testing.AllocsPerRun(100, func() {
		Members(b, func(k, v []byte) bool { _, _ = Size(v); return true })
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

// FuzzMembers checks Members and Size against encoding/json on every valid
// JSON input: an object's members are its keys and values, in order, and
// a value's size is the length of what encoding/json writes once it is
// decoded with UseNumber.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{
		`{"name":"x","arguments":{"a":[1,2.0,{"b":"<c>"}]},"_meta":{}}`,
		`{"a":"\ud83d\ude00\ud800\u2028","b":null,"c":[true,false,-0.5e-3]}`,
		"{\"k\":\"\xff\xfe\"}", `[1,"2",{}]`, `"x"`, `12`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		Members(b, func(k, v []byte) bool { return true }) // never panics
		n, ok := Size(b)
		if !json.Valid(b) {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		out, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if !ok || n < int64(len(out)) || n != int64(len(out)) && !repeatsKeys(b) {
			t.Fatalf("Size = %d, %v; encoding/json writes %d bytes: %s", n, ok, len(out), out)
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(b, &obj) != nil || obj == nil || bytes.IndexByte(b, '\\') >= 0 || !utf8.Valid(b) {
			return // keys are raw: as written, not as decoded
		}
		seen := map[string][]byte{}
		Members(b, func(k, v []byte) bool {
			seen[string(k)] = v // the last of a repeated key, as decoders take it
			return true
		})
		if len(seen) != len(obj) {
			t.Fatalf("%d members, want %d", len(seen), len(obj))
		}
		for k, want := range obj {
			if got, ok := seen[k]; !ok || !bytes.Equal(got, want) {
				t.Fatalf("member %q: got %s, want %s", k, got, want)
			}
		}
	})
}

// repeatsKeys reports whether an object in the valid JSON b has a key
// twice: decoding keeps one, Size counts both.
func repeatsKeys(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	type frame struct {
		keys   map[string]bool
		object bool
		key    bool // the next string is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.key {
			if k, ok := tok.(string); ok {
				if top.keys[k] {
					return true
				}
				top.keys[k] = true
				top.key = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]bool{}, object: true, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].key = true // a value ended: a key follows
		}
	}
}
