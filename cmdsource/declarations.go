package cmdsource

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// The two spellings of a group of declarations: the Gemini API's JSON
// (camelCase) and its Python SDK's (snake_case). Gemini CLI accepts both.
const (
	groupKeyCamel = "functionDeclarations"
	groupKeySnake = "function_declarations"
)

// maxProblems bounds how many problems a [DeclarationError] lists, so a
// discovery command printing a thousand bad entries yields a readable error.
const maxProblems = 20

// declaration is one function declaration the discovery command printed,
// with its parameters already turned into a JSON Schema.
type declaration struct {
	name        string
	description string
	schema      map[string]any
	// where is the declaration's position in the output, such as
	// "[2].functionDeclarations[0]", for messages.
	where string
}

// DeclarationError reports discovery output that is not a valid list of
// function declarations. Discovery fails as a whole when any declaration is
// invalid: a tool silently missing is harder to notice than a server
// reported as failed with the reason.
type DeclarationError struct {
	// Problems each name where the problem is, e.g.
	// `[1].functionDeclarations[0]: no "name"`. At most 20 are kept.
	Problems []string
	// More counts the problems left out of Problems.
	More int
}

// Error lists the problems on one line.
func (e *DeclarationError) Error() string {
	s := strings.Join(e.Problems, "; ")
	if e.More > 0 {
		s += fmt.Sprintf("; and %d more", e.More)
	}
	return "invalid function declarations: " + s
}

// parser collects declarations and problems from decoded discovery output.
type parser struct {
	decls    []declaration
	seen     map[string]string // name -> where it was first declared
	warnings []string
	problems []string
	more     int
}

// parseDeclarations reads the discovery command's stdout: a JSON array whose
// elements are declarations or groups of them, or a single group object.
// Duplicate names keep their first declaration; the others are dropped and
// described in warnings. Any other problem fails the whole parse with a
// *DeclarationError naming every problem (or a plain error when the output
// is not JSON at all).
func parseDeclarations(data []byte) (decls []declaration, warnings []string, err error) {
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil, nil, errors.New("nothing; want a JSON array of function declarations")
	}
	var top any
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, nil, fmt.Errorf("not JSON: %v", err)
	}
	p := &parser{seen: map[string]string{}}
	switch v := top.(type) {
	case []any:
		for i, el := range v {
			p.element(fmt.Sprintf("[%d]", i), el)
		}
	case map[string]any:
		switch {
		case isGroup(v):
			p.group("", v)
		case v["name"] != nil:
			p.problem("top level: a single declaration must be inside an array: [{\"name\": ...}]")
		default:
			p.problem("top level: an object must be a group {\"functionDeclarations\": [...]}; want an array of declarations or groups")
		}
	default:
		p.problem(fmt.Sprintf("top level: want an array of function declarations, got %s", typeName(top)))
	}
	if len(p.problems) > 0 {
		return nil, p.warnings, &DeclarationError{Problems: p.problems, More: p.more}
	}
	return p.decls, p.warnings, nil
}

func (p *parser) problem(msg string) {
	if len(p.problems) >= maxProblems {
		p.more++
		return
	}
	p.problems = append(p.problems, msg)
}

func isGroup(m map[string]any) bool {
	_, camel := m[groupKeyCamel]
	_, snake := m[groupKeySnake]
	return camel || snake
}

// element is one entry of the top-level array: a group or a declaration.
func (p *parser) element(where string, v any) {
	m, ok := v.(map[string]any)
	if !ok {
		p.problem(fmt.Sprintf("%s: want a declaration or group object, got %s", where, typeName(v)))
		return
	}
	if isGroup(m) {
		if _, named := m["name"]; named {
			p.problem(fmt.Sprintf("%s: has both \"name\" and a list of function declarations; make it one or the other", where))
			return
		}
		p.group(where, m)
		return
	}
	p.declaration(where, m)
}

// group reads the declarations of a group; both spellings may appear in
// one group and are read in the order camelCase, snake_case.
func (p *parser) group(where string, m map[string]any) {
	for _, key := range []string{groupKeyCamel, groupKeySnake} {
		v, ok := m[key]
		if !ok || v == nil {
			continue
		}
		at := key
		if where != "" {
			at = where + "." + key
		}
		list, ok := v.([]any)
		if !ok {
			p.problem(fmt.Sprintf("%s: want an array of declarations, got %s", at, typeName(v)))
			continue
		}
		for i, d := range list {
			dm, ok := d.(map[string]any)
			w := fmt.Sprintf("%s[%d]", at, i)
			if !ok {
				p.problem(fmt.Sprintf("%s: want a declaration object, got %s", w, typeName(d)))
				continue
			}
			p.declaration(w, dm)
		}
	}
}

// declaration reads one function declaration.
func (p *parser) declaration(where string, m map[string]any) {
	d := declaration{where: where}
	bad := false
	switch name := m["name"].(type) {
	case string:
		switch {
		case strings.TrimSpace(name) == "":
			p.problem(fmt.Sprintf("%s: the name is empty", where))
			bad = true
		case strings.ContainsFunc(name, unicode.IsControl):
			// The name is passed as an argument to the call command; a NUL
			// cannot be, and other control characters are surely a mistake.
			p.problem(fmt.Sprintf("%s: the name %q contains control characters", where, name))
			bad = true
		default:
			d.name = name
		}
	case nil:
		p.problem(fmt.Sprintf("%s: no \"name\"", where))
		bad = true
	default:
		p.problem(fmt.Sprintf("%s: \"name\" is %s, want a string", where, typeName(name)))
		bad = true
	}
	label := where
	if d.name != "" {
		label = fmt.Sprintf("%s (%s)", where, d.name)
	}
	switch desc := m["description"].(type) {
	case string:
		d.description = desc
	case nil:
	default:
		p.problem(fmt.Sprintf("%s: \"description\" is %s, want a string", label, typeName(desc)))
		bad = true
	}
	schema, err := declaredSchema(m)
	if err != nil {
		p.problem(fmt.Sprintf("%s: %v", label, err))
		bad = true
	}
	d.schema = schema
	if bad {
		return
	}
	if first, dup := p.seen[d.name]; dup {
		p.warnings = append(p.warnings, fmt.Sprintf("%s: the name %q was already declared at %s; this declaration is ignored", where, d.name, first))
		return
	}
	p.seen[d.name] = where
	p.decls = append(p.decls, d)
}

// declaredSchema returns the JSON Schema of a declaration's arguments:
// parametersJsonSchema as it is, else parameters (Gemini's OpenAPI subset)
// with its types made JSON Schema's, else an empty object schema. A schema
// without a type gets "object", which MCP requires of every input schema.
func declaredSchema(m map[string]any) (map[string]any, error) {
	key := "parametersJsonSchema"
	v := m[key]
	if v == nil {
		key = "parameters"
		v = m[key]
	}
	if v == nil {
		return map[string]any{"type": "object", "properties": map[string]any{}}, nil
	}
	s, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%q is %s, want a schema object", key, typeName(v))
	}
	if key == "parameters" {
		normalizeSchema(s, 0)
	}
	switch t := s["type"].(type) {
	case nil:
		s["type"] = "object"
	case string:
		if t != "object" {
			return nil, fmt.Errorf("%q must describe an object (the arguments), not type %q", key, t)
		}
	default:
		return nil, fmt.Errorf("%q must have type \"object\" (the arguments), not %s", key, compactJSON(t))
	}
	return s, nil
}

// jsonTypes maps the lower-cased type names of Gemini's OpenAPI subset
// ("STRING", "OBJECT", ...) to JSON Schema's, which are the same words in
// lower case.
var jsonTypes = map[string]bool{
	"string": true, "number": true, "integer": true, "boolean": true,
	"array": true, "object": true, "null": true,
}

// Keywords whose value is a schema, a map of schemas, or a list of schemas.
// Gemini's subset only uses properties, items and anyOf; the rest are
// walked too so that a schema mixing the two dialects comes out consistent.
var (
	schemaKeys    = []string{"items", "additionalProperties", "not", "contains", "if", "then", "else", "propertyNames", "additionalItems", "unevaluatedItems", "unevaluatedProperties"}
	schemaMapKeys = []string{"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
	schemaSeqKeys = []string{"anyOf", "oneOf", "allOf", "prefixItems", "items"}
)

// maxSchemaDepth stops the walk on absurdly deep schemas; below it they are
// left as they are.
const maxSchemaDepth = 64

// normalizeSchema rewrites, in place and recursively, an OpenAPI-subset
// schema into JSON Schema: upper-case types become lower-case,
// TYPE_UNSPECIFIED is dropped, and nullable: true adds "null" to the type.
// Everything else is kept, since JSON Schema ignores keywords it does not
// know (propertyOrdering, example).
func normalizeSchema(s map[string]any, depth int) {
	if depth > maxSchemaDepth {
		return
	}
	if t, ok := s["type"]; ok {
		if nt, keep := normalizeType(t); keep {
			s["type"] = nt
		} else {
			delete(s, "type")
		}
	}
	if nullable, ok := s["nullable"].(bool); ok {
		delete(s, "nullable")
		if nullable {
			switch t := s["type"].(type) {
			case string:
				if t != "null" {
					s["type"] = []any{t, "null"}
				}
			case []any:
				if !containsString(t, "null") {
					s["type"] = append(t, "null")
				}
			}
		}
	}
	for _, k := range schemaKeys {
		if sub, ok := s[k].(map[string]any); ok {
			normalizeSchema(sub, depth+1)
		}
	}
	for _, k := range schemaMapKeys {
		if m, ok := s[k].(map[string]any); ok {
			for _, sub := range m {
				if sm, ok := sub.(map[string]any); ok {
					normalizeSchema(sm, depth+1)
				}
			}
		}
	}
	for _, k := range schemaSeqKeys {
		if list, ok := s[k].([]any); ok {
			for _, sub := range list {
				if sm, ok := sub.(map[string]any); ok {
					normalizeSchema(sm, depth+1)
				}
			}
		}
	}
}

// normalizeType lower-cases a type name, or each of a list of them; keep is
// false when the type should be dropped (TYPE_UNSPECIFIED means "any").
// Names it does not know are left alone for the schema's consumers to judge.
func normalizeType(t any) (out any, keep bool) {
	switch v := t.(type) {
	case string:
		if strings.EqualFold(v, "TYPE_UNSPECIFIED") {
			return nil, false
		}
		if l := strings.ToLower(v); jsonTypes[l] {
			return l, true
		}
		return v, true
	case []any:
		out := make([]any, 0, len(v))
		for _, e := range v {
			if n, keep := normalizeType(e); keep {
				out = append(out, n)
			}
		}
		if len(out) == 0 {
			return nil, false
		}
		return out, true
	}
	return t, true
}

func containsString(list []any, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// typeName names the JSON type of a decoded value, for messages.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64, json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func compactJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
