package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
)

// decodeObject decodes a response body that must be one JSON object, keeping
// its members undecoded so that each section can fail on its own.
func decodeObject(body []byte) (map[string]json.RawMessage, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, errors.New("empty body")
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, err
	}
	if top == nil {
		return nil, errors.New("the body is null, not an object")
	}
	return top, nil
}

// decodeSection decodes one member of an object into v and reports whether
// it was there and of the expected shape.
func decodeSection(top map[string]json.RawMessage, key string, v any) bool {
	raw, ok := top[key]
	if !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return false
	}
	return json.Unmarshal(raw, v) == nil
}

// jsonInt is an integer that providers send as a number or a string; any
// other value decodes as 0 rather than failing the result around it.
type jsonInt int

// UnmarshalJSON implements json.Unmarshaler.
func (n *jsonInt) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(bytes.TrimSpace(b)), `"`)
	if f, err := strconv.ParseFloat(s, 64); err == nil && f >= 0 && f < 1<<31 {
		*n = jsonInt(f)
	} else {
		*n = 0
	}
	return nil
}

// nullString is a string that may be null or of another type (SearXNG's
// publishedDate is null when unknown); anything but a string decodes as "".
type nullString string

// UnmarshalJSON implements json.Unmarshaler.
func (s *nullString) UnmarshalJSON(b []byte) error {
	var v string
	if json.Unmarshal(b, &v) == nil {
		*s = nullString(v)
	} else {
		*s = ""
	}
	return nil
}

// clean collapses runs of white space, which snippets are full of, and
// bounds a field's length.
func clean(s string) string {
	return cut(strings.Join(strings.Fields(s), " "), 2000)
}

// firstNonEmpty returns the first argument that is not blank.
func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if strings.TrimSpace(s) != "" {
			return s
		}
	}
	return ""
}
