package agent

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/toolmux/toolmux/internal/jsonrepair"
)

// TextCall is a tool call a model wrote in MiroFlow's text protocol, for
// models without native tool calling:
//
//	<use_mcp_tool>
//	<server_name>builtin</server_name>
//	<tool_name>read_file</tool_name>
//	<arguments>
//	{"path": "README.md"}
//	</arguments>
//	</use_mcp_tool>
type TextCall struct {
	Server, Tool string
	// Arguments are the decoded arguments, repaired when the model's JSON
	// was not quite JSON (Repaired says so); numbers are json.Number.
	Arguments map[string]any
	Repaired  bool
	// Raw is the whole block as the model wrote it, for the record.
	Raw string
}

// TextCallError is a <use_mcp_tool> block that could not be read: the turn
// is malformed, and the agent rolls it back with Reason as the hint.
type TextCallError struct {
	// Index is the block's position among the reply's blocks, from 0.
	Index  int
	Reason string
	Raw    string
}

// Error returns "tool call N: REASON".
func (e *TextCallError) Error() string {
	return fmt.Sprintf("tool call %d in the text protocol: %s", e.Index+1, e.Reason)
}

var (
	// A block runs to its closing tag, or to the next block or the end of
	// the reply when the model was cut off or forgot it.
	openTag  = regexp.MustCompile(`(?i)<use_mcp_tool\s*>`)
	closeTag = regexp.MustCompile(`(?i)</use_mcp_tool\s*>`)
)

// ParseTextCalls reads every <use_mcp_tool> block of a model's reply, in
// order. It returns the calls read, the reply's text before the first
// block (the model's thinking, or its whole answer when there is no
// block), and a *TextCallError for each block that could not be read.
// Tag names are matched without regard to case or surrounding space; a
// block whose closing tags are missing at the end of the reply is still
// read; arguments are repaired with internal/jsonrepair.
func ParseTextCalls(reply string) (calls []TextCall, before string, errs []error) {
	starts := openTag.FindAllStringIndex(reply, -1)
	if len(starts) == 0 {
		return nil, strings.TrimSpace(reply), nil
	}
	before = strings.TrimSpace(reply[:starts[0][0]])
	for i, loc := range starts {
		end := len(reply)
		if i+1 < len(starts) {
			end = starts[i+1][0]
		}
		body := reply[loc[1]:end]
		raw := reply[loc[0]:end]
		if c := closeTag.FindStringIndex(body); c != nil {
			body = body[:c[0]]
			raw = reply[loc[0] : loc[1]+c[1]]
		}
		call, err := parseBlock(body)
		if err != nil {
			errs = append(errs, &TextCallError{Index: i, Reason: err.Error(), Raw: strings.TrimSpace(raw)})
			continue
		}
		call.Raw = strings.TrimSpace(raw)
		calls = append(calls, call)
	}
	return calls, before, errs
}

func parseBlock(body string) (TextCall, error) {
	var c TextCall
	server, ok := element(body, "server_name")
	if !ok || server == "" {
		return c, fmt.Errorf("<server_name> is missing")
	}
	name, ok := element(body, "tool_name")
	if !ok || name == "" {
		return c, fmt.Errorf("<tool_name> is missing")
	}
	args, _ := element(body, "arguments")
	m, repaired, err := jsonrepair.Object(args)
	if err != nil {
		return c, fmt.Errorf("the <arguments> of %s/%s are not a JSON object: %v", server, name, err)
	}
	return TextCall{Server: server, Tool: name, Arguments: m, Repaired: repaired}, nil
}

// element returns the trimmed text of <tag>…</tag> in body; a missing
// closing tag runs to the next tag's opening or the end.
func element(body, tag string) (string, bool) {
	lower := asciiLower(body)
	open := strings.Index(lower, "<"+tag)
	if open < 0 {
		return "", false
	}
	gt := strings.IndexByte(lower[open:], '>')
	if gt < 0 {
		return "", false
	}
	start := open + gt + 1
	end := strings.Index(lower[start:], "</"+tag)
	if end < 0 {
		// Cut off: to the next element, or the end. JSON never holds a
		// "<" followed by a tag name of ours, so this cannot cut it.
		end = len(body) - start
		for _, next := range []string{"<server_name", "<tool_name", "<arguments"} {
			if i := strings.Index(lower[start:], next); i >= 0 && i < end {
				end = i
			}
		}
	}
	return strings.TrimSpace(body[start : start+end]), true
}

// TextProtocolTool is a tool as the text protocol's prompt lists it.
type TextProtocolTool struct {
	Server, Name, Description string
	// Schema is the tool's input schema, shown as JSON.
	Schema string
}

// TextProtocolPrompt is the part of a system prompt that teaches a model
// the text protocol and lists the tools it may call, grouped by server.
func TextProtocolPrompt(tools []TextProtocolTool) string {
	var b strings.Builder
	b.WriteString(`# Using tools

You can call tools to do the task. To call one, write a block like this,
and nothing after it:

<use_mcp_tool>
<server_name>SERVER</server_name>
<tool_name>TOOL</tool_name>
<arguments>
{"parameter": "value"}
</arguments>
</use_mcp_tool>

The arguments are one JSON object that follows the tool's input schema;
escape quotes inside strings. Several blocks in one message are run
together, and their results come back in the next message. When you have
the answer, reply without any block.

# Tools
`)
	byServer := map[string][]TextProtocolTool{}
	var servers []string
	for _, t := range tools {
		if _, ok := byServer[t.Server]; !ok {
			servers = append(servers, t.Server)
		}
		byServer[t.Server] = append(byServer[t.Server], t)
	}
	sort.Strings(servers)
	for _, s := range servers {
		fmt.Fprintf(&b, "\n## Server: %s\n", s)
		for _, t := range byServer[s] {
			fmt.Fprintf(&b, "\n### %s\n", t.Name)
			if t.Description != "" {
				b.WriteString(strings.TrimSpace(t.Description) + "\n")
			}
			if t.Schema != "" {
				b.WriteString("Input schema: " + t.Schema + "\n")
			}
		}
	}
	return b.String()
}

// asciiLower lower-cases ASCII letters only, keeping every byte where it
// is, so that offsets found in the result index body too (strings.ToLower
// may change the length of text that is not valid UTF-8).
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
