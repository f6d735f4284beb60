package tool

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/toolmux/toolmux/internal/editdist"
)

// State is a server's health state.
type State string

// Server health states.
const (
	// StateConnecting: a connection (or process start) is under way.
	StateConnecting State = "connecting"
	// StateReady: connected and answering.
	StateReady State = "ready"
	// StateDegraded: usable, but recent calls failed or it had to restart.
	StateDegraded State = "degraded"
	// StateFailed: cannot be reached, or its circuit breaker is open.
	StateFailed State = "failed"
	// StateDisabled: turned off in the configuration.
	StateDisabled State = "disabled"
)

// ServerHealth is a snapshot of one server's state.
type ServerHealth struct {
	Name      string `json:"server"`
	Transport string `json:"transport,omitempty"`
	State     State  `json:"state"`
	// Error is the last error, when the server is degraded or failed.
	Error string `json:"error,omitempty"`
	// Detail holds diagnostics such as the tail of the server's stderr.
	Detail   string `json:"detail,omitempty"`
	Restarts int    `json:"restarts"`
	Tools    int    `json:"tools"`
	// Breaker is where the server's circuit breaker stands: "closed",
	// "half-open" or "open"; "" when the server has none.
	Breaker string `json:"breaker,omitempty"`
	// PID is the process id of a running stdio server.
	PID int `json:"pid,omitempty"`
	// ErrorAt is when Error happened.
	ErrorAt time.Time `json:"error_at,omitzero"`
}

// Collision reports that two tools wanted the same exposed name. The tool
// that sorts first by (server, tool) keeps it; the other gets a hashed name.
type Collision struct {
	Name     string `json:"name"`
	Server   string `json:"server"`
	Tool     string `json:"tool"`
	Holder   string `json:"held_by"`
	Assigned string `json:"assigned"`
}

// Catalog is an immutable snapshot of every tool toolmux offers, with the
// exposed name of each and the health of each server. Lookups are O(1).
type Catalog struct {
	tools      []Tool
	byName     map[string]int
	byKey      map[key]int
	servers    []ServerHealth
	collisions []Collision
}

type key struct{ server, tool string }

// NewCatalog builds a catalog. Tools are ordered by server, then name, and
// their Exposed field is assigned here; a later duplicate of the same
// (server, tool) replaces an earlier one.
func NewCatalog(tools []Tool, servers []ServerHealth) *Catalog {
	c := &Catalog{
		byName:  make(map[string]int, len(tools)),
		byKey:   make(map[key]int, len(tools)),
		servers: slices.Clone(servers),
	}
	dedup := make(map[key]Tool, len(tools))
	for _, t := range tools {
		dedup[key{t.Server, t.Name}] = t
	}
	c.tools = make([]Tool, 0, len(dedup))
	for _, t := range dedup {
		c.tools = append(c.tools, t)
	}
	slices.SortFunc(c.tools, func(a, b Tool) int {
		return cmp.Or(strings.Compare(a.Server, b.Server), strings.Compare(a.Name, b.Name))
	})
	// Two passes: every tool first claims its preferred name, then the losers
	// of a collision get hashed names. Doing it in one pass would let a loser's
	// hashed name depend on which names happened to be taken before it.
	preferred := make([]string, len(c.tools))
	holder := make(map[string]int, len(c.tools))
	for i, t := range c.tools {
		preferred[i] = ExposedName(t.Server, t.Name)
		if _, taken := holder[preferred[i]]; !taken {
			holder[preferred[i]] = i
		}
	}
	for i := range c.tools {
		t := &c.tools[i]
		name := preferred[i]
		if h := holder[name]; h != i {
			held := c.tools[h]
			for salt := 0; ; salt++ {
				name = hashedName(preferred[i], t.Server, t.Name, salt)
				if _, taken := holder[name]; !taken {
					break
				}
			}
			holder[name] = i
			c.collisions = append(c.collisions, Collision{
				Name: preferred[i], Server: t.Server, Tool: t.Name,
				Holder: held.Server + "/" + held.Name, Assigned: name,
			})
		}
		t.Exposed = name
		c.byName[name] = i
		c.byKey[key{t.Server, t.Name}] = i
	}
	for i := range c.servers {
		c.servers[i].Tools = 0
	}
	counts := make(map[string]int)
	for _, t := range c.tools {
		counts[t.Server]++
	}
	for i := range c.servers {
		c.servers[i].Tools = counts[c.servers[i].Name]
	}
	return c
}

// Len returns the number of tools.
func (c *Catalog) Len() int { return len(c.tools) }

// Tools returns every tool, ordered by server and name. The slice is shared:
// do not modify it.
func (c *Catalog) Tools() []Tool { return c.tools }

// Servers returns the health of every configured server, tools or not.
func (c *Catalog) Servers() []ServerHealth { return c.servers }

// Server returns the health of one server.
func (c *Catalog) Server(name string) (ServerHealth, bool) {
	for _, s := range c.servers {
		if s.Name == name {
			return s, true
		}
	}
	return ServerHealth{}, false
}

// Collisions lists the tools that did not get their preferred name.
func (c *Catalog) Collisions() []Collision { return c.collisions }

// Lookup finds a tool by exposed name.
func (c *Catalog) Lookup(exposed string) (Tool, bool) {
	i, ok := c.byName[exposed]
	if !ok {
		return Tool{}, false
	}
	return c.tools[i], true
}

// Find finds a tool by its identity.
func (c *Catalog) Find(server, name string) (Tool, bool) {
	i, ok := c.byKey[key{server, name}]
	if !ok {
		return Tool{}, false
	}
	return c.tools[i], true
}

// Resolve finds a tool by exposed name, or returns a tool_not_registered
// error that suggests the closest name.
func (c *Catalog) Resolve(exposed string) (Tool, error) {
	if t, ok := c.Lookup(exposed); ok {
		return t, nil
	}
	return Tool{}, &Error{
		Kind:       KindToolNotRegistered,
		Message:    fmt.Sprintf("no tool named %q", exposed),
		Tool:       exposed,
		Suggestion: c.Suggest(exposed),
	}
}

// Suggest returns the exposed name closest to name, or "" when nothing is
// close. A bare tool name ("read_file") finds the tool's exposed name
// ("builtin__read_file").
func (c *Catalog) Suggest(name string) string {
	names := make([]string, 0, 2*len(c.tools))
	targets := make([]string, 0, 2*len(c.tools))
	for _, t := range c.tools {
		names = append(names, t.Exposed, t.Name)
		targets = append(targets, t.Exposed, t.Exposed)
	}
	if i := closest(name, names); i >= 0 {
		return targets[i]
	}
	return ""
}

// SuggestTool returns the name of the tool of server closest to name, or "".
func (c *Catalog) SuggestTool(server, name string) string {
	var names []string
	for _, t := range c.tools {
		if t.Server == server {
			names = append(names, t.Name)
		}
	}
	if i := closest(name, names); i >= 0 {
		return names[i]
	}
	return ""
}

// Closest returns the candidate closest to name by edit distance (ignoring
// case, and treating '-' and '_' alike), or "" when none is close enough to
// be a plausible typo.
func Closest(name string, candidates []string) string {
	if i := closest(name, candidates); i >= 0 {
		return candidates[i]
	}
	return ""
}

func closest(name string, candidates []string) int {
	norm := func(s string) string { return strings.ReplaceAll(strings.ToLower(s), "-", "_") }
	n := norm(name)
	if n == "" {
		return -1
	}
	// Anything farther than limit is refused, so the distance need not
	// be counted beyond it.
	limit := max(2, len(n)/3)
	best, bestDist := -1, 0
	for i, cand := range candidates {
		cn := norm(cand)
		d := editdist.Levenshtein(n, cn, limit)
		if strings.Contains(cn, n) || strings.Contains(n, cn) {
			// A containment ("read" in "read_file") is as good as a near-typo.
			d = min(d, 1+abs(len(cn)-len(n))/4)
		}
		if best < 0 || d < bestDist {
			best, bestDist = i, d
		}
	}
	if best < 0 || bestDist > limit {
		return -1
	}
	return best
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
