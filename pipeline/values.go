package pipeline

import (
	"encoding/json"
	"maps"
	"slices"
)

// jsonText renders a JSON value as indented text.
func jsonText(v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return ""
	}
	return string(b)
}

// cloneValue deep-copies a decoded JSON value (maps and slices), leaving
// scalars shared.
func cloneValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = cloneValue(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = cloneValue(e)
		}
		return s
	}
	return v
}

// cloneArgs deep-copies an arguments object.
func cloneArgs(args map[string]any) map[string]any {
	if args == nil {
		return nil
	}
	return cloneValue(args).(map[string]any)
}

// rewriteChildren returns the map or slice v with each child replaced by
// what f returns for it (key and index -1 for a map entry, "" and the
// index for a slice element) and whether any changed. v is copied only
// when a child changes, so a walk that changes nothing allocates nothing,
// and v itself is never modified. With sorted, a map's keys are visited in
// order (a walk whose findings are listed gives the same list each time).
// Other values come back as they are.
func rewriteChildren(v any, sorted bool, f func(key string, index int, e any) (any, bool)) (any, bool) {
	switch x := v.(type) {
	case map[string]any:
		var m map[string]any
		visit := func(k string, e any) {
			if e, changed := f(k, -1, e); changed {
				if m == nil {
					m = maps.Clone(x)
				}
				m[k] = e
			}
		}
		if sorted {
			for _, k := range slices.Sorted(maps.Keys(x)) {
				visit(k, x[k])
			}
		} else {
			for k, e := range x {
				visit(k, e)
			}
		}
		if m != nil {
			return m, true
		}
	case []any:
		var out []any
		for i, e := range x {
			if e, changed := f("", i, e); changed {
				if out == nil {
					out = slices.Clone(x)
				}
				out[i] = e
			}
		}
		if out != nil {
			return out, true
		}
	}
	return v, false
}
