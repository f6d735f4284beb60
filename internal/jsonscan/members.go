package jsonscan

import "unicode/utf8"

// Members calls f with the raw key (between its quotes, escapes as
// written) and the raw value of each member of the JSON object b, in
// order, until f returns false. It allocates nothing and does not
// validate: on anything that is not a well-formed object it stops where
// it loses its way, having reported what it read so far.
func Members(b []byte, f func(key, value []byte) bool) {
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return
	}
	for i++; ; {
		i = skipSpace(b, i)
		if i >= len(b) || b[i] != '"' {
			return // '}', or malformed
		}
		end := skipString(b, i)
		if end < 0 {
			return
		}
		key := b[i+1 : end-1]
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return
		}
		i = skipSpace(b, i+1)
		end = skipValue(b, i)
		if end < 0 {
			return
		}
		if !f(key, b[i:end]) {
			return
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ',' {
			return
		}
		i++
	}
}

// skipString returns the index after the string starting at b[i] (a
// quote), or -1 if it is not closed.
func skipString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// skipValue returns the index after the value starting at b[i], or -1 if
// it is not closed.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				if j = skipString(b, j); j < 0 {
					return -1
				}
				j--
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(b) && !isSpace(b[j]) && b[j] != ',' && b[j] != '}' && b[j] != ']' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}

// Size returns the size of the JSON value b as encoding/json writes it
// again once decoded (numbers kept as they are written, json.Number):
// without space, strings with the escapes it writes (<, > and & as
// \u003c, invalid UTF-8 as U+FFFD). It is what a tool call's arguments
// weigh against their limit, known before they are decoded. For valid
// JSON, ok is true and n exact (a key repeated in an object, which
// decoding keeps once, counts each time: more, never less); ok is false where the brackets and
// strings do not close (what else is malformed, the decoder refuses).
func Size(b []byte) (n int64, ok bool) {
	i := skipSpace(b, 0)
	depth := 0
	for i < len(b) {
		switch c := b[i]; {
		case isSpace(c):
			i++
			continue
		case c == '"':
			s, end := stringSize(b, i)
			if end < 0 {
				return n, false
			}
			n += s
			i = end
		case c == '{' || c == '[':
			depth++
			n++
			i++
		case c == '}' || c == ']':
			if depth--; depth < 0 {
				return n, false
			}
			n++
			i++
		case c == ',' || c == ':':
			n++
			i++
		default:
			j := i
			for j < len(b) && !isSpace(b[j]) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ':' {
				j++
			}
			n += int64(j - i)
			i = j
		}
		if depth == 0 {
			break
		}
	}
	if depth != 0 || skipSpace(b, i) != len(b) {
		return n, false
	}
	return n, true
}

// stringSize returns the encoded size of the string starting at b[i],
// and the index after it (-1 if it is not closed).
func stringSize(b []byte, i int) (int64, int) {
	n := int64(2)
	for j := i + 1; j < len(b); {
		c := b[j]
		switch {
		case c == '"':
			return n, j + 1
		case c == '\\':
			if j+1 >= len(b) {
				return n, -1
			}
			switch b[j+1] {
			case 'u':
				r, next := unicodeEscape(b, j)
				if next < 0 {
					return n, -1
				}
				n += runeSize(r)
				j = next
				continue
			case '"', '\\', 'b', 'f', 'n', 'r', 't':
				n += 2
			default: // '/', or an escape the decoder refuses
				n++
			}
			j += 2
		case c < utf8.RuneSelf:
			n += runeSize(rune(c))
			j++
		default:
			r, size := utf8.DecodeRune(b[j:])
			n += runeSize(r) // utf8.RuneError for invalid bytes, as decoded
			j += size
		}
	}
	return n, -1
}

// unicodeEscape reads the \uXXXX escape at b[j] (and the low surrogate
// after a high one), as encoding/json decodes it: a lone surrogate is
// U+FFFD. next is -1 if the escape is cut short.
func unicodeEscape(b []byte, j int) (r rune, next int) {
	r, ok := hex4(b, j+2)
	if !ok {
		return 0, -1
	}
	next = j + 6
	if r < 0xD800 || r > 0xDFFF {
		return r, next
	}
	if r < 0xDC00 && next+1 < len(b) && b[next] == '\\' && b[next+1] == 'u' {
		if lo, ok := hex4(b, next+2); ok && lo >= 0xDC00 && lo <= 0xDFFF {
			return 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00), next + 6
		}
	}
	return utf8.RuneError, next
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// runeSize is the size encoding/json writes r in within a string.
func runeSize(r rune) int64 {
	switch {
	case r == '"' || r == '\\' || r == '\b' || r == '\f' || r == '\n' || r == '\r' || r == '\t':
		return 2
	case r < 0x20 || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029':
		return 6
	case r < utf8.RuneSelf:
		return 1
	}
	return int64(utf8.RuneLen(r))
}
