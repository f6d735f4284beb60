package config

import (
	"strconv"
	"strings"

	"github.com/toolmux/toolmux/internal/editdist"
)

// Error is one problem in a configuration file, located precisely enough
// for an editor to jump to it. Parse returns these joined with errors.Join;
// use errors.As to get the first, or unwrap the join to get them all.
type Error struct {
	// File is the name given to Parse (the path given to Load).
	File string
	// Line and Column are 1-based; 0 when the parser could not tell (YAML
	// syntax errors, for instance, come with a line but no column).
	Line, Column int
	// Key is the dotted path of the offending key, such as
	// "servers.everything.timeout"; "" for errors not tied to a key.
	Key string
	// Msg says what was wrong and what was expected instead.
	Msg string
}

// Error formats as file:line:col: key: msg, the form compilers use, so
// editors and terminals can link it.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
		if e.Column > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(e.Column))
		}
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// unknownKeyMsg describes an unknown key, suggesting the closest known (or
// ignored) key when it is plausibly a typo.
func unknownKeyMsg(key string, known, ignored []string) string {
	msg := "unknown key (expected one of: " + strings.Join(known, ", ") + ")"
	if s := suggest(key, known, ignored); s != "" {
		msg += "; did you mean " + s + "?"
	}
	return msg
}

// suggest returns the candidate closest to key within edit distance 2, ""
// if none. Case differences count as a single edit at most, since
// "Command" for "command" is the commonest slip.
func suggest(key string, lists ...[]string) string {
	const limit = 2
	best, bestD := "", limit+1
	for _, l := range lists {
		for _, c := range l {
			// Bounded, so a very long key (from a hostile file) costs
			// little: no known key is long, it cannot be a typo of one.
			d := editdist.OSA(key, c, limit)
			if ld := editdist.OSA(strings.ToLower(key), strings.ToLower(c), limit); ld+1 < d {
				d = ld + 1
			}
			if d < bestD {
				best, bestD = c, d
			}
		}
	}
	// A one- or two-letter key is within distance 2 of too much to be a
	// meaningful suggestion.
	if len(key) <= bestD {
		return ""
	}
	return best
}
