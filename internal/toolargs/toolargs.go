// Package toolargs reads the arguments of a tool call as a JSON decoder
// leaves them (strings, float64 or json.Number, nil for null) or as a Go
// caller passes them (any integer type). Every refusal is a *tool.Error of
// kind invalid_tool_params whose message names the argument and what was
// expected, so that a model can correct its call.
package toolargs

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/toolmux/toolmux/tool"
)

// Args is the arguments of one call of the tool named Tool.
//
// A JSON null counts as absent throughout, since models often send null for
// optional arguments they do not use.
type Args struct {
	// Tool names the tool, in messages and in the Tool field of errors.
	Tool string
	// M holds the arguments by name.
	M map[string]any
}

// Invalid returns an invalid_tool_params error for the tool with the
// message format and v make.
func (a Args) Invalid(format string, v ...any) error {
	return &tool.Error{Kind: tool.KindInvalidParams, Tool: a.Tool, Message: fmt.Sprintf(format, v...)}
}

// Check refuses arguments that are not among known, listing them sorted
// along with the known ones: the tool's schema forbids them, and a
// misspelt optional argument would otherwise be ignored silently.
func (a Args) Check(known ...string) error {
	var unknown []string
	for k := range a.M {
		if !slices.Contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	// Sorted, so the message is the same from one call to the next.
	slices.Sort(unknown)
	return a.Invalid("%s does not take the argument(s) %s; its arguments are %s",
		a.Tool, quoteAll(unknown), quoteAll(known))
}

// String returns the string argument name and whether it was given. A
// required argument must be given and must not be empty.
func (a Args) String(name string, required bool) (string, bool, error) {
	v, ok := a.M[name]
	if !ok || v == nil {
		if required {
			return "", false, a.Invalid("missing required argument %q (a string)", name)
		}
		return "", false, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", false, a.Invalid("argument %q must be a string, not %s", name, JSONType(v))
	}
	if required && s == "" {
		return "", false, a.Invalid("argument %q must not be empty", name)
	}
	return s, true, nil
}

// NonBlank returns the required string argument name, which must hold more
// than white space: for a URL or a search query, blank means nothing was
// given.
func (a Args) NonBlank(name string) (string, error) {
	s, _, err := a.String(name, true)
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(s) == "" {
		return "", a.Invalid("argument %q must not be empty", name)
	}
	return s, nil
}

// Text returns the required string argument name, which may be empty:
// file content and replacement text can legitimately be "".
func (a Args) Text(name string) (string, error) {
	v, ok := a.M[name]
	if !ok || v == nil {
		return "", a.Invalid("missing required argument %q (a string; it may be empty)", name)
	}
	s, ok := v.(string)
	if !ok {
		return "", a.Invalid("argument %q must be a string, not %s", name, JSONType(v))
	}
	return s, nil
}

// Int returns the optional integer argument name, no smaller than least,
// and whether it was given; 0 when it was not. JSON numbers arrive as
// float64, or as json.Number from decoders that keep them; a whole number
// written as a float (3.0, 1e3) is an integer. Go callers may pass any
// integer type. Numbers too large in magnitude are clamped rather than
// refused (floats to ±2^62, integers to the largest int): every limit a
// caller checks them against is smaller.
func (a Args) Int(name string, least int) (int, bool, error) {
	v, ok := a.M[name]
	if !ok || v == nil {
		return 0, false, nil
	}
	n, err := a.integer(name, v)
	if err != nil {
		return 0, false, err
	}
	if n < int64(least) {
		return 0, false, a.Invalid("argument %q must be at least %d, not %d", name, least, n)
	}
	// Only where int is 32 bits wide can an int64 not fit.
	if n > math.MaxInt {
		n = math.MaxInt
	}
	return int(n), true, nil
}

// integer converts v, a number of any of the kinds Int takes, to int64.
func (a Args) integer(name string, v any) (int64, error) {
	switch x := v.(type) {
	case float64:
		return a.wholeFloat(name, x)
	case float32:
		return a.wholeFloat(name, float64(x))
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i, nil
		}
		// Not an integer literal, or past int64: a whole float (1e3, 5.0)
		// still is an integer.
		f, err := x.Float64()
		if err != nil || f != math.Trunc(f) || math.IsInf(f, 0) {
			return 0, a.Invalid("argument %q must be an integer, not %s", name, x.String())
		}
		return clampFloat(f), nil
	case int:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int64:
		return x, nil
	case uint:
		return clampUint(uint64(x)), nil
	case uint8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case uint64:
		return clampUint(x), nil
	}
	return 0, a.Invalid("argument %q must be an integer, not %s", name, JSONType(v))
}

// wholeFloat converts f, which must be a whole number, for Int.
func (a Args) wholeFloat(name string, f float64) (int64, error) {
	if f != math.Trunc(f) || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, a.Invalid("argument %q must be an integer, not %v", name, f)
	}
	return clampFloat(f), nil
}

// clampFloat converts a whole float64 to int64, keeping it within ±2^62:
// converting a float beyond int64's range is undefined, and numbers that
// large are over every limit anyway.
func clampFloat(f float64) int64 {
	return int64(max(min(f, 1<<62), -1<<62))
}

// clampUint converts u to int64, lowering it to the largest int64 when it
// does not fit.
func clampUint(u uint64) int64 {
	if u > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(u)
}

// JSONType names the JSON type of a decoded value ("a string", "a number",
// ...) for error messages; a value that JSON does not produce is named by
// its Go type.
func JSONType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case float64, float32, json.Number, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("a %T", v)
}

// quoteAll quotes each of ss and joins them with commas.
func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}
