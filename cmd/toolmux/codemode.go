package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/toolmux/toolmux/codemode"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/tasklog"
)

// codeModeFlag is serve's --code-mode, over the configuration's
// code_mode.enabled.
type codeModeFlag struct{ on bool }

func (f *codeModeFlag) flags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.on, "code-mode", false, "offer run_code on /mcp and the virtual servers: a JavaScript program that calls tools, each call governed (code_mode.enabled; docs/codemode.md)")
}

// apply returns the gateway's code mode: the configuration's, the flag
// given over it, each run_code call recorded in the task log (if any).
func (f *codeModeFlag) apply(cmd *cobra.Command, c config.CodeMode, log *tasklog.Log) gateway.CodeMode {
	out := gateway.CodeModeFromConfig(c)
	if cmd.Flags().Changed("code-mode") {
		out.Enabled = f.on
	}
	if log != nil {
		out.Recorder = log
	}
	return out
}

// codeModeLine says at start that run_code is offered, and its bounds.
func codeModeLine(w io.Writer, c gateway.CodeMode) {
	if !c.Enabled {
		return
	}
	engine, err := codemode.FindEngine(c.Bounds.Engine)
	if err != nil {
		return // no engine: the gateway logs why
	}
	b := c.Bounds.WithDefaults()
	fmt.Fprintf(w, "toolmux: code mode on: run_code (engine %s, timeout %s, max_calls %d, max_output_bytes %d, max_memory_bytes %d)\n",
		engine, b.Timeout, b.MaxCalls, b.MaxOutputBytes, b.MaxMemoryBytes)
}
