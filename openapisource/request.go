package openapisource

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// ArgumentError says that an argument cannot be put in the request: its
// name and why. The pipeline validates arguments against the input schema
// before a call; this catches what a schema cannot say (a path segment of
// "..", a header value with a line break) and calls that bypass it.
type ArgumentError struct {
	Arg string
	Msg string
}

func (e *ArgumentError) Error() string { return fmt.Sprintf("argument %q: %s", e.Arg, e.Msg) }

// request is an operation's HTTP request as built from the arguments.
type request struct {
	// path is the escaped path, the base URL's path joined with the
	// operation's template filled in; query the encoded query.
	path, query string
	header      map[string]string
	body        []byte
}

// build fills in the operation's path template, query and headers from
// args, and encodes the body, following each parameter's style.
func (op *operation) build(basePath string, args map[string]any) (*request, error) {
	known := map[string]bool{BodyKey: op.body != ""}
	for _, p := range op.params {
		known[p.key] = true
	}
	names := make([]string, 0, len(args))
	for k := range args {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if !known[k] {
			return nil, &ArgumentError{Arg: k, Msg: "the operation has no such parameter"}
		}
	}

	r := &request{header: map[string]string{}}
	pathVals := map[string]string{}
	var query []string
	for _, p := range op.params {
		v, ok := args[p.key]
		if !ok || v == nil {
			if p.required {
				return nil, &ArgumentError{Arg: p.key, Msg: "is required"}
			}
			continue
		}
		switch p.in {
		case openapi3.ParameterInPath:
			s, err := pathValue(p, v)
			if err != nil {
				return nil, err
			}
			pathVals[p.name] = s
		case openapi3.ParameterInQuery:
			q, err := queryPairs(p, v)
			if err != nil {
				return nil, err
			}
			query = append(query, q...)
		case openapi3.ParameterInHeader:
			// Header values are sent as given (no escaping in the simple
			// style); a line break would end the header.
			s, err := joined(p, v, ",", func(s string) string { return s }, p.explode)
			if err != nil {
				return nil, err
			}
			if strings.ContainsAny(s, "\r\n\x00") {
				return nil, &ArgumentError{Arg: p.key, Msg: "a header value must not contain a line break or a NUL byte"}
			}
			r.header[p.name] = s
		}
	}
	filled, err := fillPath(op.path, pathVals)
	if err != nil {
		return nil, err
	}
	r.path = strings.TrimSuffix(basePath, "/") + filled
	r.query = strings.Join(query, "&")
	if b, ok := args[BodyKey]; ok && op.body != "" {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(b); err != nil {
			return nil, &ArgumentError{Arg: BodyKey, Msg: fmt.Sprintf("cannot be written as JSON: %v", err)}
		}
		r.body = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	} else if op.bodyRequired {
		return nil, &ArgumentError{Arg: BodyKey, Msg: "is required"}
	}
	return r, nil
}

// fillPath replaces every {name} of the template with its escaped value.
func fillPath(tmpl string, vals map[string]string) (string, error) {
	var b strings.Builder
	for {
		i := strings.IndexByte(tmpl, '{')
		if i < 0 {
			b.WriteString(tmpl)
			return b.String(), nil
		}
		j := strings.IndexByte(tmpl[i:], '}')
		if j < 0 {
			b.WriteString(tmpl)
			return b.String(), nil
		}
		name := tmpl[i+1 : i+j]
		v, ok := vals[name]
		if !ok {
			return "", &ArgumentError{Arg: name, Msg: "is a path parameter and is required"}
		}
		b.WriteString(tmpl[:i])
		b.WriteString(v)
		tmpl = tmpl[i+j+1:]
	}
}

// pathValue is the escaped value of a path parameter in its style:
// simple ("a,b"), label (".a.b") or matrix (";id=a,b"). A value that would
// leave its segment ("", ".", "..") is refused: escaping cannot stop a
// server, or a proxy, from normalising a ".." segment away.
func pathValue(p param, v any) (string, error) {
	var s string
	var err error
	switch p.style {
	case openapi3.SerializationLabel:
		sep := ","
		if p.explode {
			sep = "."
		}
		s, err = joined(p, v, sep, url.PathEscape, p.explode)
		s = "." + s
	case openapi3.SerializationMatrix:
		s, err = matrix(p, v)
	default:
		s, err = joined(p, v, ",", url.PathEscape, p.explode)
		if err == nil && (s == "" || s == "." || s == "..") {
			return "", &ArgumentError{Arg: p.key, Msg: fmt.Sprintf("%q cannot be a path segment", s)}
		}
	}
	return s, err
}

func matrix(p param, v any) (string, error) {
	name := url.PathEscape(p.name)
	switch x := v.(type) {
	case []any:
		if p.explode {
			var b strings.Builder
			for _, e := range x {
				s, err := scalar(p, e)
				if err != nil {
					return "", err
				}
				b.WriteString(";" + name + "=" + url.PathEscape(s))
			}
			return b.String(), nil
		}
	case map[string]any:
		if p.explode {
			var b strings.Builder
			for _, k := range sortedKeys(x) {
				s, err := scalar(p, x[k])
				if err != nil {
					return "", err
				}
				b.WriteString(";" + url.PathEscape(k) + "=" + url.PathEscape(s))
			}
			return b.String(), nil
		}
	}
	s, err := joined(p, v, ",", url.PathEscape, false)
	return ";" + name + "=" + s, err
}

// queryPairs are the encoded name=value pairs of a query parameter in
// its style: form (exploded: one pair per item or property; else
// "a,b"), spaceDelimited, pipeDelimited, deepObject ("f[k]=v").
func queryPairs(p param, v any) ([]string, error) {
	esc := url.QueryEscape
	name := esc(p.name)
	switch x := v.(type) {
	case []any:
		// Items are escaped one by one, so that a separator inside one
		// is escaped and the one between them is not.
		sep := ","
		switch p.style {
		case openapi3.SerializationSpaceDelimited:
			sep = "%20"
		case openapi3.SerializationPipeDelimited:
			sep = "|"
		}
		if !p.explode {
			s, err := joined(p, v, sep, esc, false)
			return []string{name + "=" + s}, err
		}
		out := make([]string, 0, len(x))
		for _, e := range x {
			s, err := scalar(p, e)
			if err != nil {
				return nil, err
			}
			out = append(out, name+"="+esc(s))
		}
		return out, nil
	case map[string]any:
		var out []string
		for _, k := range sortedKeys(x) {
			s, err := scalar(p, x[k])
			if err != nil {
				return nil, err
			}
			switch {
			case p.style == openapi3.SerializationDeepObject:
				out = append(out, name+"["+esc(k)+"]="+esc(s))
			case p.explode:
				out = append(out, esc(k)+"="+esc(s))
			}
		}
		if p.style != openapi3.SerializationDeepObject && !p.explode {
			s, err := joined(p, v, ",", esc, false)
			return []string{name + "=" + s}, err
		}
		return out, nil
	}
	s, err := scalar(p, v)
	return []string{name + "=" + esc(s)}, err
}

// joined writes an array as its items, an object as its properties
// ("k,v,k,v", or "k=v,k=v" exploded), each escaped and separated by sep;
// a scalar as itself, escaped.
func joined(p param, v any, sep string, esc func(string) string, explode bool) (string, error) {
	var parts []string
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			s, err := scalar(p, e)
			if err != nil {
				return "", err
			}
			parts = append(parts, esc(s))
		}
	case map[string]any:
		for _, k := range sortedKeys(x) {
			s, err := scalar(p, x[k])
			if err != nil {
				return "", err
			}
			if explode {
				parts = append(parts, esc(k)+"="+esc(s))
			} else {
				parts = append(parts, esc(k), esc(s))
			}
		}
	default:
		s, err := scalar(p, v)
		return esc(s), err
	}
	return strings.Join(parts, sep), nil
}

// scalar writes one primitive value as text: numbers as JSON writes them
// (no exponent for integers), booleans as true/false. A nested array or
// object has no form in these styles.
func scalar(p param, v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case float32:
		return strconv.FormatFloat(float64(x), 'f', -1, 32), nil
	case int:
		return strconv.Itoa(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case json.Number:
		return x.String(), nil
	case nil:
		return "", nil
	}
	return "", &ArgumentError{Arg: p.key, Msg: fmt.Sprintf("a %T cannot be serialised in a %s parameter (style %s)", v, p.in, p.style)}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
