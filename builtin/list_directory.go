package builtin

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/toolmux/toolmux/tool"
)

func (s *Source) listDirectoryTool() tool.Tool {
	return tool.Tool{
		Server: ServerName,
		Name:   ListDirectory,
		Title:  "List directory",
		Description: fmt.Sprintf(`Lists the entries of one directory of the workspace (not recursive): subdirectories first, marked "[DIR] name", then files with their size in bytes, each group in alphabetical order. At most %d entries are listed; a note says how many were left out.
Use it to explore the layout of the project. To find files by name pattern across many directories use glob; to search file contents use grep; to see a file use read_file.
Paths are relative to the workspace root (%s) or absolute inside it; paths outside the workspace are refused.`,
			s.limits.maxEntries, s.ws.root),
		InputSchema: objectSchema(map[string]any{
			"path": map[string]any{
				"type":        "string",
				"description": `The directory to list: relative to the workspace root, or absolute inside it. Use "." for the root.`,
			},
		}, "path"),
		Annotations: readOnly("List directory"),
	}
}

// dirEntry is one listed entry.
type dirEntry struct {
	name string
	dir  bool
	size int64
	// link is set for a symbolic link; ok says whether it leads to
	// something inside the workspace.
	link, ok bool
}

func (s *Source) listDirectory(ctx context.Context, a args) (*tool.Result, error) {
	if err := a.Check("path"); err != nil {
		return nil, err
	}
	loc, p, err := s.pathArg(a, "path", true)
	if err != nil {
		return nil, err
	}
	r, err := s.ws.open()
	if err != nil {
		return nil, err
	}
	defer r.Close()

	f, err := r.Open(loc.rel)
	if err != nil {
		return nil, fsError("path", p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fsError("path", p, err)
	}
	if !fi.IsDir() {
		return nil, &tool.Error{Kind: tool.KindInvalidParams,
			Message: fmt.Sprintf("path %q is a file, not a directory; use read_file to read it", p)}
	}

	var entries []dirEntry
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		batch, err := f.ReadDir(1024)
		for _, e := range batch {
			entries = append(entries, s.describe(r, loc.rel, e))
		}
		if err == io.EOF || (err == nil && len(batch) == 0) {
			break
		}
		if err != nil {
			return nil, fsError("path", p, err)
		}
	}

	slices.SortFunc(entries, func(x, y dirEntry) int {
		if x.dir != y.dir {
			if x.dir {
				return -1
			}
			return 1
		}
		if c := strings.Compare(strings.ToLower(x.name), strings.ToLower(y.name)); c != 0 {
			return c
		}
		return strings.Compare(x.name, y.name)
	})

	var b strings.Builder
	if len(entries) == 0 {
		fmt.Fprintf(&b, "Directory %s is empty.", loc.display())
		return tool.TextResult(b.String()), nil
	}
	dirs := 0
	for _, e := range entries {
		if e.dir {
			dirs++
		}
	}
	fmt.Fprintf(&b, "Directory %s (%s, %s):\n", loc.display(),
		plural(dirs, "directory", "directories"), plural(len(entries)-dirs, "file", "files"))
	shown := entries[:min(len(entries), s.limits.maxEntries)]
	for _, e := range shown {
		switch {
		case e.link && !e.ok:
			fmt.Fprintf(&b, "[LINK] %s (symbolic link that is broken or leads outside the workspace)\n", e.name)
		case e.dir && e.link:
			fmt.Fprintf(&b, "[DIR] %s (symbolic link)\n", e.name)
		case e.dir:
			fmt.Fprintf(&b, "[DIR] %s\n", e.name)
		case e.link:
			fmt.Fprintf(&b, "%s (%d bytes, symbolic link)\n", e.name, e.size)
		default:
			fmt.Fprintf(&b, "%s (%d bytes)\n", e.name, e.size)
		}
	}
	if omitted := len(entries) - len(shown); omitted > 0 {
		fmt.Fprintf(&b, "[showing %d of %d entries; %d omitted. Use glob with a pattern to find specific files.]\n",
			len(shown), len(entries), omitted)
	}
	return tool.TextResult(strings.TrimSuffix(b.String(), "\n")), nil
}

// describe reads what the listing shows of e. A symbolic link is described
// by what it leads to only when that is inside the workspace: its size or
// kind would otherwise describe a file outside.
func (s *Source) describe(r *os.Root, dirRel string, e fs.DirEntry) dirEntry {
	d := dirEntry{name: e.Name()}
	rel := filepath.Join(dirRel, e.Name())
	switch t := e.Type(); {
	case t.IsDir():
		d.dir = true
	case t&fs.ModeSymlink != 0:
		d.link = true
		loc, err := s.ws.resolve("path", rel)
		if err != nil {
			return d
		}
		fi, err := r.Stat(loc.rel)
		if err != nil {
			return d
		}
		d.ok, d.dir, d.size = true, fi.IsDir(), fi.Size()
	default:
		if fi, err := e.Info(); err == nil {
			d.size = fi.Size()
		}
	}
	return d
}
