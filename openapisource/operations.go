package openapisource

import (
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/toolmux/toolmux/tool"
)

// BodyKey is the argument that carries an operation's JSON request body.
const BodyKey = "body"

// maxToolName is the longest tool name MCP allows.
const maxToolName = 128

// operation is one API operation as a tool: what the tool looks like
// and what a call needs to build its request.
type operation struct {
	tool   tool.Tool
	method string // upper case
	path   string // the path template, "/pets/{petId}"
	params []param
	// body is the media type of the JSON body ("" when the operation
	// takes none), bodyRequired whether the spec requires one.
	body         string
	bodyRequired bool
}

// param is one parameter of an operation.
type param struct {
	key      string // its argument's name
	name, in string
	style    string
	explode  bool
	required bool
}

// skipped is an operation left out, and why.
type skipped struct {
	op, why string
}

// operations turns every operation of doc into a tool of server, keeping
// those whose name or "METHOD /path" matches an include pattern (all when
// there is none) and no exclude pattern. Operations that cannot be called
// as tools are returned as skipped, with the reason.
func operations(server string, doc *openapi3.T, include, exclude []string, maxSchemaNodes int) ([]*operation, []skipped) {
	var ops []*operation
	var skips []skipped
	taken := map[string]bool{}
	for _, p := range doc.Paths.InMatchingOrder() {
		item := doc.Paths.Value(p)
		if item == nil {
			continue
		}
		methods := make([]string, 0, 8)
		for m := range item.Operations() {
			methods = append(methods, m)
		}
		slices.Sort(methods)
		for _, method := range methods {
			o := item.GetOperation(method)
			label := method + " " + p
			name := o.OperationID
			if name == "" {
				name = strings.ToLower(method) + "_" + p
			}
			name = toolName(name)
			if !selected(name, label, include, exclude) {
				continue
			}
			op, why := newOperation(server, name, method, p, item, o, maxSchemaNodes)
			if why != "" {
				skips = append(skips, skipped{op: label, why: why})
				continue
			}
			// Two operations whose names sanitise alike: the later one
			// gets a numbered name, so both stay callable.
			for i := 2; taken[op.tool.Name]; i++ {
				op.tool.Name = fmt.Sprintf("%s_%d", name, i)
			}
			taken[op.tool.Name] = true
			ops = append(ops, op)
		}
	}
	slices.SortFunc(ops, func(a, b *operation) int { return strings.Compare(a.tool.Name, b.tool.Name) })
	return ops, skips
}

// selected applies the include and exclude patterns (path.Match globs)
// to an operation's tool name and to its "METHOD /path".
func selected(name, label string, include, exclude []string) bool {
	match := func(pats []string) bool {
		for _, p := range pats {
			if ok, _ := path.Match(p, name); ok {
				return true
			}
			if ok, _ := path.Match(p, label); ok {
				return true
			}
		}
		return false
	}
	return (len(include) == 0 || match(include)) && !match(exclude)
}

// toolName makes s a tool name by MCP's rules: 1 to 128 of A-Z, a-z,
// 0-9, '_', '-' and '.'; every run of other characters becomes one '_'.
func toolName(s string) string {
	var b strings.Builder
	under := false
	for _, r := range s {
		ok := r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.')
		switch {
		case ok:
			b.WriteRune(r)
			under = r == '_'
		case !under:
			b.WriteByte('_')
			under = true
		}
	}
	name := strings.Trim(b.String(), "_")
	if name == "" {
		name = "operation"
	}
	if len(name) > maxToolName {
		name = name[:maxToolName]
	}
	return name
}

// ignoredHeaders are header parameters OpenAPI says to ignore: the
// request's own headers say these.
var ignoredHeaders = []string{"accept", "content-type", "authorization"}

// newOperation builds the tool of one operation; why says why it cannot
// be one.
func newOperation(server, name, method, p string, item *openapi3.PathItem, o *openapi3.Operation, maxSchemaNodes int) (*operation, string) {
	op := &operation{method: strings.ToUpper(method), path: p}
	budget := maxSchemaNodes
	props := map[string]any{}
	var required []string
	// Path-level parameters apply to every operation, unless the
	// operation redefines one (same name and location).
	var all []*openapi3.Parameter
	seen := map[string]bool{}
	for _, list := range []openapi3.Parameters{o.Parameters, item.Parameters} {
		for _, pr := range list {
			if pr == nil || pr.Value == nil || seen[pr.Value.In+" "+pr.Value.Name] {
				continue
			}
			seen[pr.Value.In+" "+pr.Value.Name] = true
			all = append(all, pr.Value)
		}
	}
	order := map[string]int{openapi3.ParameterInPath: 0, openapi3.ParameterInQuery: 1, openapi3.ParameterInHeader: 2, openapi3.ParameterInCookie: 3}
	slices.SortStableFunc(all, func(a, b *openapi3.Parameter) int { return order[a.In] - order[b.In] })
	for _, pv := range all {
		switch {
		case pv.In == openapi3.ParameterInCookie:
			if pv.Required {
				return nil, fmt.Sprintf("its cookie parameter %q is required, and cookie parameters are not supported", pv.Name)
			}
			continue
		case pv.In == openapi3.ParameterInHeader && slices.Contains(ignoredHeaders, strings.ToLower(pv.Name)):
			continue
		case pv.Schema == nil:
			// A parameter described by content (a JSON-encoded value)
			// rather than a schema.
			if pv.Required {
				return nil, fmt.Sprintf("its parameter %q is described by content, not a schema, which is not supported", pv.Name)
			}
			continue
		}
		sm, err := pv.SerializationMethod()
		if err != nil {
			return nil, err.Error()
		}
		key := pv.Name
		// A name used twice (the same name in the path and the query, or a
		// parameter named "body") is told apart by its location.
		if _, dup := props[key]; dup || key == BodyKey {
			key = pv.In + "." + pv.Name
		}
		s := jsonSchema(pv.Schema, &budget)
		if pv.Description != "" {
			if _, has := s["description"]; !has {
				s["description"] = pv.Description
			}
		}
		s["description"] = where(pv, s["description"])
		props[key] = s
		if pv.Required {
			required = append(required, key)
		}
		op.params = append(op.params, param{key: key, name: pv.Name, in: pv.In, style: sm.Style, explode: sm.Explode, required: pv.Required})
	}
	if rb := o.RequestBody; rb != nil && rb.Value != nil {
		mt, media := jsonMedia(rb.Value.Content)
		switch {
		case media != nil:
			op.body, op.bodyRequired = mt, rb.Value.Required
			s := jsonSchema(media.Schema, &budget)
			if rb.Value.Description != "" {
				if _, has := s["description"]; !has {
					s["description"] = rb.Value.Description
				}
			}
			props[BodyKey] = s
			if rb.Value.Required {
				required = append(required, BodyKey)
			}
		case rb.Value.Required:
			return nil, "its request body is required and has no JSON media type (only JSON bodies are supported)"
		}
	}
	schema := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		schema["required"] = required
	}
	desc := strings.TrimSpace(o.Summary)
	if d := strings.TrimSpace(o.Description); d != "" && d != desc {
		if desc != "" {
			desc += "\n\n"
		}
		desc += d
	}
	if desc == "" {
		desc = op.method + " " + p
	}
	if o.Deprecated {
		desc = "(deprecated) " + desc
	}
	op.tool = tool.Tool{
		Server:      server,
		Name:        name,
		Exposed:     tool.ExposedName(server, name),
		Title:       o.Summary,
		Description: desc,
		InputSchema: schema,
		Annotations: annotations(op.method),
	}
	return op, ""
}

// where prefixes a parameter's description with where it goes, which
// tells a model what the flat argument object does not.
func where(pv *openapi3.Parameter, desc any) string {
	d, _ := desc.(string)
	loc := pv.In + " parameter " + pv.Name
	if d == "" {
		return "(" + loc + ")"
	}
	return "(" + loc + ") " + d
}

// jsonMedia finds the JSON media type of a request body: application/json
// first, else any other JSON type (application/merge-patch+json, ...).
func jsonMedia(c openapi3.Content) (string, *openapi3.MediaType) {
	if mt := c.Get("application/json"); mt != nil {
		return "application/json", mt
	}
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		base, _, _ := strings.Cut(strings.ToLower(k), ";")
		if strings.HasSuffix(base, "/json") || strings.HasSuffix(base, "+json") {
			return k, c[k]
		}
	}
	return "", nil
}

// annotations are the behaviour hints HTTP's method semantics give
// (RFC 9110 §9.2): GET, HEAD and OPTIONS are safe, hence read-only and
// idempotent; PUT and DELETE are idempotent, and DELETE destroys; POST
// and PATCH are neither, and their destructiveness is left undeclared
// (MCP's default, destructive, is the cautious one). Every API is out in
// the world.
func annotations(method string) tool.Annotations {
	a := tool.Annotations{OpenWorld: tool.Bool(true)}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		a.ReadOnly, a.Idempotent, a.Destructive = tool.Bool(true), tool.Bool(true), tool.Bool(false)
	case http.MethodPut:
		a.ReadOnly, a.Idempotent = tool.Bool(false), tool.Bool(true)
	case http.MethodDelete:
		a.ReadOnly, a.Idempotent, a.Destructive = tool.Bool(false), tool.Bool(true), tool.Bool(true)
	default:
		a.ReadOnly, a.Idempotent = tool.Bool(false), tool.Bool(false)
	}
	return a
}
