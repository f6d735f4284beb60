package pipeline

import (
	"encoding/json"
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
