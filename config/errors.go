package config

import (
	"strconv"
	"strings"
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
	best, bestD := "", 3
	for _, l := range lists {
		for _, c := range l {
			d := distance(key, c)
			if ld := distance(strings.ToLower(key), strings.ToLower(c)); ld+1 < d {
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

// distance is the optimal string alignment distance (Levenshtein plus
// adjacent transpositions, which are typical typos). Keys are short, so the
// full matrix is fine; very long input (from a hostile file) is cut off
// early, since no known key is long and it cannot be a typo of one.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	if len(ra) > 64 || len(rb) > 64 {
		return 1 << 10
	}
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
