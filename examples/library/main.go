// Command library is toolmux used as a library: an agent whose model is
// any OpenAI-compatible server, with a tool written in Go beside the
// built-in ones, run on the task given on the command line.
//
//	OPENAI_BASE_URL=http://localhost:11434/v1 TOOLMUX_MODEL=qwen3:8b \
//	  go run ./examples/library "How many apples are in stock?"
package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/funcsource"
	"github.com/toolmux/toolmux/llm"
	"github.com/toolmux/toolmux/manager"
)

// stock is the program's own data, which only its own tool can see.
var stock = map[string]int{"apples": 12, "pears": 3}

type stockArgs struct {
	Item string `json:"item" jsonschema:"what to look up, such as apples"`
}

func lookUp(_ context.Context, in stockArgs) (string, error) {
	n, ok := stock[strings.ToLower(strings.TrimSpace(in.Item))]
	if !ok {
		return "", fmt.Errorf("no item %q: the shop sells apples and pears", in.Item)
	}
	return strconv.Itoa(n), nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: library TASK")
		os.Exit(2)
	}
	if err := run(context.Background(), os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "library:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, task string) error {
	model, err := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: os.Getenv("OPENAI_BASE_URL"),
		APIKey: os.Getenv("OPENAI_API_KEY"), Model: cmp.Or(os.Getenv("TOOLMUX_MODEL"), "gpt-4o-mini")})
	if err != nil {
		return err
	}
	// ReadOnly lets the default policy run the tool without asking anyone.
	shop := funcsource.New("shop", funcsource.Func("stock", "Says how many of an item the shop has in stock.", lookUp, funcsource.ReadOnly()))
	// config.Default(): the built-in tools on the current directory, no
	// data directory, so nothing is written anywhere.
	rt, err := toolmux.Open(ctx, config.Default(), toolmux.Options{Model: model, Sources: []manager.Source{shop}})
	if err != nil {
		return err
	}
	defer rt.Close(context.WithoutCancel(ctx))
	a, err := rt.Agent()
	if err != nil {
		return err
	}
	res, err := a.Run(ctx, task)
	if err != nil {
		return err
	}
	fmt.Println(res.Answer)
	return nil
}
