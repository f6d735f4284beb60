package tool_test

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"testing/quick"
	"unicode/utf8"

	"github.com/toolmux/toolmux/tool"
)

var validName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func TestSanitize(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", ""},
		{"read_file", "read_file"},
		{"Read-File_2", "Read-File_2"},
		{"a.b", "a_b"},
		{"a/b\\c", "a_b_c"},
		{"hello world", "hello_world"},
		{"tab\tnew\nline", "tab_new_line"},
		{"a:b@c#d$e%f", "a_b_c_d_e_f"},
		{"ÿ", "_"},
		{"café", "caf_"},       // one '_' per character, not per byte
		{"日本語", "___"},         // multibyte runes
		{"emoji😀x", "emoji_x"}, // 4-byte rune
		{"\xff\xfe", "__"},     // invalid UTF-8: one '_' per bad byte
		{"\x00nul", "_nul"},
		{"...", "___"},
	}
	for _, c := range cases {
		if got := tool.Sanitize(c.in); got != c.want {
			t.Errorf("Sanitize(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestSanitizeProperties(t *testing.T) {
	valid := regexp.MustCompile(`^[A-Za-z0-9_-]*$`)
	f := func(s string) bool {
		out := tool.Sanitize(s)
		if !valid.MatchString(out) {
			t.Logf("Sanitize(%q) = %q has invalid characters", s, out)
			return false
		}
		// One output character per input character.
		if utf8.RuneCountInString(s) != len(out) {
			t.Logf("Sanitize(%q) = %q changed the length", s, out)
			return false
		}
		// Valid characters stay in place.
		i := 0
		for _, r := range s {
			if r < 0x80 && valid.MatchString(string(r)) && out[i] != byte(r) {
				t.Logf("Sanitize(%q) = %q changed valid char %q", s, out, r)
				return false
			}
			i++
		}
		// Idempotent.
		return tool.Sanitize(out) == out
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 5000}); err != nil {
		t.Error(err)
	}
}

func TestExposedName(t *testing.T) {
	cases := []struct{ server, tool, want string }{
		{"builtin", "read_file", "builtin__read_file"},
		{"my.server", "do thing", "my_server__do_thing"},
		{"git-hub", "list/prs", "git-hub__list_prs"},
		{"", "", "__"},
	}
	for _, c := range cases {
		if got := tool.ExposedName(c.server, c.tool); got != c.want {
			t.Errorf("ExposedName(%q, %q) = %q, want %q", c.server, c.tool, got, c.want)
		}
	}
	if tool.Separator != "__" || tool.MaxNameLen != 64 {
		t.Errorf("constants changed: Separator=%q MaxNameLen=%d", tool.Separator, tool.MaxNameLen)
	}
}

func TestExposedNameLengthBoundary(t *testing.T) {
	// "s__" + tool: 64 fits exactly, 65 must be shortened.
	exact := strings.Repeat("t", 64-3)
	if got := tool.ExposedName("s", exact); got != "s__"+exact {
		t.Errorf("64-char name changed: %q", got)
	}
	over := strings.Repeat("t", 65-3)
	got := tool.ExposedName("s", over)
	if len(got) != tool.MaxNameLen {
		t.Fatalf("shortened name has length %d, want %d: %q", len(got), tool.MaxNameLen, got)
	}
	full := "s__" + over
	prefix := full[:tool.MaxNameLen-9]
	if !strings.HasPrefix(got, prefix+"_") {
		t.Errorf("shortened name %q does not keep the prefix %q", got, prefix)
	}
	if !regexp.MustCompile(`_[0-9a-f]{8}$`).MatchString(got) {
		t.Errorf("shortened name %q does not end with _ and 8 hex digits", got)
	}
}

func TestExposedNameLongIsStableAndDistinct(t *testing.T) {
	long := strings.Repeat("very_long_tool_name_", 5)
	a1 := tool.ExposedName("server", long+"alpha")
	a2 := tool.ExposedName("server", long+"alpha")
	b := tool.ExposedName("server", long+"beta")
	c := tool.ExposedName("server2", long+"alpha")
	if a1 != a2 {
		t.Errorf("not stable: %q vs %q", a1, a2)
	}
	for _, n := range []string{a1, b, c} {
		if len(n) > tool.MaxNameLen || !validName.MatchString(n) {
			t.Errorf("invalid shortened name %q (len %d)", n, len(n))
		}
	}
	if a1 == b || a1 == c || b == c {
		t.Errorf("identities sharing a long prefix got the same name: %q %q %q", a1, b, c)
	}
	// The shared prefix is kept; only the hash part differs.
	if a1[:55] != b[:55] {
		t.Errorf("prefixes differ: %q vs %q", a1, b)
	}
	// A long server name is shortened too.
	s := tool.ExposedName(strings.Repeat("S", 100), "t")
	if len(s) != tool.MaxNameLen || !strings.HasPrefix(s, strings.Repeat("S", 55)+"_") {
		t.Errorf("long server name: %q", s)
	}
	// Identities that sanitise alike but differ in raw form get different hashes.
	if tool.ExposedName("srv", long+"a.b") == tool.ExposedName("srv", long+"a_b") {
		t.Error("raw identities with the same sanitised form got the same long name")
	}
}

func TestExposedNameProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("abcXYZ019_-./ :é日😀\x00\t")
	randString := func() string {
		n := rng.IntN(90)
		var b strings.Builder
		for range n {
			b.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	seen := map[string][2]string{}
	for range 20000 {
		server, name := randString(), randString()
		got := tool.ExposedName(server, name)
		if !validName.MatchString(got) {
			t.Fatalf("ExposedName(%q, %q) = %q (len %d) is not a valid name", server, name, got, len(got))
		}
		if again := tool.ExposedName(server, name); again != got {
			t.Fatalf("ExposedName(%q, %q) unstable: %q vs %q", server, name, got, again)
		}
		// Different long identities never share a shortened name.
		if len(tool.Sanitize(server)+"__"+tool.Sanitize(name)) > tool.MaxNameLen {
			if prev, ok := seen[got]; ok && prev != [2]string{server, name} {
				t.Fatalf("shortened name %q given to %q and %q", got, prev, [2]string{server, name})
			}
			seen[got] = [2]string{server, name}
		}
	}
	f := func(server, name string) bool { return validName.MatchString(tool.ExposedName(server, name)) }
	if err := quick.Check(f, &quick.Config{MaxCount: 5000}); err != nil {
		t.Error(err)
	}
}
