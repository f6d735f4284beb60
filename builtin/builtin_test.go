package builtin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/builtin"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/tool"
)

// write creates root/rel with content, making parent directories.
func write(t *testing.T, root, rel, content string) string {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Skipf("symlinks unavailable: %v", err)
	}
}

func newSource(t *testing.T, root string, opts ...builtin.Option) *builtin.Source {
	t.Helper()
	s, err := builtin.New(root, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func call(t *testing.T, s *builtin.Source, name string, args map[string]any) (*tool.Result, error) {
	t.Helper()
	return s.Call(context.Background(), name, args)
}

// text calls a tool that must succeed and returns its text.
func text(t *testing.T, s *builtin.Source, name string, args map[string]any) string {
	t.Helper()
	res, err := call(t, s, name, args)
	if err != nil {
		t.Fatalf("%s(%v): %v", name, args, err)
	}
	return res.Text()
}

// wantErr calls a tool that must fail with kind and returns the error.
func wantErr(t *testing.T, s *builtin.Source, name string, args map[string]any, kind tool.Kind) *tool.Error {
	t.Helper()
	res, err := call(t, s, name, args)
	if err == nil {
		t.Fatalf("%s(%v) = %q, want a %s error", name, args, res.Text(), kind)
	}
	te, ok := errors.AsType[*tool.Error](err)
	if !ok {
		t.Fatalf("%s(%v) error %v (%T) is not a *tool.Error", name, args, err, err)
	}
	if te.Kind != kind {
		t.Fatalf("%s(%v) error kind = %s (%v), want %s", name, args, te.Kind, err, kind)
	}
	if te.Server != "builtin" || te.Tool != name {
		t.Errorf("error names %s/%s, want builtin/%s", te.Server, te.Tool, name)
	}
	return te
}

func TestNew(t *testing.T) {
	root := t.TempDir()
	if _, err := builtin.New(filepath.Join(root, "missing")); err == nil {
		t.Error("New(missing) succeeded")
	}
	f := write(t, root, "f.txt", "x")
	if _, err := builtin.New(f); err == nil {
		t.Error("New(file) succeeded")
	}
	if _, err := builtin.New(""); err == nil {
		t.Error(`New("") succeeded`)
	}

	// A root given through a link is resolved, and absolute paths through
	// the link still work.
	real := filepath.Join(root, "real")
	write(t, real, "a.txt", "through the alias")
	alias := filepath.Join(root, "alias")
	symlink(t, real, alias)
	s := newSource(t, alias)
	want, _ := filepath.EvalSymlinks(real)
	if s.Root() != want {
		t.Errorf("Root() = %q, want %q", s.Root(), want)
	}
	if got := text(t, s, "read_file", map[string]any{"path": filepath.Join(alias, "a.txt")}); got != "through the alias" {
		t.Errorf("read through alias = %q", got)
	}
	if s.Name() != "builtin" || s.Close() != nil {
		t.Error("Name/Close")
	}
}

func TestTools(t *testing.T) {
	s := newSource(t, t.TempDir())
	tools, err := s.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"list_directory": {"path"},
		"read_file":      {"path", "offset", "limit"},
		"glob":           {"pattern", "path"},
		"grep":           {"pattern", "path", "include"},
		"write_file":     {"path", "content"},
		"edit":           {"path", "old_string", "new_string", "expected_replacements"},
		"shell":          {"command", "cwd", "timeout_ms"},
		"memory":         {"action", "fact", "query"},
		"web_fetch":      {"url"},
	}
	// The annotations each tool declares: read-only, destructive,
	// idempotent, open world.
	type hints struct{ readOnly, destructive, idempotent, openWorld bool }
	wantHints := map[string]hints{
		"list_directory": {true, false, true, false},
		"read_file":      {true, false, true, false},
		"glob":           {true, false, true, false},
		"grep":           {true, false, true, false},
		"write_file":     {false, true, true, false},
		"edit":           {false, true, false, false},
		"shell":          {false, true, false, true},
		"memory":         {false, false, false, false},
		"web_fetch":      {true, false, true, true},
	}
	if len(tools) != len(want) {
		t.Fatalf("%d tools, want %d", len(tools), len(want))
	}
	for i, tl := range tools {
		if i > 0 && tools[i-1].Name >= tl.Name {
			t.Errorf("tools not sorted: %s before %s", tools[i-1].Name, tl.Name)
		}
		props, ok := want[tl.Name]
		if !ok {
			t.Errorf("unexpected tool %q", tl.Name)
			continue
		}
		if tl.Server != "builtin" || tl.Title == "" || len(tl.Description) < 100 {
			t.Errorf("%s: server %q, title %q, description %d chars", tl.Name, tl.Server, tl.Title, len(tl.Description))
		}
		an := tl.Annotations
		if an.ReadOnly == nil || an.Destructive == nil || an.Idempotent == nil || an.OpenWorld == nil {
			t.Errorf("%s: undeclared annotations %+v", tl.Name, an)
		} else if got := (hints{*an.ReadOnly, *an.Destructive, *an.Idempotent, *an.OpenWorld}); got != wantHints[tl.Name] {
			t.Errorf("%s: annotations %+v, want %+v", tl.Name, got, wantHints[tl.Name])
		}
		sch := tl.InputSchema
		if sch["type"] != "object" || sch["additionalProperties"] != false {
			t.Errorf("%s: schema %v", tl.Name, sch)
		}
		p := sch["properties"].(map[string]any)
		if len(p) != len(props) {
			t.Errorf("%s: properties %v, want %v", tl.Name, p, props)
		}
		for _, name := range props {
			if _, ok := p[name]; !ok {
				t.Errorf("%s: no property %q", tl.Name, name)
			}
		}
		if _, err := json.Marshal(tl); err != nil {
			t.Errorf("%s: %v", tl.Name, err)
		}
	}
}

func TestUnknownTool(t *testing.T) {
	s := newSource(t, t.TempDir())
	_, err := s.Call(context.Background(), "read_fil", nil)
	te, ok := errors.AsType[*tool.Error](err)
	if !ok || te.Kind != tool.KindToolNotRegistered || te.Suggestion != "read_file" || te.Server != "builtin" {
		t.Fatalf("err = %#v", err)
	}
}

func TestCancelled(t *testing.T) {
	root := t.TempDir()
	write(t, root, "a.txt", "x")
	s := newSource(t, root)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, name := range []string{"list_directory", "read_file", "glob", "grep", "write_file", "edit", "shell", "memory"} {
		_, err := s.Call(ctx, name, map[string]any{"path": "a.txt", "pattern": "x"})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: err = %v, want context.Canceled", name, err)
		}
	}
}

func TestArguments(t *testing.T) {
	root := t.TempDir()
	write(t, root, "a.txt", "1\n2\n3\n4\n5\n")
	s := newSource(t, root)
	for _, c := range []struct {
		name string
		args map[string]any
		msg  string
	}{
		{"read_file", map[string]any{}, `"path"`},
		{"read_file", nil, `"path"`},
		{"read_file", map[string]any{"path": 3.0}, "string"},
		{"read_file", map[string]any{"path": ""}, "empty"},
		{"read_file", map[string]any{"path": "a.txt", "offset": -1.0}, `"offset"`},
		{"read_file", map[string]any{"path": "a.txt", "limit": -1.0}, `"limit"`},
		{"read_file", map[string]any{"path": "a.txt", "limit": 0.0}, `"limit"`},
		{"read_file", map[string]any{"path": "a.txt", "offset": 1.5}, "integer"},
		{"read_file", map[string]any{"path": "a.txt", "offset": "2"}, "integer"},
		{"read_file", map[string]any{"path": "a.txt", "limit": true}, "integer"},
		{"read_file", map[string]any{"path": "a.txt", "offset": json.Number("x")}, "integer"},
		{"read_file", map[string]any{"path": "a.txt", "lines": 3.0}, `"lines"`},
		{"list_directory", map[string]any{}, `"path"`},
		{"list_directory", map[string]any{"path": []any{"a"}}, "array"},
		{"glob", map[string]any{}, `"pattern"`},
		{"glob", map[string]any{"pattern": "*", "path": 1.0}, `"path"`},
		{"glob", map[string]any{"pattern": "[a"}, "glob pattern"},
		{"grep", map[string]any{"pattern": "x", "include": map[string]any{}}, "object"},
		{"grep", map[string]any{"pattern": "x", "include": "{a"}, "include"},
		{"grep", map[string]any{"pattern": ""}, `"pattern"`},
		{"grep", map[string]any{"pattern": "x", "paths": "."}, `"paths"`},
	} {
		te := wantErr(t, s, c.name, c.args, tool.KindInvalidParams)
		if !strings.Contains(te.Message, c.msg) {
			t.Errorf("%s(%v): message %q does not mention %s", c.name, c.args, te.Message, c.msg)
		}
	}

	// Every integer representation is accepted; null means absent.
	for _, v := range []any{2.0, float32(2), 2, int64(2), int32(2), uint8(2), uint64(2), json.Number("2"), json.Number("2.0")} {
		got := text(t, s, "read_file", map[string]any{"path": "a.txt", "offset": v, "limit": v})
		if !strings.HasPrefix(got, "3\n4\n\n[showing lines 3-4 of 5; use offset=4 to continue]") {
			t.Errorf("offset %T: %q", v, got)
		}
	}
	if got := text(t, s, "read_file", map[string]any{"path": "a.txt", "offset": nil, "limit": nil}); got != "1\n2\n3\n4\n5" {
		t.Errorf("null arguments: %q", got)
	}
	// Huge numbers are not an overflow.
	wantErr(t, s, "read_file", map[string]any{"path": "a.txt", "offset": 1e300}, tool.KindInvalidParams)
	if got := text(t, s, "read_file", map[string]any{"path": "a.txt", "limit": 1e300}); got != "1\n2\n3\n4\n5" {
		t.Errorf("huge limit: %q", got)
	}
}

func TestListDirectory(t *testing.T) {
	root := t.TempDir()
	write(t, root, "b.txt", "12345")
	write(t, root, "A.md", "")
	write(t, root, "zdir/x", "")
	write(t, root, "adir/y", "")
	write(t, root, "sub/deep/z", "")
	symlink(t, "b.txt", filepath.Join(root, "link"))
	symlink(t, "adir", filepath.Join(root, "dirlink"))
	s := newSource(t, root)

	got := text(t, s, "list_directory", map[string]any{"path": "."})
	want := `Directory . (4 directories, 3 files):
[DIR] adir
[DIR] dirlink (symbolic link)
[DIR] sub
[DIR] zdir
A.md (0 bytes)
b.txt (5 bytes)
link (5 bytes, symbolic link)`
	if got != want {
		t.Errorf("list . =\n%s\nwant\n%s", got, want)
	}
	if got := text(t, s, "list_directory", map[string]any{"path": filepath.Join(root, "sub")}); got != "Directory sub (1 directory, 0 files):\n[DIR] deep" {
		t.Errorf("list abs sub = %q", got)
	}
	if got := text(t, s, "list_directory", map[string]any{"path": "sub/deep/"}); got != "Directory sub/deep (0 directories, 1 file):\nz (0 bytes)" {
		t.Errorf("list sub/deep = %q", got)
	}
	os.Mkdir(filepath.Join(root, "empty"), 0o755)
	if got := text(t, s, "list_directory", map[string]any{"path": "empty"}); got != "Directory empty is empty." {
		t.Errorf("empty = %q", got)
	}
	te := wantErr(t, s, "list_directory", map[string]any{"path": "b.txt"}, tool.KindInvalidParams)
	if !strings.Contains(te.Message, "read_file") {
		t.Errorf("file message %q", te.Message)
	}
	wantErr(t, s, "list_directory", map[string]any{"path": "nope"}, tool.KindFileNotFound)
	wantErr(t, s, "list_directory", map[string]any{"path": "b.txt/x"}, tool.KindFileNotFound)

	// The cap keeps directories first and says how many were left out.
	s = newSource(t, root, builtin.WithMaxEntries(3))
	got = text(t, s, "list_directory", map[string]any{"path": "."})
	if !strings.HasSuffix(got, "[DIR] dirlink (symbolic link)\n[DIR] empty\n[showing 3 of 8 entries; 5 omitted. Use glob with a pattern to find specific files.]") {
		t.Errorf("capped list =\n%s", got)
	}
}

func TestReadFile(t *testing.T) {
	root := t.TempDir()
	var lines []string
	for i := 1; i <= 12; i++ {
		lines = append(lines, fmt.Sprintf("line %d", i))
	}
	write(t, root, "twelve.txt", strings.Join(lines, "\n")+"\n")
	write(t, root, "crlf.txt", "a\r\nb\r\n")
	write(t, root, "nonl.txt", "a\nb")
	write(t, root, "empty.txt", "")
	write(t, root, "utf8.txt", "héllo\xffwörld")
	s := newSource(t, root, builtin.WithMaxLines(5))
	read := func(args map[string]any) string { return text(t, s, "read_file", args) }

	if got := read(map[string]any{"path": "twelve.txt"}); got != "line 1\nline 2\nline 3\nline 4\nline 5\n\n[showing lines 1-5 of 12; use offset=5 to continue]" {
		t.Errorf("default = %q", got)
	}
	if got := read(map[string]any{"path": "twelve.txt", "offset": 5.0}); got != "line 6\nline 7\nline 8\nline 9\nline 10\n\n[showing lines 6-10 of 12; use offset=10 to continue]" {
		t.Errorf("offset 5 = %q", got)
	}
	if got := read(map[string]any{"path": "twelve.txt", "offset": 10.0}); got != "line 11\nline 12\n\n[showing lines 11-12 of 12; end of file]" {
		t.Errorf("offset 10 = %q", got)
	}
	if got := read(map[string]any{"path": "twelve.txt", "offset": 11.0, "limit": 1.0}); got != "line 12\n\n[showing lines 12-12 of 12; end of file]" {
		t.Errorf("last line = %q", got)
	}
	if got := read(map[string]any{"path": "twelve.txt", "offset": 2.0, "limit": 2.0}); got != "line 3\nline 4\n\n[showing lines 3-4 of 12; use offset=4 to continue]" {
		t.Errorf("offset 2 limit 2 = %q", got)
	}
	// A limit above the maximum is lowered to it.
	if got := read(map[string]any{"path": "twelve.txt", "limit": 100.0}); !strings.HasSuffix(got, "line 5\n\n[showing lines 1-5 of 12; use offset=5 to continue]") {
		t.Errorf("limit 100 = %q", got)
	}
	te := wantErr(t, s, "read_file", map[string]any{"path": "twelve.txt", "offset": 12.0}, tool.KindInvalidParams)
	if !strings.Contains(te.Message, "12 lines") {
		t.Errorf("past end: %q", te.Message)
	}
	if got := read(map[string]any{"path": "crlf.txt"}); got != "a\nb" {
		t.Errorf("crlf = %q", got)
	}
	if got := read(map[string]any{"path": "nonl.txt", "offset": 1.0}); got != "b\n\n[showing lines 2-2 of 2; end of file]" {
		t.Errorf("no final newline = %q", got)
	}
	if got := read(map[string]any{"path": "empty.txt"}); got != "[empty.txt is empty]" {
		t.Errorf("empty = %q", got)
	}
	if got := read(map[string]any{"path": "utf8.txt"}); got != "héllo\uFFFDwörld" {
		t.Errorf("invalid utf-8 = %q", got)
	}
	if got := read(map[string]any{"path": filepath.Join(root, "nonl.txt")}); got != "a\nb" {
		t.Errorf("absolute = %q", got)
	}

	// Long lines are cut, by characters, with a marker and a note.
	write(t, root, "long.txt", "short\n"+strings.Repeat("é", 30)+"\n")
	s2 := newSource(t, root, builtin.WithMaxLineLength(10))
	got := text(t, s2, "read_file", map[string]any{"path": "long.txt"})
	if got != "short\n"+strings.Repeat("é", 10)+" ... [line cut: 10 of 30 characters shown]\n\n[1 line longer than 10 characters cut]" {
		t.Errorf("long = %q", got)
	}

	te = wantErr(t, s, "read_file", map[string]any{"path": "."}, tool.KindInvalidParams)
	if !strings.Contains(te.Message, "list_directory") {
		t.Errorf("directory message %q", te.Message)
	}
	wantErr(t, s, "read_file", map[string]any{"path": "missing.txt"}, tool.KindFileNotFound)
	wantErr(t, s, "read_file", map[string]any{"path": "twelve.txt/x"}, tool.KindFileNotFound)
}

func TestReadFileDefaults(t *testing.T) {
	root := t.TempDir()
	var b strings.Builder
	for i := range 5400 {
		fmt.Fprintf(&b, "%d\n", i)
	}
	write(t, root, "big.txt", b.String())
	s := newSource(t, root)
	got := text(t, s, "read_file", map[string]any{"path": "big.txt"})
	if !strings.HasSuffix(got, "\n1999\n\n[showing lines 1-2000 of 5400; use offset=2000 to continue]") {
		t.Errorf("tail = %q", got[len(got)-80:])
	}
	got = text(t, s, "read_file", map[string]any{"path": "big.txt", "offset": 2000.0})
	if !strings.HasPrefix(got, "2000\n") || !strings.HasSuffix(got, "\n3999\n\n[showing lines 2001-4000 of 5400; use offset=4000 to continue]") {
		t.Errorf("page 2 = %q...%q", got[:10], got[len(got)-80:])
	}
}

func TestReadFileTooLarge(t *testing.T) {
	root := t.TempDir()
	write(t, root, "big.txt", strings.Repeat("x", 101))
	write(t, root, "ok.txt", strings.Repeat("x", 100))
	s := newSource(t, root, builtin.WithMaxReadBytes(100))
	te := wantErr(t, s, "read_file", map[string]any{"path": "big.txt"}, tool.KindToolError)
	if !strings.Contains(te.Message, "101 bytes") || !strings.Contains(te.Message, "100 bytes") {
		t.Errorf("message %q", te.Message)
	}
	text(t, s, "read_file", map[string]any{"path": "ok.txt"})
}

func pngBytes(t *testing.T) []byte {
	img := image.NewRGBA(image.Rect(0, 0, 2, 2))
	img.Set(0, 0, color.RGBA{255, 0, 0, 255})
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestReadFileImage(t *testing.T) {
	root := t.TempDir()
	data := pngBytes(t)
	write(t, root, "pic.png", string(data))
	write(t, root, "pic.dat", string(data))
	gif := "GIF89a\x01\x00\x01\x00\x00\x00\x00;"
	write(t, root, "anim.gif", gif)
	write(t, root, "lfs.png", "version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 12\n")
	write(t, root, "broken.jpg", "\x00\x01garbage")
	s := newSource(t, root)

	for _, c := range []struct {
		path, mime string
		data       []byte
	}{{"pic.png", "image/png", data}, {"pic.dat", "image/png", data}, {"anim.gif", "image/gif", []byte(gif)}} {
		res, err := call(t, s, "read_file", map[string]any{"path": c.path})
		if err != nil {
			t.Fatal(err)
		}
		img := res.Content[0]
		if img.Type != tool.ContentImage || img.MIMEType != c.mime || !bytes.Equal(img.Data, c.data) {
			t.Errorf("%s: content %s %s %d bytes", c.path, img.Type, img.MIMEType, len(img.Data))
		}
	}
	// A text file named .png is text; a non-image named .jpg is binary.
	if got := text(t, s, "read_file", map[string]any{"path": "lfs.png"}); !strings.HasPrefix(got, "version https://git-lfs") {
		t.Errorf("lfs.png = %q", got)
	}
	if got := text(t, s, "read_file", map[string]any{"path": "broken.jpg"}); !strings.Contains(got, "binary file of 9 bytes") || !strings.Contains(got, ".jpg") {
		t.Errorf("broken.jpg = %q", got)
	}
}

func TestReadFileBinary(t *testing.T) {
	root := t.TempDir()
	write(t, root, "blob.bin", "abc\x00\x01\x02secret-bytes")
	write(t, root, "a.zip", "PK\x03\x04\x00\x00rest")
	// A NUL after the first 8 KiB does not make a file binary.
	write(t, root, "late.txt", strings.Repeat("a", 9000)+"\x00")
	s := newSource(t, root)
	got := text(t, s, "read_file", map[string]any{"path": "blob.bin"})
	if got != "blob.bin is a binary file of 18 bytes (detected type: application/octet-stream); its content is not shown. read_file returns text files, and PNG, JPEG, GIF and WebP images." {
		t.Errorf("binary = %q", got)
	}
	if got := text(t, s, "read_file", map[string]any{"path": "a.zip"}); !strings.Contains(got, "application/zip") {
		t.Errorf("zip = %q", got)
	}
	if got := text(t, s, "read_file", map[string]any{"path": "late.txt"}); !strings.HasPrefix(got, "aaaa") {
		t.Errorf("late NUL = %q", got[:20])
	}
}

func TestReadFileSpecial(t *testing.T) {
	root := t.TempDir()
	if err := mkfifo(filepath.Join(root, "fifo")); err != nil {
		t.Skip(err)
	}
	s := newSource(t, root)
	done := make(chan struct{})
	go func() {
		defer close(done)
		te := wantErr(t, s, "read_file", map[string]any{"path": "fifo"}, tool.KindInvalidParams)
		if !strings.Contains(te.Message, "named pipe") {
			t.Errorf("fifo message %q", te.Message)
		}
		wantErr(t, s, "grep", map[string]any{"pattern": "x", "path": "fifo"}, tool.KindInvalidParams)
		// A walk skips it rather than blocking on it.
		if got := text(t, s, "grep", map[string]any{"pattern": "x"}); !strings.HasPrefix(got, "No matches") {
			t.Errorf("grep = %q", got)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("reading a FIFO blocked")
	}
}

// TestPermissionDenied runs as a user whom file permissions bind: as
// root (make test in CI) it runs again as nobody (RunUnprivileged).
func TestPermissionDenied(t *testing.T) {
	if !testservers.RunUnprivileged(t) {
		return
	}
	root := t.TempDir()
	write(t, root, "locked/a.txt", "x")
	write(t, root, "unreadable.txt", "x")
	os.Chmod(filepath.Join(root, "unreadable.txt"), 0)
	os.Chmod(filepath.Join(root, "locked"), 0)
	t.Cleanup(func() { os.Chmod(filepath.Join(root, "locked"), 0o755) })
	s := newSource(t, root)
	wantErr(t, s, "read_file", map[string]any{"path": "unreadable.txt"}, tool.KindPermissionDenied)
	wantErr(t, s, "read_file", map[string]any{"path": "locked/a.txt"}, tool.KindPermissionDenied)
	wantErr(t, s, "list_directory", map[string]any{"path": "locked"}, tool.KindPermissionDenied)
	// Walks skip what they cannot read.
	if got := text(t, s, "grep", map[string]any{"pattern": "x"}); !strings.HasPrefix(got, "No matches") {
		t.Errorf("grep = %q", got)
	}
}

func TestGlob(t *testing.T) {
	root := t.TempDir()
	base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	files := []struct {
		rel string
		age int // hours before now-ish; bigger is older
	}{
		{"old.go", 50},
		{"src/new.go", 1},
		{"src/deep/mid.go", 10},
		{"src/deep/readme.md", 0},
		{"tie_b.go", 20},
		{"tie_a.go", 20},
		{".git/hooks/x.go", 0},
		{"node_modules/pkg/y.go", 0},
		{"src/node_modules/z.go", 0},
	}
	for _, f := range files {
		p := write(t, root, f.rel, "package x\n")
		mt := base.Add(-time.Duration(f.age) * time.Hour)
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	s := newSource(t, root)
	glob := func(args map[string]any) string { return text(t, s, "glob", args) }

	if got := glob(map[string]any{"pattern": "**/*.go"}); got != `Found 5 files matching "**/*.go" in . (newest first):
src/new.go
src/deep/mid.go
tie_a.go
tie_b.go
old.go` {
		t.Errorf("**/*.go =\n%s", got)
	}
	if got := glob(map[string]any{"pattern": "*.go"}); got != "Found 3 files matching \"*.go\" in . (newest first):\ntie_a.go\ntie_b.go\nold.go" {
		t.Errorf("*.go =\n%s", got)
	}
	if got := glob(map[string]any{"pattern": "src/**/*.{go,md}"}); got != "Found 3 files matching \"src/**/*.{go,md}\" in . (newest first):\nsrc/deep/readme.md\nsrc/new.go\nsrc/deep/mid.go" {
		t.Errorf("src/** =\n%s", got)
	}
	if got := glob(map[string]any{"pattern": "*.go", "path": "src"}); got != "Found 1 file matching \"*.go\" in src (newest first):\nsrc/new.go" {
		t.Errorf("path src =\n%s", got)
	}
	if got := glob(map[string]any{"pattern": "deep/*", "path": filepath.Join(root, "src")}); got != "Found 2 files matching \"deep/*\" in src (newest first):\nsrc/deep/readme.md\nsrc/deep/mid.go" {
		t.Errorf("path abs src =\n%s", got)
	}
	if got := glob(map[string]any{"pattern": filepath.Join(root, "src", "*.go")}); got != "Found 1 file matching \""+filepath.Join(root, "src", "*.go")+"\" in . (newest first):\nsrc/new.go" {
		t.Errorf("absolute pattern =\n%s", got)
	}
	// A walk that starts in a skipped directory searches it.
	if got := glob(map[string]any{"pattern": ".git/**"}); got != "Found 1 file matching \".git/**\" in . (newest first):\n.git/hooks/x.go" {
		t.Errorf(".git/** =\n%s", got)
	}
	for _, p := range []string{"*.rs", "nowhere/**/*.go", "~/x/*"} {
		if got := glob(map[string]any{"pattern": p}); got != fmt.Sprintf("No files found matching %q in ..", p) {
			t.Errorf("%s = %q", p, got)
		}
	}
	wantErr(t, s, "glob", map[string]any{"pattern": "*", "path": "old.go"}, tool.KindInvalidParams)
	wantErr(t, s, "glob", map[string]any{"pattern": "*", "path": "missing"}, tool.KindFileNotFound)
	te := wantErr(t, s, "glob", map[string]any{"pattern": "src/[a-"}, tool.KindInvalidParams)
	if !strings.Contains(te.Message, "not a valid glob pattern") {
		t.Errorf("bad pattern message %q", te.Message)
	}

	s = newSource(t, root, builtin.WithMaxFiles(2))
	if got := text(t, s, "glob", map[string]any{"pattern": "**/*.go"}); got != `Found 5 files matching "**/*.go" in . (newest first):
src/new.go
src/deep/mid.go
[showing the 2 newest of 5 files; 3 omitted. Narrow the pattern or path to see the rest.]` {
		t.Errorf("capped =\n%s", got)
	}
}

func TestGlobSymlinks(t *testing.T) {
	root := t.TempDir()
	write(t, root, "real/a.go", "")
	symlink(t, "real/a.go", filepath.Join(root, "filelink.go"))
	symlink(t, "real", filepath.Join(root, "dirlink"))
	symlink(t, ".", filepath.Join(root, "real", "loop"))
	s := newSource(t, root)
	got := text(t, s, "glob", map[string]any{"pattern": "**/*.go"})
	if got != "Found 2 files matching \"**/*.go\" in . (newest first):\nfilelink.go\nreal/a.go" &&
		got != "Found 2 files matching \"**/*.go\" in . (newest first):\nreal/a.go\nfilelink.go" {
		t.Errorf("symlinks =\n%s", got)
	}
	// A pattern may name a linked directory explicitly.
	if got := text(t, s, "glob", map[string]any{"pattern": "dirlink/*.go"}); got != "Found 1 file matching \"dirlink/*.go\" in . (newest first):\nreal/a.go" {
		t.Errorf("dirlink =\n%s", got)
	}
}

func TestGrep(t *testing.T) {
	root := t.TempDir()
	write(t, root, "a.go", "package a\n\nfunc Foo() {}\nfunc bar() {}\r\n")
	write(t, root, "b.txt", "Foo in text\n")
	write(t, root, "web/app.ts", "const Foo = 1\n")
	write(t, root, "web/view.tsx", "<Foo/>\n")
	write(t, root, "web/style.css", "Foo {}\n")
	write(t, root, ".git/config", "Foo\n")
	write(t, root, "node_modules/x/index.js", "Foo\n")
	write(t, root, "bin.dat", "Foo\x00\x01")
	s := newSource(t, root)
	grep := func(args map[string]any) string { return text(t, s, "grep", args) }

	if got := grep(map[string]any{"pattern": "Foo"}); got != `Found 5 matches for "Foo" in .:

File: a.go
L3: func Foo() {}

File: b.txt
L1: Foo in text

File: web/app.ts
L1: const Foo = 1

File: web/style.css
L1: Foo {}

File: web/view.tsx
L1: <Foo/>` {
		t.Errorf("grep Foo =\n%s", got)
	}
	if got := grep(map[string]any{"pattern": `^func \w+\(\) \{\}$`, "include": "*.go"}); got != "Found 2 matches for \"^func \\\\w+\\\\(\\\\) \\\\{\\\\}$\" in . (include \"*.go\"):\n\nFile: a.go\nL3: func Foo() {}\nL4: func bar() {}" {
		t.Errorf("anchored, crlf =\n%s", got)
	}
	for _, inc := range []string{"**/*.{ts,tsx}", "*.{ts,tsx}", "web/*.ts*"} {
		got := grep(map[string]any{"pattern": "(?i)foo", "include": inc})
		if !strings.Contains(got, "File: web/app.ts\n") || !strings.Contains(got, "File: web/view.tsx\n") || strings.Contains(got, "a.go") || strings.Contains(got, "css") {
			t.Errorf("include %s =\n%s", inc, got)
		}
	}
	// include is matched relative to path as well as to the root.
	for _, inc := range []string{"*.ts", "web/*.ts"} {
		if got := grep(map[string]any{"pattern": "Foo", "path": "web", "include": inc}); !strings.HasSuffix(got, "File: web/app.ts\nL1: const Foo = 1") {
			t.Errorf("path web include %s =\n%s", inc, got)
		}
	}
	if got := grep(map[string]any{"pattern": "Foo", "path": "a.go"}); got != "Found 1 match for \"Foo\" in a.go:\n\nFile: a.go\nL3: func Foo() {}" {
		t.Errorf("single file =\n%s", got)
	}
	if got := grep(map[string]any{"pattern": "Foo", "path": "bin.dat"}); got != "bin.dat was not searched: it is a binary file." {
		t.Errorf("binary file = %q", got)
	}
	if got := grep(map[string]any{"pattern": "nothing"}); got != `No matches for "nothing" in ..` {
		t.Errorf("none = %q", got)
	}
	if got := grep(map[string]any{"pattern": "Foo", "path": ".git"}); !strings.Contains(got, "File: .git/config") {
		t.Errorf("explicit .git = %q", got)
	}
	te := wantErr(t, s, "grep", map[string]any{"pattern": "func("}, tool.KindInvalidParams)
	if !strings.Contains(te.Message, "missing closing )") {
		t.Errorf("invalid regexp message %q", te.Message)
	}
	wantErr(t, s, "grep", map[string]any{"pattern": `(?<=x)y`}, tool.KindInvalidParams)
	wantErr(t, s, "grep", map[string]any{"pattern": "x", "path": "missing"}, tool.KindFileNotFound)
}

func TestGrepLimits(t *testing.T) {
	root := t.TempDir()
	write(t, root, "a.txt", "hit 1\nmiss\nhit 2\nhit 3\n")
	write(t, root, "b.txt", "hit 4\nhit 5\n")
	write(t, root, "c.txt", "hit 6\n")
	write(t, root, "0huge.txt", "hit\n"+strings.Repeat("x", 200))
	write(t, root, "long.txt", "xx hit "+strings.Repeat("y", 50)+"\n")
	s := newSource(t, root, builtin.WithMaxMatches(4), builtin.WithMaxReadBytes(100), builtin.WithMaxLineLength(10))
	got := text(t, s, "grep", map[string]any{"pattern": "hit"})
	want := `Found more than 4 matches for "hit" in .:

File: a.txt
L1: hit 1
L3: hit 2
L4: hit 3

File: b.txt
L1: hit 4

[stopped after 4 matches; narrow the pattern, path or include to see the rest]

[1 file over 100 bytes not searched]`
	if got != want {
		t.Errorf("capped =\n%s\nwant\n%s", got, want)
	}
	// Exactly the cap is not "more".
	got = text(t, s, "grep", map[string]any{"pattern": "hit [1-4]"})
	if !strings.HasPrefix(got, "Found 4 matches") || strings.Contains(got, "stopped") {
		t.Errorf("exactly 4 =\n%s", got)
	}
	got = text(t, s, "grep", map[string]any{"pattern": "hit", "include": "long.txt"})
	if got != "Found 1 match for \"hit\" in . (include \"long.txt\"):\n\nFile: long.txt\nL1: xx hit yyy ... [line cut: 10 of 57 characters shown]" {
		t.Errorf("long line = %q", got)
	}
	if got := text(t, s, "grep", map[string]any{"pattern": "hit", "path": "0huge.txt"}); got != "0huge.txt was not searched: it is over 100 bytes." {
		t.Errorf("huge = %q", got)
	}
}
