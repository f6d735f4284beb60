package toolglob

import (
	"errors"
	"path"
	"slices"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		global  bool
		problem Problem // 0: valid
		msg     string
	}{
		{"read_file", true, 0, ""},
		{"files/read_*", true, 0, ""},
		{"*/*", true, 0, ""},
		{"a/b/c", true, 0, ""}, // the tool part may hold "/": path.Match takes it literally
		{"files/read_*", false, 0, ""},
		{"a/", false, 0, ""}, // per-server patterns are whole tool globs
		{"", true, Empty, "empty pattern"},
		{"", false, Empty, "empty pattern"},
		{"a/", true, EmptyPart, `"a/": expected "server/tool" or a bare tool name`},
		{"/b", true, EmptyPart, `"/b": expected "server/tool" or a bare tool name`},
		{"/", true, EmptyPart, `"/": expected "server/tool" or a bare tool name`},
		{"a/[", true, BadGlob, `"a/[" is not a valid glob: syntax error in pattern (see path.Match)`},
		{"[z-/x", true, BadGlob, `"[z-/x" is not a valid glob: syntax error in pattern (see path.Match)`},
		{`a/\`, true, BadGlob, `"a/\\" is not a valid glob: syntax error in pattern (see path.Match)`},
		{"[", false, BadGlob, `"[" is not a valid glob: syntax error in pattern (see path.Match)`},
	} {
		err := Check(tc.pattern, tc.global)
		if tc.problem == 0 {
			if err != nil {
				t.Errorf("Check(%q, %v) = %v, want nil", tc.pattern, tc.global, err)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Problem != tc.problem || e.Pattern != tc.pattern || err.Error() != tc.msg {
			t.Errorf("Check(%q, %v) = %v (%+v), want problem %d: %s", tc.pattern, tc.global, err, e, tc.problem, tc.msg)
		}
		if tc.problem == BadGlob && !errors.Is(err, path.ErrBadPattern) {
			t.Errorf("Check(%q): %v does not wrap path.ErrBadPattern", tc.pattern, err)
		}
	}
}

func TestCheckServer(t *testing.T) {
	for _, s := range []string{"files", "web-*", "[ab]", ""} {
		if err := CheckServer(s); err != nil {
			t.Errorf("CheckServer(%q) = %v", s, err)
		}
	}
	var e *Error
	if err := CheckServer("a/b"); !errors.As(err, &e) || e.Problem != ServerSlash ||
		err.Error() != `"a/b": a server name never contains "/" (to name a tool, use tools: ["server/tool"])` {
		t.Errorf("CheckServer(a/b) = %v", err)
	}
	if err := CheckServer("[x"); !errors.As(err, &e) || e.Problem != BadGlob || !errors.Is(err, path.ErrBadPattern) {
		t.Errorf("CheckServer([x) = %v", err)
	}
}

// Explain lets each caller write the pattern its own way.
func TestExplain(t *testing.T) {
	e := &Error{Pattern: "x/", Problem: EmptyPart}
	if got := e.Explain(func(s string) string { return "<" + s + ">" }); got != `<x/>: expected "server/tool" or a bare tool name` {
		t.Errorf("Explain = %q", got)
	}
}

func TestParseAndMatch(t *testing.T) {
	type probe struct {
		server, tool string
		want         bool
	}
	for _, tc := range []struct {
		pattern string
		global  bool
		probes  []probe
	}{
		{"read_file", true, []probe{{"files", "read_file", true}, {"other", "read_file", true}, {"files", "write_file", false}}},
		{"files/read_*", true, []probe{{"files", "read_file", true}, {"files", "read", false}, {"web", "read_file", false}}},
		{"f*/*", true, []probe{{"files", "x", true}, {"fs", "y", true}, {"web", "x", false}}},
		// Not global: the server is not part of the pattern, "/" is literal.
		{"files/read_*", false, []probe{{"files", "read_file", false}, {"x", "files/read_file", true}}},
		// The tool part keeps everything after the first "/".
		{"a/b/c", true, []probe{{"a", "b/c", true}, {"a", "b", false}}},
		{`re\*d`, true, []probe{{"s", "re*d", true}, {"s", "read", false}}},
	} {
		p, err := Parse(tc.pattern, tc.global)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.pattern, err)
		}
		if p.String() != tc.pattern {
			t.Errorf("String() = %q, want %q", p.String(), tc.pattern)
		}
		for _, pr := range tc.probes {
			if got := p.Match(pr.server, pr.tool); got != pr.want {
				t.Errorf("%q (global %v).Match(%q, %q) = %v, want %v", tc.pattern, tc.global, pr.server, pr.tool, got, pr.want)
			}
		}
	}
}

// Parse refuses only invalid syntax: the emptiness rules are Check's.
func TestParseLenient(t *testing.T) {
	for _, s := range []string{"", "a/", "/b"} {
		if _, err := Parse(s, true); err != nil {
			t.Errorf("Parse(%q) = %v", s, err)
		}
	}
	if _, err := Parse("/b", true); err != nil {
		t.Fatal(err)
	}
	p, _ := Parse("/b", true)
	if !p.Match("any", "b") {
		t.Error(`"/b" should match b in any server`)
	}
	_, err := Parse("a/[", true)
	if err == nil || err.Error() != `bad tool pattern "a/[": syntax error in pattern` || !errors.Is(err, path.ErrBadPattern) {
		t.Errorf("Parse(a/[) = %v", err)
	}
}

func TestParseAllAndAny(t *testing.T) {
	ps, err := ParseAll([]string{"web/*", "files/read_*", "*"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := Any(ps, "files", "read_file"); !ok || p.String() != "files/read_*" {
		t.Errorf("Any = %v %v, want the second pattern", p, ok)
	}
	if p, ok := Any(ps, "web", "read_file"); !ok || p.String() != "web/*" {
		t.Errorf("Any = %v %v, want the first pattern", p, ok)
	}
	if _, ok := Any(ps[:2], "shell", "run"); ok {
		t.Error("no pattern should match")
	}
	if _, err := ParseAll([]string{"ok", "[", "also"}, true); err == nil {
		t.Error("ParseAll accepted a bad pattern")
	}
	if ps, err := ParseAll(nil, true); err != nil || len(ps) != 0 {
		t.Errorf("ParseAll(nil) = %v, %v", ps, err)
	}
}

func TestScope(t *testing.T) {
	got := Scope([]string{"read_*", "files/write_*", "f*/edit", "web/fetch", "a/b/c"}, "files")
	want := []string{"read_*", "write_*", "edit"}
	if !slices.Equal(got, want) {
		t.Errorf("Scope = %q, want %q", got, want)
	}
	if got := Scope(nil, "files"); got != nil {
		t.Errorf("Scope(nil) = %q", got)
	}
}

func TestEscape(t *testing.T) {
	for _, name := range []string{"plain", "a*b", "q?", "[x]", `back\slash`, "all*?[]\\", "caf\xe9"} {
		e := Escape(name)
		if err := Check(e, false); err != nil {
			t.Errorf("Escape(%q) = %q: %v", name, e, err)
			continue
		}
		if ok, _ := path.Match(e, name); !ok {
			t.Errorf("Escape(%q) = %q does not match the name", name, e)
		}
	}
	if ok, _ := path.Match(Escape("a*"), "abc"); ok {
		t.Error(`Escape("a*") matches "abc"`)
	}
	if got := Escape("a*b"); got != `a\*b` {
		t.Errorf("Escape(a*b) = %q", got)
	}
}

// FuzzPattern: what Check accepts, Parse accepts; Parse agrees with
// path.Match on each part and never panics matching; an escaped name
// matches itself and nothing Check refuses comes out of Escape.
func FuzzPattern(f *testing.F) {
	for _, s := range []string{"", "a", "a/b", "a/", "/b", "[", "a/[", `\`, "f*/read_?", "[a-z]/x", "a/b/c", "\xff/\xfe"} {
		f.Add(s, "srv", "tool")
	}
	f.Fuzz(func(t *testing.T, s, server, name string) {
		for _, global := range []bool{true, false} {
			checkErr := Check(s, global)
			p, parseErr := Parse(s, global)
			if checkErr == nil && parseErr != nil {
				t.Fatalf("Check(%q, %v) passed but Parse failed: %v", s, global, parseErr)
			}
			if checkErr != nil {
				var e *Error
				if !errors.As(checkErr, &e) || e.Pattern != s || e.Problem < Empty || e.Problem > ServerSlash {
					t.Fatalf("Check(%q): %#v", s, checkErr)
				}
			}
			if parseErr != nil {
				continue
			}
			if p.String() != s {
				t.Fatalf("String() = %q, want %q", p.String(), s)
			}
			got := p.Match(server, name)
			srv, tl := split(s, global)
			want, _ := path.Match(tl, name)
			if srv != "" {
				ok, _ := path.Match(srv, server)
				want = want && ok
			}
			if got != want {
				t.Fatalf("%q.Match(%q, %q) = %v, path.Match says %v", s, server, name, got, want)
			}
		}
		if name != "" {
			e := Escape(name)
			if err := Check(e, false); err != nil {
				t.Fatalf("Escape(%q) = %q: %v", name, e, err)
			}
			p, err := Parse(e, false)
			if err != nil || !p.Match(server, name) {
				t.Fatalf("Escape(%q) = %q does not match the name (%v)", name, e, err)
			}
			if ok, _ := path.Match(e, name+"x"); ok {
				t.Fatalf("Escape(%q) = %q matches more than the name", name, e)
			}
		}
		if err := CheckServer(s); err == nil && Check(s, false) != nil && s != "" {
			t.Fatalf("CheckServer(%q) passed a glob Check refuses", s)
		}
	})
}
