// Package funcsource makes tools of Go functions: a [manager.Source] whose
// tools run in the program itself, so that a program using toolmux as a
// library adds its own tools in a few lines and they go through the same
// policy gate, pipeline and task log as every MCP server's:
//
//	type addArgs struct {
//		A float64 `json:"a" jsonschema:"the first number"`
//		B float64 `json:"b" jsonschema:"the second number"`
//	}
//	src := funcsource.New("calc",
//		funcsource.Func("add", "Adds two numbers.", func(ctx context.Context, in addArgs) (string, error) {
//			return strconv.FormatFloat(in.A+in.B, 'f', -1, 64), nil
//		}, funcsource.ReadOnly()),
//	)
//	rt, err := toolmux.Open(ctx, cfg, toolmux.Options{Model: model, Sources: []manager.Source{src}})
//
// The input schema the model sees is derived from the argument type, so it
// cannot drift from the code that reads the arguments.
package funcsource

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/toolmux/toolmux/internal/jsontype"
	"github.com/toolmux/toolmux/tool"
)

// Tool is one tool implemented by a Go function, made by [Func] and served
// by a [Source].
type Tool struct {
	def tool.Tool
	// required are the arguments that must be present: decoding alone
	// would leave them zero.
	required []string
	// call decodes the arguments' JSON and runs the function.
	call func(ctx context.Context, data []byte) (string, error)
}

// Option adjusts a tool made by [Func].
type Option func(*Tool)

// ReadOnly declares that the tool only looks and changes nothing
// (readOnlyHint true). The default policy runs read-only tools without
// asking, and plan mode allows only them, so a lookup should say so.
func ReadOnly() Option {
	return func(t *Tool) {
		t.def.Annotations.ReadOnly = tool.Bool(true)
		t.def.Annotations.Destructive = tool.Bool(false)
	}
}

// Destructive declares that the tool may delete or overwrite data
// (destructiveHint true), for the policy rules and approval prompts that
// treat such tools with more care.
func Destructive() Option {
	return func(t *Tool) {
		t.def.Annotations.ReadOnly = tool.Bool(false)
		t.def.Annotations.Destructive = tool.Bool(true)
	}
}

// Func makes a tool of fn. The tool's input schema is derived from In, a
// struct (or a map with string keys): its exported fields are the
// arguments, named by their `json` tags, required unless tagged omitempty
// or omitzero, described by their `jsonschema` tags. Extra arguments are
// refused.
//
// A call decodes the arguments into an In, strictly: a required argument
// missing, an unknown one or one of the wrong type fails the call with an
// invalid_tool_params error naming it, and fn is not called. (Through
// toolmux's pipeline, the arguments have already been validated against
// the whole schema and repaired where they could be.) The string fn returns is the
// tool's text result. An error fn returns is reported to the model as the
// tool's own failure (a result with isError, kind tool_error), except a
// *tool.Error, which is kept as it is (fn chooses its kind), and the
// context's error, which reports the call as cancelled or timed out. A
// panic in fn fails the call with execution_failed; the program goes on.
//
// A tool without options is declared as one that changes things without
// destroying them (readOnlyHint and destructiveHint false): the program
// defining it knows what it does, so it says so rather than leaving MCP's
// worst-case defaults. Pass [ReadOnly] or [Destructive] when that is wrong.
//
// Func panics when name is empty, fn is nil or In has no object schema (a
// function, a channel, a number...): these are mistakes in the program,
// found the first time it starts, as with regexp.MustCompile.
func Func[In any](name, description string, fn func(context.Context, In) (string, error), opts ...Option) Tool {
	if name == "" {
		panic("funcsource.Func: empty tool name")
	}
	if fn == nil {
		panic(fmt.Sprintf("funcsource.Func(%q): nil function", name))
	}
	input, required, err := objectSchema[In]()
	if err != nil {
		panic(fmt.Sprintf("funcsource.Func(%q): %v", name, err))
	}
	t := Tool{
		def: tool.Tool{
			Name:        name,
			Description: description,
			InputSchema: input,
			Annotations: tool.Annotations{ReadOnly: tool.Bool(false), Destructive: tool.Bool(false)},
		},
		required: required,
		call: func(ctx context.Context, data []byte) (string, error) {
			var in In
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&in); err != nil {
				return "", &tool.Error{Kind: tool.KindInvalidParams, Message: decodeError(err), Err: err}
			}
			return fn(ctx, in)
		},
	}
	for _, o := range opts {
		if o != nil {
			o(&t)
		}
	}
	return t
}

// objectSchema derives the schema of In, as the JSON map a tool
// definition carries, and its required properties.
func objectSchema[In any]() (map[string]any, []string, error) {
	s, err := jsonschema.For[In](nil)
	if err != nil {
		return nil, nil, err
	}
	// A pointer type allows null; the arguments are always an object.
	if s.Type == "" && slices.Equal(s.Types, []string{"null", "object"}) {
		s.Type, s.Types = "object", nil
	}
	if s.Type != "object" {
		return nil, nil, fmt.Errorf("the argument type %s is not a struct or a map with string keys", reflect.TypeFor[In]())
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, nil, err
	}
	// Some providers refuse an object schema without properties (a tool
	// with no arguments, struct{}).
	if _, ok := m["properties"]; !ok {
		m["properties"] = map[string]any{}
	}
	return m, s.Required, nil
}

// decodeError says what in the arguments does not fit, in JSON's terms
// rather than Go's, naming the argument.
func decodeError(err error) string {
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
		// For an array's item, Field names the array.
		return fmt.Sprintf("argument %q: found %s where %s was expected", te.Field, jsontype.Found(te.Value), jsontype.Of(te.Type))
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return "unknown argument " + name
	}
	return "the arguments do not fit the tool: " + strings.TrimPrefix(err.Error(), "json: ")
}

// Name is the tool's name within its source.
func (t Tool) Name() string { return t.def.Name }

// Source serves tools made by [Func] as one tool source (one "server" of
// the catalog: models see server__tool). It holds nothing between calls,
// so it is safe for concurrent use and Close has nothing to release.
type Source struct {
	name   string
	tools  []Tool // sorted by name, as sources list their tools
	byName map[string]*Tool
}

// New returns a source named name serving tools. It panics when name is
// empty or two tools share a name: mistakes in the program, not in what
// it is given at run time.
func New(name string, tools ...Tool) *Source {
	if name == "" {
		panic("funcsource.New: empty source name")
	}
	s := &Source{name: name, tools: slices.Clone(tools), byName: make(map[string]*Tool, len(tools))}
	slices.SortFunc(s.tools, func(a, b Tool) int { return strings.Compare(a.def.Name, b.def.Name) })
	for i := range s.tools {
		t := &s.tools[i]
		if t.call == nil {
			panic(fmt.Sprintf("funcsource.New(%q): tool %d was not made by funcsource.Func", name, i))
		}
		if _, dup := s.byName[t.def.Name]; dup {
			panic(fmt.Sprintf("funcsource.New(%q): two tools named %q", name, t.def.Name))
		}
		s.byName[t.def.Name] = t
	}
	return s
}

// Name returns the source's name, the server part of its tools' names.
func (s *Source) Name() string { return s.name }

// Tools returns the tools' definitions, sorted by name. Each call returns
// fresh values, so callers may modify them.
func (s *Source) Tools(ctx context.Context) ([]tool.Tool, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]tool.Tool, len(s.tools))
	for i, t := range s.tools {
		d := t.def
		d.Server = s.name
		d.InputSchema = cloneJSON(d.InputSchema).(map[string]any)
		d.Annotations.ReadOnly = clonePtr(d.Annotations.ReadOnly)
		d.Annotations.Destructive = clonePtr(d.Annotations.Destructive)
		out[i] = d
	}
	return out, nil
}

// Call runs one tool. Its failures are *tool.Error values, except the
// tool's own (a result with IsError) and cancellation (ctx.Err()).
func (s *Source) Call(ctx context.Context, name string, args map[string]any) (*tool.Result, error) {
	t, ok := s.byName[name]
	if !ok {
		names := make([]string, len(s.tools))
		for i, t := range s.tools {
			names[i] = t.def.Name
		}
		return nil, &tool.Error{Kind: tool.KindToolNotRegistered, Server: s.name, Tool: name,
			Message:    fmt.Sprintf("no tool named %q in %s; its tools are %s", name, s.name, strings.Join(names, ", ")),
			Suggestion: tool.Closest(name, names)}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fail := func(err *tool.Error) (*tool.Result, error) {
		err.Server, err.Tool = s.name, name
		return nil, err
	}
	if args == nil {
		args = map[string]any{}
	}
	// The pipeline has validated the arguments against the schema already;
	// the checks here are strict anyway, as the source may be used without
	// a pipeline, and they cost little: a second, full validation made a
	// call three times as costly (5.8 µs against 2).
	for _, r := range t.required {
		if _, ok := args[r]; !ok {
			return fail(&tool.Error{Kind: tool.KindInvalidParams, Message: fmt.Sprintf("missing required argument %q", r)})
		}
	}
	// A JSON round trip: the decoder then reads JSON's own types whatever
	// the caller built the map from (json.Number, ints, structs).
	data, err := json.Marshal(args)
	if err != nil {
		return fail(&tool.Error{Kind: tool.KindInvalidParams, Message: "the arguments are not JSON: " + err.Error(), Err: err})
	}
	text, err := run(ctx, t, data)
	if err == nil {
		return tool.TextResult(text), nil
	}
	if te, ok := errors.AsType[*tool.Error](err); ok {
		// A copy: fn may return the same *tool.Error to concurrent calls.
		c := *te
		if c.Server == "" {
			c.Server = s.name
		}
		if c.Tool == "" {
			c.Tool = name
		}
		return nil, &c
	}
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		// The manager tells a timeout from a cancellation by the context.
		return nil, err
	}
	return tool.ErrorResult(err.Error()), nil
}

// run calls the tool's function; a panic becomes an execution_failed
// error, so that one faulty tool cannot take the program down.
func run(ctx context.Context, t *Tool, data []byte) (text string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &tool.Error{Kind: tool.KindExecutionFailed,
				Message: fmt.Sprintf("the tool panicked: %v", r), Detail: panicStack(debug.Stack())}
		}
	}()
	return t.call(ctx, data)
}

// panicStack is the stack of a recovered panic from the frame that
// panicked on, a few frames deep: where the fault is, for the task log (a
// model is shown it too, so the recovery machinery above is left out).
func panicStack(stack []byte) string {
	lines := strings.Split(strings.TrimSpace(string(stack)), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "panic(") && i+2 < len(lines) {
			lines = lines[i+2:]
			break
		}
	}
	const frames = 8 // two lines each
	if len(lines) > 2*frames {
		lines = lines[:2*frames]
	}
	return strings.Join(lines, "\n")
}

// Close does nothing: the source holds nothing between calls.
func (s *Source) Close() error { return nil }

// cloneJSON copies a value made of JSON's types (maps, slices, scalars).
func cloneJSON(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[k] = cloneJSON(e)
		}
		return m
	case []any:
		s := make([]any, len(v))
		for i, e := range v {
			s[i] = cloneJSON(e)
		}
		return s
	default:
		return v
	}
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
