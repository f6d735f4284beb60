package funcsource_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/toolmux/toolmux/funcsource"
)

type greetArgs struct {
	Name  string `json:"name" jsonschema:"who to greet"`
	Times int    `json:"times,omitempty" jsonschema:"how many times (default 1)"`
}

// A Go function becomes a tool: its input schema comes from the argument
// type, its result is the string it returns. The source serves it to the
// manager (toolmux.Options.Sources, or a manager of your own) like any MCP
// server.
func Example() {
	greet := funcsource.Func("greet", "Greets someone.", func(_ context.Context, in greetArgs) (string, error) {
		return strings.TrimSpace(strings.Repeat("Hello, "+in.Name+"! ", max(in.Times, 1))), nil
	}, funcsource.ReadOnly())
	src := funcsource.New("demo", greet)

	ctx := context.Background()
	tools, _ := src.Tools(ctx)
	fmt.Println(tools[0].Name, tools[0].InputSchema["required"], tools[0].IsReadOnly())

	res, _ := src.Call(ctx, "greet", map[string]any{"name": "Ada", "times": 2})
	fmt.Println(res.Text())

	// Arguments that do not fit the type are refused before the function runs.
	_, err := src.Call(ctx, "greet", map[string]any{"name": "Ada", "loud": true})
	fmt.Println(err)
	// Output:
	// greet [name] true
	// Hello, Ada! Hello, Ada!
	// invalid_tool_params: unknown argument "loud"
}
