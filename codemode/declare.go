package codemode

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/toolmux/toolmux/tool"
)

// Declare renders the program's API for tools as TypeScript declarations
// with JSDoc, the text a model reads to write a program: tools.call and
// one function per tool, its description and its arguments' types from
// its input schema. The text is at most maxBytes (0: no bound): the tools
// that do not fit are left out, and the text says so and how to reach
// them (find_tools, then tools.call by name).
func Declare(tools []tool.Tool, maxBytes int) string {
	var head strings.Builder
	head.WriteString("// The program is the body of an async function: `return` gives its result (as JSON).\n")
	head.WriteString("// console.log(...) lines are returned beside it. No require, fetch, process or timers.\n")
	head.WriteString("declare const tools: {\n")
	head.WriteString("  /** Calls any tool by its name; resolves to its structured content, else its text.\n")
	head.WriteString("   * A failed call throws an Error whose `kind` says why (e.g. approval_denied). */\n")
	head.WriteString("  call(name: string, args?: object): Promise<any>;\n")
	const tail = "};\n"
	var body strings.Builder
	left := 0
	for i, t := range tools {
		d := declareTool(t)
		// Room is kept for the note of those left out after this one.
		note := 0
		if i < len(tools)-1 {
			note = len(omitted(len(tools) - i - 1))
		}
		if maxBytes > 0 && head.Len()+body.Len()+len(d)+len(tail)+note > maxBytes {
			left = len(tools) - i
			break
		}
		body.WriteString(d)
	}
	out := head.String() + body.String() + tail
	if left > 0 {
		out += omitted(left)
	}
	return out
}

func omitted(n int) string {
	return fmt.Sprintf("// %d more tools are not declared here: find their names in the tool list (or with find_tools) and call them with tools.call(name, args).\n", n)
}

// identifier is a name JavaScript takes after a dot.
var identifier = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)

// key is name as a property name of a declaration: quoted unless it is
// an identifier.
func key(name string) string {
	if identifier.MatchString(name) {
		return name
	}
	return fmt.Sprintf("%q", name)
}

// declareTool is one tool's declaration.
func declareTool(t tool.Tool) string {
	var b strings.Builder
	b.WriteString("  /**")
	if d := strings.TrimSpace(t.Description); d != "" {
		b.WriteString(" " + strings.ReplaceAll(comment(d), "\n", "\n   * "))
	}
	props, _ := t.InputSchema["properties"].(map[string]any)
	required := map[string]bool{}
	if rs, ok := t.InputSchema["required"].([]any); ok {
		for _, r := range rs {
			if s, ok := r.(string); ok {
				required[s] = true
			}
		}
	}
	names := make([]string, 0, len(props))
	for n := range props {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		p, _ := props[n].(map[string]any)
		desc, _ := p["description"].(string)
		if desc != "" {
			fmt.Fprintf(&b, "\n   * @param args.%s %s", n, comment(firstLine(desc)))
		}
	}
	b.WriteString(" */\n  ")
	b.WriteString(key(t.Exposed) + "(args")
	if len(required) == 0 {
		b.WriteString("?")
	}
	b.WriteString(": {")
	for i, n := range names {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(key(n))
		if !required[n] {
			b.WriteString("?")
		}
		p, _ := props[n].(map[string]any)
		b.WriteString(": " + tsType(p, 0))
	}
	b.WriteString("}): Promise<any>;\n")
	return b.String()
}

// tsType is the TypeScript type of a JSON schema, shallowly: objects
// deeper than two levels are `object`.
func tsType(s map[string]any, depth int) string {
	if s == nil {
		return "any"
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		parts := make([]string, 0, len(e))
		for _, v := range e {
			if str, ok := v.(string); ok {
				parts = append(parts, fmt.Sprintf("%q", str))
			} else {
				parts = append(parts, fmt.Sprint(v))
			}
		}
		return strings.Join(parts, " | ")
	}
	switch typ, _ := s["type"].(string); typ {
	case "string":
		return "string"
	case "integer", "number":
		return "number"
	case "boolean":
		return "boolean"
	case "null":
		return "null"
	case "array":
		items, _ := s["items"].(map[string]any)
		return "Array<" + tsType(items, depth+1) + ">"
	case "object":
		props, _ := s["properties"].(map[string]any)
		if len(props) == 0 || depth >= 2 {
			return "object"
		}
		names := make([]string, 0, len(props))
		for n := range props {
			names = append(names, n)
		}
		slices.Sort(names)
		var b strings.Builder
		b.WriteString("{")
		for i, n := range names {
			if i > 0 {
				b.WriteString("; ")
			}
			p, _ := props[n].(map[string]any)
			fmt.Fprintf(&b, "%s?: %s", key(n), tsType(p, depth+1))
		}
		b.WriteString("}")
		return b.String()
	}
	return "any"
}

// comment keeps a text from closing its JSDoc comment.
func comment(s string) string { return strings.ReplaceAll(s, "*/", "*\\/") }

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// ToolName is the name the meta-tool that runs a program is offered
// under, by the gateway and by the agent.
const ToolName = "run_code"

// MaxDescription bounds run_code's description, the declarations of the
// tools offered beside it: past it, the model is told to find the others
// by name.
const MaxDescription = 16 << 10

// Description is run_code's description: what it does, then the
// declarations of tools (Declare, within MaxDescription). searching says
// that only some tools are declared and find_tools finds the others.
func Description(tools []tool.Tool, searching bool) string {
	var d strings.Builder
	d.WriteString("Run a short JavaScript program that calls tools as functions, loops, filters, " +
		"and returns only what matters: many calls in one step. Each call is governed like a direct one " +
		"(policy, approvals, the task log). The program is the body of an async function; `return` its result. " +
		"Call a tool with `await tools.call(\"NAME\", {...})` or `await tools.NAME({...})`.")
	if searching {
		d.WriteString(" Only some tools are declared below: find others with find_tools and call them by name with tools.call.")
	}
	d.WriteString("\n\n")
	d.WriteString(Declare(tools, MaxDescription))
	return d.String()
}

// InputSchema is run_code's input schema: {"code": "..."}.
func InputSchema() map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"code": map[string]any{"type": "string", "description": "The program: the body of an async function, in JavaScript."},
		},
		"required": []any{"code"},
	}
}
