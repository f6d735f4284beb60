package tool

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxNameLen is the longest exposed name; OpenAI and Anthropic both reject
// function names over 64 characters.
const MaxNameLen = 64

// Separator joins server and tool in an exposed name.
const Separator = "__"

// hashLen is how many hex digits of the identity hash a shortened name keeps.
const hashLen = 8

// Sanitize replaces every character outside [A-Za-z0-9_-] with '_'.
func Sanitize(s string) string {
	ok := true
	for i := 0; i < len(s); i++ {
		if !nameByte(s[i]) {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r < 0x80 && nameByte(byte(r)) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// ExposedName returns the preferred exposed name of (server, tool):
// `server__tool` sanitised, shortened with a stable hash suffix when it would
// exceed MaxNameLen. A [Catalog] may still give a tool its hashed form when
// the preferred name is taken.
func ExposedName(server, tool string) string {
	name := Sanitize(server) + Separator + Sanitize(tool)
	if len(name) <= MaxNameLen {
		return name
	}
	return hashedName(name, server, tool, 0)
}

// hashedName shortens base to leave room for "_" and a hash of the tool's
// identity, so the name is the same in every run and on every machine.
// salt distinguishes the rare case where even hashed names collide.
func hashedName(base, server, tool string, salt int) string {
	h := sha256.New()
	h.Write([]byte(server))
	h.Write([]byte{0})
	h.Write([]byte(tool))
	for range salt {
		h.Write([]byte{0})
	}
	suffix := hex.EncodeToString(h.Sum(nil))[:hashLen]
	if keep := MaxNameLen - 1 - hashLen; len(base) > keep {
		base = base[:keep]
	}
	return base + "_" + suffix
}
