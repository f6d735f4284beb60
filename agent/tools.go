package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/toolmux/toolmux/internal/bm25"
	"github.com/toolmux/toolmux/internal/toolglob"
	"github.com/toolmux/toolmux/llm"
	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

// offer is the tools of one turn.
type offer struct {
	cat *tool.Catalog
	// tools are the catalog's tools offered this turn; llm adds the
	// meta-tools, in the model's form.
	tools []tool.Tool
	llm   []llm.Tool
	// narrowed says the catalog was larger than the threshold, so that
	// find_tools is offered.
	narrowed bool
}

// DefaultSystemPrompt is the system prompt of an agent whose
// configuration gives none.
const DefaultSystemPrompt = `You are a capable assistant that completes tasks by calling tools.
Think about what the task needs, call the tools that get it (several at once when they do not depend on each other), and read their results carefully.
When you have the answer, give it as your final reply without calling a tool, or call terminate with it.`

// terminateTool ends the run with an answer.
var terminateTool = llm.Tool{
	Name:        metaTerminate,
	Description: "End the task with your final answer. Call it alone, once you have everything you need.",
	Parameters: map[string]any{
		"type":                 "object",
		"properties":           map[string]any{"answer": map[string]any{"type": "string", "description": "The final answer, complete."}},
		"required":             []any{"answer"},
		"additionalProperties": false,
	},
}

// findToolsTool searches the tools not offered this turn.
var findToolsTool = llm.Tool{
	Name: metaFindTools,
	Description: "Search every available tool by what it does, when none of the tools you were given fits. " +
		"The tools found are offered to you from the next turn on.",
	Parameters: map[string]any{
		"type": "object",
		"properties": map[string]any{
			"query": map[string]any{"type": "string", "description": "What the tool should do, in a few words."},
			"limit": map[string]any{"type": "integer", "description": "How many tools to return (default 10, at most 50)."},
		},
		"required":             []any{"query"},
		"additionalProperties": false,
	},
}

// selection is the BM25 index of the tools an agent may be offered, built
// once per catalog (catalogs are immutable, so the pointer identifies one).
type selection struct {
	mu    sync.Mutex
	cat   *tool.Catalog
	tools []tool.Tool
	index *bm25.Index
}

// allowed returns the catalog's tools this agent may use, and their index.
func (a *Agent) allowed(cat *tool.Catalog) ([]tool.Tool, *bm25.Index) {
	a.sel.mu.Lock()
	defer a.sel.mu.Unlock()
	if a.sel.cat == cat {
		return a.sel.tools, a.sel.index
	}
	var tools []tool.Tool
	var docs [][]bm25.Field
	for _, t := range cat.Tools() {
		if !a.mayUse(t) {
			continue
		}
		tools = append(tools, t)
		docs = append(docs, []bm25.Field{{Text: t.Name, Weight: 3}, {Text: t.Server, Weight: 1.5}, {Text: t.Description, Weight: 1}})
	}
	a.sel.cat, a.sel.tools, a.sel.index = cat, tools, bm25.New(docs)
	return tools, a.sel.index
}

// mayUse says whether t is among this agent's tools: its patterns for
// ordinary tools, its list of sub-agents for sub-agents' tools.
func (a *Agent) mayUse(t tool.Tool) bool {
	if strings.HasPrefix(t.Server, SubAgentPrefix) {
		return a.allAgents || a.subAgents[t.Server]
	}
	if len(a.tools) == 0 {
		return true
	}
	_, ok := toolglob.Any(a.tools, t.Server, t.Name)
	return ok
}

// offer chooses the tools of a turn: every tool the agent may use, or,
// past the threshold, the pinned ones, sub-agents, the tools found or used
// so far and the best matches for the task and the latest reply.
func (s *session) offer(ctx context.Context) (*offer, error) {
	a := s.a
	cat, err := a.rt.Catalog.Tools(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, s.cancelled(ctx)
		}
		return nil, &Error{Kind: ErrCatalog, Agent: a.cfg.Name, Message: "listing the tools failed", Err: err}
	}
	tools, index := a.allowed(cat)
	off := &offer{cat: cat}
	sel := a.cfg.Selection
	if sel.Threshold < 0 || len(tools) <= sel.Threshold {
		off.tools = tools
	} else {
		off.narrowed = true
		chosen := make([]bool, len(tools))
		for i, t := range tools {
			_, pinned := toolglob.Any(a.pinned, t.Server, t.Name)
			chosen[i] = pinned || strings.HasPrefix(t.Server, SubAgentPrefix) || s.found[t.Exposed]
		}
		for _, h := range index.Search(s.query(), max(sel.TopK, 1)) {
			chosen[h.Doc] = true
		}
		for i, t := range tools {
			if chosen[i] {
				off.tools = append(off.tools, t)
			}
		}
	}
	codeOnly := a.cfg.CodeMode.only()
	for _, t := range off.tools {
		if codeOnly {
			// The tools are declared in run_code's description and
			// reached through programs alone.
			break
		}
		params := t.InputSchema
		if params == nil {
			params = map[string]any{"type": "object", "properties": map[string]any{}}
		}
		off.llm = append(off.llm, llm.Tool{Name: t.Exposed, Description: t.Description, Parameters: params})
	}
	if a.cfg.CodeMode.on() {
		off.llm = append(off.llm, runCodeTool(off))
	}
	if off.narrowed {
		off.llm = append(off.llm, findToolsTool)
	}
	off.llm = append(off.llm, terminateTool)
	return off, nil
}

// query is what tool selection ranks the tools against: the task and the
// model's latest words.
func (s *session) query() string {
	q := s.input
	for i := len(s.history) - 1; i >= 0; i-- {
		if m := s.history[i].msg; m.Role == llm.RoleAssistant && m.Content != "" {
			q += "\n" + m.Content
			break
		}
	}
	return q
}

// system is the system prompt of a turn; with the text protocol it lists
// the tools offered.
func (s *session) system(off *offer) string {
	prompt := s.a.prompt()
	if s.a.cfg.ToolProtocol != ProtocolText {
		return prompt
	}
	list := make([]TextProtocolTool, 0, len(off.llm))
	for _, t := range off.tools {
		if s.a.cfg.CodeMode.only() {
			break
		}
		schema, _ := json.Marshal(t.InputSchema)
		list = append(list, TextProtocolTool{Server: t.Server, Name: t.Name, Description: t.Description, Schema: string(schema)})
	}
	metas := []llm.Tool{terminateTool}
	if s.a.cfg.CodeMode.on() {
		metas = append(metas, runCodeTool(off))
	}
	if off.narrowed {
		metas = append(metas, findToolsTool)
	}
	for _, m := range metas {
		schema, _ := json.Marshal(m.Parameters)
		list = append(list, TextProtocolTool{Server: metaServer, Name: m.Name, Description: m.Description, Schema: string(schema)})
	}
	return prompt + "\n\n" + TextProtocolPrompt(list)
}

// prompt is the agent's system prompt without the text protocol's
// listing: the configuration's, or DefaultSystemPrompt.
func (a *Agent) prompt() string {
	if strings.TrimSpace(a.cfg.SystemPrompt) == "" {
		return DefaultSystemPrompt
	}
	return a.cfg.SystemPrompt
}

// act runs the calls of a turn: the tool calls as one batch through the
// scheduler, the meta-tools here.
func (s *session) act(ctx context.Context, off *offer, plan *turnPlan) {
	var batch []tool.Call
	var scheduled, programs []*plannedCall
	for _, c := range plan.calls {
		switch c.meta {
		case "":
			batch = append(batch, c.call)
			scheduled = append(scheduled, c)
		case metaFindTools:
			s.findTools(ctx, off, c)
		case metaRunCode:
			programs = append(programs, c)
		case metaTerminate:
			c.text = "The task ends with this answer."
		}
	}
	if len(batch) > 0 {
		outcomes := s.a.rt.Calls.Run(ctx, batch)
		for i, o := range outcomes {
			c := scheduled[i]
			c.rec = o.Record
			c.text, c.isError = formatRecord(o.Record)
			if c.rec.Name != "" {
				s.found[c.rec.Name] = true
			} else if c.call.Server != "" {
				if t, ok := off.cat.Find(c.call.Server, c.call.Tool); ok {
					s.found[t.Exposed] = true
				}
			}
		}
		s.step(ctx, "tool calls", fmt.Sprintf("%d calls", len(batch)), tasklog.LevelInfo, map[string]any{"calls": callSummaries(scheduled)})
	}
	// Programs run after the turn's direct calls, one at a time, in the
	// model's order: each is a batch of calls of its own.
	for _, c := range programs {
		if ctx.Err() != nil {
			c.text, c.isError = "Error: the run was cancelled before the program ran.", true
			continue
		}
		s.runCode(ctx, off, c)
	}
}

func callSummaries(calls []*plannedCall) []map[string]any {
	out := make([]map[string]any, 0, len(calls))
	for _, c := range calls {
		m := map[string]any{"id": c.call.ID, "tool": c.exposed}
		if c.rec != nil && c.rec.Error != nil {
			m["error"] = string(c.rec.Error.Kind)
		}
		out = append(out, m)
	}
	return out
}

// findTools answers find_tools: the best matches among the agent's tools,
// offered from the next turn on.
func (s *session) findTools(ctx context.Context, off *offer, c *plannedCall) {
	id := "find-" + tool.NewID()
	s.a.publish(stream.EventToolCall, s.task, stream.ToolCallInput(id, metaFindTools, c.call.Arguments))
	query := stringArg(c.call.Arguments, "query")
	limit := 10
	if n, ok := intArg(c.call.Arguments, "limit"); ok && n > 0 {
		limit = min(n, 50)
	}
	tools, index := s.a.allowed(off.cat)
	var b strings.Builder
	if strings.TrimSpace(query) == "" {
		c.text, c.isError = "Error: find_tools needs a query saying what the tool should do.", true
	} else {
		hits := index.Search(query, limit)
		if len(hits) == 0 {
			b.WriteString("No tool matches " + fmt.Sprintf("%q", query) + ". Try other words.")
		} else {
			fmt.Fprintf(&b, "%d tools match %q; they are offered to you from now on:\n", len(hits), query)
		}
		for _, h := range hits {
			t := tools[h.Doc]
			s.found[t.Exposed] = true
			name := t.Exposed
			if s.a.cfg.ToolProtocol == ProtocolText {
				name = t.Server + "/" + t.Name
			}
			fmt.Fprintf(&b, "- %s: %s\n", name, firstLine(t.Description))
		}
		c.text = strings.TrimRight(b.String(), "\n")
	}
	s.a.publish(stream.EventToolCall, s.task, stream.ToolCallResult(id, metaFindTools, c.text))
	s.step(ctx, "find_tools", c.text, tasklog.LevelInfo, map[string]any{"query": query})
}

func intArg(args map[string]any, key string) (int, bool) {
	switch v := args[key].(type) {
	case float64:
		return int(v), true
	case json.Number:
		n, err := v.Int64()
		return int(n), err == nil
	case int:
		return v, true
	case int64:
		return int(v), true
	}
	return 0, false
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
