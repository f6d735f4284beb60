package codemode_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolmux/toolmux/codemode"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/tool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// tools is a Caller over Go functions by name, counting the calls it
// was given.
type tools struct {
	mu    sync.Mutex
	calls []string
	fns   map[string]func(ctx context.Context, args map[string]any) *tool.Record
}

func (c *tools) Call(ctx context.Context, name string, args map[string]any) *tool.Record {
	c.mu.Lock()
	c.calls = append(c.calls, name)
	c.mu.Unlock()
	f, ok := c.fns[name]
	if !ok {
		return &tool.Record{Error: &tool.Error{Kind: tool.KindToolNotRegistered, Tool: name, Message: "no tool " + name}}
	}
	return f(ctx, args)
}

func (c *tools) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.calls)
}

func newTools() *tools {
	return &tools{fns: map[string]func(context.Context, map[string]any) *tool.Record{
		"fx__echo": func(_ context.Context, args map[string]any) *tool.Record {
			s, _ := args["text"].(string)
			return &tool.Record{Result: &tool.Result{Content: []tool.Content{{Type: "text", Text: s}}}}
		},
		"fx__add": func(_ context.Context, args map[string]any) *tool.Record {
			a, _ := args["a"].(float64)
			b, _ := args["b"].(float64)
			return &tool.Record{Result: &tool.Result{Structured: map[string]any{"sum": a + b}}}
		},
		"fx__denied": func(context.Context, map[string]any) *tool.Record {
			return &tool.Record{Error: &tool.Error{Kind: tool.KindApprovalDenied, Server: "fx", Tool: "denied", Message: "no"}}
		},
		"fx__failing": func(context.Context, map[string]any) *tool.Record {
			return &tool.Record{Result: &tool.Result{IsError: true, Content: []tool.Content{{Type: "text", Text: "it broke"}}}}
		},
		"fx__wait": func(ctx context.Context, _ map[string]any) *tool.Record {
			<-ctx.Done()
			return &tool.Record{Error: &tool.Error{Kind: tool.KindCancelled, Message: ctx.Err().Error()}}
		},
	}}
}

var names = []string{"fx__echo", "fx__add", "fx__denied", "fx__failing", "fx__wait"}

func run(t *testing.T, o codemode.Options, code string) (*codemode.Result, error, *tools) {
	t.Helper()
	c := newTools()
	o.Engine = testservers.CodeModeEngine(t)
	res, err := codemode.New(c, o).Run(t.Context(), code, names)
	if res == nil {
		t.Fatal("Run returned no result")
	}
	return res, err, c
}

func wantKind(t *testing.T, err error, k codemode.Kind) *codemode.Error {
	t.Helper()
	e, ok := errors.AsType[*codemode.Error](err)
	if !ok || e.Kind != k {
		t.Fatalf("err = %v, want a *codemode.Error of kind %s", err, k)
	}
	return e
}

func TestRunCallsToolsAndReturns(t *testing.T) {
	res, err, c := run(t, codemode.Options{}, `
		const parts = [];
		for (let i = 0; i < 3; i++) {
			parts.push(await tools.call("fx__echo", {text: "n" + i}));
		}
		const s = await tools.fx__add({a: 2, b: 3});
		console.log("sum is", s.sum, {ok: true});
		console.warn("careful");
		return {parts, sum: s.sum};`)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Parts []string
		Sum   float64
	}
	if err := json.Unmarshal(res.Value, &got); err != nil {
		t.Fatalf("%s: %v", res.Value, err)
	}
	if strings.Join(got.Parts, ",") != "n0,n1,n2" || got.Sum != 5 {
		t.Fatalf("result = %s", res.Value)
	}
	if res.Calls != 4 || c.count() != 4 {
		t.Fatalf("calls = %d (caller saw %d), want 4", res.Calls, c.count())
	}
	if want := []string{`sum is 5 {"ok":true}`, "warn: careful"}; strings.Join(res.Console, "|") != strings.Join(want, "|") {
		t.Fatalf("console = %q, want %q", res.Console, want)
	}
}

func TestRunNoReturnIsNull(t *testing.T) {
	res, err, _ := run(t, codemode.Options{}, `console.log("hi")`)
	if err != nil || string(res.Value) != "null" {
		t.Fatalf("value %s, err %v", res.Value, err)
	}
}

func TestFailedCallThrowsWithKind(t *testing.T) {
	res, err, _ := run(t, codemode.Options{}, `
		const kinds = [];
		for (const name of ["fx__denied", "fx__failing", "nope__nothing"]) {
			try { await tools.call(name, {}); } catch (e) { kinds.push(e instanceof Error ? e.kind : "not an Error"); }
		}
		return kinds;`)
	if err != nil {
		t.Fatal(err)
	}
	if want := `["approval_denied","tool_error","tool_not_registered"]`; string(res.Value) != want {
		t.Fatalf("kinds = %s, want %s", res.Value, want)
	}
	// Not caught, the call's kind is the program's error's.
	_, err, _ = run(t, codemode.Options{}, `await tools.fx__denied({}); return 1`)
	if e := wantKind(t, err, codemode.KindThrown); e.ToolKind != tool.KindApprovalDenied {
		t.Fatalf("tool kind = %q, want approval_denied", e.ToolKind)
	}
}

func TestThrowAndSyntax(t *testing.T) {
	_, err, _ := run(t, codemode.Options{}, `throw new Error("mine")`)
	if e := wantKind(t, err, codemode.KindThrown); !strings.Contains(e.Message, "mine") {
		t.Fatalf("message %q", e.Message)
	}
	_, err, _ = run(t, codemode.Options{}, `return (`)
	wantKind(t, err, codemode.KindSyntax)
	_, err, _ = run(t, codemode.Options{}, `await new Promise(() => {}); return 1`)
	wantKind(t, err, codemode.KindResult)
	_, err, _ = run(t, codemode.Options{}, `return 10n`)
	wantKind(t, err, codemode.KindResult)
}

// Nothing of the host is reachable: the names are not defined, and no
// call is made.
func TestSandboxHasNoHost(t *testing.T) {
	for _, name := range []string{"require", "fetch", "process", "setTimeout", "setInterval", "XMLHttpRequest", "Deno", "Bun", "module"} {
		t.Run(name, func(t *testing.T) {
			res, err, c := run(t, codemode.Options{}, name+`; return "reached"`)
			if e := wantKind(t, err, codemode.KindThrown); !strings.Contains(e.Message, "ReferenceError") {
				t.Fatalf("message %q, want a ReferenceError", e.Message)
			}
			if c.count() != 0 || string(res.Value) != "" {
				t.Fatalf("calls %d, value %s", c.count(), res.Value)
			}
		})
	}
	// Through the global object either.
	res, err, _ := run(t, codemode.Options{}, `return [typeof globalThis.require, typeof globalThis.process, typeof globalThis.fetch]`)
	if err != nil || string(res.Value) != `["undefined","undefined","undefined"]` {
		t.Fatalf("%s %v", res.Value, err)
	}
}

func TestBoundTimeout(t *testing.T) {
	_, err, _ := run(t, codemode.Options{Timeout: 50 * time.Millisecond}, `for (;;) {}`)
	if e := wantKind(t, err, codemode.KindTimeout); e.Bound != "timeout" || e.Limit != 50 {
		t.Fatalf("bound %q %d", e.Bound, e.Limit)
	}
	// A call in flight is cancelled with it (time enough for the
	// engine's process to start and make it).
	_, err, c := run(t, codemode.Options{Timeout: time.Second}, `await tools.fx__wait({}); for (;;) {}`)
	wantKind(t, err, codemode.KindTimeout)
	if c.count() != 1 {
		t.Fatalf("calls %d", c.count())
	}
}

func TestBoundMaxCalls(t *testing.T) {
	prog := func(n int) string {
		return fmt.Sprintf(`for (let i = 0; i < %d; i++) { await tools.fx__echo({text: "x"}); } return "done"`, n)
	}
	res, err, _ := run(t, codemode.Options{MaxCalls: 3}, prog(3))
	if err != nil || res.Calls != 3 {
		t.Fatalf("3 calls of 3: %v, %d", err, res.Calls)
	}
	// One more ends the program, even one that catches: the bound is not
	// the program's to catch.
	res, err, c := run(t, codemode.Options{MaxCalls: 3}, `try { `+prog(4)+` } catch (e) { return "caught" }`)
	if e := wantKind(t, err, codemode.KindMaxCalls); e.Limit != 3 || e.Bound != "max_calls" {
		t.Fatalf("%+v", e)
	}
	if c.count() != 3 || res.Calls != 3 {
		t.Fatalf("the caller saw %d calls, want 3", c.count())
	}
}

func TestBoundMaxOutput(t *testing.T) {
	// "x".repeat(n) is n+2 bytes of JSON.
	res, err, _ := run(t, codemode.Options{MaxOutputBytes: 100}, `return "x".repeat(98)`)
	if err != nil || len(res.Value) != 100 {
		t.Fatalf("100 bytes of 100: %v (%d bytes)", err, len(res.Value))
	}
	_, err, _ = run(t, codemode.Options{MaxOutputBytes: 100}, `return "x".repeat(99)`)
	wantKind(t, err, codemode.KindMaxOutput)
	// The console counts, a line and its newline.
	_, err, _ = run(t, codemode.Options{MaxOutputBytes: 100}, `console.log("x".repeat(95)); return "ab"`)
	if err != nil {
		t.Fatalf("96 + 4 bytes of 100: %v", err)
	}
	_, err, _ = run(t, codemode.Options{MaxOutputBytes: 100}, `console.log("x".repeat(96)); return "ab"`)
	wantKind(t, err, codemode.KindMaxOutput)
	// A console past the bound ends the program at once.
	res, err, _ = run(t, codemode.Options{MaxOutputBytes: 100}, `for (;;) console.log("again")`)
	wantKind(t, err, codemode.KindMaxOutput)
	if len(strings.Join(res.Console, "\n")) > 100 {
		t.Fatalf("console kept %d bytes", len(strings.Join(res.Console, "\n")))
	}
}

func TestBoundMemory(t *testing.T) {
	const limit = 32 << 20
	// Well under the bound: fine.
	_, err, _ := run(t, codemode.Options{MaxMemoryBytes: limit, Timeout: time.Minute}, `
		const a = []; for (let i = 0; i < 1000; i++) a.push("x".repeat(100) + i); return a.length`)
	if err != nil {
		t.Fatal(err)
	}
	// Garbage does not count: twice the bound allocated and dropped.
	_, err, _ = run(t, codemode.Options{MaxMemoryBytes: limit, Timeout: time.Minute}, `
		let n = 0; for (let i = 0; i < 256; i++) { const a = new Array(1 << 14).fill(i); n += a.length; } return n`)
	if err != nil {
		t.Fatalf("a program of garbage: %v", err)
	}
	// Without bound: ended by the memory bound, long before the timeout.
	_, err, _ = run(t, codemode.Options{MaxMemoryBytes: limit, Timeout: time.Minute}, `
		const a = []; for (let i = 0; ; i++) a.push(new Array(1 << 20).fill(i));`)
	if e := wantKind(t, err, codemode.KindMaxMemory); e.Bound != "max_memory_bytes" || e.Limit != limit {
		t.Fatalf("%+v", e)
	}
}

func TestCallerContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	c := newTools()
	c.fns["fx__stop"] = func(context.Context, map[string]any) *tool.Record {
		cancel()
		return &tool.Record{Result: &tool.Result{}}
	}
	_, err := codemode.New(c, codemode.Options{Engine: testservers.CodeModeEngine(t)}).Run(ctx, `await tools.call("fx__stop"); for (;;) {}`, nil)
	wantKind(t, err, codemode.KindCancelled)
}

func TestDeclare(t *testing.T) {
	ts := []tool.Tool{
		{Exposed: "fx__echo", Description: "Echoes text. */ not closed", InputSchema: map[string]any{
			"type": "object", "required": []any{"text"},
			"properties": map[string]any{
				"text":  map[string]any{"type": "string", "description": "What to echo."},
				"times": map[string]any{"type": "integer"},
				"mode":  map[string]any{"enum": []any{"loud", "quiet"}},
			}}},
		{Exposed: "fx__odd-name", Description: "No arguments."},
	}
	d := codemode.Declare(ts, 0)
	for _, want := range []string{
		"call(name: string, args?: object): Promise<any>;",
		"fx__echo(args: {mode?: \"loud\" | \"quiet\"; text: string; times?: number}): Promise<any>;",
		"@param args.text What to echo.",
		"Echoes text. *\\/ not closed",
		`"fx__odd-name"(args?: {}): Promise<any>;`,
	} {
		if !strings.Contains(d, want) {
			t.Errorf("declaration lacks %q:\n%s", want, d)
		}
	}
	// Bounded: the tools that do not fit are left out, and said to be.
	small := codemode.Declare(ts, len(d)-1)
	if len(small) > len(d)-1 || !strings.Contains(small, "more tools are not declared here") || strings.Contains(small, "odd-name") {
		t.Fatalf("bounded declaration (%d bytes of %d):\n%s", len(small), len(d)-1, small)
	}
}

// The example of docs/codemode.md runs as it says.
func TestDocExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/codemode.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```js\n")
	code, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/codemode.md has no js example")
	}
	c := &tools{fns: map[string]func(context.Context, map[string]any) *tool.Record{}}
	for _, n := range []string{"cat__calendar_get_event", "cat__calendar_list_event"} {
		c.fns[n] = func(_ context.Context, args map[string]any) *tool.Record {
			return &tool.Record{Result: &tool.Result{Content: []tool.Content{{Type: "text", Text: n + fmt.Sprintf(" done for %q", args["target"])}}}}
		}
	}
	res, err := codemode.New(c, codemode.Options{Engine: testservers.CodeModeEngine(t)}).Run(t.Context(), code, nil)
	if err != nil || string(res.Value) != `{"done":2,"of":2}` || res.Calls != 2 {
		t.Fatalf("%s %v", res.Value, err)
	}
}

// The engine is found beside the program, then on PATH; missing, a
// program is refused as unavailable, and nothing is called.
func TestEngineFound(t *testing.T) {
	engine := testservers.CodeModeEngine(t)
	t.Setenv("PATH", t.TempDir())
	_, err := codemode.FindEngine("")
	if err == nil || !strings.Contains(err.Error(), codemode.EngineName) {
		t.Fatalf("no engine anywhere: %v", err)
	}
	c := newTools()
	_, err = codemode.New(c, codemode.Options{}).Run(t.Context(), `return await tools.fx__echo({text: "x"})`, names)
	wantKind(t, err, codemode.KindUnavailable)
	if c.count() != 0 {
		t.Fatalf("calls %d", c.count())
	}
	if _, err := codemode.FindEngine(filepath.Join(t.TempDir(), "nothing")); err == nil {
		t.Fatal("a path that does not exist was taken")
	}
	t.Setenv("PATH", filepath.Dir(engine))
	if p, err := codemode.FindEngine(""); err != nil || p != engine {
		t.Fatalf("on PATH: %q %v", p, err)
	}
}

// fakeEngine is a shell script in the engine's place, for what the real
// engine does not do: the runner trusts nothing it writes.
func fakeEngine(t *testing.T, script string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "engine")
	if err := os.WriteFile(p, []byte("#!/bin/sh\nread -r request\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEngineMisbehaves(t *testing.T) {
	call := `{"call":{"name":"fx__echo","args":{"text":"x"}}}`
	for _, tc := range []struct {
		name, script string
		o            codemode.Options
		kind         codemode.Kind
		calls        int
		says         string
	}{
		{"dies", `echo "engine broke" >&2; exit 3`, codemode.Options{}, codemode.KindEngine, 0, "engine broke"},
		{"dies after a call", `echo '` + call + `'; read -r reply; exit 4`, codemode.Options{}, codemode.KindEngine, 1, "exit status 4"},
		{"not the protocol", `echo "hello"; read -r x`, codemode.Options{}, codemode.KindEngine, 0, "protocol"},
		{"neither call nor end", `echo '{}'; read -r x`, codemode.Options{}, codemode.KindEngine, 0, "neither"},
		// One byte past the line bound (the memory and output bounds).
		{"line too long", `head -c 1101 /dev/zero | tr '\\0' x; echo; read -r x`,
			codemode.Options{MaxMemoryBytes: 1000, MaxOutputBytes: 100}, codemode.KindMaxMemory, 0, "longer than 1100"},
		{"calls past the bound", `for i in 1 2 3; do echo '` + call + `'; read -r reply; done; read -r x`,
			codemode.Options{MaxCalls: 2}, codemode.KindMaxCalls, 2, "call 3"},
		{"never ends", `while read -r x; do :; done`, codemode.Options{Timeout: 50 * time.Millisecond}, codemode.KindTimeout, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTools()
			tc.o.Engine = fakeEngine(t, tc.script)
			_, err := codemode.New(c, tc.o).Run(t.Context(), "return 1", names)
			e := wantKind(t, err, tc.kind)
			if !strings.Contains(e.Message, tc.says) {
				t.Fatalf("message %q lacks %q", e.Message, tc.says)
			}
			if c.count() != tc.calls {
				t.Fatalf("calls %d, want %d", c.count(), tc.calls)
			}
		})
	}
}

// What a program costs in its engine process: the process's start, the
// program, and each call's round trip over the pipe (BENCHMARKS.md §33;
// jsengine's BenchmarkRunInProcess is the same without the process).
func BenchmarkRun(b *testing.B) {
	c := newTools()
	r := codemode.New(c, codemode.Options{Engine: testservers.CodeModeEngine(b)})
	for _, n := range []int{1, 20} {
		code := fmt.Sprintf(`let s = 0; for (let i = 0; i < %d; i++) s += (await tools.fx__add({a: i, b: 1})).sum; return s`, n)
		b.Run(fmt.Sprintf("calls=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := r.Run(b.Context(), code, names); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Programs bounds the programs running at once across its runners: one
// past it is refused, unstarted and calling nothing; once one ends, its
// place is free again.
func TestBoundMaxPrograms(t *testing.T) {
	programs := codemode.NewPrograms(1)
	if programs.Max() != 1 || codemode.NewPrograms(0).Max() != codemode.DefaultMaxPrograms {
		t.Fatal("Max")
	}
	o := codemode.Options{Engine: testservers.CodeModeEngine(t), Programs: programs}
	entered, release := make(chan struct{}), make(chan struct{})
	first := newTools()
	first.fns["fx__hold"] = func(context.Context, map[string]any) *tool.Record {
		close(entered)
		<-release
		return &tool.Record{Result: &tool.Result{Content: []tool.Content{{Type: "text", Text: "held"}}}}
	}
	done := make(chan error, 1)
	go func() {
		_, err := codemode.New(first, o).Run(t.Context(), `return await tools.call("fx__hold")`, nil)
		done <- err
	}()
	<-entered
	second := newTools()
	res, err := codemode.New(second, o).Run(t.Context(), `return await tools.fx__echo({text: "x"})`, names)
	if e := wantKind(t, err, codemode.KindMaxPrograms); e.Bound != "max_programs" || e.Limit != 1 {
		t.Fatalf("%+v", e)
	}
	if second.count() != 0 || res.Calls != 0 {
		t.Fatalf("the refused program made %d calls", second.count())
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := codemode.New(second, o).Run(t.Context(), `return await tools.fx__echo({text: "x"})`, names); err != nil {
		t.Fatalf("once the first ended: %v", err)
	}
}
