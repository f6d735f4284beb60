// Command toolmux-codemode is code mode's JavaScript engine: toolmux starts
// it for each program that run_code (or an agent's code mode) runs, gives it
// the program on its stdin, answers the tool calls it asks for there with
// governed calls, and reads the program's end (docs/codemode.md). It is a
// program of its own so that toolmux's binary does without the engine's
// weight, and a program's heap is its process's alone. It is not meant to
// be run by hand.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/toolmux/toolmux/codemode/jsengine"
)

func main() {
	if err := jsengine.Serve(context.Background(), os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "toolmux-codemode:", err)
		os.Exit(1)
	}
}
