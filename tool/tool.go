package tool

// Tool describes one callable tool of one source.
//
// The pair (Server, Name) is the tool's identity inside toolmux; Exposed is
// the name models and MCP clients see, assigned by a [Catalog].
type Tool struct {
	// Server is the name of the source (MCP server, "builtin", ...) that owns the tool.
	Server string `json:"server"`
	// Name is the tool's own name within its server.
	Name string `json:"tool"`
	// Exposed is the sanitised `server__tool` name, set by the catalog.
	Exposed string `json:"name,omitempty"`
	// Title is a human-readable display name.
	Title string `json:"title,omitempty"`
	// Description is the text models read to decide whether to use the tool.
	Description string `json:"description,omitempty"`
	// InputSchema is the JSON Schema of the arguments object.
	InputSchema map[string]any `json:"input_schema,omitempty"`
	// OutputSchema is the JSON Schema of the structured result, when the tool has one.
	OutputSchema map[string]any `json:"output_schema,omitempty"`
	// Annotations are the behaviour hints the server declared.
	Annotations Annotations `json:"annotations,omitzero"`
	// Instructions is guidance attached to results the first time the tool is
	// used in a task (set from configuration, never from the server).
	Instructions string `json:"instructions,omitempty"`
}

// Annotations are MCP's behaviour hints. Nil means "not declared", which
// matters: an undeclared destructiveHint defaults to true, an undeclared
// readOnlyHint to false.
type Annotations struct {
	Title       string `json:"title,omitempty"`
	ReadOnly    *bool  `json:"readOnlyHint,omitempty"`
	Destructive *bool  `json:"destructiveHint,omitempty"`
	Idempotent  *bool  `json:"idempotentHint,omitempty"`
	OpenWorld   *bool  `json:"openWorldHint,omitempty"`
}

// IsReadOnly reports whether the tool declared that it does not modify its environment.
func (t Tool) IsReadOnly() bool { return deref(t.Annotations.ReadOnly, false) }

// IsIdempotent reports whether repeating a call with the same arguments has
// no further effect. Read-only tools are idempotent by nature.
func (t Tool) IsIdempotent() bool {
	return t.IsReadOnly() || deref(t.Annotations.Idempotent, false)
}

// IsDestructive reports whether the tool may destroy data, applying MCP's
// default (true) when the server did not say and the tool is not read-only.
func (t Tool) IsDestructive() bool {
	if t.IsReadOnly() {
		return false
	}
	return deref(t.Annotations.Destructive, true)
}

// Bool returns a pointer to b, for filling in [Annotations].
func Bool(b bool) *bool { return &b }

func deref(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}
