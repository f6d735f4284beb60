package openapisource

import (
	"encoding/json"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// maxSchemaDepth bounds how deep a parameter's or body's schema is
// written out; past it, and where a schema refers to itself, the input
// schema accepts anything (the API still validates what it receives).
const maxSchemaDepth = 32

// jsonSchema writes an OpenAPI schema as the JSON Schema of a tool's
// input, using up to *budget schema objects (shared by a tool's
// parameters and body): references inlined (tool schemas must stand
// alone; a schema reached twice is written twice, so a spec whose schemas
// share others over many levels would write exponentially many without
// the budget; past it, a schema accepts anything), OpenAPI
// 3.0's nullable and boolean exclusive bounds turned into their JSON
// Schema forms, and what only documents (example, xml, discriminator,
// externalDocs, x- extensions) left out.
func jsonSchema(sr *openapi3.SchemaRef, budget *int) map[string]any {
	return convert(sr, 0, map[*openapi3.Schema]bool{}, budget)
}

func convert(sr *openapi3.SchemaRef, depth int, visiting map[*openapi3.Schema]bool, budget *int) map[string]any {
	if sr == nil || sr.Value == nil || depth > maxSchemaDepth || *budget <= 0 {
		return map[string]any{}
	}
	*budget--
	s := sr.Value
	if visiting[s] {
		return map[string]any{}
	}
	if s.Always != nil {
		if *s.Always {
			return map[string]any{}
		}
		return map[string]any{"not": map[string]any{}}
	}
	visiting[s] = true
	defer delete(visiting, s)

	// The scalar keywords come from kin-openapi's own JSON form; every
	// keyword holding schemas is rewritten below from the typed fields,
	// which is where the references are resolved.
	m := map[string]any{}
	if b, err := json.Marshal(s); err == nil {
		_ = json.Unmarshal(b, &m)
	}
	for k := range m {
		if strings.HasPrefix(k, "x-") {
			delete(m, k)
		}
	}
	for _, k := range []string{"example", "xml", "discriminator", "externalDocs", "allowEmptyValue", "$schema", "$id",
		"$defs", "$anchor", "$dynamicRef", "$dynamicAnchor", "properties", "patternProperties", "dependentSchemas",
		"items", "prefixItems", "additionalProperties", "not", "oneOf", "anyOf", "allOf", "contains", "propertyNames",
		"if", "then", "else", "contentSchema", "unevaluatedItems", "unevaluatedProperties", "nullable",
		"exclusiveMinimum", "exclusiveMaximum"} {
		delete(m, k)
	}
	sub := func(r *openapi3.SchemaRef) map[string]any { return convert(r, depth+1, visiting, budget) }
	subs := func(rs openapi3.SchemaRefs) []any {
		out := make([]any, len(rs))
		for i, r := range rs {
			out[i] = sub(r)
		}
		return out
	}
	named := func(key string, ss openapi3.Schemas) {
		if len(ss) == 0 {
			return
		}
		out := make(map[string]any, len(ss))
		for name, r := range ss {
			out[name] = sub(r)
		}
		m[key] = out
	}
	named("properties", s.Properties)
	named("patternProperties", s.PatternProperties)
	named("dependentSchemas", s.DependentSchemas)
	for key, r := range map[string]*openapi3.SchemaRef{"items": s.Items, "not": s.Not, "contains": s.Contains,
		"propertyNames": s.PropertyNames, "if": s.If, "then": s.Then, "else": s.Else} {
		if r != nil {
			m[key] = sub(r)
		}
	}
	for key, rs := range map[string]openapi3.SchemaRefs{"oneOf": s.OneOf, "anyOf": s.AnyOf, "allOf": s.AllOf, "prefixItems": s.PrefixItems} {
		if len(rs) > 0 {
			m[key] = subs(rs)
		}
	}
	switch ap := s.AdditionalProperties; {
	case ap.Schema != nil:
		m["additionalProperties"] = sub(ap.Schema)
	case ap.Has != nil:
		m["additionalProperties"] = *ap.Has
	}
	bound := func(key, plain string, b openapi3.ExclusiveBound, v *float64) {
		switch {
		case b.Value != nil:
			m[key] = *b.Value
		case b.IsTrue() && v != nil:
			m[key] = *v
			delete(m, plain)
		}
	}
	bound("exclusiveMinimum", "minimum", s.ExclusiveMin, s.Min)
	bound("exclusiveMaximum", "maximum", s.ExclusiveMax, s.Max)
	if s.Nullable {
		switch t := m["type"].(type) {
		case string:
			m["type"] = []any{t, "null"}
		case []any:
			m["type"] = append(t, "null")
		}
	}
	return m
}
