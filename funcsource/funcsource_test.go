package funcsource_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/funcsource"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/tool"
)

type addArgs struct {
	A float64 `json:"a" jsonschema:"the first number"`
	B float64 `json:"b" jsonschema:"the second number"`
}

func add(_ context.Context, in addArgs) (string, error) {
	return strconv.FormatFloat(in.A+in.B, 'f', -1, 64), nil
}

type searchArgs struct {
	Query string   `json:"query"`
	Limit int      `json:"limit,omitempty"`
	Tags  []string `json:"tags,omitzero"`
	Inner *struct {
		Deep bool `json:"deep"`
	} `json:"inner,omitempty"`
	Hidden  string `json:"-"`
	private string // unexported: not an argument
}

func listed(t *testing.T, src *funcsource.Source, name string) tool.Tool {
	t.Helper()
	tools, err := src.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range tools {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("no tool %q in %v", name, tools)
	return tool.Tool{}
}

func TestSchemaDerivation(t *testing.T) {
	src := funcsource.New("s",
		funcsource.Func("add", "Adds two numbers.", add),
		funcsource.Func("search", "Searches.", func(context.Context, searchArgs) (string, error) { return "", nil }),
		funcsource.Func("ping", "No arguments.", func(context.Context, struct{}) (string, error) { return "pong", nil }),
		funcsource.Func("env", "A map.", func(context.Context, map[string]string) (string, error) { return "", nil }),
		funcsource.Func("ptr", "A pointer.", func(context.Context, *addArgs) (string, error) { return "", nil }),
	)

	d := listed(t, src, "add")
	if d.Server != "s" || d.Description != "Adds two numbers." {
		t.Errorf("definition: %+v", d)
	}
	want := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"a": map[string]any{"type": "number", "description": "the first number"},
			"b": map[string]any{"type": "number", "description": "the second number"},
		},
		"required":             []any{"a", "b"},
		"additionalProperties": false,
	}
	if !reflect.DeepEqual(d.InputSchema, want) {
		t.Errorf("add schema:\n got %v\nwant %v", d.InputSchema, want)
	}

	s := listed(t, src, "search").InputSchema
	props := s["properties"].(map[string]any)
	if got := fmt.Sprint(keys(props)); got != "[inner limit query tags]" {
		t.Errorf("search properties: %s (json:\"-\" and unexported fields must not appear)", got)
	}
	if !reflect.DeepEqual(s["required"], []any{"query"}) {
		t.Errorf("only query is required (omitempty, omitzero): %v", s["required"])
	}
	if props["limit"].(map[string]any)["type"] != "integer" {
		t.Errorf("limit: %v", props["limit"])
	}

	if p := listed(t, src, "ping").InputSchema; p["type"] != "object" || p["properties"] == nil {
		t.Errorf("a tool without arguments still has an object schema with properties: %v", p)
	}
	if e := listed(t, src, "env").InputSchema; e["type"] != "object" || e["additionalProperties"].(map[string]any)["type"] != "string" {
		t.Errorf("map schema: %v", e)
	}
	if p := listed(t, src, "ptr").InputSchema; p["type"] != "object" {
		t.Errorf("a pointer to a struct is an object: %v", p)
	}
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestAnnotations(t *testing.T) {
	src := funcsource.New("s",
		funcsource.Func("plain", "", add),
		funcsource.Func("look", "", add, funcsource.ReadOnly()),
		funcsource.Func("wipe", "", add, funcsource.Destructive()),
	)
	for _, c := range []struct {
		name                        string
		readOnly, destructive, idem bool
	}{
		{"plain", false, false, false},
		{"look", true, false, true},
		{"wipe", false, true, false},
	} {
		d := listed(t, src, c.name)
		if d.IsReadOnly() != c.readOnly || d.IsDestructive() != c.destructive || d.IsIdempotent() != c.idem {
			t.Errorf("%s: read-only %v destructive %v idempotent %v", c.name, d.IsReadOnly(), d.IsDestructive(), d.IsIdempotent())
		}
		if d.Annotations.ReadOnly == nil || d.Annotations.Destructive == nil {
			t.Errorf("%s: hints left undeclared: %+v", c.name, d.Annotations)
		}
	}
}

func TestToolsAreFreshCopies(t *testing.T) {
	src := funcsource.New("s", funcsource.Func("add", "", add, funcsource.ReadOnly()))
	d := listed(t, src, "add")
	d.InputSchema["properties"].(map[string]any)["a"].(map[string]any)["type"] = "string"
	*d.Annotations.ReadOnly = false
	again := listed(t, src, "add")
	if again.InputSchema["properties"].(map[string]any)["a"].(map[string]any)["type"] != "number" || !again.IsReadOnly() {
		t.Errorf("a caller's change to a listing reached the source: %v", again)
	}
	// The call still validates against the original schema.
	if res, err := src.Call(context.Background(), "add", map[string]any{"a": 1, "b": 2}); err != nil || res.Text() != "3" {
		t.Errorf("call: %v %v", res, err)
	}
}

func TestFuncPanicsOnProgramErrors(t *testing.T) {
	for name, f := range map[string]func(){
		"not an object": func() { funcsource.Func("n", "", func(context.Context, int) (string, error) { return "", nil }) },
		"unsupported": func() {
			funcsource.Func("c", "", func(context.Context, struct{ C chan int }) (string, error) { return "", nil })
		},
		"empty name":     func() { funcsource.Func("", "", add) },
		"nil function":   func() { funcsource.Func[addArgs]("x", "", nil) },
		"duplicate tool": func() { funcsource.New("s", funcsource.Func("add", "", add), funcsource.Func("add", "", add)) },
		"empty source":   func() { funcsource.New("") },
		"zero tool":      func() { funcsource.New("s", funcsource.Tool{}) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r := recover(); r == nil {
					t.Error("no panic")
				} else if !strings.Contains(fmt.Sprint(r), "funcsource.") {
					t.Errorf("the panic does not say where it comes from: %v", r)
				}
			}()
			f()
		})
	}
}

func TestCallDecodingErrors(t *testing.T) {
	var called atomic.Int32
	src := funcsource.New("s", funcsource.Func("add", "", func(ctx context.Context, in addArgs) (string, error) {
		called.Add(1)
		return add(ctx, in)
	}), funcsource.Func("search", "", func(_ context.Context, in searchArgs) (string, error) {
		return fmt.Sprintf("%s %d %v", in.Query, in.Limit, in.Tags), nil
	}), funcsource.Func("small", "", func(_ context.Context, in struct {
		N int8 `json:"n"`
	}) (string, error) {
		called.Add(1)
		return "", nil
	}))
	ctx := context.Background()
	for _, c := range []struct {
		tool string
		args map[string]any
		want []string // in the message
	}{
		{"add", map[string]any{"a": "one", "b": 2}, []string{`argument "a": found a string where a number was expected`}},
		{"add", map[string]any{"a": 1}, []string{`missing required argument "b"`}},
		{"add", map[string]any{"a": 1, "b": 2, "c": 3}, []string{`unknown argument "c"`}},
		{"add", map[string]any{"A": 1, "B": 2}, []string{`missing required argument "a"`}}, // Go's decoder alone would take these
		{"search", map[string]any{"query": "x", "limit": 1.5}, []string{`argument "limit": found number 1.5 where an integer was expected`}},
		{"search", map[string]any{"query": "x", "tags": []any{"a", 2}}, []string{`argument "tags": found a number where a string was expected`}},
		{"search", map[string]any{"query": "x", "inner": map[string]any{"deep": "yes"}}, []string{`argument "inner.deep": found a string where a boolean was expected`}},
		{"search", map[string]any{"query": "x", "inner": map[string]any{"deeper": true}}, []string{`unknown argument "deeper"`}},
		{"small", map[string]any{"n": 300}, []string{`argument "n": found number 300 where an integer from -128 to 127 was expected`}},
		{"small", map[string]any{"n": true}, []string{`argument "n": found a boolean where an integer from -128 to 127 was expected`}},
	} {
		res, err := src.Call(ctx, c.tool, c.args)
		te := tool.AsError(err)
		if err == nil || te.Kind != tool.KindInvalidParams {
			t.Errorf("%s %v: got %v, %v; want invalid_tool_params", c.tool, c.args, res, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(te.Message, w) {
				t.Errorf("%s %v: %q does not name %s", c.tool, c.args, te.Message, w)
			}
		}
		if te.Server != "s" || te.Tool != c.tool {
			t.Errorf("the error does not name the tool: %+v", te)
		}
	}
	if n := called.Load(); n != 0 {
		t.Errorf("the function ran %d times on arguments that do not fit", n)
	}

	// What fits decodes, whatever Go types the caller built the map from.
	res, err := src.Call(ctx, "search", map[string]any{"query": "q", "limit": int64(3), "tags": []string{"x", "y"}})
	if err != nil || res.Text() != "q 3 [x y]" {
		t.Errorf("search: %v %v", res, err)
	}
	if res, err := src.Call(ctx, "search", nil); tool.KindOf(err) != tool.KindInvalidParams {
		t.Errorf("nil arguments are an empty object, missing query: %v %v", res, err)
	}
}

var errShared = tool.NewError(tool.KindPermissionDenied, "read-only mode")

func TestCallErrors(t *testing.T) {
	errOwn := errors.New("the file is locked")
	src := funcsource.New("s",
		funcsource.Func("fails", "", func(context.Context, struct{}) (string, error) { return "", errOwn }),
		funcsource.Func("typed", "", func(context.Context, struct{}) (string, error) {
			return "", fmt.Errorf("wrapped: %w", tool.NewError(tool.KindFileNotFound, "no such file: a.txt"))
		}),
		funcsource.Func("shared", "", func(context.Context, struct{}) (string, error) { return "", errShared }),
		funcsource.Func("panics", "", func(context.Context, struct{}) (string, error) {
			var m map[string]int
			m["x"] = 1
			return "", nil
		}),
		funcsource.Func("waits", "", func(ctx context.Context, _ struct{}) (string, error) {
			<-ctx.Done()
			return "", fmt.Errorf("waiting: %w", ctx.Err())
		}),
	)
	ctx := context.Background()

	res, err := src.Call(ctx, "fails", nil)
	if err != nil || !res.IsError || res.Text() != "the file is locked" {
		t.Errorf("a plain error is the tool's own failure: %+v %v", res, err)
	}

	_, err = src.Call(ctx, "typed", nil)
	if te := tool.AsError(err); te.Kind != tool.KindFileNotFound || te.Message != "no such file: a.txt" || te.Server != "s" || te.Tool != "typed" {
		t.Errorf("a *tool.Error is kept: %+v", te)
	}
	_, err = src.Call(ctx, "shared", nil)
	if te := tool.AsError(err); te.Kind != tool.KindPermissionDenied || te.Tool != "shared" || errShared.Tool != "" {
		t.Errorf("a shared *tool.Error is copied, not changed: %+v, %+v", te, errShared)
	}

	_, err = src.Call(ctx, "panics", nil)
	if te := tool.AsError(err); te.Kind != tool.KindExecutionFailed || !strings.Contains(te.Message, "panicked") ||
		!strings.Contains(te.Message, "nil map") || !strings.HasPrefix(te.Detail, "github.com/toolmux/toolmux/funcsource_test.TestCallErrors") {
		t.Errorf("a panic is execution_failed with its stack: %+v", te)
	}

	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = src.Call(cctx, "waits", nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the context's error is returned as is: %v", err)
	}

	_, err = src.Call(ctx, "fail", nil)
	if te := tool.AsError(err); te.Kind != tool.KindToolNotRegistered || te.Suggestion != "fails" || !strings.Contains(te.Message, "fails, panics, shared, typed, waits") {
		t.Errorf("unknown tool: %+v", te)
	}

	done, stop := context.WithCancel(ctx)
	stop()
	if _, err := src.Call(done, "fails", nil); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled call does not run: %v", err)
	}
	if err := src.Close(); err != nil {
		t.Error(err)
	}
}

// The source under a real manager and pipeline: the catalog names, the
// records, the kinds, and calls side by side.
func TestThroughManagerAndPipeline(t *testing.T) {
	var mu sync.Mutex
	notes := map[string]string{}
	src := funcsource.New("calc",
		funcsource.Func("add", "Adds two numbers.", add, funcsource.ReadOnly()),
		funcsource.Func("note", "Keeps a note.", func(_ context.Context, in struct {
			Key  string `json:"key"`
			Text string `json:"text"`
		}) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			if _, ok := notes[in.Key]; ok {
				return "", fmt.Errorf("note %q exists", in.Key)
			}
			notes[in.Key] = in.Text
			return "kept " + in.Key, nil
		}),
		funcsource.Func("boom", "Panics.", func(context.Context, struct{}) (string, error) { panic("boom") }),
	)
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p, err := pipeline.New(m, append(pipeline.FromConfig(config.Default().Pipeline), pipeline.WithDataDir(t.TempDir()))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cat, err := p.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range cat.Tools() {
		names = append(names, d.Exposed)
	}
	if fmt.Sprint(names) != "[calc__add calc__boom calc__note]" {
		t.Errorf("catalog: %v", names)
	}

	call := func(name string, args map[string]any) *tool.Record {
		return p.Call(ctx, tool.Call{Task: "t", Session: "main", Server: "calc", Tool: name, Arguments: args})
	}
	if rec := call("add", map[string]any{"a": 2, "b": 40}); rec.Err() != nil || rec.Result.Text() != "42" || rec.Name != "calc__add" {
		t.Errorf("add: %v %+v", rec.Err(), rec)
	}
	if rec := call("add", map[string]any{"a": 2}); tool.KindOf(rec.Err()) != tool.KindInvalidParams {
		t.Errorf("missing argument: %v", rec.Err())
	}
	if rec := call("note", map[string]any{"key": "k", "text": "x"}); rec.Err() != nil || rec.Result.Text() != "kept k" {
		t.Errorf("note: %v", rec.Err())
	}
	if rec := call("note", map[string]any{"key": "k", "text": "y"}); tool.KindOf(rec.Err()) != tool.KindToolError ||
		!strings.Contains(rec.Error.Message, `note "k" exists`) || rec.Result == nil || !rec.Result.IsError {
		t.Errorf("the tool's own failure: %v %+v", rec.Err(), rec.Result)
	}
	if rec := call("boom", nil); tool.KindOf(rec.Err()) != tool.KindExecutionFailed {
		t.Errorf("panic: %v", rec.Err())
	}
	if rec := call("nope", nil); tool.KindOf(rec.Err()) != tool.KindToolNotRegistered {
		t.Errorf("unknown tool: %v", rec.Err())
	}

	// Side by side (run with -race).
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			rec := p.Call(ctx, tool.Call{Task: fmt.Sprint("t", i), Session: "main", Server: "calc", Tool: "add", Arguments: map[string]any{"a": i, "b": 1}})
			if rec.Err() != nil || rec.Result.Text() != strconv.Itoa(i+1) {
				t.Errorf("add %d: %v", i, rec.Err())
			}
		})
	}
	wg.Wait()
}
