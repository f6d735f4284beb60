package jsengine_test

import (
	"context"
	"fmt"
	"testing"

	"go.uber.org/goleak"

	"github.com/toolmux/toolmux/codemode"
	"github.com/toolmux/toolmux/codemode/jsengine"
	"github.com/toolmux/toolmux/tool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type caller struct{ calls int }

func (c *caller) Call(_ context.Context, name string, args map[string]any) *tool.Record {
	c.calls++
	if name != "fx__add" {
		return &tool.Record{Error: &tool.Error{Kind: tool.KindToolNotRegistered, Tool: name, Message: "no tool " + name}}
	}
	a, _ := args["a"].(float64)
	b, _ := args["b"].(float64)
	return &tool.Record{Result: &tool.Result{Structured: map[string]any{"sum": a + b}}}
}

// A library runs a program in its own process with Run and Caller, with
// the bounds and errors of the engine process.
func TestRunInProcess(t *testing.T) {
	c := &caller{}
	res, err := jsengine.Run(t.Context(), `
		const s = await tools.fx__add({a: 1, b: 2});
		try { await tools.call("fx__nope", {}); } catch (e) { console.log(e.kind); }
		return s.sum`, []string{"fx__add"}, jsengine.Caller(c), codemode.Options{})
	if err != nil || string(res.Value) != "3" || res.Calls != 2 || c.calls != 2 ||
		len(res.Console) != 1 || res.Console[0] != "tool_not_registered" {
		t.Fatalf("%s %v %+v calls %d", res.Value, err, res, c.calls)
	}
	_, err = jsengine.Run(t.Context(), `for (;;) {}`, nil, jsengine.Caller(c), codemode.Options{MaxCalls: 1, Timeout: 1})
	if codemode.KindOf(err) != codemode.KindTimeout {
		t.Fatalf("err %v", err)
	}
}

// BenchmarkRun's programs (codemode's) run in this process.
func BenchmarkRunInProcess(b *testing.B) {
	c := &caller{}
	for _, n := range []int{1, 20} {
		code := fmt.Sprintf(`let s = 0; for (let i = 0; i < %d; i++) s += (await tools.fx__add({a: i, b: 1})).sum; return s`, n)
		b.Run(fmt.Sprintf("calls=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := jsengine.Run(b.Context(), code, []string{"fx__add"}, jsengine.Caller(c), codemode.Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
