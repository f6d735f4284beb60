package builtin

import (
	"cmp"
	"context"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/toolmux/toolmux/tool"
)

func (s *Source) globTool() tool.Tool {
	return tool.Tool{
		Server: ServerName,
		Name:   Glob,
		Title:  "Find files by glob pattern",
		Description: fmt.Sprintf(`Finds files whose path matches a glob pattern, such as "**/*.go" or "src/**/*.{ts,tsx}", and lists them newest modification first, so recently edited files come first. At most %d paths are listed; a note says how many were left out.
Pattern syntax: "*" matches within one path segment, "**" matches any number of directories (so "*.go" only matches files directly in path, "**/*.go" matches them at any depth), "?" one character, "[abc]" a character class, "{a,b}" alternatives. Matching is case-sensitive. Only files are listed, with paths relative to the workspace root. The directories .git and node_modules are not searched, and symbolic links to directories are not followed.
Use it to find files by name; use grep to search their contents and list_directory to look at one directory.
path is relative to the workspace root (%s) or absolute inside it; paths outside the workspace are refused.`,
			s.limits.maxFiles, s.ws.root),
		InputSchema: objectSchema(map[string]any{
			"pattern": map[string]any{
				"type":        "string",
				"description": `The glob pattern, relative to path, e.g. "**/*.py" or "docs/*.md".`,
			},
			"path": map[string]any{
				"type":        "string",
				"description": "The directory to search in: relative to the workspace root, or absolute inside it. Defaults to the workspace root.",
			},
		}, "pattern"),
		Annotations: readOnly("Find files by glob pattern"),
	}
}

func (s *Source) glob(ctx context.Context, a args) (*tool.Result, error) {
	if err := a.Check("pattern", "path"); err != nil {
		return nil, err
	}
	pattern, _, err := a.String("pattern", true)
	if err != nil {
		return nil, err
	}
	if err := checkPattern(a, "pattern", pattern); err != nil {
		return nil, err
	}
	dir, p, err := s.pathArg(a, "path", false)
	if err != nil {
		return nil, err
	}
	r, err := s.ws.open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if fi, err := r.Stat(dir.rel); err != nil {
		return nil, fsError("path", p, err)
	} else if !fi.IsDir() {
		return nil, &tool.Error{Kind: tool.KindInvalidParams,
			Message: fmt.Sprintf("path %q is a file, not a directory; glob searches a directory", p)}
	}

	none := func() *tool.Result {
		return tool.TextResult(fmt.Sprintf("No files found matching %q in %s.", pattern, dir.display()))
	}
	// The pattern's leading literal directories are a path like any other:
	// they are resolved, and confined, before anything is walked. That
	// also keeps the walk to the part of the tree the pattern can match.
	baseDir, rest := doublestar.SplitPattern(filepath.ToSlash(pattern))
	if rest == "" {
		return none(), nil
	}
	base := dir
	if baseDir != "." {
		candidate := baseDir
		if !path.IsAbs(baseDir) {
			candidate = path.Join(dir.display(), baseDir)
		}
		base, err = s.ws.resolve("pattern", candidate)
		if err != nil {
			switch tool.KindOf(err) {
			case tool.KindFileNotFound:
				return none(), nil
			case tool.KindPathNotInWorkspace:
				return nil, &tool.Error{Kind: tool.KindPathNotInWorkspace,
					Message: fmt.Sprintf("pattern %q reaches outside the workspace root %s; patterns are matched against paths inside path", pattern, s.ws.root)}
			}
			return nil, err
		}
		if fi, err := r.Stat(base.rel); err != nil || !fi.IsDir() {
			return none(), nil
		}
	}

	type match struct {
		path  string
		mtime time.Time
	}
	var matches []match
	prefix := base.display() + "/"
	err = s.ws.walk(ctx, r, base, func(f walkFile) error {
		name := f.display
		if base.rel != "." {
			name = strings.TrimPrefix(name, prefix)
		}
		if doublestar.MatchUnvalidated(rest, name) {
			matches = append(matches, match{f.display, f.info.ModTime()})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(matches) == 0 {
		return none(), nil
	}
	slices.SortFunc(matches, func(x, y match) int {
		return cmp.Or(y.mtime.Compare(x.mtime), strings.Compare(x.path, y.path))
	})

	var b strings.Builder
	fmt.Fprintf(&b, "Found %s matching %q in %s (newest first):\n", plural(len(matches), "file", "files"), pattern, dir.display())
	shown := matches[:min(len(matches), s.limits.maxFiles)]
	for _, m := range shown {
		b.WriteString(m.path)
		b.WriteByte('\n')
	}
	if omitted := len(matches) - len(shown); omitted > 0 {
		fmt.Fprintf(&b, "[showing the %d newest of %d files; %d omitted. Narrow the pattern or path to see the rest.]\n",
			len(shown), len(matches), omitted)
	}
	return tool.TextResult(strings.TrimSuffix(b.String(), "\n")), nil
}

// checkPattern refuses a glob pattern that is malformed or could not be a
// path: doublestar would otherwise match nothing, silently.
func checkPattern(a args, name, pattern string) error {
	if len(pattern) > MaxPathLen {
		return a.Invalid("argument %q is %d bytes long; patterns are limited to %d bytes", name, len(pattern), MaxPathLen)
	}
	if strings.IndexByte(pattern, 0) >= 0 {
		return a.Invalid("argument %q contains a NUL byte", name)
	}
	if !doublestar.ValidatePattern(filepath.ToSlash(pattern)) {
		return a.Invalid("argument %q is not a valid glob pattern: %q (check for an unclosed '[' or '{', or a trailing '\\')", name, pattern)
	}
	return nil
}
