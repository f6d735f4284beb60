// Package jsonrepair turns the almost-JSON models write into JSON: the
// arguments of a tool call in MiroFlow's text protocol, or a native tool
// call whose arguments do not parse. It accepts what models are known to
// produce — code fences, single quotes, unquoted keys, trailing commas,
// comments, Python's True/False/None, raw newlines in strings, a value cut
// off before its closing brackets — and writes standard JSON.
//
// It never guesses beyond that: text that is not a JSON-like value at all
// is an error, so a caller can tell the model its reply was malformed.
package jsonrepair

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxDepth bounds nesting, so that hostile input cannot exhaust the stack.
const maxDepth = 512

// Error is input that could not be read as a JSON-like value.
type Error struct {
	// Offset is the byte offset in the input where reading failed.
	Offset int
	Reason string
}

// Error returns "jsonrepair: REASON at byte OFFSET".
func (e *Error) Error() string { return fmt.Sprintf("jsonrepair: %s at byte %d", e.Reason, e.Offset) }

// Repair returns s as standard JSON, and whether it had to change
// anything beyond whitespace. Text after the value (a model's comment) is
// dropped and counts as a change.
func Repair(s string) (string, bool, error) {
	if json.Valid([]byte(s)) {
		return s, false, nil
	}
	body := stripFence(strings.TrimSpace(s))
	p := &parser{s: body}
	var out strings.Builder
	p.ws()
	if p.i >= len(p.s) {
		return "", false, &Error{Offset: 0, Reason: "no value"}
	}
	// At the top, a bare word is prose ("I cannot do that"), not a value.
	if c := p.s[p.i]; !strings.ContainsRune(`{["'-+.0123456789`, rune(c)) {
		switch p.word() {
		case "true", "True", "false", "False", "null", "None":
			p.i = 0
			p.ws()
		default:
			return "", false, &Error{Offset: 0, Reason: "no JSON value"}
		}
	}
	if err := p.value(&out, 0); err != nil {
		return "", false, err
	}
	return out.String(), true, nil
}

// stripFence removes a Markdown code fence around the value.
func stripFence(s string) string {
	if !strings.HasPrefix(s, "```") {
		return s
	}
	s = s[3:]
	if nl := strings.IndexByte(s, '\n'); nl >= 0 && !strings.ContainsAny(s[:nl], "{[") {
		s = s[nl+1:] // the language tag
	}
	if end := strings.LastIndex(s, "```"); end >= 0 {
		s = s[:end]
	}
	return strings.TrimSpace(s)
}

type parser struct {
	s string
	i int
}

func (p *parser) fail(reason string) error { return &Error{Offset: p.i, Reason: reason} }

// ws skips white space and comments (//, /* */, #).
func (p *parser) ws() {
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			p.i++
		case c == '#' || strings.HasPrefix(p.s[p.i:], "//"):
			if nl := strings.IndexByte(p.s[p.i:], '\n'); nl >= 0 {
				p.i += nl + 1
			} else {
				p.i = len(p.s)
			}
		case strings.HasPrefix(p.s[p.i:], "/*"):
			if end := strings.Index(p.s[p.i+2:], "*/"); end >= 0 {
				p.i += end + 4
			} else {
				p.i = len(p.s)
			}
		default:
			return
		}
	}
}

func (p *parser) value(out *strings.Builder, depth int) error {
	if depth > maxDepth {
		return p.fail("nested too deeply")
	}
	p.ws()
	if p.i >= len(p.s) {
		return p.fail("value missing")
	}
	switch c := p.s[p.i]; {
	case c == '{':
		return p.object(out, depth)
	case c == '[':
		return p.array(out, depth)
	case c == '"' || c == '\'':
		s := p.str(c)
		writeString(out, s)
		return nil
	case c == '-' || c == '+' || c == '.' || (c >= '0' && c <= '9'):
		return p.number(out)
	default:
		word := p.word()
		switch word {
		case "true", "True", "TRUE":
			out.WriteString("true")
		case "false", "False", "FALSE":
			out.WriteString("false")
		case "null", "None", "nil", "NULL", "undefined", "NaN", "Infinity":
			out.WriteString("null")
		case "":
			return p.fail(fmt.Sprintf("unexpected %q", p.s[p.i:p.i+runeLen(p.s[p.i:])]))
		default:
			// A bare word as a value: most likely an unquoted string.
			writeString(out, word)
		}
		return nil
	}
}

func runeLen(s string) int {
	_, n := utf8.DecodeRuneInString(s)
	return max(n, 1)
}

func (p *parser) object(out *strings.Builder, depth int) error {
	p.i++ // {
	out.WriteByte('{')
	first := true
	for {
		p.ws()
		if p.i >= len(p.s) {
			break // cut off: close it
		}
		if p.s[p.i] == '}' {
			p.i++
			break
		}
		if p.s[p.i] == ',' {
			p.i++
			continue
		}
		var key string
		switch c := p.s[p.i]; {
		case c == '"' || c == '\'':
			key = p.str(c)
		default:
			if key = p.word(); key == "" {
				return p.fail("object key expected")
			}
		}
		p.ws()
		if p.i < len(p.s) && (p.s[p.i] == ':' || p.s[p.i] == '=') {
			p.i++
		} else if p.i < len(p.s) {
			return p.fail("':' expected after object key")
		}
		if !first {
			out.WriteByte(',')
		}
		first = false
		writeString(out, key)
		out.WriteByte(':')
		p.ws()
		if p.i >= len(p.s) || p.s[p.i] == '}' || p.s[p.i] == ',' {
			out.WriteString("null") // a key cut off before its value
			continue
		}
		if err := p.value(out, depth+1); err != nil {
			return err
		}
	}
	out.WriteByte('}')
	return nil
}

func (p *parser) array(out *strings.Builder, depth int) error {
	p.i++ // [
	out.WriteByte('[')
	first := true
	for {
		p.ws()
		if p.i >= len(p.s) {
			break
		}
		if p.s[p.i] == ']' {
			p.i++
			break
		}
		if p.s[p.i] == ',' {
			p.i++
			continue
		}
		if !first {
			out.WriteByte(',')
		}
		first = false
		if err := p.value(out, depth+1); err != nil {
			return err
		}
	}
	out.WriteByte(']')
	return nil
}

// str reads a string quoted with q, unescaping as JSON does and keeping
// what JSON would refuse (raw control characters, unknown escapes) as
// text. A string cut off at the end of the input ends there.
func (p *parser) str(q byte) string {
	p.i++
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == q:
			p.i++
			return b.String()
		case c == '\\' && p.i+1 < len(p.s):
			e := p.s[p.i+1]
			p.i += 2
			switch e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case '/', '\\', '"', '\'':
				b.WriteByte(e)
			case 'u':
				if p.i+4 <= len(p.s) {
					if v, err := strconv.ParseUint(p.s[p.i:p.i+4], 16, 16); err == nil {
						r := rune(v)
						p.i += 4
						// A surrogate pair written as two escapes.
						if r >= 0xD800 && r < 0xDC00 && strings.HasPrefix(p.s[p.i:], `\u`) && p.i+6 <= len(p.s) {
							if lo, err := strconv.ParseUint(p.s[p.i+2:p.i+6], 16, 16); err == nil && lo >= 0xDC00 && lo < 0xE000 {
								r = 0x10000 + (r-0xD800)<<10 + (rune(lo) - 0xDC00)
								p.i += 6
							}
						}
						b.WriteRune(r)
						continue
					}
				}
				b.WriteString(`\u`)
			default:
				b.WriteByte('\\')
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
			p.i++
		}
	}
	return b.String()
}

// word reads a bare word: letters, digits, '_', '-', '.', '$', '/'.
func (p *parser) word() string {
	start := p.i
	for p.i < len(p.s) {
		r, n := utf8.DecodeRuneInString(p.s[p.i:])
		if !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '-' || r == '.' || r == '$' || r == '/') {
			break
		}
		p.i += n
	}
	return p.s[start:p.i]
}

// number reads a number as models write them (+1, .5, 1., 0x1F is not
// one) and writes it as JSON; text that only looks like a number is kept
// as a string.
func (p *parser) number(out *strings.Builder) error {
	start := p.i
	for p.i < len(p.s) && strings.IndexByte("+-.0123456789eE", p.s[p.i]) >= 0 {
		p.i++
	}
	text := p.s[start:p.i]
	if json.Valid([]byte(text)) {
		out.WriteString(text)
		return nil
	}
	f, err := strconv.ParseFloat(strings.TrimPrefix(text, "+"), 64)
	if err != nil {
		writeString(out, text)
		return nil
	}
	if math.Abs(f) < 1<<53 && f == math.Trunc(f) && !strings.ContainsAny(text, ".eE") {
		out.WriteString(strconv.FormatInt(int64(f), 10))
		return nil
	}
	out.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
	return nil
}

func writeString(out *strings.Builder, s string) {
	b, err := json.Marshal(s)
	if err != nil {
		// json.Marshal of a string cannot fail; keep the output valid.
		b = []byte(`""`)
	}
	out.Write(b)
}

// ErrNotObject is returned by Object for a value that is not an object.
var ErrNotObject = errors.New("jsonrepair: not a JSON object")

// Object repairs s and decodes it as a JSON object, as tool arguments must
// be; "" and "null" are an empty object.
func Object(s string) (map[string]any, bool, error) {
	t := strings.TrimSpace(s)
	if t == "" || t == "null" {
		return map[string]any{}, t != "", nil
	}
	fixed, changed, err := Repair(t)
	if err != nil {
		return nil, false, err
	}
	var v any
	d := json.NewDecoder(strings.NewReader(fixed))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return nil, false, &Error{Reason: "repaired text does not decode: " + err.Error()}
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, false, ErrNotObject
	}
	return m, changed, nil
}
