package manager

import (
	"fmt"

	"github.com/toolmux/toolmux/internal/toolglob"
)

// filter is a pair of allow and deny lists. Deny wins; an empty allow list
// allows everything.
type filter struct {
	allow, deny []toolglob.Pattern
}

// verdict returns "" when the tool is allowed, else why not.
func (f filter) verdict(server, tool string) string {
	if p, ok := toolglob.Any(f.deny, server, tool); ok {
		return fmt.Sprintf("deny pattern %q", p.String())
	}
	if len(f.allow) == 0 {
		return ""
	}
	if _, ok := toolglob.Any(f.allow, server, tool); ok {
		return ""
	}
	return "no allow pattern matches it"
}
