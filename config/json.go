package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// JSON files are parsed with encoding/json rather than the YAML parser:
// YAML is only nearly a superset of JSON (yaml.v3 rejects the "\/" escape and
// surrogate-pair escapes, for instance), and encoding/json reports syntax
// errors at an exact offset. The result is a yaml.Node tree with positions,
// so one walker handles both formats.

// syntaxError is a parse failure at a byte offset of the input.
type syntaxError struct {
	off int
	msg string
}

func (e *syntaxError) Error() string { return e.msg }

// parseJSON returns the document's root value as a yaml.Node.
func parseJSON(data []byte) (*yaml.Node, error) {
	clean := stripJSONComments(data)
	// encoding/json's validity check gives consistent offsets (one past the
	// offending byte); the token stream used below does not.
	var v any
	if err := json.Unmarshal(clean, &v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			off := int(se.Offset)
			if off < len(clean) && off > 0 {
				off-- // point at the offending byte itself
			}
			return nil, &syntaxError{off: off, msg: se.Error()}
		}
		return nil, &syntaxError{off: len(clean), msg: err.Error()}
	}
	b := &jsonBuilder{dec: json.NewDecoder(bytes.NewReader(clean)), data: data, clean: clean}
	b.dec.UseNumber()
	n, err := b.value()
	if err != nil {
		return nil, &syntaxError{off: len(clean), msg: err.Error()}
	}
	return n, nil
}

type jsonBuilder struct {
	dec   *json.Decoder
	data  []byte // as written, for line and column numbers
	clean []byte // comments blanked out, what the decoder reads
}

// next returns the offset where the next token starts: the decoder's offset
// is the end of the previous token, before any separator.
func (b *jsonBuilder) next() int {
	i := int(b.dec.InputOffset())
	for i < len(b.clean) && strings.IndexByte(" \t\r\n,:", b.clean[i]) >= 0 {
		i++
	}
	return i
}

func (b *jsonBuilder) node(kind yaml.Kind, tag, value string, off int) *yaml.Node {
	line, col := position(b.data, off)
	n := &yaml.Node{Kind: kind, Tag: tag, Value: value, Line: line, Column: col}
	if kind == yaml.ScalarNode && tag == "!!str" {
		n.Style = yaml.DoubleQuotedStyle
	} else if kind != yaml.ScalarNode {
		n.Style = yaml.FlowStyle
	}
	return n
}

// value reads one JSON value. The input was validated already, so errors
// here are unexpected; nesting is bounded by encoding/json's own limit.
func (b *jsonBuilder) value() (*yaml.Node, error) {
	off := b.next()
	tok, err := b.dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		var n *yaml.Node
		switch t {
		case '{':
			n = b.node(yaml.MappingNode, "!!map", "", off)
			for b.dec.More() {
				koff := b.next()
				kt, err := b.dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, errors.New("object key is not a string")
				}
				v, err := b.value()
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, b.node(yaml.ScalarNode, "!!str", k, koff), v)
			}
		case '[':
			n = b.node(yaml.SequenceNode, "!!seq", "", off)
			for b.dec.More() {
				v, err := b.value()
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, v)
			}
		default:
			return nil, errors.New("unexpected " + t.String())
		}
		if _, err := b.dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		return n, nil
	case string:
		return b.node(yaml.ScalarNode, "!!str", t, off), nil
	case json.Number:
		tag := "!!int"
		if strings.ContainsAny(string(t), ".eE") {
			tag = "!!float"
		}
		return b.node(yaml.ScalarNode, tag, string(t), off), nil
	case bool:
		v := "false"
		if t {
			v = "true"
		}
		return b.node(yaml.ScalarNode, "!!bool", v, off), nil
	case nil:
		return b.node(yaml.ScalarNode, "!!null", "null", off), nil
	}
	return nil, io.ErrUnexpectedEOF
}

// position converts a byte offset to a 1-based line and a 1-based column
// counted in characters, as editors count them.
func position(data []byte, off int) (line, col int) {
	off = min(max(off, 0), len(data))
	before := data[:off]
	line = bytes.Count(before, []byte{'\n'}) + 1
	lineStart := bytes.LastIndexByte(before, '\n') + 1
	return line, utf8.RuneCount(before[lineStart:]) + 1
}

// stripJSONComments blanks out // and /* */ comments, which Gemini CLI and
// VS Code-style editors allow in settings files. Blanking (rather than
// removing) keeps every offset, so positions stay true to the file.
func stripJSONComments(data []byte) []byte {
	if !bytes.Contains(data, []byte{'/'}) {
		return data
	}
	out := bytes.Clone(data)
	inString := false
	for i := 0; i < len(out); i++ {
		c := out[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch {
		case c == '"':
			inString = true
		case c == '/' && i+1 < len(out) && out[i+1] == '/':
			for ; i < len(out) && out[i] != '\n'; i++ {
				out[i] = ' '
			}
		case c == '/' && i+1 < len(out) && out[i+1] == '*':
			out[i], out[i+1] = ' ', ' '
			for i += 2; i < len(out); i++ {
				if out[i] == '*' && i+1 < len(out) && out[i+1] == '/' {
					out[i], out[i+1] = ' ', ' '
					i++
					break
				}
				if out[i] != '\n' {
					out[i] = ' '
				}
			}
		}
	}
	return out
}
