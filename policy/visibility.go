package policy

import (
	"fmt"
	"slices"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/toolglob"
)

// Visibility says which tools a caller may see and call: the tools the
// `groups:` section grants its groups (`groups.NAME.tools`). It is off —
// every caller sees every tool — until some group names its tools; from
// then on a caller sees the tools its groups grant, together, and nothing
// else: a caller in no group that grants tools sees none. A caller in the
// admin group sees every tool, and so does a request without a caller (no
// authentication is configured: one trusted user, as before identity).
//
// Where a caller may not see a tool, it may not call it either: the
// gateway and the API answer such a call as the call of a tool that does
// not exist, so that a caller learns nothing of tools it may not see.
// The zero value and nil are off. A Visibility is immutable.
type Visibility struct {
	// grants are the patterns of the tools each group grants; nil when
	// no group names tools (off).
	grants map[string][]toolglob.Pattern
	admin  string
}

// NewVisibility returns the visibility of grants (group name → tool
// patterns, server/tool globs as in allow); members of admin (if not "")
// see everything. No group in grants turns it off (nil).
func NewVisibility(grants map[string][]string, admin string) (*Visibility, error) {
	if len(grants) == 0 {
		return nil, nil
	}
	v := &Visibility{grants: make(map[string][]toolglob.Pattern, len(grants)), admin: admin}
	for g, pats := range grants {
		ps, err := toolglob.ParseAll(pats, true)
		if err != nil {
			return nil, fmt.Errorf("policy: the tools of group %q: %w", g, err)
		}
		v.grants[g] = ps
	}
	return v, nil
}

// VisibilityFromConfig returns the visibility of the groups section:
// the tools of each group that names some (`tools:`, [] included).
// admin is the group whose members see everything (the gateway's admin
// group).
func VisibilityFromConfig(c *config.Config, admin string) (*Visibility, error) {
	var grants map[string][]string
	for name, g := range c.Groups {
		if g.Tools == nil {
			continue
		}
		if grants == nil {
			grants = map[string][]string{}
		}
		grants[name] = g.Tools
	}
	return NewVisibility(grants, admin)
}

// Scope is what one caller may see (Visibility.For): every tool, or
// those its groups' patterns match.
type Scope struct {
	limited  bool
	patterns []toolglob.Pattern
}

// For returns what c may see.
func (v *Visibility) For(c *identity.Caller) Scope {
	if v == nil || c == nil || (v.admin != "" && c.In(v.admin)) {
		return Scope{}
	}
	s := Scope{limited: true}
	for _, g := range c.Groups {
		s.patterns = append(s.patterns, v.grants[g]...)
	}
	return s
}

// Limited reports whether the caller sees only some tools: false means
// every tool, with nothing to filter.
func (s Scope) Limited() bool { return s.limited }

// Sees reports whether the caller may see and call the tool name of
// server.
func (s Scope) Sees(server, name string) bool {
	if !s.limited {
		return true
	}
	_, ok := toolglob.Any(s.patterns, server, name)
	return ok
}

// SeesServer reports whether the caller may see some tool of server
// whose name is not known (the server is down, so its tools are not
// listed): a pattern naming the server, or a bare tool pattern.
func (s Scope) SeesServer(server string) bool {
	return !s.limited || slices.ContainsFunc(s.patterns, func(p toolglob.Pattern) bool { return p.MatchServer(server) })
}
