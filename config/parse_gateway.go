package config

import (
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/toolmux/toolmux/internal/toolglob"
)

// This file reads what toolmux serve shows of the catalog on its MCP
// endpoints: tool_search (on /mcp) and virtual_servers.

var (
	toolSearchKeys    = []string{"enabled", "above", "pinned", "limit"}
	virtualServerKeys = []string{"name", "description", "tools", "rename", "descriptions", "tool_search", "groups"}
)

// maxToolSearchAbove bounds tool_search.above: a typo of a few digits more
// should be caught rather than turn the threshold off.
const maxToolSearchAbove = 1_000_000

// maxVirtualServers bounds virtual_servers: each is an MCP server of its own.
const maxVirtualServers = 1000

// virtualNameRE is a virtual server's name: one segment of a URL path
// that needs no escaping.
var virtualNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// toolNameRE is a tool name as MCP allows it (1 to 128 of A-Z, a-z, 0-9,
// '_', '-' and '.').
var toolNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// metaToolNames are the names tool search gives its meta-tools.
var metaToolNames = []string{"find_tools", "call_tool"}

// toolSearch reads a tool_search section.
func (p *parser) toolSearch(n *yaml.Node, kp string) ToolSearch {
	var ts ToolSearch
	p.fields(n, kp, toolSearchKeys, func(e entry, fp string) {
		switch e.key {
		case "enabled":
			ts.Enabled, _ = p.boolean(e.v, fp)
		case "above":
			ts.Above, _ = p.integer(e.v, fp, 0, maxToolSearchAbove)
		case "pinned":
			ts.Pinned = p.patterns(e.v, fp, true)
		case "limit":
			ts.Limit, _ = p.integer(e.v, fp, 1, MaxFindLimit)
		}
	})
	return ts
}

// virtualServers reads the list of virtual servers.
func (p *parser) virtualServers(n *yaml.Node, kp string) []VirtualServer {
	items := p.items(n, kp)
	if len(items) > maxVirtualServers {
		p.errAt(n, kp, "at most %d virtual servers", maxVirtualServers)
		return nil
	}
	var out []VirtualServer
	names := map[string]*yaml.Node{}
	for i, it := range items {
		ip := fmt.Sprintf("%s[%d]", kp, i)
		vs, nameNode := p.virtualServer(it, ip)
		if vs.Name == "" {
			continue
		}
		if prev, dup := names[vs.Name]; dup {
			p.errAt(nameNode, ip+".name", "virtual server %s is already defined at line %d", quote(vs.Name), prev.Line)
			continue
		}
		names[vs.Name] = nameNode
		out = append(out, vs)
	}
	return out
}

// virtualServer reads one virtual server; name is its name's node.
func (p *parser) virtualServer(n *yaml.Node, kp string) (vs VirtualServer, name *yaml.Node) {
	var rename, descriptions *yaml.Node
	var renameKP, descriptionsKP string
	ok := p.element(n, kp, virtualServerKeys, func(e entry, fp string) {
		switch e.key {
		case "name":
			name = e.v
			if s, ok := p.text(e.v, fp); ok {
				if !virtualNameRE.MatchString(s) {
					p.errAt(e.v, fp, "%s is not a virtual server name: use 1 to 64 letters, digits, '-' and '_' (it is a part of the URL)", quote(s))
				} else {
					vs.Name = s
				}
			}
		case "description":
			vs.Description, _ = p.text(e.v, fp)
		case "tools":
			vs.Tools = p.nonEmptyStrings(e.v, fp, checkToolPattern)
		case "rename":
			rename, renameKP = e.v, fp
		case "descriptions":
			descriptions, descriptionsKP = e.v, fp
		case "tool_search":
			vs.ToolSearch = p.toolSearch(e.v, fp)
		case "groups":
			vs.Groups = p.nonEmptyStrings(e.v, fp, checkGroupName)
		}
	})
	if !ok {
		return VirtualServer{}, nil
	}
	if name == nil {
		p.errAt(n, kp, "a virtual server needs a name")
	}
	if vs.Tools == nil {
		p.errAt(n, kp, "a virtual server needs tools: the tool patterns (server/tool) of the tools it serves")
	}
	patterns, _ := toolglob.ParseAll(vs.Tools, true)
	if rename != nil {
		taken := map[string]string{}
		vs.Rename = p.toolMap(rename, renameKP, patterns, func(tool, s string) string {
			switch {
			case !toolNameRE.MatchString(s):
				return fmt.Sprintf("%s is not a tool name: use 1 to 128 letters, digits, '_', '-' and '.'", quote(s))
			case strings.Contains(s, "__") && s != strings.ReplaceAll(tool, "/", "__"):
				// Exposed names are server__tool: such a name could be
				// another tool's.
				return fmt.Sprintf("%s contains \"__\", which exposed names (server__tool) use; choose a name without it", quote(s))
			case s == metaToolNames[0] || s == metaToolNames[1]:
				return fmt.Sprintf("%s is the name of one of tool search's meta-tools", quote(s))
			case taken[s] != "":
				return fmt.Sprintf("%s is already the name of %s", quote(s), quote(taken[s]))
			}
			taken[s] = tool
			return ""
		})
	}
	if descriptions != nil {
		vs.Descriptions = p.toolMap(descriptions, descriptionsKP, patterns, nil)
	}
	return vs, name
}

// toolMap reads a mapping from exact tools (server/tool) that patterns
// match to non-empty strings, each checked by check.
func (p *parser) toolMap(n *yaml.Node, kp string, patterns []toolglob.Pattern, check func(tool, v string) string) map[string]string {
	es, _ := p.entries(n, kp)
	out := make(map[string]string, len(es))
	for _, e := range es {
		fp := join(kp, e.key)
		server, tool, ok := strings.Cut(e.key, "/")
		if !ok || server == "" || tool == "" {
			p.errAt(e.k, fp, "%s is not a tool: write server/tool", quote(e.key))
			continue
		}
		if strings.ContainsAny(e.key, "*?[{") {
			p.errAt(e.k, fp, "%s is a pattern: name one tool exactly (server/tool)", quote(e.key))
			continue
		}
		if patterns != nil {
			if _, ok := toolglob.Any(patterns, server, tool); !ok {
				p.errAt(e.k, fp, "%s is not among the virtual server's tools (no pattern of tools matches it)", quote(e.key))
				continue
			}
		}
		if s, ok := p.checkedText(e, fp, check); ok {
			out[e.key] = s
		}
	}
	return out
}

// mcpTasksKeys are the keys of mcp_tasks.
var mcpTasksKeys = []string{"enabled", "threshold", "thresholds", "long", "required", "max_running", "poll_interval"}

// maxMCPTasks bounds mcp_tasks.max_running.
const maxMCPTasks = 100_000

// mcpTasks reads the mcp_tasks section. thresholds maps tool patterns to
// durations.
func (p *parser) mcpTasks(n *yaml.Node, kp string) MCPTasks {
	var mt MCPTasks
	p.fields(n, kp, mcpTasksKeys, func(e entry, fp string) {
		switch e.key {
		case "enabled":
			on, ok := p.boolean(e.v, fp)
			mt.Disabled = ok && !on
		case "threshold":
			p.setDuration(&mt.Threshold, e.v, fp)
		case "thresholds":
			es, _ := p.entries(e.v, fp)
			for _, te := range es {
				tp := fp + "." + te.key
				if msg := checkPattern(te.key, true); msg != "" {
					p.errAt(te.k, tp, "%s", msg)
					continue
				}
				if d, ok := p.duration(te.v, tp); ok {
					mt.Thresholds = append(mt.Thresholds, ToolThreshold{Tools: te.key, After: d})
				}
			}
		case "long":
			mt.Long = p.patterns(e.v, fp, true)
		case "required":
			mt.Required = p.patterns(e.v, fp, true)
		case "max_running":
			mt.MaxRunning, _ = p.integer(e.v, fp, 1, maxMCPTasks)
		case "poll_interval":
			p.setDuration(&mt.PollInterval, e.v, fp)
		}
	})
	return mt
}
