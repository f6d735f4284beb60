package builtin_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/builtin"
	"github.com/toolmux/toolmux/tool"
)

// secret is the content of the files outside the workspace. No result or
// error may ever contain it.
const secret = "TOP-SECRET-c0ffee-5e1f"

// escapeFixture is a workspace next to a directory of secrets, with every
// kind of link that could lead from one to the other.
type escapeFixture struct {
	root, outside string
	s             *builtin.Source
}

func newEscapeFixture(t *testing.T) *escapeFixture {
	t.Helper()
	parent := t.TempDir()
	root := filepath.Join(parent, "ws")
	outside := filepath.Join(parent, "outside")
	write(t, outside, "secret.txt", secret+"\n")
	write(t, outside, "dir/inner.txt", secret+"\n")
	write(t, outside, "back/x.txt", secret+"\n")

	write(t, root, "file.txt", "inside\n")
	write(t, root, "sub/inner.go", "package sub\n")
	symlink(t, outside, filepath.Join(root, "linkdir"))                               // absolute, to a directory outside
	symlink(t, filepath.Join(outside, "secret.txt"), filepath.Join(root, "linkfile")) // absolute, to a file outside
	symlink(t, "../outside/secret.txt", filepath.Join(root, "rellink"))               // relative, to a file outside
	symlink(t, "chain2", filepath.Join(root, "chain1"))                               // chain1 -> chain2 -> linkfile -> outside
	symlink(t, "linkfile", filepath.Join(root, "chain2"))
	symlink(t, "../..", filepath.Join(root, "sub", "escape")) // relative, to the parent of the root
	symlink(t, filepath.Join(outside, "missing"), filepath.Join(root, "dangling"))
	// A link out and back in: outside/back/ws -> root. The path it makes
	// ends inside, but it passes through a link that points outside.
	symlink(t, root, filepath.Join(outside, "back", "ws"))
	symlink(t, "../outside/back", filepath.Join(root, "outandback"))
	return &escapeFixture{root: root, outside: outside, s: newSource(t, root)}
}

// escapes lists paths that must be refused, with the kind of the refusal.
func (f *escapeFixture) escapes() []struct {
	path string
	kind tool.Kind
} {
	out := tool.KindPathNotInWorkspace
	return []struct {
		path string
		kind tool.Kind
	}{
		{"..", out},
		{"../..", out},
		{"../", out},
		{"./..", out},
		{"a/../../x", out},
		{"sub/../../", out},
		{"sub/./../../outside/secret.txt", out},
		{"../outside/secret.txt", out},
		{"../outside", out},
		{"/etc/passwd", out},
		{"/", out},
		{"//etc//passwd", out},
		{"/proc/self/environ", out},
		{"/proc/self/root/etc/passwd", out},
		{"/proc/self/cwd", out},
		{"/proc/self/root" + f.outside + "/secret.txt", out},
		{f.outside, out},
		{filepath.Join(f.outside, "secret.txt"), out},
		{filepath.Join(f.outside, "missing.txt"), out},
		{filepath.Join(f.root, "..", "outside", "secret.txt"), out},
		{f.root + "/../outside", out},
		{"linkdir", out},
		{"linkdir/", out},
		{"linkdir/secret.txt", out},
		{"linkdir/dir/inner.txt", out},
		{"linkdir/missing", out},
		{"linkfile", out},
		{"rellink", out},
		{"chain1", out},
		{"chain2", out},
		{"sub/escape", out},
		{"sub/escape/outside/secret.txt", out},
		{"dangling", out},
		{"outandback", out},
		{"outandback/ws/file.txt", out},
		{filepath.Join(f.outside, "back", "ws", "..", "secret.txt"), out},
		{"file.txt\x00", tool.KindInvalidParams},
		{"\x00/etc/passwd", tool.KindInvalidParams},
		{"../outside/secret.txt\x00.png", tool.KindInvalidParams},
		{strings.Repeat("a/", 2500), tool.KindInvalidParams},
		{"/" + strings.Repeat("x", 5000), tool.KindInvalidParams},
		{"~/x", tool.KindFileNotFound},
		{"~", tool.KindFileNotFound},
		{"$HOME/.ssh", tool.KindFileNotFound},
		{`..\..\etc\passwd`, tool.KindFileNotFound}, // a file name on Unix
		{"file.txt/x", tool.KindFileNotFound},
	}
}

// noSecret fails when the secret appears anywhere in a call's outcome.
func noSecret(t *testing.T, what string, res *tool.Result, err error) {
	t.Helper()
	var all strings.Builder
	if res != nil {
		all.WriteString(res.Text())
		all.WriteString(res.Summary())
		for _, c := range res.Content {
			all.Write(c.Data)
		}
	}
	if err != nil {
		all.WriteString(err.Error())
		if te, ok := errors.AsType[*tool.Error](err); ok {
			all.WriteString(te.Detail)
		}
	}
	if strings.Contains(all.String(), secret) {
		t.Errorf("%s leaked outside content:\n%s", what, all.String())
	}
}

// TestTraversal runs the corpus against every path argument of every tool.
func TestTraversal(t *testing.T) {
	f := newEscapeFixture(t)
	type use struct {
		tool string
		args func(p string) map[string]any
	}
	uses := []use{
		{"list_directory", func(p string) map[string]any { return map[string]any{"path": p} }},
		{"read_file", func(p string) map[string]any { return map[string]any{"path": p} }},
		{"read_file", func(p string) map[string]any { return map[string]any{"path": p, "offset": 0.0, "limit": 10.0} }},
		{"glob", func(p string) map[string]any { return map[string]any{"pattern": "*", "path": p} }},
		{"glob", func(p string) map[string]any { return map[string]any{"pattern": "**", "path": p} }},
		{"grep", func(p string) map[string]any { return map[string]any{"pattern": ".", "path": p} }},
		{"grep", func(p string) map[string]any { return map[string]any{"pattern": "SECRET", "path": p, "include": "*"} }},
		// edit of a file that exists is refused like a read; see
		// TestTraversalWrite for the edits and writes that create files.
		{"edit", func(p string) map[string]any {
			return map[string]any{"path": p, "old_string": "TOP-SECRET", "new_string": "pwned"}
		}},
		{"shell", func(p string) map[string]any { return map[string]any{"command": "cat secret.txt", "cwd": p} }},
	}
	for _, c := range f.escapes() {
		for _, u := range uses {
			args := u.args(c.path)
			res, err := f.s.Call(context.Background(), u.tool, args)
			noSecret(t, u.tool+" "+c.path, res, err)
			if err == nil {
				t.Errorf("%s(%q) = %q, want a %s error", u.tool, c.path, res.Text(), c.kind)
				continue
			}
			te, ok := errors.AsType[*tool.Error](err)
			if !ok || te.Kind != c.kind {
				t.Errorf("%s(%q) error = %v, want kind %s", u.tool, c.path, err, c.kind)
				continue
			}
			if c.kind == tool.KindPathNotInWorkspace && !strings.Contains(te.Message, f.s.Root()) {
				t.Errorf("%s(%q) message %q does not name the root", u.tool, c.path, te.Message)
			}
		}
	}
}

// TestTraversalGlobPattern treats the pattern of glob as a path: its literal
// leading directories are confined like any path argument.
func TestTraversalGlobPattern(t *testing.T) {
	f := newEscapeFixture(t)
	for _, c := range f.escapes() {
		for _, pattern := range []string{c.path + "/*", c.path + "/**/*.txt"} {
			res, err := f.s.Call(context.Background(), "glob", map[string]any{"pattern": pattern})
			noSecret(t, "glob "+pattern, res, err)
			want := c.kind
			if want == tool.KindFileNotFound {
				// A pattern whose directory does not exist matches nothing.
				if err != nil || !strings.HasPrefix(res.Text(), "No files found") {
					t.Errorf("glob(%q) = %v, %v, want no files", pattern, res, err)
				}
				continue
			}
			if k := tool.KindOf(err); k != want {
				t.Errorf("glob(%q) = %v, %v, want kind %s", pattern, res.Text(), err, want)
			}
		}
	}
	for _, pattern := range []string{"..", "../*", "**/../*", "*/../../*", "sub/../../*"} {
		res, err := f.s.Call(context.Background(), "glob", map[string]any{"pattern": pattern})
		noSecret(t, "glob "+pattern, res, err)
		if err == nil && !strings.HasPrefix(res.Text(), "No files found") {
			t.Errorf("glob(%q) = %q", pattern, res.Text())
		}
	}
}

// TestTraversalWalks checks that whole-workspace walks, listings and include
// filters never reach through the links.
func TestTraversalWalks(t *testing.T) {
	f := newEscapeFixture(t)
	ctx := context.Background()
	for _, args := range []map[string]any{
		{"pattern": "SECRET"},
		{"pattern": "."},
		{"pattern": "SECRET", "include": "**"},
		{"pattern": "SECRET", "include": "../outside/*"},
		{"pattern": "SECRET", "include": f.outside + "/*"},
		{"pattern": "SECRET", "include": "linkdir/**"},
	} {
		res, err := f.s.Call(ctx, "grep", args)
		noSecret(t, "grep", res, err)
		if err != nil {
			t.Fatalf("grep %v: %v", args, err)
		}
		for _, line := range strings.Split(res.Text(), "\n") {
			if name, ok := strings.CutPrefix(line, "File: "); ok && name != "file.txt" && name != "sub/inner.go" {
				t.Errorf("grep %v searched %s:\n%s", args, name, res.Text())
			}
		}
	}
	for _, pattern := range []string{"**", "**/*", "**/*.txt", "*", "*/*"} {
		res, err := f.s.Call(ctx, "glob", map[string]any{"pattern": pattern})
		noSecret(t, "glob", res, err)
		if err != nil {
			t.Fatal(err)
		}
		got := res.Text()
		for _, bad := range []string{"linkdir", "linkfile", "rellink", "chain", "dangling", "outandback", "escape", "secret"} {
			if strings.Contains(got, bad) {
				t.Errorf("glob %s lists %s:\n%s", pattern, bad, got)
			}
		}
	}
	res, err := f.s.Call(ctx, "list_directory", map[string]any{"path": "."})
	noSecret(t, "list", res, err)
	if err != nil {
		t.Fatal(err)
	}
	size := fmt.Sprintf("(%d bytes", len(secret)+1)
	for _, line := range strings.Split(res.Text(), "\n") {
		for _, l := range []string{"linkdir", "linkfile", "rellink", "chain1", "chain2", "dangling", "outandback"} {
			if strings.Contains(line, l+" ") && line != "[LINK] "+l+" (symbolic link that is broken or leads outside the workspace)" {
				t.Errorf("list describes outside link: %q", line)
			}
		}
		if strings.Contains(line, size) {
			t.Errorf("list shows the size of an outside file: %q", line)
		}
	}
}

// TestInsideLinks checks that links which stay inside the workspace work.
func TestInsideLinks(t *testing.T) {
	root := t.TempDir()
	write(t, root, "sub/file.txt", "inside\n")
	symlink(t, filepath.Join(root, "sub", "file.txt"), filepath.Join(root, "abs"))
	symlink(t, "sub/file.txt", filepath.Join(root, "rel"))
	symlink(t, "..", filepath.Join(root, "sub", "up"))
	symlink(t, "../sub/./file.txt", filepath.Join(root, "sub", "dotted"))
	write(t, root, "~/x", "tilde\n")
	s := newSource(t, root)
	for _, p := range []string{"abs", "rel", "sub/up/sub/file.txt", "sub/up/rel", "sub/dotted", filepath.Join(root, "sub", "up", "abs")} {
		if got := text(t, s, "read_file", map[string]any{"path": p}); got != "inside" {
			t.Errorf("read %s = %q", p, got)
		}
	}
	if got := text(t, s, "read_file", map[string]any{"path": "~/x"}); got != "tilde" {
		t.Errorf("~/x = %q", got)
	}
	if got := text(t, s, "grep", map[string]any{"pattern": "inside", "path": "sub/up"}); !strings.Contains(got, "File: abs\n") || !strings.Contains(got, "File: sub/file.txt\n") {
		t.Errorf("grep through sub/up =\n%s", got)
	}
	// A link loop inside the workspace is a bad path, not a hang.
	symlink(t, "loop2", filepath.Join(root, "loop1"))
	symlink(t, "loop1", filepath.Join(root, "loop2"))
	wantErr(t, s, "read_file", map[string]any{"path": "loop1"}, tool.KindInvalidParams)
	if got := text(t, s, "list_directory", map[string]any{"path": "."}); !strings.Contains(got, "[LINK] loop1 (") {
		t.Errorf("list with loop =\n%s", got)
	}
}

// outsideState records every file and directory under dir, except the
// subtree skip, with its content and mode, to detect any write outside the
// workspace.
func outsideState(t *testing.T, dir, skip string) map[string]string {
	t.Helper()
	state := map[string]string{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			state[p] = "error: " + err.Error()
			return nil
		}
		if p == skip {
			return filepath.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		entry := fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			entry += " " + string(b)
		}
		state[p] = entry
		return nil
	})
	return state
}

// TestTraversalWrite runs the corpus, and paths that only a writer could
// misuse, against write_file and edit creating files: nothing may be
// written outside the workspace, through any kind of link.
func TestTraversalWrite(t *testing.T) {
	f := newEscapeFixture(t)
	// A hard link inside to a file outside: replacing the file must not
	// write through the link.
	if err := os.Link(filepath.Join(f.outside, "secret.txt"), filepath.Join(f.root, "hard")); err != nil {
		t.Skipf("hard links unavailable: %v", err)
	}
	parent := filepath.Dir(f.root)
	before := outsideState(t, parent, f.root)
	passwd, _ := os.ReadFile("/etc/passwd")

	cases := f.escapes()
	out := tool.KindPathNotInWorkspace
	for _, p := range []string{
		"linkdir/new.txt", "linkdir/sub/new.txt", "linkdir/dir/inner.txt",
		"sub/escape/new.txt", "sub/escape/outside/new.txt", "sub/escape/outside/secret.txt",
		"outandback/ws/new.txt", "outandback/new.txt", "chain1", "rellink",
		filepath.Join(f.outside, "new.txt"), filepath.Join(f.outside, "dir", "new", "deep.txt"),
		"/proc/self/cwd/new.txt", "/proc/self/root" + f.root + "/new.txt", "/tmp/toolmux-escape.txt",
	} {
		cases = append(cases, struct {
			path string
			kind tool.Kind
		}{p, out})
	}
	uses := []struct {
		tool string
		args func(p string) map[string]any
	}{
		{"write_file", func(p string) map[string]any { return map[string]any{"path": p, "content": "pwned"} }},
		{"edit", func(p string) map[string]any {
			return map[string]any{"path": p, "old_string": "", "new_string": "pwned"}
		}},
	}
	for _, c := range cases {
		for _, u := range uses {
			res, err := f.s.Call(context.Background(), u.tool, u.args(c.path))
			noSecret(t, u.tool+" "+c.path, res, err)
			if c.kind == tool.KindFileNotFound {
				// A name that only looks like a way out ("~", "$HOME")
				// is an ordinary file name inside the workspace: it is
				// created, or refused because an earlier call created it
				// (or a directory under it), or cannot be made.
				if err != nil {
					if k := tool.KindOf(err); k != tool.KindFileNotFound && k != tool.KindInvalidParams {
						t.Errorf("%s(%q) = %v", u.tool, c.path, err)
					}
					continue
				}
				st := res.Structured.(map[string]any)
				if b, rerr := os.ReadFile(filepath.Join(f.root, st["path"].(string))); rerr != nil || string(b) != "pwned" {
					t.Errorf("%s(%q) reported %v but the file inside holds %q (%v)", u.tool, c.path, st, b, rerr)
				}
				continue
			}
			if k := tool.KindOf(err); k != c.kind {
				t.Errorf("%s(%q) = %v, %v; want kind %s", u.tool, c.path, res, err, c.kind)
			}
		}
	}

	// The hard link is replaced by a new file; the file outside keeps its
	// content.
	if _, err := f.s.Call(context.Background(), "write_file", map[string]any{"path": "hard", "content": "replaced"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(f.root, "hard")); string(b) != "replaced" {
		t.Errorf("hard = %q", b)
	}
	if err := os.Link(filepath.Join(f.outside, "dir", "inner.txt"), filepath.Join(f.root, "hard2")); err != nil {
		t.Fatal(err)
	}
	res, err := f.s.Call(context.Background(), "edit", map[string]any{"path": "hard2", "old_string": "TOP", "new_string": "BOTTOM"})
	noSecret(t, "edit hard2", res, err)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(f.root, "hard2")); !strings.HasPrefix(string(b), "BOTTOM-SECRET") {
		t.Errorf("hard2 = %q", b)
	}

	after := outsideState(t, parent, f.root)
	for p, was := range before {
		if after[p] != was {
			t.Errorf("outside the workspace, %s changed: %q -> %q", p, was, after[p])
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("outside the workspace, %s was created", p)
		}
	}
	if now, _ := os.ReadFile("/etc/passwd"); string(now) != string(passwd) {
		t.Error("/etc/passwd changed")
	}
	if _, err := os.Stat("/tmp/toolmux-escape.txt"); err == nil {
		t.Error("/tmp/toolmux-escape.txt was created")
	}
}
