package config

import (
	"time"

	"go.yaml.in/yaml/v3"
)

// This file reads the code_mode section: the meta-tool run_code of
// toolmux serve, which runs a model's JavaScript program that calls tools
// (docs/codemode.md).

// CodeMode is the `code_mode:` section. Zero values mean the defaults of
// package codemode.
type CodeMode struct {
	// Enabled offers run_code on /mcp, stdio and the virtual servers.
	Enabled bool
	// Timeout bounds a program's wall time.
	Timeout time.Duration
	// MaxCalls bounds a program's tool calls.
	MaxCalls int
	// MaxOutputBytes bounds a program's result and console together.
	MaxOutputBytes int64
	// MaxMemoryBytes bounds the heap of a program's engine process.
	MaxMemoryBytes int64
	// MaxPrograms bounds the programs running at once (engine
	// processes), of the gateway and of the runtime's agents each.
	MaxPrograms int
	// Engine is the path of the toolmux-codemode program (relative to
	// the config file's directory); "" finds it beside toolmux or on
	// PATH.
	Engine string
}

var codeModeKeys = []string{"enabled", "timeout", "max_calls", "max_output_bytes", "max_memory_bytes", "max_programs", "engine"}

// Bounds of the code_mode section: a typo of a few digits more is caught
// rather than let one program take the machine.
const (
	maxCodeModeCalls       = 100_000
	maxCodeModeOutputBytes = 64 << 20
	maxCodeModeMemoryBytes = 16 << 30
	maxCodeModePrograms    = 1024
)

// codeMode reads a code_mode section.
func (p *parser) codeMode(n *yaml.Node, kp string) CodeMode {
	var c CodeMode
	p.fields(n, kp, codeModeKeys, func(e entry, fp string) {
		switch e.key {
		case "enabled":
			c.Enabled, _ = p.boolean(e.v, fp)
		case "timeout":
			p.setDuration(&c.Timeout, e.v, fp)
		case "max_calls":
			c.MaxCalls, _ = p.integer(e.v, fp, 1, maxCodeModeCalls)
		case "max_output_bytes":
			c.MaxOutputBytes, _ = p.sizeUpTo(e.v, fp, maxCodeModeOutputBytes, "64MiB")
		case "max_memory_bytes":
			c.MaxMemoryBytes, _ = p.sizeUpTo(e.v, fp, maxCodeModeMemoryBytes, "16GiB")
		case "max_programs":
			c.MaxPrograms, _ = p.integer(e.v, fp, 1, maxCodeModePrograms)
		case "engine":
			if s, ok := p.text(e.v, fp); ok {
				if r, err := resolvePath(s, p.dir, p.lookup); err != nil {
					p.errAt(e.v, fp, "%v", err)
				} else {
					c.Engine = r
				}
			}
		}
	})
	return c
}
