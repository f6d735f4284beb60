package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/santhosh-tekuri/jsonschema/v6"

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

	instance, refused := v.checkArguments(call)
	if refused != nil {
		return refused
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
	return v.refuse(call, violationsMessage(call, lines), map[string]any{"violations": lines})
}

// checkArguments refuses arguments that hold what JSON cannot (invalid
// UTF-8, numbers it cannot encode) or are over the size limit, and
// otherwise returns them in the form the schema is checked against.
func (v *schemaValidator) checkArguments(call tool.Call) (instance any, refused *tool.Record) {
	// Arguments are a map, hence a JSON object; nil is {}.
	var scan argScan
	if p := scan.object(call.Arguments); p != nil {
		return nil, v.refuse(call, p.message(), map[string]any{"pointer": p.pointer()})
	}
	instance = call.Arguments
	if call.Arguments == nil {
		instance = map[string]any{}
	}
	if scan.foreign {
		// Values of Go types a JSON decoder never produces ([]string,
		// structs, ...): measure and validate their JSON form.
		b, err := json.Marshal(call.Arguments)
		if err != nil {
			return nil, v.refuse(call, fmt.Sprintf("the arguments cannot be encoded as JSON: %v", err), nil)
		}
		scan.size = int64(len(b))
		if scan.size <= v.limit {
			instance, err = jsonschema.UnmarshalJSON(bytes.NewReader(b))
			if err != nil {
				return nil, v.refuse(call, fmt.Sprintf("the arguments cannot be encoded as JSON: %v", err), nil)
			}
		}
	}
	if scan.size > v.limit {
		return nil, v.refuse(call,
			ArgumentsTooLarge(scan.size, v.limit),
			map[string]any{"size": scan.size, "limit": v.limit})
	}
	return instance, nil
}

// ArgumentsTooLarge is the message refusing arguments of size bytes of
// JSON over limit: the validator's, and the gateway's, which weighs them
// before decoding them.
func ArgumentsTooLarge(size, limit int64) string {
	return fmt.Sprintf("the arguments are %d bytes of JSON, over the limit of %d bytes; send less data in one call", size, limit)
}

// violationsMessage is the error message listing a call's violations.
func violationsMessage(call tool.Call, lines []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "arguments do not match the schema of %s/%s:", call.Server, call.Tool)
	for _, l := range lines {
		b.WriteString("\n- ")
		b.WriteString(l)
	}
	return b.String()
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
