package tool

import "fmt"

// DefaultMaxDepth is the deepest nesting of a call's arguments accepted
// when no other limit is configured (limits.max_depth). Real tool
// arguments nest a handful of levels (an object of options holding a list
// of objects is three); 64 leaves room for any of them, while everything
// that walks arguments (repair, validation, redaction, fingerprints, the
// JSON written to records and answers) stays cheap. The go-sdk refuses
// whole MCP messages nested deeper than 1000 levels for the same reason.
const DefaultMaxDepth = 64

// Depth returns how deeply v nests, counting every object and array as one
// level (a scalar is 0, {} is 1, {"a": [1]} is 2), but never looks further
// than limit+1 levels: a result of limit+1 means "deeper than limit", so
// the cost of asking is bounded by the limit, not by v.
func Depth(v any, limit int) int {
	return depth(v, limit+1)
}

func depth(v any, left int) int {
	if left <= 0 {
		return 0
	}
	deepest := 0
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			if d := depth(e, left-1); d > deepest {
				deepest = d
				if deepest >= left-1 {
					break
				}
			}
		}
	case []any:
		for _, e := range x {
			if d := depth(e, left-1); d > deepest {
				deepest = d
				if deepest >= left-1 {
					break
				}
			}
		}
	default:
		return 0
	}
	return deepest + 1
}

// CheckDepth refuses arguments nested deeper than limit levels (the
// arguments object itself is level 1) with an invalid_tool_params error
// naming the limit; limit ≤ 0 means DefaultMaxDepth. Every route that takes
// arguments calls it before anything walks them.
func CheckDepth(args map[string]any, limit int) *Error {
	if limit <= 0 {
		limit = DefaultMaxDepth
	}
	if Depth(args, limit) <= limit {
		return nil
	}
	return &Error{Kind: KindInvalidParams, Message: fmt.Sprintf(
		"the arguments nest deeper than %d levels (limits.max_depth); flatten them", limit)}
}
