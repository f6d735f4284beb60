package builtin_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmux/toolmux/builtin"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/tool"
)

// readBack returns the content of root/rel.
func readBack(t *testing.T, root, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// noTempFiles fails if a temporary file of an atomic write is left
// anywhere under root.
func noTempFiles(t *testing.T, root string) {
	t.Helper()
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".toolmux-") {
			t.Errorf("temporary file left behind: %s", p)
		}
		return nil
	})
}

func modeOf(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestWriteFile(t *testing.T) {
	root := t.TempDir()
	write(t, root, "old.txt", "the old content\n")
	write(t, root, "private.txt", "secret\n")
	write(t, root, "run.sh", "#!/bin/sh\n")
	write(t, root, "dir/keep.txt", "x")
	os.Chmod(filepath.Join(root, "private.txt"), 0o600)
	os.Chmod(filepath.Join(root, "run.sh"), 0o755)
	symlink(t, "old.txt", filepath.Join(root, "link.txt"))
	symlink(t, "made/by/link.txt", filepath.Join(root, "dangling.txt"))
	s := newSource(t, root)

	for _, c := range []struct {
		name    string
		args    map[string]any
		want    string // the result text
		file    string // the file that must hold content afterwards
		content string
		created bool
	}{
		{"create", map[string]any{"path": "new.txt", "content": "hello"},
			"Created new.txt (5 bytes).", "new.txt", "hello", true},
		{"create with parents", map[string]any{"path": "a/b/c.txt", "content": "deep\n"},
			"Created a/b/c.txt (5 bytes). Missing parent directories were created.", "a/b/c.txt", "deep\n", true},
		{"create in existing dir", map[string]any{"path": "dir/new.txt", "content": "x"},
			"Created dir/new.txt (1 byte).", "dir/new.txt", "x", true},
		{"empty content", map[string]any{"path": "empty.txt", "content": ""},
			"Created empty.txt (0 bytes).", "empty.txt", "", true},
		{"overwrite", map[string]any{"path": "old.txt", "content": "new"},
			"Overwrote old.txt (3 bytes; it held 16 bytes).", "old.txt", "new", false},
		{"absolute", map[string]any{"path": filepath.Join(root, "abs.txt"), "content": "abs"},
			"Created abs.txt (3 bytes).", "abs.txt", "abs", true},
		{"slashes", map[string]any{"path": "./dir//x/../y.txt", "content": "y"},
			"Created dir/y.txt (1 byte).", "dir/y.txt", "y", true},
		{"through a link", map[string]any{"path": "link.txt", "content": "via link"},
			"Overwrote old.txt (8 bytes; it held 3 bytes).", "old.txt", "via link", false},
		{"dangling link inside", map[string]any{"path": "dangling.txt", "content": "made"},
			"Created made/by/link.txt (4 bytes). Missing parent directories were created.", "made/by/link.txt", "made", true},
		{"keeps 0600", map[string]any{"path": "private.txt", "content": "still secret\n"},
			"Overwrote private.txt (13 bytes; it held 7 bytes).", "private.txt", "still secret\n", false},
		{"keeps 0755", map[string]any{"path": "run.sh", "content": "#!/bin/sh\necho hi\n"},
			"Overwrote run.sh (18 bytes; it held 10 bytes).", "run.sh", "#!/bin/sh\necho hi\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := call(t, s, "write_file", c.args)
			if err != nil {
				t.Fatal(err)
			}
			if res.Text() != c.want || res.IsError {
				t.Errorf("result %q (isError %v), want %q", res.Text(), res.IsError, c.want)
			}
			if got := readBack(t, root, c.file); got != c.content {
				t.Errorf("%s holds %q, want %q", c.file, got, c.content)
			}
			st := res.Structured.(map[string]any)
			if st["created"] != c.created || st["bytes"] != len(c.content) || st["path"] != c.file {
				t.Errorf("structured %v", st)
			}
		})
	}
	if m := modeOf(t, filepath.Join(root, "private.txt")); m != 0o600 {
		t.Errorf("private.txt mode %v, want 0600", m)
	}
	if m := modeOf(t, filepath.Join(root, "run.sh")); m != 0o755 {
		t.Errorf("run.sh mode %v, want 0755", m)
	}
	if fi, err := os.Lstat(filepath.Join(root, "link.txt")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("link.txt is no longer a link: %v", err)
	}
	noTempFiles(t, root)
}

func TestWriteFileErrors(t *testing.T) {
	root := t.TempDir()
	write(t, root, "file.txt", "x")
	write(t, root, "dir/a.txt", "x")
	fifoOK := mkfifo(filepath.Join(root, "fifo")) == nil
	s := newSource(t, root, builtin.WithMaxWriteBytes(10))
	cases := []struct {
		name string
		args map[string]any
		kind tool.Kind
		msg  string
	}{
		{"directory", map[string]any{"path": "dir", "content": "x"}, tool.KindInvalidParams, "is a directory"},
		{"root", map[string]any{"path": ".", "content": "x"}, tool.KindInvalidParams, "is a directory"},
		{"parent is a file", map[string]any{"path": "file.txt/x", "content": "x"}, tool.KindFileNotFound, "does not exist"},
		{"too large", map[string]any{"path": "big.txt", "content": "12345678901"}, tool.KindInvalidParams, "11 bytes, over write_file's limit of 10 bytes"},
		{"no content", map[string]any{"path": "a.txt"}, tool.KindInvalidParams, `"content"`},
		{"null content", map[string]any{"path": "a.txt", "content": nil}, tool.KindInvalidParams, `"content"`},
		{"content not a string", map[string]any{"path": "a.txt", "content": 3.0}, tool.KindInvalidParams, "must be a string"},
		{"no path", map[string]any{"content": "x"}, tool.KindInvalidParams, `"path"`},
		{"empty path", map[string]any{"path": "", "content": "x"}, tool.KindInvalidParams, "empty"},
		{"unknown argument", map[string]any{"path": "a.txt", "content": "x", "mode": "0644"}, tool.KindInvalidParams, `"mode"`},
	}
	if fifoOK {
		cases = append(cases, struct {
			name string
			args map[string]any
			kind tool.Kind
			msg  string
		}{"fifo", map[string]any{"path": "fifo", "content": "x"}, tool.KindInvalidParams, "named pipe"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			te := wantErr(t, s, "write_file", c.args, c.kind)
			if !strings.Contains(te.Message, c.msg) {
				t.Errorf("message %q does not contain %q", te.Message, c.msg)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(root, "big.txt")); err == nil {
		t.Error("an oversized write created the file")
	}
	if _, err := os.Stat(filepath.Join(root, "a.txt")); err == nil {
		t.Error("a refused write created the file")
	}
	if got := readBack(t, root, "file.txt"); got != "x" {
		t.Errorf("file.txt = %q", got)
	}
	noTempFiles(t, root)
}

// TestWriteFileReadOnly runs as a user whom file permissions bind: as
// root (make test in CI) it runs again as nobody (RunUnprivileged).
func TestWriteFileReadOnly(t *testing.T) {
	if !testservers.RunUnprivileged(t) {
		return
	}
	root := t.TempDir()
	write(t, root, "ro.txt", "keep")
	os.Chmod(filepath.Join(root, "ro.txt"), 0o444)
	write(t, root, "locked/a.txt", "x")
	os.Chmod(filepath.Join(root, "locked"), 0o555)
	t.Cleanup(func() { os.Chmod(filepath.Join(root, "locked"), 0o755) })
	s := newSource(t, root)
	// A rename would replace a read-only file; an in-place write could
	// not, and neither may write_file.
	wantErr(t, s, "write_file", map[string]any{"path": "ro.txt", "content": "x"}, tool.KindPermissionDenied)
	wantErr(t, s, "edit", map[string]any{"path": "ro.txt", "old_string": "keep", "new_string": "x"}, tool.KindPermissionDenied)
	wantErr(t, s, "write_file", map[string]any{"path": "locked/b.txt", "content": "x"}, tool.KindPermissionDenied)
	if got := readBack(t, root, "ro.txt"); got != "keep" {
		t.Errorf("ro.txt = %q", got)
	}
	noTempFiles(t, root)
}

// TestWriteFileAtomic overwrites a file again and again while another
// goroutine reads it: every read must see one whole version, never a
// truncated or mixed one.
func TestWriteFileAtomic(t *testing.T) {
	root := t.TempDir()
	const size = 256 << 10
	versions := []string{strings.Repeat("a", size), strings.Repeat("b", size)}
	write(t, root, "f.txt", versions[0])
	s := newSource(t, root)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad []string
	reads := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			b, err := os.ReadFile(filepath.Join(root, "f.txt"))
			if err != nil {
				bad = append(bad, err.Error())
				continue
			}
			reads++
			if len(b) != size || (bytes.Count(b, []byte{'a'}) != size && bytes.Count(b, []byte{'b'}) != size) {
				bad = append(bad, fmt.Sprintf("partial content of %d bytes", len(b)))
			}
		}
	}()
	for i := range 100 {
		if _, err := call(t, s, "write_file", map[string]any{"path": "f.txt", "content": versions[(i+1)%2]}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if len(bad) > 0 {
		t.Errorf("%d of %d reads saw a partial file: %v", len(bad), reads, bad[:min(3, len(bad))])
	}
	noTempFiles(t, root)
}

// TestWriteFileCancelled checks that a cancelled call writes nothing.
func TestWriteFileCancelled(t *testing.T) {
	root := t.TempDir()
	s := newSource(t, root)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if _, err := s.Call(ctx, "write_file", map[string]any{"path": "x.txt", "content": "x"}); tool.KindOf(err) != tool.KindTimeout {
		t.Errorf("err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "x.txt")); err == nil {
		t.Error("a cancelled call wrote the file")
	}
}

// TestWriteFileRunningProgram replaces a program while it runs: the file
// cannot be written in place (ETXTBSY), but it can be replaced, as a
// compiler replaces the binary it builds.
func TestWriteFileRunningProgram(t *testing.T) {
	bin, err := os.ReadFile("/bin/sleep")
	if err != nil {
		t.Skip(err)
	}
	root := t.TempDir()
	p := filepath.Join(root, "prog")
	if err := os.WriteFile(p, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(p, "300")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot run a program from the temporary directory: %v", err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	s := newSource(t, root)
	got := text(t, s, "write_file", map[string]any{"path": "prog", "content": "#!/bin/sh\n"})
	if !strings.HasPrefix(got, "Overwrote prog (10 bytes;") {
		t.Errorf("result %q", got)
	}
	if m := modeOf(t, p); m != 0o755 {
		t.Errorf("mode %v, want 0755", m)
	}
}
