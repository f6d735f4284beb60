// Package toolglob matches tools against the patterns configurations use:
// "server/tool" globs, or bare "tool" globs that match in any server, in the
// syntax of path.Match.
package toolglob

import (
	"fmt"
	"path"
	"strings"
)

// Pattern is one parsed tool pattern.
type Pattern struct {
	text   string
	server string // "" matches any server
	tool   string
}

// Parse parses a pattern. With global set, "server/tool" is split at the
// first "/"; otherwise the whole text is a tool-name glob.
func Parse(s string, global bool) (Pattern, error) {
	p := Pattern{text: s, tool: s}
	if global {
		if srv, tl, ok := strings.Cut(s, "/"); ok {
			p.server, p.tool = srv, tl
		}
	}
	for _, part := range []string{p.server, p.tool} {
		if _, err := path.Match(part, ""); err != nil {
			return Pattern{}, fmt.Errorf("bad tool pattern %q: %v", s, err)
		}
	}
	return p, nil
}

// ParseAll parses every pattern, stopping at the first bad one.
func ParseAll(ss []string, global bool) ([]Pattern, error) {
	out := make([]Pattern, 0, len(ss))
	for _, s := range ss {
		p, err := Parse(s, global)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// Match reports whether the pattern matches the tool (server, name).
func (p Pattern) Match(server, name string) bool {
	if p.server != "" {
		if ok, _ := path.Match(p.server, server); !ok {
			return false
		}
	}
	ok, _ := path.Match(p.tool, name)
	return ok
}

// String returns the pattern as written.
func (p Pattern) String() string { return p.text }

// Any reports whether any pattern matches; it returns the first that does.
func Any(ps []Pattern, server, name string) (Pattern, bool) {
	for _, p := range ps {
		if p.Match(server, name) {
			return p, true
		}
	}
	return Pattern{}, false
}
