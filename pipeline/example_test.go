package pipeline_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/toolmux/toolmux/funcsource"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/tool"
)

// A middleware of the caller's own, an audit hook, added to the built-in
// chain: it sees each call as the tool will (the alias already repaired),
// and its record then goes through the built-in steps after the call.
func ExampleWithMiddleware() {
	type greetArgs struct {
		Name string `json:"name"`
	}
	src := funcsource.New("hello",
		funcsource.Func("greet", "Greets someone.", func(_ context.Context, in greetArgs) (string, error) {
			return "Hello, " + in.Name + "!", nil
		}, funcsource.ReadOnly()))
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		panic(err)
	}
	defer m.Close()

	audit := func(next pipeline.Handler) pipeline.Handler {
		return pipeline.HandlerFunc(func(ctx context.Context, call tool.Call) *tool.Record {
			fmt.Printf("audit: %s/%s %v\n", call.Server, call.Tool, call.Arguments)
			return next.Call(ctx, call)
		})
	}
	p, err := pipeline.New(m,
		pipeline.WithRepair(pipeline.RepairOptions{Aliases: []pipeline.Aliases{{Tools: "hello/greet", Map: map[string]string{"who": "name"}}}}),
		pipeline.WithRecorder(pipeline.RecorderFunc(func(_ context.Context, rec *tool.Record) {
			fmt.Printf("recorded: %s, %d notes\n", rec.Name, len(rec.Notes))
		})),
		pipeline.WithMiddleware(audit))
	if err != nil {
		panic(err)
	}
	rec := p.Call(context.Background(), tool.Call{Server: "hello", Tool: "greet", Arguments: map[string]any{"who": "Ada"}})
	fmt.Println(strings.TrimSpace(rec.Result.Text()))
	// Output:
	// audit: hello/greet map[name:Ada]
	// recorded: hello__greet, 1 notes
	// Hello, Ada!
}
