package cmdsource

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzDeclarations feeds the parser arbitrary discovery output. It must
// never panic, and whatever it accepts must be usable: named, unique, with
// an object schema that can be written back as JSON.
func FuzzDeclarations(f *testing.F) {
	for _, seed := range []string{
		``,
		`[]`,
		`{}`,
		`null`,
		`"x"`,
		`[{"name": "a"}]`,
		`[{"name": "a", "description": "d", "parameters": {"type": "OBJECT", "properties": {"q": {"type": "STRING", "nullable": true}}}}]`,
		`[{"name": "a", "parametersJsonSchema": {"type": "object", "properties": {"q": {"type": ["string", "null"]}}}}]`,
		`[{"functionDeclarations": [{"name": "a"}, {"name": "a"}]}, {"function_declarations": [{"name": "b"}]}]`,
		`{"functionDeclarations": [{"name": "a"}], "function_declarations": null}`,
		`[{"name": "x", "functionDeclarations": []}, 1, [2], {"name": 3}, {"description": "no name"}]`,
		`[{"name": "a", "parameters": {"type": "ARRAY", "items": [{"type": "STRING"}], "anyOf": [1, {"type": "TYPE_UNSPECIFIED"}]}}]`,
		`[{"name": "a", "parameters": {"properties": {"p": {"properties": {"q": {"items": {"type": "INTEGER"}}}}}}}]`,
		`[{"name": "a\u0000b"}]`,
		`[{"name": "a", "parameters": {"type": null, "nullable": "yes"}}]`,
		`[{"name": "a", "parameters": {"type": ["OBJECT", "NULL"]}}]`,
		`[{"name": "a"}] trailing`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		decls, warnings, err := parseDeclarations(data)
		if err != nil {
			if decls != nil {
				t.Fatalf("declarations returned with an error: %v", err)
			}
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		seen := map[string]bool{}
		for _, d := range decls {
			if strings.TrimSpace(d.name) == "" || seen[d.name] {
				t.Fatalf("bad or repeated name %q", d.name)
			}
			seen[d.name] = true
			if d.schema["type"] != "object" {
				t.Fatalf("%s: schema type %v", d.name, d.schema["type"])
			}
			if _, err := json.Marshal(d.schema); err != nil {
				t.Fatalf("%s: schema cannot be written: %v", d.name, err)
			}
		}
		for _, w := range warnings {
			if !strings.Contains(w, "already declared") {
				t.Fatalf("unexpected warning %q", w)
			}
		}
	})
}

func TestParseDeclarationsReportsEveryProblem(t *testing.T) {
	var b strings.Builder
	b.WriteString("[")
	for i := range 30 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"description": "nameless"}`)
	}
	b.WriteString("]")
	_, _, err := parseDeclarations([]byte(b.String()))
	de, ok := err.(*DeclarationError)
	if !ok || len(de.Problems) != maxProblems || de.More != 10 || !strings.HasSuffix(err.Error(), "; and 10 more") {
		t.Fatalf("error = %v", err)
	}
}

func TestParseDeclarationsRejectsTrailingData(t *testing.T) {
	if _, _, err := parseDeclarations([]byte(`[{"name": "a"}] [{"name": "b"}]`)); err == nil || !strings.Contains(err.Error(), "not JSON") {
		t.Fatalf("error = %v", err)
	}
}

func TestQuoteStream(t *testing.T) {
	long := strings.Repeat("a", 300) + strings.Repeat("b", 600) + strings.Repeat("c", 300)
	cases := []struct {
		name  string
		kept  string
		total int64
		tail  bool
		want  string
	}{
		{"empty", "", 0, false, "out: (empty)"},
		{"white space", " \n\n", 3, false, "out: (3 bytes of white space)"},
		{"short", "one\ntwo\n", 8, false, "out:\none\ntwo"},
		{"head cut by the limit", "abc", 10, false, "out (10 bytes, shown in part):\nabc\n[…]"},
		{"tail cut by the limit", "xyz\n", 10, true, "out (10 bytes, shown in part):\n[…]\nxyz"},
		{"long", long, int64(len(long)), false, "out (1200 bytes, shown in part):\n" + strings.Repeat("a", 175) + "\n[…]\n" + strings.Repeat("b", 225) + strings.Repeat("c", 300)},
		{"invalid UTF-8", "caf\xc3", 4, false, "out:\ncaf\uFFFD"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var b strings.Builder
			quoteStream(&b, "out", []byte(c.kept), c.total, c.tail)
			if b.String() != c.want {
				t.Errorf("got\n%q\nwant\n%q", b.String(), c.want)
			}
		})
	}
	// A multi-byte character at a cut point is not split.
	s := strings.Repeat("é", 1000)
	var b strings.Builder
	quoteStream(&b, "out", []byte(s), int64(len(s)), false)
	if strings.ContainsRune(b.String(), '\uFFFD') {
		t.Errorf("a character was split: %q", b.String())
	}
}

func TestCommandLine(t *testing.T) {
	got := commandLine([]string{"sh", "-c", "echo 'hi' there", "", "a=b,c"})
	if want := `sh -c 'echo '\''hi'\'' there' '' a=b,c`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if got := commandLine([]string{strings.Repeat("x", 300)}); len(got) > 203 || !strings.HasSuffix(got, "…") {
		t.Errorf("long command line not cut: %d bytes", len(got))
	}
}
