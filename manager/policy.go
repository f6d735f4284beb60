package manager

import (
	"fmt"
	"path"
	"strings"
)

// pattern is one allow/deny glob. Global patterns are "server/tool" or a
// bare "tool" (any server); per-server patterns are bare tool globs.
type pattern struct {
	text   string
	server string // "" matches any server
	tool   string
}

func parsePatterns(globs []string, global bool) ([]pattern, error) {
	out := make([]pattern, 0, len(globs))
	for _, g := range globs {
		p := pattern{text: g, tool: g}
		if global {
			if srv, tl, ok := strings.Cut(g, "/"); ok {
				p.server, p.tool = srv, tl
			}
		}
		for _, part := range []string{p.server, p.tool} {
			if _, err := path.Match(part, ""); err != nil {
				return nil, fmt.Errorf("bad tool pattern %q: %v", g, err)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

func (p pattern) match(server, tool string) bool {
	if p.server != "" {
		if ok, _ := path.Match(p.server, server); !ok {
			return false
		}
	}
	ok, _ := path.Match(p.tool, tool)
	return ok
}

// filter is a pair of allow and deny lists. Deny wins; an empty allow list
// allows everything.
type filter struct {
	allow, deny []pattern
}

// verdict returns "" when the tool is allowed, else why not.
func (f filter) verdict(server, tool string) string {
	for _, p := range f.deny {
		if p.match(server, tool) {
			return fmt.Sprintf("deny pattern %q", p.text)
		}
	}
	if len(f.allow) == 0 {
		return ""
	}
	for _, p := range f.allow {
		if p.match(server, tool) {
			return ""
		}
	}
	return "no allow pattern matches it"
}
