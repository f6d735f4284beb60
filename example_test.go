package toolmux_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/funcsource"
	"github.com/toolmux/toolmux/manager"
)

// An agent with a tool of the program's own: a Go function served by
// funcsource beside the built-in tools, through the whole runtime (policy,
// pipeline, scheduler). The model here is a scripted OpenAI-compatible
// server that asks for shop__stock and answers with what it returned;
// examples/library is the same program against a real model.
func Example() {
	ctx := context.Background()
	model, stop := scriptedModel()
	defer stop()

	stock := map[string]int{"apples": 12, "pears": 3}
	type stockArgs struct {
		Item string `json:"item" jsonschema:"what to look up, such as apples"`
	}
	shop := funcsource.New("shop", funcsource.Func("stock", "Says how many of an item the shop has in stock.",
		func(_ context.Context, in stockArgs) (string, error) {
			n, ok := stock[strings.ToLower(in.Item)]
			if !ok {
				return "", fmt.Errorf("no item %q", in.Item)
			}
			return strconv.Itoa(n), nil
		},
		funcsource.ReadOnly(), // the default policy runs read-only tools without asking
	))

	rt, err := toolmux.Open(ctx, config.Default(), toolmux.Options{
		Model:     model,
		Sources:   []manager.Source{shop},
		NoTaskLog: true, // write nothing, whatever the configuration's data_dir
	})
	if err != nil {
		panic(err)
	}
	defer rt.Close(ctx)
	a, err := rt.Agent()
	if err != nil {
		panic(err)
	}
	res, err := a.Run(ctx, "How many apples are in stock?")
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Answer)
	fmt.Printf("%s after %d tool call\n", res.Status, res.Calls)
	// Output:
	// There are 12 apples in stock.
	// answered after 1 tool call
}
