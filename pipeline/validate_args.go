package pipeline

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/toolmux/toolmux/internal/jsonfloat"
)

// argScan walks arguments checking that every string is valid UTF-8 and
// every number is encodable, and measures their JSON encoding, without
// encoding them.
type argScan struct {
	size int64
	// foreign is set when a value has a Go type JSON decoding never
	// produces; size is then not computed.
	foreign bool
}

// argProblem is a value the arguments cannot hold. tokens is the JSON
// pointer to it, last token first.
type argProblem struct {
	tokens []string
	key    bool   // the last token (a key) is the problem
	what   string // what is wrong
}

func (p *argProblem) pointer() string {
	var b strings.Builder
	for i := len(p.tokens) - 1; i >= 0; i-- {
		b.WriteByte('/')
		b.WriteString(pointerToken(strings.ToValidUTF8(p.tokens[i], "\uFFFD")))
	}
	return b.String()
}

func (p *argProblem) message() string {
	if p.key {
		return fmt.Sprintf("the name of the argument at %s %s", p.pointer(), p.what)
	}
	return fmt.Sprintf("the argument at %s %s", p.pointer(), p.what)
}

const utf8Problem = "is not valid UTF-8 text; send text as valid UTF-8, and binary data base64-encoded"

func (s *argScan) object(m map[string]any) *argProblem {
	s.size += 2
	first := true
	for k, e := range m {
		if !first {
			s.size++
		}
		first = false
		n, ok := jsonStringSize(k)
		if !ok {
			return &argProblem{tokens: []string{k}, key: true, what: utf8Problem}
		}
		s.size += n + 1
		if p := s.value(e); p != nil {
			p.tokens = append(p.tokens, k)
			return p
		}
	}
	return nil
}

func (s *argScan) value(v any) *argProblem {
	var buf [32]byte
	switch x := v.(type) {
	case nil:
		s.size += 4
	case bool:
		if x {
			s.size += 4
		} else {
			s.size += 5
		}
	case string:
		n, ok := jsonStringSize(x)
		if !ok {
			return &argProblem{what: utf8Problem}
		}
		s.size += n
	case json.Number:
		if !usableJSONNumber(string(x)) {
			return &argProblem{what: fmt.Sprintf("is not a usable JSON number: %s", repairQuote(string(x)))}
		}
		s.size += int64(len(x))
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return &argProblem{what: fmt.Sprintf("is not a finite number: %v", x)}
		}
		s.size += int64(len(jsonfloat.Append(buf[:0], x, 64)))
	case float32:
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return &argProblem{what: fmt.Sprintf("is not a finite number: %v", x)}
		}
		s.size += int64(len(jsonfloat.Append(buf[:0], float64(x), 32)))
	case int:
		s.size += int64(len(strconv.AppendInt(buf[:0], int64(x), 10)))
	case int8:
		s.size += int64(len(strconv.AppendInt(buf[:0], int64(x), 10)))
	case int16:
		s.size += int64(len(strconv.AppendInt(buf[:0], int64(x), 10)))
	case int32:
		s.size += int64(len(strconv.AppendInt(buf[:0], int64(x), 10)))
	case int64:
		s.size += int64(len(strconv.AppendInt(buf[:0], x, 10)))
	case uint:
		s.size += int64(len(strconv.AppendUint(buf[:0], uint64(x), 10)))
	case uint8:
		s.size += int64(len(strconv.AppendUint(buf[:0], uint64(x), 10)))
	case uint16:
		s.size += int64(len(strconv.AppendUint(buf[:0], uint64(x), 10)))
	case uint32:
		s.size += int64(len(strconv.AppendUint(buf[:0], uint64(x), 10)))
	case uint64:
		s.size += int64(len(strconv.AppendUint(buf[:0], x, 10)))
	case map[string]any:
		return s.object(x)
	case []any:
		s.size += 2
		if len(x) > 1 {
			s.size += int64(len(x) - 1)
		}
		for i, e := range x {
			if p := s.value(e); p != nil {
				p.tokens = append(p.tokens, strconv.Itoa(i))
				return p
			}
		}
	default:
		s.foreign = true
		return foreignUTF8(reflect.ValueOf(v), 0)
	}
	return nil
}

// foreignUTF8 finds invalid UTF-8 in a value of a type JSON decoding never
// produces, before json.Marshal would silently replace it.
func foreignUTF8(rv reflect.Value, depth int) *argProblem {
	if depth > 100 || !rv.IsValid() {
		return nil
	}
	switch rv.Kind() {
	case reflect.String:
		if !utf8.ValidString(rv.String()) {
			return &argProblem{what: utf8Problem}
		}
	case reflect.Interface, reflect.Pointer:
		if !rv.IsNil() {
			return foreignUTF8(rv.Elem(), depth+1)
		}
	case reflect.Slice, reflect.Array:
		if rv.Type().Elem().Kind() == reflect.Uint8 {
			return nil // bytes are encoded as base64
		}
		for i := range rv.Len() {
			if p := foreignUTF8(rv.Index(i), depth+1); p != nil {
				p.tokens = append(p.tokens, strconv.Itoa(i))
				return p
			}
		}
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			return nil
		}
		it := rv.MapRange()
		for it.Next() {
			k := it.Key().String()
			if !utf8.ValidString(k) {
				return &argProblem{tokens: []string{k}, key: true, what: utf8Problem}
			}
			if p := foreignUTF8(it.Value(), depth+1); p != nil {
				p.tokens = append(p.tokens, k)
				return p
			}
		}
	case reflect.Struct:
		for i := range rv.NumField() {
			f := rv.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			if p := foreignUTF8(rv.Field(i), depth+1); p != nil {
				name := f.Name
				if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag != "" && tag != "-" {
					name = tag
				}
				p.tokens = append(p.tokens, name)
				return p
			}
		}
	}
	return nil
}

// jsonStringSize returns the length of s encoded by encoding/json (quotes
// and escapes, HTML characters escaped), and whether s is valid UTF-8.
func jsonStringSize(s string) (int64, bool) {
	n := int64(2)
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			switch {
			case b == '"' || b == '\\' || b == '\b' || b == '\f' || b == '\n' || b == '\r' || b == '\t':
				n += 2
			case b < 0x20 || b == '<' || b == '>' || b == '&':
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return n, false
		}
		if r == '\u2028' || r == '\u2029' {
			n += 6
		} else {
			n += int64(size)
		}
		i += size
	}
	return n, true
}
