package builtin_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/builtin"
	"github.com/toolmux/toolmux/tool"
)

const editSample = `package main

func main() {
	println("hello")
	println("hello")
	println("hello")
}
`

func TestEdit(t *testing.T) {
	for _, c := range []struct {
		name    string
		file    string // the content before; "" means the file does not exist
		args    map[string]any
		want    string // the result text
		after   string // the content after
		replace int
	}{
		{"one occurrence", "a\nb\nc\n",
			map[string]any{"old_string": "b\n", "new_string": "B\nB2\n"},
			"Edited f.txt: replaced 1 occurrence (at line 2).", "a\nB\nB2\nc\n", 1},
		{"every occurrence", editSample,
			map[string]any{"old_string": `println("hello")`, "new_string": `println("bye")`, "expected_replacements": 3.0},
			"Edited f.txt: replaced 3 occurrences (at lines 4, 5, 6).", strings.ReplaceAll(editSample, "hello", "bye"), 3},
		{"unique with context", editSample,
			map[string]any{"old_string": "{\n\tprintln(\"hello\")", "new_string": "{\n\tprintln(\"first\")"},
			"Edited f.txt: replaced 1 occurrence (at line 3).", strings.Replace(editSample, "hello", "first", 1), 1},
		{"delete", "keep drop keep",
			map[string]any{"old_string": " drop", "new_string": ""},
			"Edited f.txt: replaced 1 occurrence (at line 1).", "keep keep", 1},
		{"crlf file, lf strings", "one\r\ntwo\r\nthree\r\n",
			map[string]any{"old_string": "one\ntwo", "new_string": "1\n2"},
			"Edited f.txt: replaced 1 occurrence (at line 1). The file's CRLF line endings were kept.", "1\r\n2\r\nthree\r\n", 1},
		{"dollar signs are literal", "x = 1",
			map[string]any{"old_string": "1", "new_string": "$1 $& \\1"},
			"Edited f.txt: replaced 1 occurrence (at line 1).", "x = $1 $& \\1", 1},
		{"create", "",
			map[string]any{"old_string": "", "new_string": "new file\n"},
			"Created f.txt (9 bytes).", "new file\n", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			if c.file != "" {
				write(t, root, "f.txt", c.file)
			}
			s := newSource(t, root)
			c.args["path"] = "f.txt"
			res, err := call(t, s, "edit", c.args)
			if err != nil {
				t.Fatal(err)
			}
			if res.Text() != c.want || res.IsError {
				t.Errorf("result %q, want %q", res.Text(), c.want)
			}
			if got := readBack(t, root, "f.txt"); got != c.after {
				t.Errorf("file = %q, want %q", got, c.after)
			}
			if st := res.Structured.(map[string]any); st["replacements"] != c.replace || st["path"] != "f.txt" {
				t.Errorf("structured %v", st)
			}
			noTempFiles(t, root)
		})
	}
}

func TestEditCreatesParents(t *testing.T) {
	root := t.TempDir()
	s := newSource(t, root)
	got := text(t, s, "edit", map[string]any{"path": "new/dir/f.go", "old_string": "", "new_string": "package dir\n"})
	if got != "Created new/dir/f.go (12 bytes). Missing parent directories were created." {
		t.Errorf("result %q", got)
	}
	if got := readBack(t, root, "new/dir/f.go"); got != "package dir\n" {
		t.Errorf("file = %q", got)
	}
}

func TestEditErrors(t *testing.T) {
	root := t.TempDir()
	write(t, root, "f.go", editSample)
	write(t, root, "spaces.py", "def f():\n    return  1\n")
	write(t, root, "bin.dat", "abc\x00def")
	write(t, root, "dir/x", "")
	write(t, root, "big.txt", strings.Repeat("x", 250))
	write(t, root, "small.txt", "grow")
	s := newSource(t, root, builtin.WithMaxReadBytes(200), builtin.WithMaxWriteBytes(100))
	for _, c := range []struct {
		name string
		args map[string]any
		kind tool.Kind
		msgs []string
	}{
		{"no match", map[string]any{"path": "f.go", "old_string": "goodbye", "new_string": "x"},
			tool.KindToolError, []string{"old_string was not found in f.go", "read_file"}},
		{"no match, whitespace differs", map[string]any{"path": "spaces.py", "old_string": "def f():\n\treturn 1", "new_string": "x"},
			tool.KindToolError, []string{"was not found", "Ignoring differences in whitespace", "at line 1"}},
		{"no match, indentation differs", map[string]any{"path": "f.go", "old_string": "println(\"hello\")\n    println(\"hello\")", "new_string": "x"},
			tool.KindToolError, []string{"was not found", "at line 4 (and 1 other place)"}},
		{"several when one expected", map[string]any{"path": "f.go", "old_string": `println("hello")`, "new_string": "x"},
			tool.KindToolError, []string{"occurs 3 times", "lines 4, 5, 6", "add more surrounding lines", "set expected_replacements to 3"}},
		{"count mismatch", map[string]any{"path": "f.go", "old_string": `println("hello")`, "new_string": "x", "expected_replacements": 2.0},
			tool.KindToolError, []string{"expected 2 occurrences of old_string but found 3", "set expected_replacements to 3"}},
		{"fewer than expected", map[string]any{"path": "f.go", "old_string": "func main", "new_string": "func Main", "expected_replacements": 2.0},
			tool.KindToolError, []string{"expected 2 occurrences of old_string but found 1"}},
		{"identical strings", map[string]any{"path": "f.go", "old_string": "main", "new_string": "main"},
			tool.KindInvalidParams, []string{"identical"}},
		{"empty old_string, file exists", map[string]any{"path": "f.go", "old_string": "", "new_string": "x"},
			tool.KindInvalidParams, []string{"already exists", "write_file"}},
		{"missing file", map[string]any{"path": "missing.go", "old_string": "a", "new_string": "b"},
			tool.KindFileNotFound, []string{"does not exist", "write_file"}},
		{"missing parent", map[string]any{"path": "nodir/missing.go", "old_string": "a", "new_string": "b"},
			tool.KindFileNotFound, []string{"does not exist"}},
		{"directory", map[string]any{"path": "dir", "old_string": "a", "new_string": "b"},
			tool.KindInvalidParams, []string{"is a directory"}},
		{"directory, empty old_string", map[string]any{"path": "dir", "old_string": "", "new_string": "b"},
			tool.KindInvalidParams, []string{"is a directory"}},
		{"binary", map[string]any{"path": "bin.dat", "old_string": "abc", "new_string": "x"},
			tool.KindToolError, []string{"binary"}},
		{"file too large to read", map[string]any{"path": "big.txt", "old_string": "x", "new_string": "y", "expected_replacements": 250.0},
			tool.KindToolError, []string{"250 bytes", "200 bytes"}},
		{"result too large", map[string]any{"path": "small.txt", "old_string": "grow", "new_string": strings.Repeat("g", 101)},
			tool.KindToolError, []string{"would be 101 bytes", "100 bytes"}},
		{"new file too large", map[string]any{"path": "new.txt", "old_string": "", "new_string": strings.Repeat("g", 101)},
			tool.KindInvalidParams, []string{"101 bytes"}},
		{"expected_replacements zero", map[string]any{"path": "f.go", "old_string": "main", "new_string": "x", "expected_replacements": 0.0},
			tool.KindInvalidParams, []string{"expected_replacements", "at least 1"}},
		{"expected_replacements not a number", map[string]any{"path": "f.go", "old_string": "main", "new_string": "x", "expected_replacements": "two"},
			tool.KindInvalidParams, []string{"integer"}},
		{"no old_string", map[string]any{"path": "f.go", "new_string": "x"},
			tool.KindInvalidParams, []string{`"old_string"`}},
		{"no new_string", map[string]any{"path": "f.go", "old_string": "x"},
			tool.KindInvalidParams, []string{`"new_string"`}},
		{"unknown argument", map[string]any{"path": "f.go", "old_string": "x", "new_string": "y", "replace_all": true},
			tool.KindInvalidParams, []string{`"replace_all"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			te := wantErr(t, s, "edit", c.args, c.kind)
			for _, m := range c.msgs {
				if !strings.Contains(te.Message, m) {
					t.Errorf("message %q does not contain %q", te.Message, m)
				}
			}
		})
	}
	// Nothing was changed or created by any refused edit.
	for rel, want := range map[string]string{"f.go": editSample, "spaces.py": "def f():\n    return  1\n", "small.txt": "grow", "big.txt": strings.Repeat("x", 250)} {
		if got := readBack(t, root, rel); got != want {
			t.Errorf("%s changed to %q", rel, got)
		}
	}
	for _, rel := range []string{"missing.go", "nodir", "new.txt"} {
		if _, err := os.Stat(filepath.Join(root, rel)); err == nil {
			t.Errorf("%s was created", rel)
		}
	}
	noTempFiles(t, root)
}

func TestEditKeepsMode(t *testing.T) {
	root := t.TempDir()
	p := write(t, root, "run.sh", "#!/bin/sh\necho old\n")
	os.Chmod(p, 0o750)
	s := newSource(t, root)
	text(t, s, "edit", map[string]any{"path": "run.sh", "old_string": "old", "new_string": "new"})
	if got := readBack(t, root, "run.sh"); got != "#!/bin/sh\necho new\n" {
		t.Errorf("file = %q", got)
	}
	if m := modeOf(t, p); m != 0o750 {
		t.Errorf("mode %v, want 0750", m)
	}
	noTempFiles(t, root)
}
