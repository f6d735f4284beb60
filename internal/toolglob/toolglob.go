// Package toolglob matches tools against the patterns configurations use:
// "server/tool" globs, or bare "tool" globs that match in any server, in the
// syntax of path.Match.
//
// It is the one place that knows what a tool pattern is: [Check] is the
// rule a configuration (and a policy rule built in code) is held to, [Parse]
// turns a pattern into a matcher, [Scope] narrows global patterns to one
// server, [Escape] turns an exact tool name into a pattern that matches only
// it, and [CheckServer] checks a glob over server names.
package toolglob

import (
	"fmt"
	"path"
	"strconv"
	"strings"
)

// Pattern is one parsed tool pattern.
type Pattern struct {
	text   string
	server string // "" matches any server
	tool   string
}

// Problem is what is wrong with a pattern.
type Problem int

// The problems [Check] and [CheckServer] find.
const (
	// Empty: the pattern is "".
	Empty Problem = iota + 1
	// EmptyPart: a global pattern with an empty server or tool part
	// ("a/", "/b").
	EmptyPart
	// BadGlob: a part is not valid path.Match syntax (an unclosed "[", a
	// trailing "\"); Error.Err is path.Match's error.
	BadGlob
	// ServerSlash: a server glob containing "/", which no server name does.
	ServerSlash
)

// Error is a pattern refused by [Check] or [CheckServer].
type Error struct {
	Pattern string
	Problem Problem
	// Err is the cause, for BadGlob (path.ErrBadPattern); nil otherwise.
	Err error
}

// Error words the problem with the pattern quoted by strconv.Quote.
func (e *Error) Error() string { return e.Explain(strconv.Quote) }

// Explain words the problem, writing the pattern with quote: config
// shortens long patterns in its messages, policy does not.
func (e *Error) Explain(quote func(string) string) string {
	switch e.Problem {
	case Empty:
		return "empty pattern"
	case EmptyPart:
		return fmt.Sprintf("%s: expected \"server/tool\" or a bare tool name", quote(e.Pattern))
	case ServerSlash:
		return fmt.Sprintf("%s: a server name never contains \"/\" (to name a tool, use tools: [\"server/tool\"])", quote(e.Pattern))
	}
	return fmt.Sprintf("%s is not a valid glob: %v (see path.Match)", quote(e.Pattern), e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// split cuts a global pattern into its server and tool parts; a bare
// pattern (or a non-global one) has no server part.
func split(s string, global bool) (server, tool string) {
	if global {
		if srv, tl, ok := strings.Cut(s, "/"); ok {
			return srv, tl
		}
	}
	return "", s
}

// validGlob returns path.Match's complaint about glob, nil when it is
// valid. Matching against "" walks the whole pattern, so every syntax
// error shows.
func validGlob(glob string) error {
	_, err := path.Match(glob, "")
	return err
}

// Check reports whether s is a tool pattern a configuration may hold: not
// empty, valid globs, and, when global, either a bare tool glob or
// "server/tool" with both parts given. The error is an *Error.
func Check(s string, global bool) error {
	if s == "" {
		return &Error{Pattern: s, Problem: Empty}
	}
	srv, tl := split(s, global)
	if global && strings.Contains(s, "/") && (srv == "" || tl == "") {
		return &Error{Pattern: s, Problem: EmptyPart}
	}
	for _, part := range []string{srv, tl} {
		if err := validGlob(part); err != nil {
			return &Error{Pattern: s, Problem: BadGlob, Err: err}
		}
	}
	return nil
}

// CheckServer reports whether s is a glob over server names. The error is
// an *Error.
func CheckServer(s string) error {
	if strings.Contains(s, "/") {
		return &Error{Pattern: s, Problem: ServerSlash}
	}
	if err := validGlob(s); err != nil {
		return &Error{Pattern: s, Problem: BadGlob, Err: err}
	}
	return nil
}

// Parse parses a pattern. With global set, "server/tool" is split at the
// first "/"; otherwise the whole text is a tool-name glob. Parse refuses
// only what it cannot match (invalid glob syntax); [Check] is the stricter
// rule configurations are held to.
func Parse(s string, global bool) (Pattern, error) {
	p := Pattern{text: s}
	p.server, p.tool = split(s, global)
	for _, part := range []string{p.server, p.tool} {
		if err := validGlob(part); err != nil {
			return Pattern{}, fmt.Errorf("bad tool pattern %q: %w", s, err)
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

// MatchServer reports whether the pattern may match tools of server: a
// bare tool pattern matches tools of any server.
func (p Pattern) MatchServer(server string) bool {
	if p.server == "" {
		return true
	}
	ok, _ := path.Match(p.server, server)
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

// Scope rewrites global patterns as the bare tool globs that apply in one
// server: bare patterns are kept, "server/tool" ones whose server part
// matches server keep their tool part, the others are dropped.
func Scope(patterns []string, server string) []string {
	var out []string
	for _, s := range patterns {
		srv, tl, ok := strings.Cut(s, "/")
		if !ok {
			out = append(out, s)
		} else if m, _ := path.Match(srv, server); m {
			out = append(out, tl)
		}
	}
	return out
}

// Escape returns a bare pattern that matches exactly the tool name
// name: every character path.Match treats specially is escaped.
func Escape(name string) string {
	if !strings.ContainsAny(name, `*?[]\`) {
		return name
	}
	var b strings.Builder
	b.Grow(len(name) + 4)
	// Byte by byte: the special characters are ASCII, and a name that is
	// not valid UTF-8 stays as it is.
	for i := 0; i < len(name); i++ {
		if strings.IndexByte(`*?[]\`, name[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(name[i])
	}
	return b.String()
}
