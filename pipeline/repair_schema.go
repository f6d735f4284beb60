package pipeline

// repairType is a set of JSON Schema types.
type repairType uint8

const (
	typeString repairType = 1 << iota
	typeNumber
	typeInteger
	typeBoolean
	typeObject
	typeArray
	typeNull
)

func repairTypeNamed(s string) repairType {
	switch s {
	case "string":
		return typeString
	case "number":
		return typeNumber
	case "integer":
		return typeInteger
	case "boolean":
		return typeBoolean
	case "object":
		return typeObject
	case "array":
		return typeArray
	case "null":
		return typeNull
	}
	return 0
}

// typesOf returns the types a schema allows: its "type" (a name or a list
// of names), or when it has none, the union of the types of its "anyOf" or
// "oneOf" alternatives (Optional[int] is {"anyOf": [{"type": "integer"},
// {"type": "null"}]}). 0 means unknown. Alternatives count by their own
// "type" only, so that self-referencing schemas cost no more than one pass.
func (r *repairer) typesOf(schema map[string]any) repairType {
	if t, ok := repairTypeKeyword(schema); ok {
		return t
	}
	var t repairType
	for _, kw := range [...]string{"anyOf", "oneOf"} {
		alts, ok := schema[kw].([]any)
		if !ok {
			continue
		}
		for _, a := range alts {
			m, ok := a.(map[string]any)
			if !ok {
				return 0
			}
			at, _ := repairTypeKeyword(r.resolve(m))
			if at == 0 {
				return 0 // an alternative of unknown type could take anything
			}
			t |= at
		}
		return t
	}
	return 0
}

// repairTypeKeyword reads a schema's "type"; ok is false when it has none.
func repairTypeKeyword(schema map[string]any) (t repairType, ok bool) {
	switch v := schema["type"].(type) {
	case string:
		return repairTypeNamed(v), true
	case []any:
		for _, e := range v {
			if s, ok := e.(string); ok {
				t |= repairTypeNamed(s)
			}
		}
		return t, true
	case []string:
		for _, s := range v {
			t |= repairTypeNamed(s)
		}
		return t, true
	case nil:
		return 0, false
	}
	return 0, true
}

// branch returns the schema that describes values of type want: the schema
// itself, or its anyOf/oneOf alternative of that type. It returns nil when
// the schema does not allow such values.
func (r *repairer) branch(schema map[string]any, want repairType) map[string]any {
	if _, ok := schema["type"]; ok || (schema["anyOf"] == nil && schema["oneOf"] == nil) {
		if t := r.typesOf(schema); t != 0 && t&want == 0 {
			return nil
		}
		return schema
	}
	for _, kw := range [...]string{"anyOf", "oneOf"} {
		alts, _ := schema[kw].([]any)
		for _, a := range alts {
			m, ok := a.(map[string]any)
			if !ok {
				continue
			}
			m = r.resolve(m)
			t, typed := repairTypeKeyword(m)
			if t&want != 0 || !typed && (want == typeObject && m["properties"] != nil || want == typeArray && m["items"] != nil) {
				return m
			}
		}
	}
	return nil
}

// repairRequired returns a schema's "required" names ([]any from JSON,
// []string from Go code).
func repairRequired(schema map[string]any) []string {
	switch v := schema["required"].(type) {
	case []string:
		return v
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// repairMissingRequired reports whether obj lacks a required property of
// schema, without allocating.
func repairMissingRequired(schema, obj map[string]any) bool {
	switch v := schema["required"].(type) {
	case []string:
		for _, s := range v {
			if _, ok := obj[s]; !ok {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if s, ok := e.(string); ok {
				if _, ok := obj[s]; !ok {
					return true
				}
			}
		}
	}
	return false
}
