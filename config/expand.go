package config

import (
	"fmt"
	"path/filepath"
	"strings"
)

// expand replaces ${VAR}, ${VAR:-default} and ${VAR-default} in s, and $$
// with $. A "$" followed by anything else is kept as is, so values that
// merely contain a dollar sign (passwords, regexps) need no escaping.
//
// Unset variables without a default are returned in missing rather than as
// an error, so the caller can decide (a disabled server tolerates them).
// err reports text that cannot be expanded at all.
func expand(s string, lookup func(string) (string, bool)) (out string, missing []string, err error) {
	if !strings.Contains(s, "$") {
		return s, nil, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '$' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", nil, fmt.Errorf(`unterminated "${" (write "$$" for a literal "$")`)
			}
			expr := s[i+2 : i+2+end]
			i += 2 + end
			name, def, hasDef, emptyToo := expr, "", false, false
			if j := strings.IndexByte(expr, '-'); j >= 0 {
				name, def, hasDef = expr[:j], expr[j+1:], true
				if strings.HasSuffix(name, ":") {
					name, emptyToo = name[:len(name)-1], true
				}
			}
			if !validVarName(name) {
				return "", nil, fmt.Errorf("invalid variable name %q in ${%s} (expected ${NAME} or ${NAME:-default})", name, expr)
			}
			v, ok := lookup(name)
			switch {
			case ok && (v != "" || !emptyToo):
				b.WriteString(v)
			case hasDef:
				b.WriteString(def)
			default:
				missing = append(missing, name)
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), missing, nil
}

func validVarName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return true
}

// resolvePath expands a leading "~" to HOME and makes a relative path
// absolute against dir, so paths in a file mean the same wherever toolmux
// is started from.
func resolvePath(p, dir string, lookup func(string) (string, bool)) (string, error) {
	if p == "~" || strings.HasPrefix(p, "~/") {
		home, ok := lookup("HOME")
		if !ok || home == "" {
			return "", fmt.Errorf("cannot expand %q: HOME is not set", p)
		}
		p = filepath.Join(home, p[1:])
	} else if strings.HasPrefix(p, "~") {
		return "", fmt.Errorf("cannot expand %q: only ~ and ~/ are supported, not ~user", p)
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	return filepath.Clean(p), nil
}
