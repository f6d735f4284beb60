package pipeline

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/big"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/toolmux/toolmux/tool"
)

// NewValidate returns the validation middleware: it refuses, with an
// invalid_tool_params error that lists every problem, calls whose arguments
// hold invalid UTF-8, are too large, or do not match the tool's input
// schema. The tool is not called then.
func NewValidate(cfg ValidateOptions, tools ToolLookup) (Middleware, error) {
	v, err := newSchemaValidator(cfg, tools)
	if err != nil {
		return nil, err
	}
	return v.wrap, nil
}

// schemaValidator is the validation middleware's state: the compiled input
// schema of each tool, as last listed.
type schemaValidator struct {
	limit int64
	tools ToolLookup

	mu    sync.Mutex
	cache map[schemaKey]*schemaEntry

	// compiles counts schema compilations, for tests.
	compiles atomic.Int64
}

type schemaKey struct{ server, tool string }

// schemaEntry is one tool's compiled schema. src is the schema map it was
// compiled from: a new listing brings a new map, which is compiled afresh.
// Holding src also keeps its address from being reused while cached.
type schemaEntry struct {
	src  map[string]any
	once sync.Once
	doc  any // src in the form the compiler wants (a JSON round trip)
	sch  *jsonschema.Schema
	err  error // why src does not compile
}

func newSchemaValidator(cfg ValidateOptions, tools ToolLookup) (*schemaValidator, error) {
	if tools == nil {
		return nil, errors.New("validate: no tool lookup")
	}
	limit := cfg.MaxArgumentBytes
	if limit <= 0 {
		limit = DefaultMaxArgumentBytes
	}
	return &schemaValidator{limit: limit, tools: tools, cache: make(map[schemaKey]*schemaEntry)}, nil
}

func (v *schemaValidator) wrap(next Handler) Handler {
	return HandlerFunc(func(ctx context.Context, call tool.Call) *tool.Record {
		return v.call(ctx, call, next)
	})
}

func (v *schemaValidator) call(ctx context.Context, call tool.Call, next Handler) *tool.Record {
	t, err := definition(ctx, v.tools, &call)
	if err != nil {
		// The manager reports unknown and denied tools.
		return next.Call(ctx, call)
	}

	// Arguments are a map, hence a JSON object; nil is {}.
	var scan argScan
	if p := scan.object(call.Arguments); p != nil {
		return v.refuse(call, p.message(), map[string]any{"pointer": p.pointer()})
	}
	var instance any = call.Arguments
	if call.Arguments == nil {
		instance = map[string]any{}
	}
	if scan.foreign {
		// Values of Go types a JSON decoder never produces ([]string,
		// structs, ...): measure and validate their JSON form.
		b, err := json.Marshal(call.Arguments)
		if err != nil {
			return v.refuse(call, fmt.Sprintf("the arguments cannot be encoded as JSON: %v", err), nil)
		}
		scan.size = int64(len(b))
		if scan.size <= v.limit {
			instance, err = jsonschema.UnmarshalJSON(bytes.NewReader(b))
			if err != nil {
				return v.refuse(call, fmt.Sprintf("the arguments cannot be encoded as JSON: %v", err), nil)
			}
		}
	}
	if scan.size > v.limit {
		return v.refuse(call,
			fmt.Sprintf("the arguments are %d bytes of JSON, over the limit of %d bytes; send less data in one call", scan.size, v.limit),
			map[string]any{"size": scan.size, "limit": v.limit})
	}

	if t.InputSchema == nil {
		return next.Call(ctx, call)
	}
	e, first := v.entry(ctx, call.Server, call.Tool, t.InputSchema)
	if e.err != nil {
		// The server's bad schema must not block its calls.
		rec := next.Call(ctx, call)
		if first && rec != nil {
			rec.Note("validate", "schema does not compile: "+e.err.Error(), nil)
		}
		return rec
	}
	verr, err := validateInstance(e.sch, instance)
	if err != nil {
		rec := next.Call(ctx, call)
		if rec != nil {
			rec.Note("validate", "schema validation failed: "+err.Error(), nil)
		}
		return rec
	}
	if verr == nil {
		return next.Call(ctx, call)
	}
	lines := renderViolations(verr, instance, e.doc)
	var b strings.Builder
	fmt.Fprintf(&b, "arguments do not match the schema of %s/%s:", call.Server, call.Tool)
	for _, l := range lines {
		b.WriteString("\n- ")
		b.WriteString(l)
	}
	return v.refuse(call, b.String(), map[string]any{"violations": lines})
}

func (v *schemaValidator) refuse(call tool.Call, msg string, data map[string]any) *tool.Record {
	rec := refuse(call, &tool.Error{Kind: tool.KindInvalidParams, Message: msg})
	note := msg
	if data != nil && data["violations"] != nil {
		note = "arguments do not match the schema"
	}
	rec.Note("validate", note, data)
	return rec
}

// validateInstance runs the validator, turning a panic inside the library
// into an error (the call then goes through unvalidated).
func validateInstance(sch *jsonschema.Schema, instance any) (verr *jsonschema.ValidationError, err error) {
	defer func() {
		if r := recover(); r != nil {
			verr, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()
	switch e := sch.Validate(instance).(type) {
	case nil:
		return nil, nil
	case *jsonschema.ValidationError:
		return e, nil
	default:
		return nil, e
	}
}

// entry returns the compiled schema of a tool, compiling it on first use
// and again whenever the tool's schema map changes. first is true for the
// call that compiled it.
//
// One schema is kept per tool: the one of its latest listing. A call
// carries the definition it was admitted against, so a call admitted
// just before a refresh may still bring the old map; that map is compiled
// for it alone, without evicting the current one, once the lookup says
// which of the two is current.
func (v *schemaValidator) entry(ctx context.Context, server, name string, schema map[string]any) (e *schemaEntry, first bool) {
	k := schemaKey{server, name}
	v.mu.Lock()
	cached := v.cache[k]
	if cached != nil && sameMap(cached.src, schema) {
		e = cached
	}
	v.mu.Unlock()
	if e == nil {
		e = &schemaEntry{src: schema}
		if cached == nil || v.current(ctx, server, name, schema) {
			v.mu.Lock()
			if c := v.cache[k]; c != nil && sameMap(c.src, schema) {
				e = c // another call got here first
			} else {
				v.cache[k] = e
			}
			v.mu.Unlock()
		}
	}
	e.once.Do(func() {
		first = true
		v.compiles.Add(1)
		e.doc, e.sch, e.err = compileInputSchema(schema)
	})
	return e, first
}

// current reports whether schema is the one the tool's latest listing
// holds (asked only when a call brings another map than the cached one).
func (v *schemaValidator) current(ctx context.Context, server, name string, schema map[string]any) bool {
	t, err := v.tools.Tool(ctx, server, name)
	return err != nil || sameMap(t.InputSchema, schema)
}

func sameMap(a, b map[string]any) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// inputSchemaURL is where a tool's schema is placed for the compiler.
const inputSchemaURL = "toolmux:///input-schema.json"

// compileInputSchema compiles a tool's input schema. It honours "$schema"
// (draft 4 to 2020-12), defaulting to 2020-12; it fetches nothing: a $ref or
// $schema outside the document makes the schema fail to compile. Patterns
// Go's regexp cannot compile (lookarounds, ...) match anything.
func compileInputSchema(schema map[string]any) (doc any, sch *jsonschema.Schema, err error) {
	defer func() {
		if r := recover(); r != nil {
			sch, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()
	// The round trip turns Go values ([]string from Go code, ints) into the
	// JSON form the compiler wants, and leaves the shared map alone.
	b, err := json.Marshal(schema)
	if err != nil {
		return nil, nil, err
	}
	doc, err = jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(schemaNoLoader{})
	c.UseRegexpEngine(schemaRegexp)
	if err := c.AddResource(inputSchemaURL, doc); err != nil {
		return nil, nil, err
	}
	sch, err = c.Compile(inputSchemaURL)
	if err != nil {
		return nil, nil, err
	}
	return doc, sch, nil
}

// schemaNoLoader refuses every URL: tool schemas must be self-contained,
// and a call must never make toolmux fetch from the network or read files.
type schemaNoLoader struct{}

func (schemaNoLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("toolmux does not load schema references (%s)", u)
}

// schemaRegexp compiles patterns with Go's regexp; a pattern it cannot
// compile (ECMA lookarounds, backreferences) matches anything rather than
// disabling the whole schema.
func schemaRegexp(s string) (jsonschema.Regexp, error) {
	re, err := regexp.Compile(s)
	if err != nil {
		return schemaAnyRegexp(s), nil
	}
	return re, nil
}

type schemaAnyRegexp string

func (r schemaAnyRegexp) String() string          { return string(r) }
func (r schemaAnyRegexp) MatchString(string) bool { return true }

// argScan walks arguments checking that every string is valid UTF-8 and
// every number is encodable, and measures their JSON encoding, without
// encoding them.
type argScan struct {
	size int64
	// foreign is set when a value has a Go type JSON decoding never
	// produces; size is then not computed.
	foreign bool
}

// argProblem is a value the arguments cannot hold. tokens is the JSON
// pointer to it, last token first.
type argProblem struct {
	tokens []string
	key    bool   // the last token (a key) is the problem
	what   string // what is wrong
}

func (p *argProblem) pointer() string {
	var b strings.Builder
	for i := len(p.tokens) - 1; i >= 0; i-- {
		b.WriteByte('/')
		b.WriteString(pointerToken(strings.ToValidUTF8(p.tokens[i], "\uFFFD")))
	}
	return b.String()
}

func (p *argProblem) message() string {
	if p.key {
		return fmt.Sprintf("the name of the argument at %s %s", p.pointer(), p.what)
	}
	return fmt.Sprintf("the argument at %s %s", p.pointer(), p.what)
}

const utf8Problem = "is not valid UTF-8 text; send text as valid UTF-8, and binary data base64-encoded"

func (s *argScan) object(m map[string]any) *argProblem {
	s.size += 2
	first := true
	for k, e := range m {
		if !first {
			s.size++
		}
		first = false
		n, ok := jsonStringSize(k)
		if !ok {
			return &argProblem{tokens: []string{k}, key: true, what: utf8Problem}
		}
		s.size += n + 1
		if p := s.value(e); p != nil {
			p.tokens = append(p.tokens, k)
			return p
		}
	}
	return nil
}

func (s *argScan) value(v any) *argProblem {
	var buf [32]byte
	switch x := v.(type) {
	case nil:
		s.size += 4
	case bool:
		if x {
			s.size += 4
		} else {
			s.size += 5
		}
	case string:
		n, ok := jsonStringSize(x)
		if !ok {
			return &argProblem{what: utf8Problem}
		}
		s.size += n
	case json.Number:
		if !usableJSONNumber(string(x)) {
			return &argProblem{what: fmt.Sprintf("is not a usable JSON number: %s", repairQuote(string(x)))}
		}
		s.size += int64(len(x))
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return &argProblem{what: fmt.Sprintf("is not a finite number: %v", x)}
		}
		s.size += int64(len(appendJSONFloat(buf[:0], x, 64)))
	case float32:
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return &argProblem{what: fmt.Sprintf("is not a finite number: %v", x)}
		}
		s.size += int64(len(appendJSONFloat(buf[:0], float64(x), 32)))
	case int:
		s.size += int64(len(strconv.AppendInt(buf[:0], int64(x), 10)))
	case int8:
		s.size += int64(len(strconv.AppendInt(buf[:0], int64(x), 10)))
	case int16:
		s.size += int64(len(strconv.AppendInt(buf[:0], int64(x), 10)))
	case int32:
		s.size += int64(len(strconv.AppendInt(buf[:0], int64(x), 10)))
	case int64:
		s.size += int64(len(strconv.AppendInt(buf[:0], x, 10)))
	case uint:
		s.size += int64(len(strconv.AppendUint(buf[:0], uint64(x), 10)))
	case uint8:
		s.size += int64(len(strconv.AppendUint(buf[:0], uint64(x), 10)))
	case uint16:
		s.size += int64(len(strconv.AppendUint(buf[:0], uint64(x), 10)))
	case uint32:
		s.size += int64(len(strconv.AppendUint(buf[:0], uint64(x), 10)))
	case uint64:
		s.size += int64(len(strconv.AppendUint(buf[:0], x, 10)))
	case map[string]any:
		return s.object(x)
	case []any:
		s.size += 2
		if len(x) > 1 {
			s.size += int64(len(x) - 1)
		}
		for i, e := range x {
			if p := s.value(e); p != nil {
				p.tokens = append(p.tokens, strconv.Itoa(i))
				return p
			}
		}
	default:
		s.foreign = true
		return foreignUTF8(reflect.ValueOf(v), 0)
	}
	return nil
}

// foreignUTF8 finds invalid UTF-8 in a value of a type JSON decoding never
// produces, before json.Marshal would silently replace it.
func foreignUTF8(rv reflect.Value, depth int) *argProblem {
	if depth > 100 || !rv.IsValid() {
		return nil
	}
	switch rv.Kind() {
	case reflect.String:
		if !utf8.ValidString(rv.String()) {
			return &argProblem{what: utf8Problem}
		}
	case reflect.Interface, reflect.Pointer:
		if !rv.IsNil() {
			return foreignUTF8(rv.Elem(), depth+1)
		}
	case reflect.Slice, reflect.Array:
		if rv.Type().Elem().Kind() == reflect.Uint8 {
			return nil // bytes are encoded as base64
		}
		for i := range rv.Len() {
			if p := foreignUTF8(rv.Index(i), depth+1); p != nil {
				p.tokens = append(p.tokens, strconv.Itoa(i))
				return p
			}
		}
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			return nil
		}
		it := rv.MapRange()
		for it.Next() {
			k := it.Key().String()
			if !utf8.ValidString(k) {
				return &argProblem{tokens: []string{k}, key: true, what: utf8Problem}
			}
			if p := foreignUTF8(it.Value(), depth+1); p != nil {
				p.tokens = append(p.tokens, k)
				return p
			}
		}
	case reflect.Struct:
		for i := range rv.NumField() {
			f := rv.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			if p := foreignUTF8(rv.Field(i), depth+1); p != nil {
				name := f.Name
				if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag != "" && tag != "-" {
					name = tag
				}
				p.tokens = append(p.tokens, name)
				return p
			}
		}
	}
	return nil
}

// jsonStringSize returns the length of s encoded by encoding/json (quotes
// and escapes, HTML characters escaped), and whether s is valid UTF-8.
func jsonStringSize(s string) (int64, bool) {
	n := int64(2)
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			switch {
			case b == '"' || b == '\\' || b == '\b' || b == '\f' || b == '\n' || b == '\r' || b == '\t':
				n += 2
			case b < 0x20 || b == '<' || b == '>' || b == '&':
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return n, false
		}
		if r == '\u2028' || r == '\u2029' {
			n += 6
		} else {
			n += int64(size)
		}
		i += size
	}
	return n, true
}

// appendJSONFloat formats f as encoding/json does.
func appendJSONFloat(b []byte, f float64, bits int) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	b = strconv.AppendFloat(b, f, format, -1, bits)
	if format == 'e' {
		// clean up e-09 to e-9
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// Rendering violations.

// maxViolations bounds the violations listed in one message.
const maxViolations = 100

var schemaPrinter = message.NewPrinter(language.English)

type violation struct {
	at  []string // instance location
	msg string
}

// renderViolations lists every violation in err, one line each: the JSON
// pointer of the value and what is wrong with it, in words a model can act
// on. Lines are sorted by location.
func renderViolations(err *jsonschema.ValidationError, instance, doc any) []string {
	var vs []violation
	collectViolations(err, instance, doc, &vs)
	slices.SortFunc(vs, func(a, b violation) int {
		return cmp.Or(comparePointers(a.at, b.at), strings.Compare(a.msg, b.msg))
	})
	lines := make([]string, 0, len(vs))
	for _, v := range vs {
		l := displayPointer(v.at) + ": " + v.msg
		if len(lines) > 0 && lines[len(lines)-1] == l {
			continue
		}
		lines = append(lines, l)
	}
	if len(lines) > maxViolations {
		more := len(lines) - maxViolations
		lines = append(lines[:maxViolations], fmt.Sprintf("... and %d more", more))
	}
	return lines
}

func collectViolations(e *jsonschema.ValidationError, instance, doc any, out *[]violation) {
	add := func(at []string, msg string) { *out = append(*out, violation{at, msg}) }
	child := func(name string) []string { return append(slices.Clip(e.InstanceLocation), name) }
	switch k := e.ErrorKind.(type) {
	case *kind.Schema, *kind.Group, *kind.AllOf, *kind.Reference:
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				collectViolations(c, instance, doc, out)
			}
			return
		}
	case *kind.AnyOf, *kind.OneOf:
		if o, ok := k.(*kind.OneOf); ok && len(o.Subschemas) >= 2 {
			add(e.InstanceLocation, fmt.Sprintf("matches more than one of the alternatives (oneOf %d and %d), want exactly one", o.Subschemas[0], o.Subschemas[1]))
			return
		}
		collectAlternatives(e, instance, doc, out)
		return
	case *kind.Required:
		for _, m := range k.Missing {
			add(child(m), "missing (required property)")
		}
		return
	case *kind.DependentRequired:
		for _, m := range k.Missing {
			add(child(m), fmt.Sprintf("missing (required when %q is present)", k.Prop))
		}
		return
	case *kind.Dependency:
		for _, m := range k.Missing {
			add(child(m), fmt.Sprintf("missing (required when %q is present)", k.Prop))
		}
		return
	case *kind.AdditionalProperties:
		allowed := allowedProperties(e.SchemaURL, doc)
		for _, p := range k.Properties {
			if allowed == "" {
				add(child(p), "unknown property")
			} else {
				add(child(p), "unknown property (allowed: "+allowed+")")
			}
		}
		return
	}
	add(e.InstanceLocation, describeKind(e, instance))
}

// collectAlternatives reports a value that matches none of the anyOf/oneOf
// alternatives. Alternatives of another type than the value are the wrong
// branch; when one alternative remains, its violations are reported as if
// it were the schema.
func collectAlternatives(e *jsonschema.ValidationError, instance, doc any, out *[]violation) {
	var near []*jsonschema.ValidationError
	var want []string
	for _, c := range e.Causes {
		if t, ok := c.ErrorKind.(*kind.Type); ok && slices.Equal(c.InstanceLocation, e.InstanceLocation) {
			for _, w := range t.Want {
				if !slices.Contains(want, w) {
					want = append(want, w)
				}
			}
			continue
		}
		near = append(near, c)
	}
	switch len(near) {
	case 0:
		if len(want) > 0 {
			*out = append(*out, violation{e.InstanceLocation, fmt.Sprintf("got %s, want %s", describeValue(instance, e.InstanceLocation), strings.Join(want, " or "))})
			return
		}
		*out = append(*out, violation{e.InstanceLocation, "matches none of the allowed alternatives"})
	case 1:
		collectViolations(near[0], instance, doc, out)
	default:
		var parts []string
		for i, c := range near {
			var sub []violation
			collectViolations(c, instance, doc, &sub)
			var ps []string
			for _, v := range sub {
				ps = append(ps, displayPointer(v.at)+": "+v.msg)
			}
			parts = append(parts, fmt.Sprintf("(%d) %s", i+1, strings.Join(ps, ", ")))
		}
		*out = append(*out, violation{e.InstanceLocation, "matches none of the allowed alternatives: " + strings.Join(parts, "; ")})
	}
}

// describeKind words one violation.
func describeKind(e *jsonschema.ValidationError, instance any) string {
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		return fmt.Sprintf("got %s, want %s", describeValue(instance, e.InstanceLocation), strings.Join(k.Want, " or "))
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = displayJSON(w)
		}
		if len(want) == 1 {
			return fmt.Sprintf("got %s, want %s", displayJSON(k.Got), want[0])
		}
		return fmt.Sprintf("got %s, want one of %s", displayJSON(k.Got), strings.Join(want, ", "))
	case *kind.Const:
		return fmt.Sprintf("got %s, want %s", displayJSON(k.Got), displayJSON(k.Want))
	case *kind.Minimum:
		return fmt.Sprintf("got %s, want at least %s", displayRat(k.Got), displayRat(k.Want))
	case *kind.Maximum:
		return fmt.Sprintf("got %s, want at most %s", displayRat(k.Got), displayRat(k.Want))
	case *kind.ExclusiveMinimum:
		return fmt.Sprintf("got %s, want more than %s", displayRat(k.Got), displayRat(k.Want))
	case *kind.ExclusiveMaximum:
		return fmt.Sprintf("got %s, want less than %s", displayRat(k.Got), displayRat(k.Want))
	case *kind.MultipleOf:
		return fmt.Sprintf("got %s, want a multiple of %s", displayRat(k.Got), displayRat(k.Want))
	case *kind.MinLength:
		return fmt.Sprintf("%d characters, want at least %d", k.Got, k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("%d characters, want at most %d", k.Got, k.Want)
	case *kind.MinItems:
		return fmt.Sprintf("%d items, want at least %d", k.Got, k.Want)
	case *kind.MaxItems:
		return fmt.Sprintf("%d items, want at most %d", k.Got, k.Want)
	case *kind.MinProperties:
		return fmt.Sprintf("%d properties, want at least %d", k.Got, k.Want)
	case *kind.MaxProperties:
		return fmt.Sprintf("%d properties, want at most %d", k.Got, k.Want)
	case *kind.Pattern:
		return fmt.Sprintf("%s does not match the pattern %s", repairQuote(k.Got), strconv.Quote(k.Want))
	case *kind.Format:
		msg := fmt.Sprintf("%s is not a valid %s", displayJSON(k.Got), k.Want)
		if k.Err != nil {
			msg += " (" + k.Err.Error() + ")"
		}
		return msg
	case *kind.UniqueItems:
		return fmt.Sprintf("items %d and %d are equal, want unique items", k.Duplicates[0], k.Duplicates[1])
	case *kind.FalseSchema:
		return "not allowed"
	case *kind.AdditionalItems:
		return fmt.Sprintf("the last %d items are not allowed", k.Count)
	case *kind.PropertyNames:
		return fmt.Sprintf("property name %q is not allowed", k.Property)
	case *kind.Not:
		return "matches a schema it must not match"
	case *kind.InvalidJsonValue:
		return fmt.Sprintf("not a JSON value (%T)", k.Value)
	}
	return e.ErrorKind.LocalizedString(schemaPrinter)
}

// describeValue names the type of the value at a location, with the value
// itself when it is short: `string "3"`, `number 3.5`, `object`.
func describeValue(instance any, at []string) string {
	v, ok := valueAt(instance, at)
	if !ok {
		return "value"
	}
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return fmt.Sprintf("boolean %t", x)
	case string:
		return "string " + repairQuote(x)
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case json.Number:
		if len(x) > 40 {
			return "number " + string(x[:40]) + "..."
		}
		return "number " + string(x)
	case float64, float32, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return fmt.Sprintf("number %v", x)
	}
	return "value"
}

// displayJSON renders a JSON value compactly for a message.
func displayJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 60 {
		switch v.(type) {
		case map[string]any:
			return "an object"
		case []any:
			return "an array"
		}
		cut := 57
		for cut > 0 && !utf8.RuneStart(b[cut]) {
			cut--
		}
		return string(b[:cut]) + "..."
	}
	return string(b)
}

func displayRat(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func valueAt(v any, at []string) (any, bool) {
	for _, tok := range at {
		switch x := v.(type) {
		case map[string]any:
			e, ok := x[tok]
			if !ok {
				return nil, false
			}
			v = e
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// allowedProperties lists the properties the object schema at schemaURL
// declares, when schemaURL is a location in the tool's schema.
func allowedProperties(schemaURL string, doc any) string {
	base, frag, _ := strings.Cut(schemaURL, "#")
	if base != inputSchemaURL {
		return ""
	}
	frag, err := url.PathUnescape(frag)
	if err != nil {
		return ""
	}
	s, ok := repairPointer(doc, frag)
	if !ok {
		return ""
	}
	m, _ := s.(map[string]any)
	props, _ := m["properties"].(map[string]any)
	if len(props) == 0 {
		return ""
	}
	names := slices.Sorted(maps.Keys(props))
	const most = 20
	if len(names) > most {
		return strings.Join(names[:most], ", ") + fmt.Sprintf(", ... (%d more)", len(names)-most)
	}
	return strings.Join(names, ", ")
}

func displayPointer(at []string) string {
	if len(at) == 0 {
		return "(arguments)"
	}
	var b strings.Builder
	for _, t := range at {
		b.WriteByte('/')
		b.WriteString(pointerToken(t))
	}
	return b.String()
}

// comparePointers orders locations token by token, array indexes
// numerically.
func comparePointers(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] == b[i] {
			continue
		}
		x, errx := strconv.Atoi(a[i])
		y, erry := strconv.Atoi(b[i])
		if errx == nil && erry == nil {
			return cmp.Compare(x, y)
		}
		return strings.Compare(a[i], b[i])
	}
	return cmp.Compare(len(a), len(b))
}
