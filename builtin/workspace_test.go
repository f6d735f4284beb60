package builtin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/tool"
)

// fuzzTree builds a workspace with links of every kind next to a directory
// outside it, and returns the workspace.
func fuzzTree(t testing.TB, parent string) *workspace {
	root := filepath.Join(parent, "ws")
	outside := filepath.Join(parent, "out")
	for _, d := range []string{root + "/a/b", root + "/~", outside + "/d"} {
		if err := os.MkdirAll(filepath.FromSlash(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{root + "/f.txt", root + "/a/b/g.txt", outside + "/secret"} {
		if err := os.WriteFile(filepath.FromSlash(f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		root + "/out":      outside,
		root + "/outrel":   "../out/secret",
		root + "/in":       "a/b",
		root + "/inabs":    root + "/a",
		root + "/a/up":     "..",
		root + "/a/upup":   "../..",
		root + "/loop":     "loop",
		root + "/chain":    "in/../outrel",
		root + "/dangling": "nope/../../..",
		outside + "/back":  root,
		root + "/viaout":   "../out/back/a",
	}
	for l, target := range links {
		if err := os.Symlink(target, filepath.FromSlash(l)); err != nil {
			t.Skipf("symlinks unavailable: %v", err)
		}
	}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		t.Fatal(err)
	}
	return &workspace{root: real}
}

// FuzzResolvePath checks the resolver's contract: any input either resolves
// to a path inside the root, free of links, or is refused with one of the
// expected kinds; it never panics.
func FuzzResolvePath(f *testing.F) {
	w := fuzzTree(f, f.TempDir())
	for _, seed := range []string{
		"", ".", "..", "../..", "a/../../x", "sub/../../", "/", "/etc/passwd",
		"/proc/self/environ", "/proc/self/root/etc/passwd", "/proc/self/cwd/x",
		"out", "out/secret", "outrel", "chain", "in/g.txt", "inabs/b/g.txt",
		"a/up/f.txt", "a/upup", "a/upup/out/secret", "loop", "dangling", "viaout",
		"~/x", "~", "f.txt\x00", "f.txt/x", "a//b/./g.txt", strings.Repeat("a/", 3000),
		w.root, w.root + "/../out", w.root + "/a/b", "/proc/self/root" + w.root + "/f.txt",
		strings.Repeat("x", 300),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, p string) {
		checkResolveNew(t, w, p)
		loc, err := w.resolve("path", p)
		if err != nil {
			switch k := tool.KindOf(err); k {
			case tool.KindPathNotInWorkspace, tool.KindInvalidParams, tool.KindFileNotFound:
			default:
				t.Fatalf("resolve(%q): error of kind %s: %v", p, k, err)
			}
			return
		}
		if rel, ok := w.within(loc.abs); !ok || rel != loc.rel {
			t.Fatalf("resolve(%q) = %+v, outside %s", p, loc, w.root)
		}
		if loc.rel != "." && !filepath.IsLocal(loc.rel) {
			t.Fatalf("resolve(%q): rel %q is not local", p, loc.rel)
		}
		if filepath.Join(w.root, loc.rel) != loc.abs {
			t.Fatalf("resolve(%q) = %+v: abs and rel disagree", p, loc)
		}
		real, err := filepath.EvalSymlinks(loc.abs)
		if err != nil || real != loc.abs {
			t.Fatalf("resolve(%q) = %q, which resolves to %q (%v)", p, loc.abs, real, err)
		}
	})
}

// checkResolveNew checks resolveNew's contract for p: a refusal of an
// expected kind, or a location inside the root whose existing part is free
// of links; and the same location as resolve wherever resolve succeeds.
func checkResolveNew(t *testing.T, w *workspace, p string) {
	t.Helper()
	loc, err := w.resolveNew("path", p)
	if err != nil {
		switch k := tool.KindOf(err); k {
		case tool.KindPathNotInWorkspace, tool.KindInvalidParams, tool.KindFileNotFound:
		default:
			t.Fatalf("resolveNew(%q): error of kind %s: %v", p, k, err)
		}
		if _, rerr := w.resolve("path", p); rerr == nil {
			t.Fatalf("resolveNew(%q) refused what resolve accepts: %v", p, err)
		}
		return
	}
	if rel, ok := w.within(loc.abs); !ok || rel != loc.rel || filepath.Join(w.root, loc.rel) != loc.abs {
		t.Fatalf("resolveNew(%q) = %+v, outside %s", p, loc, w.root)
	}
	existing := loc.abs
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		}
		existing = filepath.Dir(existing)
	}
	if real, err := filepath.EvalSymlinks(existing); err != nil || real != existing {
		t.Fatalf("resolveNew(%q) = %q, whose existing part %q resolves to %q (%v)", p, loc.abs, existing, real, err)
	}
	if r, err := w.resolve("path", p); err == nil && r != loc {
		t.Fatalf("resolveNew(%q) = %+v, resolve = %+v", p, loc, r)
	}
}

// TestSwapBeforeWrite replaces a checked parent directory with a link
// outside between resolveNew and the write: the [os.Root] refuses to
// create the file there.
func TestSwapBeforeWrite(t *testing.T) {
	parent := t.TempDir()
	w := fuzzTree(t, parent)
	loc, err := w.resolveNew("path", "a/b/new.txt")
	if err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(parent, "out", "d")
	if err := os.Rename(filepath.Join(w.root, "a", "b"), filepath.Join(w.root, "a", "b.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(w.root, "a", "b")); err != nil {
		t.Fatal(err)
	}
	r, err := w.open()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := writeAtomic(r, loc.rel, []byte("pwned"), newFileMode, false); err == nil {
		t.Fatal("wrote through a swapped link")
	} else if k := tool.KindOf(createError("a/b/new.txt", err)); k != tool.KindPathNotInWorkspace {
		t.Errorf("swapped link: kind %s (%v), want path_not_in_workspace", k, err)
	}
	entries, _ := os.ReadDir(outside)
	if len(entries) != 0 {
		t.Errorf("files created outside: %v", entries)
	}
}

// TestSwapAfterResolve replaces a checked directory with a link outside
// between the check and the open: the [os.Root] still refuses it.
func TestSwapAfterResolve(t *testing.T) {
	parent := t.TempDir()
	w := fuzzTree(t, parent)
	loc, err := w.resolve("path", "a/b/g.txt")
	if err != nil {
		t.Fatal(err)
	}
	// Swap a/b for a link to a directory outside holding g.txt.
	outside := filepath.Join(parent, "out", "d")
	if err := os.WriteFile(filepath.Join(outside, "g.txt"), []byte("SECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(w.root, "a", "b"), filepath.Join(w.root, "a", "b.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(w.root, "a", "b")); err != nil {
		t.Fatal(err)
	}
	r, err := w.open()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	data, err := readRegular(r, loc.rel, 1<<20)
	if err == nil {
		t.Fatalf("read through a swapped link: %q", data)
	}
	if k := tool.KindOf(fsError("path", "a/b/g.txt", err)); k != tool.KindPathNotInWorkspace {
		t.Errorf("swapped link: kind %s (%v), want path_not_in_workspace", k, err)
	}
	// And resolving again now refuses it up front.
	if _, err := w.resolve("path", "a/b/g.txt"); tool.KindOf(err) != tool.KindPathNotInWorkspace {
		t.Errorf("resolve after swap: %v", err)
	}
}

// TestWalkCancel checks that a walk notices cancellation part way.
func TestWalkCancel(t *testing.T) {
	root := t.TempDir()
	for i := range 3 {
		dir := filepath.Join(root, string(rune('a'+i)))
		os.Mkdir(dir, 0o755)
		for j := range 300 {
			os.WriteFile(filepath.Join(dir, strings.Repeat("f", 1+j%5)+string(rune('A'+j%26))+string(rune('A'+j/26))), nil, 0o644)
		}
	}
	s, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.ws.open()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seen := 0
	err = s.ws.walk(ctx, r, location{abs: s.ws.root, rel: "."}, func(walkFile) error {
		seen++
		if seen == 10 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("walk err = %v, want context.Canceled", err)
	}
	if seen >= 900 {
		t.Errorf("walk visited all %d files after cancellation", seen)
	}

	// The tools return the context's error too.
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if _, err := s.Call(ctx, Grep, map[string]any{"pattern": "x"}); !errors.Is(err, context.Canceled) {
		t.Errorf("grep err = %v", err)
	}
}
