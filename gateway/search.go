package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/bm25"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

// Tool search: clients cap how many tools they take, and a hundred tool
// schemas fill a good part of a model's context window. With tool search
// on, an endpoint lists only its pinned tools and two meta-tools:
// find_tools, BM25 over the tools' names, servers and descriptions (the
// agent's ranking, internal/bm25), which returns the best matches with
// their input schemas, and call_tool, which calls one of them by name, by
// the same governed path as a direct call.

// ToolSearch configures tool search on an endpoint of the gateway.
type ToolSearch struct {
	// Enabled turns tool search on whatever the number of tools.
	Enabled bool
	// Above turns it on while the endpoint has more tools than this; 0
	// never does. Crossing it either way changes the list clients see
	// (they are told with notifications/tools/list_changed).
	Above int
	// Pinned are tool patterns (server/tool globs, as in allow) of the
	// tools listed even while tool search is on.
	Pinned []string
	// Limit is how many tools find_tools returns when the client does not
	// say; 0 means DefaultFindLimit. At most MaxFindLimit.
	Limit int
}

// Bounds of find_tools' answers.
const (
	DefaultFindLimit = 10
	MaxFindLimit     = 50
)

// Names of the meta-tools.
const (
	metaFindTools = "find_tools"
	metaCallTool  = "call_tool"
)

func isMeta(name string) bool { return name == metaFindTools || name == metaCallTool }

// on says whether tool search is on for an endpoint with n tools.
func (s ToolSearch) on(n int) bool { return s.Enabled || s.Above > 0 && n > s.Above }

func (s ToolSearch) limit() int {
	if s.Limit <= 0 {
		return DefaultFindLimit
	}
	return min(s.Limit, MaxFindLimit)
}

// findToolsTool is find_tools' definition.
func findToolsTool(limit int) *mcp.Tool {
	return &mcp.Tool{
		Name: metaFindTools,
		Description: "Search the tools this gateway can call (more than it lists) by what they do. " +
			"Returns the best matches with their names, descriptions and input schemas; call one with call_tool. " +
			"An exact tool name finds that tool.",
		InputSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"query": map[string]any{"type": "string", "description": "What the tool should do, in a few words, or a tool's exact name."},
				"limit": map[string]any{"type": "integer", "minimum": 1, "maximum": MaxFindLimit,
					"description": fmt.Sprintf("How many tools to return (default %d, at most %d).", limit, MaxFindLimit)},
			},
			"required": []any{"query"},
		},
		Annotations: &mcp.ToolAnnotations{Title: "Find tools", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: new(false)},
	}
}

// callToolTool is call_tool's definition.
var callToolTool = &mcp.Tool{
	Name: metaCallTool,
	Description: "Call a tool found with find_tools, by its name, with arguments that follow its input schema. " +
		"The call is governed like any other (policy, approvals, the task log).",
	InputSchema: map[string]any{
		"type": "object",
		"properties": map[string]any{
			"name":      map[string]any{"type": "string", "description": "The tool's name, as find_tools gave it."},
			"arguments": map[string]any{"type": "object", "description": "The tool's arguments."},
		},
		"required": []any{"name"},
	},
	Annotations: &mcp.ToolAnnotations{Title: "Call a tool", DestructiveHint: new(true), OpenWorldHint: new(true)},
}

// FoundTool is one tool of find_tools' answer (its structured content is
// {"tools": [...]}).
type FoundTool struct {
	Name        string `json:"name"`
	Server      string `json:"server"`
	Description string `json:"description,omitempty"`
	InputSchema any    `json:"inputSchema"`
}

// findTools answers find_tools for a caller who sees sc: the exact name
// first, then the BM25 best matches, among the tools it sees.
func (v *view) findTools(sc policy.Scope, in callInput) *mcp.CallToolResult {
	args, err := v.g.decodeArgs(in.params.Arguments)
	if err != nil {
		return errorResult(&tool.Error{Kind: tool.KindInvalidParams, Tool: metaFindTools, Message: err.Error()})
	}
	query, _ := args["query"].(string)
	if strings.TrimSpace(query) == "" {
		return errorResult(&tool.Error{Kind: tool.KindInvalidParams, Tool: metaFindTools,
			Message: "find_tools needs a query saying what the tool should do"})
	}
	limit := v.search.limit()
	if n, ok := args["limit"].(json.Number); ok {
		if i, err := n.Int64(); err == nil && i > 0 {
			limit = int(min(i, MaxFindLimit))
		}
	}
	tools, index, exact := v.searchIndex(strings.TrimSpace(query))
	var keep func(int) bool
	if sc.Limited() {
		keep = func(i int) bool { return sc.Sees(tools[i].Server, tools[i].Name) }
		if exact >= 0 && !keep(exact) {
			exact = -1
		}
	}
	found := make([]FoundTool, 0, limit)
	add := func(t tool.Tool) {
		schema := any(t.InputSchema)
		if t.InputSchema == nil {
			schema = map[string]any{"type": "object"}
		}
		found = append(found, FoundTool{Name: t.Exposed, Server: t.Server, Description: t.Description, InputSchema: schema})
	}
	if exact >= 0 {
		add(tools[exact])
	}
	for _, h := range index.SearchFunc(query, limit, keep) {
		if len(found) == limit {
			break
		}
		if h.Doc != exact {
			add(tools[h.Doc])
		}
	}
	var text strings.Builder
	if len(found) == 0 {
		fmt.Fprintf(&text, "No tool matches %q. Try other words.", query)
	} else {
		fmt.Fprintf(&text, "%d tools match %q. Call one with call_tool {\"name\": NAME, \"arguments\": {...}}:\n", len(found), query)
	}
	body := map[string]any{"tools": found}
	b, err := json.Marshal(body)
	if err != nil {
		return errorResult(&tool.Error{Kind: tool.KindExecutionFailed, Tool: metaFindTools, Message: err.Error()})
	}
	if len(found) > 0 {
		text.Write(b)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text.String()}}, StructuredContent: body}
}

// searchIndex returns the view's tools, their BM25 index (built once per
// catalog) and the tool whose name is query (its shown name, or
// server/tool), -1 for none. The index is built outside the lock, which
// the view's calls take: a search that finds none builds one, and the
// first one stored for the catalog is kept.
func (v *view) searchIndex(query string) ([]tool.Tool, *bm25.Index, int) {
	v.mu.Lock()
	tools, index, synced, renamed := v.tools, v.index, v.synced, v.pick != nil
	v.mu.Unlock()
	if index == nil {
		docs := make([][]bm25.Field, len(tools))
		for i, t := range tools {
			name := t.Exposed
			if renamed && name != t.Name {
				name += " " + t.Name // a renamed tool is found by its own name too
			}
			docs[i] = []bm25.Field{{Text: name, Weight: 3}, {Text: t.Server, Weight: 1.5}, {Text: t.Description, Weight: 1}}
		}
		index = bm25.New(docs)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.synced != synced {
		// The catalog changed meanwhile: answer from the one indexed.
		return tools, index, exactIn(tools, nil, query)
	}
	if v.index == nil {
		v.index = index
	}
	return v.tools, v.index, exactIn(v.tools, v.byName, query)
}

// exactIn returns the index in tools of the tool named name (its shown
// name, found through byName when there is one, or server/tool), -1 for
// none.
func exactIn(tools []tool.Tool, byName map[string]int, name string) int {
	if byName != nil {
		if i, ok := byName[name]; ok {
			return i
		}
	} else {
		for i, t := range tools {
			if t.Exposed == name {
				return i
			}
		}
	}
	if server, name, ok := strings.Cut(name, "/"); ok {
		for i, t := range tools {
			if t.Server == server && t.Name == name {
				return i
			}
		}
	}
	return -1
}

// callTool answers call_tool: the named tool of the view called with the
// arguments given, exactly as a direct call of it.
func (v *view) callTool(ctx context.Context, in callInput) *mcp.CallToolResult {
	args, err := v.g.decodeArgs(in.params.Arguments)
	if err != nil {
		return errorResult(&tool.Error{Kind: tool.KindInvalidParams, Tool: metaCallTool, Message: err.Error()})
	}
	name, _ := args["name"].(string)
	if name == "" {
		return errorResult(&tool.Error{Kind: tool.KindInvalidParams, Tool: metaCallTool,
			Message: "call_tool needs the name of the tool to call (find it with find_tools)"})
	}
	inner := map[string]any{}
	switch a := args["arguments"].(type) {
	case nil:
	case map[string]any:
		inner = a
	default:
		return errorResult(&tool.Error{Kind: tool.KindInvalidParams, Tool: metaCallTool,
			Message: "call_tool's arguments must be a JSON object (the tool's arguments)"})
	}
	t, terr := v.byCall(v.g.toolScope(identity.From(ctx)), name, "find tools with find_tools")
	if terr != nil {
		return errorResult(terr)
	}
	// The progress token, the answers to approval questions and the rest
	// of the request's _meta are the call_tool request's: the client sent
	// them for this call.
	return v.g.callArgs(ctx, t, in, inner)
}

// byCall returns the tool a meta-tool's call names (call_tool's, a
// run_code program's): a tool of the view by its shown name or
// server/tool, or one of a server that is down (answered
// server_unavailable, and why, by the governed path as a direct call
// would be). A tool the caller, who sees sc, may not see is one that is
// not there: tool_not_registered, hint saying how to find tools.
func (v *view) byCall(sc policy.Scope, name, hint string) (tool.Tool, *tool.Error) {
	v.mu.Lock()
	t, ok := v.lookupLocked(name)
	if !ok {
		if i := exactIn(v.tools, v.byName, name); i >= 0 {
			t, ok = v.tools[i], true
		} else if v.pick == nil && v.synced != nil {
			t, ok = downServerTool(v.synced, name)
		}
	}
	ok = ok && sc.Sees(t.Server, t.Name)
	var sug string
	if !ok {
		sug = v.suggestLocked(sc, name)
	}
	v.mu.Unlock()
	if ok {
		return t, nil
	}
	msg := fmt.Sprintf("no tool is named %q here; %s", name, hint)
	if sug != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", sug)
	}
	return tool.Tool{}, &tool.Error{Kind: tool.KindToolNotRegistered, Tool: name, Suggestion: sug, Message: msg}
}
