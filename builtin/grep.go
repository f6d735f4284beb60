package builtin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/toolmux/toolmux/tool"
)

func (s *Source) grepTool() tool.Tool {
	return tool.Tool{
		Server: ServerName,
		Name:   Grep,
		Title:  "Search file contents",
		Description: fmt.Sprintf(`Searches the contents of files for lines matching a regular expression and returns the matching lines grouped by file ("File: path" followed by "L<line number>: <line>"), paths relative to the workspace root. At most %d matching lines are returned; a note says when there were more.
The pattern is a Go (RE2) regular expression, matched against each line separately: use (?i) for case-insensitive matching; lookarounds and backreferences are not supported; escape regex metacharacters to search for them literally (e.g. "foo\\(" or "\\.Close\\(\\)").
path may be a directory (searched recursively) or a single file. include restricts the search to files whose name or path matches a glob, e.g. "*.go" (by file name, in any directory) or "src/**/*.{ts,tsx}" (by path). The directories .git and node_modules, binary files and files over %s are skipped.
Use it to find where something is defined or used; then read_file with offset to read around a match (line Ln is offset n-1).
path is relative to the workspace root (%s) or absolute inside it; paths outside the workspace are refused.`,
			s.limits.maxMatches, size(s.limits.maxReadBytes), s.ws.root),
		InputSchema: objectSchema(map[string]any{
			"pattern": map[string]any{
				"type":        "string",
				"description": `The regular expression (Go RE2 syntax) to search for, e.g. "func\\s+\\w+Handler" or "(?i)todo".`,
			},
			"path": map[string]any{
				"type":        "string",
				"description": "The directory or file to search: relative to the workspace root, or absolute inside it. Defaults to the workspace root.",
			},
			"include": map[string]any{
				"type":        "string",
				"description": `A glob pattern that files must match to be searched, e.g. "*.go", "*.{ts,tsx}" or "src/**/*.py". A pattern without "/" matches file names; one with "/" matches paths relative to path (or to the workspace root).`,
			},
		}, "pattern"),
		Annotations: readOnly("Search file contents"),
	}
}

// grepMatch is one matching line.
type grepMatch struct {
	line int
	text string
}

func (s *Source) grep(ctx context.Context, a args) (*tool.Result, error) {
	if err := a.Check("pattern", "path", "include"); err != nil {
		return nil, err
	}
	pattern, _, err := a.String("pattern", true)
	if err != nil {
		return nil, err
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, a.Invalid("argument \"pattern\" is not a valid regular expression (Go RE2 syntax): %v", err)
	}
	include, _, err := a.String("include", false)
	if err != nil {
		return nil, err
	}
	if include != "" {
		if err := checkPattern(a, "include", include); err != nil {
			return nil, err
		}
	}
	target, p, err := s.pathArg(a, "path", false)
	if err != nil {
		return nil, err
	}
	r, err := s.ws.open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	fi, err := r.Stat(target.rel)
	if err != nil {
		return nil, fsError("path", p, err)
	}

	var (
		b       strings.Builder
		total   int
		files   int
		more    bool
		tooBig  int
		binFile bool
	)
	// search greps one file and appends its matches to b. A file the walk
	// found but cannot read is skipped; a file named by path is reported.
	search := func(display, rel string, named bool) error {
		data, err := readRegular(r, rel, s.limits.maxReadBytes)
		if err != nil {
			switch err := err.(type) {
			case *tooLargeError:
				tooBig++
			case *notRegularError:
				if named {
					return &tool.Error{Kind: tool.KindInvalidParams,
						Message: fmt.Sprintf("path %q is not a regular file (it is a %s)", p, err.kind)}
				}
			default:
				if named {
					return fsError("path", p, err)
				}
			}
			return nil
		}
		if isBinary(data) {
			binFile = true
			return nil
		}
		found, err := s.grepData(ctx, re, data, s.limits.maxMatches-total+1)
		if err != nil {
			return err
		}
		if len(found) == 0 {
			return nil
		}
		if total+len(found) > s.limits.maxMatches {
			found = found[:s.limits.maxMatches-total]
			more = true
		}
		if len(found) == 0 {
			return errStopWalk
		}
		if files > 0 {
			b.WriteByte('\n')
		}
		files++
		total += len(found)
		fmt.Fprintf(&b, "File: %s\n", display)
		for _, m := range found {
			fmt.Fprintf(&b, "L%d: %s\n", m.line, m.text)
		}
		if more {
			return errStopWalk
		}
		return nil
	}

	filter := ""
	if fi.IsDir() {
		if include != "" {
			filter = fmt.Sprintf(" (include %q)", include)
		}
		err = s.ws.walk(ctx, r, target, func(f walkFile) error {
			if include != "" && !includes(include, target, f.display) {
				return nil
			}
			return search(f.display, f.rel, false)
		})
	} else {
		// An explicit file is searched whatever include says: it was named.
		err = search(target.display(), target.rel, true)
		if errors.Is(err, errStopWalk) {
			err = nil
		}
		if total == 0 {
			switch {
			case tooBig > 0:
				return tool.TextResult(fmt.Sprintf("%s was not searched: it is over %s.", target.display(), size(s.limits.maxReadBytes))), nil
			case binFile:
				return tool.TextResult(fmt.Sprintf("%s was not searched: it is a binary file.", target.display())), nil
			}
		}
	}
	if err != nil {
		return nil, err
	}

	var out strings.Builder
	if total == 0 {
		fmt.Fprintf(&out, "No matches for %q in %s%s.", pattern, target.display(), filter)
	} else {
		count := plural(total, "match", "matches")
		if more {
			count = fmt.Sprintf("more than %d matches", s.limits.maxMatches)
		}
		fmt.Fprintf(&out, "Found %s for %q in %s%s:\n\n", count, pattern, target.display(), filter)
		out.WriteString(strings.TrimSuffix(b.String(), "\n"))
	}
	if more {
		fmt.Fprintf(&out, "\n\n[stopped after %d matches; narrow the pattern, path or include to see the rest]", s.limits.maxMatches)
	}
	if tooBig > 0 {
		fmt.Fprintf(&out, "\n\n[%s over %s not searched]", plural(tooBig, "file", "files"), size(s.limits.maxReadBytes))
	}
	return tool.TextResult(out.String()), nil
}

// grepData returns up to limit matching lines of data, numbered from 1.
func (s *Source) grepData(ctx context.Context, re *regexp.Regexp, data []byte, limit int) ([]grepMatch, error) {
	var found []grepMatch
	for n := 1; len(data) > 0; n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		line, rest, _ := bytes.Cut(data, []byte{'\n'})
		data = rest
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if re.Match(line) {
			text, _ := s.cutLine(line)
			found = append(found, grepMatch{n, text})
			if len(found) >= limit {
				break
			}
		}
	}
	return found, nil
}

// includes reports whether the file display (relative to the root) passes
// the include filter. A pattern without "/" is matched against the file
// name, as grep --include and ripgrep's globs do; one with "/" against the
// path relative to the searched directory, or failing that to the root, so a
// model need not know which of the two it was meant to use.
func includes(include string, dir location, display string) bool {
	if !strings.Contains(include, "/") {
		return doublestar.MatchUnvalidated(include, path.Base(display))
	}
	if dir.rel != "." {
		if rel, ok := strings.CutPrefix(display, dir.display()+"/"); ok && doublestar.MatchUnvalidated(include, rel) {
			return true
		}
	}
	return doublestar.MatchUnvalidated(include, display)
}
