// Package wire is what code mode's runner and its engine process say to
// each other over the engine's stdin and stdout: one JSON object a line.
//
// The runner writes a Request; the engine answers with Calls, each
// answered by a Reply, one at a time (a program's calls run one after
// another), and ends with Done. The runner trusts nothing the engine
// writes beyond its bounds: the engine runs the program, which is input.
package wire

import (
	"encoding/json"

	"github.com/toolmux/toolmux/tool"
)

// Request starts a program.
type Request struct {
	Code  string   `json:"code"`
	Names []string `json:"names,omitempty"`
	// The program's bounds, resolved by the runner (no zero values).
	TimeoutMS      int64 `json:"timeout_ms"`
	MaxCalls       int   `json:"max_calls"`
	MaxOutputBytes int   `json:"max_output_bytes"`
	MaxMemoryBytes int64 `json:"max_memory_bytes"`
}

// FromEngine is a line the engine writes: a call, or the end.
type FromEngine struct {
	Call *Call `json:"call,omitempty"`
	Done *Done `json:"done,omitempty"`
}

// Call asks the runner to make one governed call.
type Call struct {
	Name string         `json:"name"`
	Args map[string]any `json:"args"`
}

// Reply is a call's outcome: the value the program sees, or the error
// its promise is rejected with.
type Reply struct {
	Value json.RawMessage `json:"value,omitempty"`
	Error *tool.Error     `json:"error,omitempty"`
	// TimeUp: the program's time ran out while the call was made (the
	// runner's clock started first): the engine ends the program at its
	// timeout rather than let it see the call fail.
	TimeUp bool `json:"time_up,omitempty"`
}

// Done ends a program: what it returned, its console, its calls, and
// why it failed if it did.
type Done struct {
	Value   json.RawMessage `json:"result,omitempty"`
	Console []string        `json:"console,omitempty"`
	Calls   int             `json:"calls"`
	Error   *Error          `json:"error,omitempty"`
}

// Error is codemode.Error on the wire.
type Error struct {
	Kind     string    `json:"kind"`
	Bound    string    `json:"bound,omitempty"`
	Limit    int64     `json:"limit,omitempty"`
	ToolKind tool.Kind `json:"tool_kind,omitempty"`
	Message  string    `json:"message"`
}
