package builtin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/toolmux/toolmux/tool"
)

// MaxPathLen is the longest path argument accepted, in bytes. It matches
// Linux's PATH_MAX: nothing longer can name a file anyway, and refusing early
// keeps a hostile argument from costing a walk of thousands of components.
const MaxPathLen = 4096

// maxSymlinks bounds how many symbolic links one resolution follows, as the
// kernel does, so a loop ends in an error instead of running forever.
const maxSymlinks = 255

// workspace confines paths to a directory tree.
//
// Confinement is done twice. resolve follows symbolic links itself, one
// component at a time, and refuses any path whose resolution ends outside
// the root or leaves it on the way; the tools then open the resolved,
// root-relative path through an [os.Root], which the kernel confines again,
// so a link swapped in between the check and the open still cannot escape.
type workspace struct {
	// root is absolute, clean and free of symbolic links.
	root string
	// alias is the root as given, made absolute, when that differs from
	// root: absolute paths under it are accepted as paths under root.
	alias string
}

// location is a path argument resolved inside the workspace.
type location struct {
	// abs is the absolute, symlink-free path.
	abs string
	// rel is abs relative to the root ("." for the root itself), in the
	// form [os.Root] methods take.
	rel string
}

// display is how results name the location: relative to the root, with
// forward slashes.
func (l location) display() string { return filepath.ToSlash(l.rel) }

// errLoop reports a chain of more than maxSymlinks links.
var errLoop = errors.New("too many levels of symbolic links")

// resolve maps the path argument p (absolute, or relative to the root) to a
// location inside the workspace. It returns a *tool.Error of kind
// invalid_tool_params for malformed paths, path_not_in_workspace for paths
// that resolve outside the root (or pass outside it through a link),
// file_not_found for paths inside that do not exist, and permission_denied
// when the operating system refuses to look. The path is never expanded in
// any other way: "~" and "$HOME" are ordinary file names.
func (w *workspace) resolve(arg, p string) (location, error) {
	return w.resolvePath(arg, p, false)
}

// resolveNew is resolve for a path a tool is about to create: the path, or
// some of its parent directories, may not exist yet. The part that exists
// is resolved as resolve does, links included; the missing rest is taken
// lexically and must stay inside the root. A ".." in that rest (only a
// link's target can bring one) is refused as not existing, since no
// directory can be walked through before it is created.
//
// A final component that is a symbolic link is followed, so writing to a
// link inside the workspace writes to its target, and a link that leads
// outside, even a dangling one, is refused.
func (w *workspace) resolveNew(arg, p string) (location, error) {
	return w.resolvePath(arg, p, true)
}

// resolvePath is resolve, and with create resolveNew.
func (w *workspace) resolvePath(arg, p string, create bool) (location, error) {
	if len(p) > MaxPathLen {
		return location{}, &tool.Error{Kind: tool.KindInvalidParams,
			Message: fmt.Sprintf("argument %q is a path of %d bytes; paths are limited to %d bytes", arg, len(p), MaxPathLen)}
	}
	if strings.IndexByte(p, 0) >= 0 {
		return location{}, &tool.Error{Kind: tool.KindInvalidParams,
			Message: fmt.Sprintf("argument %q contains a NUL byte, which no file name can contain", arg)}
	}
	if p == "" {
		p = "."
	}
	p = filepath.FromSlash(p)

	// Lexical cleaning removes "x/.." pairs before any link is followed, as
	// path.resolve does in Gemini CLI; the result must lie under the root.
	// An absolute path may also name the root as it was given to New (before
	// its links were resolved), since that is the form a person would quote.
	// Nothing outside is ever looked at: a path that does not lie under the
	// root by its text is refused before the filesystem is touched.
	var rel string
	var ok bool
	if filepath.IsAbs(p) {
		full := filepath.Clean(p)
		rel, ok = within(w.root, full)
		if !ok && w.alias != "" {
			rel, ok = within(w.alias, full)
		}
	} else {
		rel, ok = within(w.root, filepath.Join(w.root, p))
	}
	if !ok {
		return location{}, w.outside(arg, p, false)
	}

	// Follow links one component at a time from the root. The resolution
	// may not leave the root, not even on its way back in: no link may point
	// outside, and no ".." in a link's target may climb above the root.
	dest, queue := w.root, splitPath(rel)
	links := 0
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			// Only a link's target can bring ".." here: the argument was cleaned.
			dest = filepath.Dir(dest)
			if !w.contains(dest) {
				return location{}, w.outside(arg, p, true)
			}
			continue
		}
		next := filepath.Join(dest, c)
		fi, err := os.Lstat(next)
		if err != nil {
			if create && errors.Is(err, fs.ErrNotExist) && !slices.Contains(queue, "..") {
				// What does not exist yet cannot be a link: the rest is
				// a plain path, and only its text decides where it is.
				lexical := filepath.Clean(joinRest(next, queue))
				rel, ok := w.within(lexical)
				if !ok {
					return location{}, w.outside(arg, p, links > 0)
				}
				return location{abs: lexical, rel: rel}, nil
			}
			return location{}, w.unresolved(arg, p, joinRest(next, queue), err, links > 0)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			if !fi.IsDir() && hasComponents(queue) {
				return location{}, w.unresolved(arg, p, joinRest(next, queue), syscall.ENOTDIR, links > 0)
			}
			dest = next
			continue
		}
		links++
		if links > maxSymlinks {
			return location{}, w.unresolved(arg, p, next, errLoop, true)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return location{}, w.unresolved(arg, p, joinRest(next, queue), err, true)
		}
		if filepath.IsAbs(target) {
			if !w.contains(filepath.Clean(target)) {
				return location{}, w.outside(arg, p, true)
			}
			vol := filepath.VolumeName(target)
			dest = vol + string(filepath.Separator)
			target = target[len(vol):]
		} else if !w.contains(filepath.Join(dest, target)) {
			return location{}, w.outside(arg, p, true)
		}
		queue = append(splitPath(target), queue...)
	}
	rel, ok = w.within(dest)
	if !ok {
		return location{}, w.outside(arg, p, links > 0)
	}
	return location{abs: dest, rel: rel}, nil
}

// unresolved builds the error for a path whose resolution stopped at an
// error. The part still unresolved is judged lexically, and containment is
// decided first, so a missing file outside the workspace reads as outside,
// never as missing: nothing is revealed about what exists there.
func (w *workspace) unresolved(arg, p, lexical string, err error, viaLink bool) error {
	if _, ok := w.within(filepath.Clean(lexical)); !ok {
		return w.outside(arg, p, viaLink)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return &tool.Error{Kind: tool.KindFileNotFound, Err: err,
			Message: fmt.Sprintf("%s %q does not exist in the workspace %s", arg, p, w.root)}
	case errors.Is(err, fs.ErrPermission):
		return &tool.Error{Kind: tool.KindPermissionDenied, Err: err,
			Message: fmt.Sprintf("permission denied while resolving %s %q", arg, p)}
	case errors.Is(err, errLoop), errors.Is(err, syscall.ELOOP):
		return &tool.Error{Kind: tool.KindInvalidParams, Err: err,
			Message: fmt.Sprintf("%s %q cannot be resolved: %v", arg, p, errLoop)}
	case errors.Is(err, syscall.ENAMETOOLONG):
		return &tool.Error{Kind: tool.KindInvalidParams, Err: err,
			Message: fmt.Sprintf("%s %q has a file name component that is too long", arg, p)}
	}
	return &tool.Error{Kind: tool.KindExecutionFailed, Err: err,
		Message: fmt.Sprintf("cannot resolve %s %q: %v", arg, p, err)}
}

// outside builds the path_not_in_workspace error. It never names where a
// link led: that would describe the filesystem outside the workspace.
func (w *workspace) outside(arg, p string, viaLink bool) *tool.Error {
	how := "is outside"
	if viaLink {
		how = "leads through a symbolic link outside"
	}
	return &tool.Error{Kind: tool.KindPathNotInWorkspace,
		Message: fmt.Sprintf("%s %q %s the workspace root %s; use a path inside it (relative paths are resolved against the root)", arg, p, how, w.root)}
}

// within reports whether the clean absolute path p is the root or lies under
// it, and returns p relative to the root.
func (w *workspace) within(p string) (string, bool) { return within(w.root, p) }

// within reports whether the clean absolute path p is dir or lies under it,
// and returns p relative to dir.
func within(dir, p string) (string, bool) {
	if p == dir {
		return ".", true
	}
	prefix := dir
	if !strings.HasSuffix(prefix, string(filepath.Separator)) {
		prefix += string(filepath.Separator)
	}
	if rest, ok := strings.CutPrefix(p, prefix); ok && rest != "" {
		return rest, true
	}
	return "", false
}

// contains reports whether the clean absolute path p is inside the root.
func (w *workspace) contains(p string) bool {
	_, ok := w.within(p)
	return ok
}

// open returns the root as an [os.Root]. It is opened per call rather than
// held, so Close has nothing to release and a source costs no descriptor
// while idle.
func (w *workspace) open() (*os.Root, error) {
	r, err := os.OpenRoot(w.root)
	if err != nil {
		return nil, fsError("workspace root", w.root, err)
	}
	return r, nil
}

// fsError classifies an error from an access through the [os.Root] after
// resolve accepted the path; name is how the caller named it.
func fsError(arg, name string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return &tool.Error{Kind: tool.KindFileNotFound, Err: err,
			Message: fmt.Sprintf("%s %q does not exist", arg, name)}
	case errors.Is(err, fs.ErrPermission):
		return &tool.Error{Kind: tool.KindPermissionDenied, Err: err,
			Message: fmt.Sprintf("permission denied: %s %q", arg, name)}
	case isEscape(err):
		// The path changed between the check and the open.
		return &tool.Error{Kind: tool.KindPathNotInWorkspace, Err: err,
			Message: fmt.Sprintf("%s %q leads outside the workspace", arg, name)}
	}
	return &tool.Error{Kind: tool.KindExecutionFailed, Err: err,
		Message: fmt.Sprintf("%s %q: %v", arg, name, err)}
}

// isEscape recognises the error [os.Root] returns for a path that leaves
// it. The os package does not export it, so its text is matched.
func isEscape(err error) bool {
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}

// joinRest joins the unresolved components q to next, lexically.
func joinRest(next string, q []string) string {
	return filepath.Join(append([]string{next}, q...)...)
}

// splitPath splits p on separators; empty components are kept for the
// caller to skip.
func splitPath(p string) []string {
	return strings.FieldsFunc(p, func(r rune) bool { return r < 0x80 && os.IsPathSeparator(uint8(r)) })
}

// hasComponents reports whether any component in q names something, that
// is, whether a path ending in q needs a directory before it.
func hasComponents(q []string) bool {
	for _, c := range q {
		if c != "" && c != "." {
			return true
		}
	}
	return false
}

// skipDirs are the directories walks do not enter: version-control data and
// installed dependencies, which are large and almost never what a search is
// for. A walk that starts inside one still searches it.
var skipDirs = map[string]bool{".git": true, "node_modules": true}

// walkFile is a regular file a walk found.
type walkFile struct {
	// display names the file relative to the root, with forward slashes.
	display string
	// rel is the path to open through the [os.Root]: display in the OS's
	// form, or, for a symbolic link, where it resolves.
	rel  string
	info fs.FileInfo
}

// errStopWalk ends a walk early without an error.
var errStopWalk = errors.New("stop walk")

// walk calls fn for every regular file under the directory base, depth
// first, each directory's entries in name order, so results are stable. It does not enter skipDirs, does not follow
// symbolic links to directories (which could lead outside, or in circles),
// reports a symbolic link to a file only when it resolves inside the
// workspace, and skips what it cannot read. It checks ctx periodically and
// returns ctx.Err() when cancelled; fn may return errStopWalk to end the walk.
func (w *workspace) walk(ctx context.Context, r *os.Root, base location, fn func(walkFile) error) error {
	seen := 0
	var visit func(dirRel string) error
	visit = func(dirRel string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		f, err := r.Open(dirRel)
		if err != nil {
			return nil
		}
		entries, _ := f.ReadDir(-1)
		f.Close()
		slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
		for _, e := range entries {
			if seen++; seen%256 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			rel := filepath.Join(dirRel, e.Name())
			switch t := e.Type(); {
			case t.IsDir():
				if skipDirs[e.Name()] {
					continue
				}
				if err := visit(rel); err != nil {
					return err
				}
			case t&fs.ModeSymlink != 0:
				loc, err := w.resolve("path", rel)
				if err != nil {
					continue
				}
				fi, err := r.Stat(loc.rel)
				if err != nil || !fi.Mode().IsRegular() {
					continue
				}
				if err := fn(walkFile{display: filepath.ToSlash(rel), rel: loc.rel, info: fi}); err != nil {
					return err
				}
			case t.IsRegular():
				fi, err := e.Info()
				if err != nil {
					continue
				}
				if err := fn(walkFile{display: filepath.ToSlash(rel), rel: rel, info: fi}); err != nil {
					return err
				}
			}
		}
		return nil
	}
	err := visit(base.rel)
	if errors.Is(err, errStopWalk) {
		return nil
	}
	return err
}
