package config

import (
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Keys of the model, agent and agents sections, in the order docs/config.md
// documents them.
var (
	modelKeys      = []string{"provider", "base_url", "api_key", "model", "temperature", "top_p", "max_tokens", "timeout", "retry", "extra"}
	modelRetryKeys = []string{"max_attempts", "initial_backoff", "max_backoff"}

	// agentCommonKeys are the keys of the main agent and of sub-agents
	// alike; mainAgentKeys and subAgentKeys add each one's own.
	agentCommonKeys = []string{"display_name", "system_prompt", "system_prompt_file", "model", "tools", "agents",
		"tool_protocol", "max_turns", "max_consecutive_rollbacks", "boxed_answer", "refusal_patterns",
		"context", "selection", "loop_detection", "code_mode"}
	mainAgentOnly = []string{"name"}
	subAgentOnly  = []string{"description", "tool", "namespace"}
	mainAgentKeys = slices.Concat(mainAgentOnly, agentCommonKeys)
	subAgentKeys  = slices.Concat(subAgentOnly, agentCommonKeys)

	agentContextKeys   = []string{"max_tokens", "keep_tool_results"}
	toolSelectionKeys  = []string{"threshold", "top_k", "pinned"}
	loopDetectionKeys  = []string{"repeats"}
	modelProviders     = []string{ProviderOpenAI, ProviderAnthropic}
	toolProtocols      = []string{ProtocolNative, ProtocolText}
	agentCodeModes     = []string{AgentCodeModeOff, AgentCodeModeBeside, AgentCodeModeOnly}
	agentNameRE        = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	agentNamespaceRE   = regexp.MustCompile(`^[A-Za-z0-9_.:-]+$`)
	agentServerPrefix  = "agent-"
	agentNameChars     = `letters, digits, "_" and "-"`
	agentNamespaceChar = `letters, digits, "_", "-", "." and ":"`
)

// Bounds on the numbers of these sections: far beyond any sensible setting,
// low enough that no arithmetic on them overflows.
const (
	maxModelTokens    = 1_000_000_000
	maxAgentCount     = 1_000_000
	maxModelAttempts  = 1000
	maxExtraNodes     = 100_000
	maxExtraDepth     = 100
	maxTemperature    = 2
	maxSystemPromptSz = 16 << 20
)

// agentRef is one name in an agent's agents list, kept with its position
// until every sub-agent is known.
type agentRef struct {
	name string
	n    *yaml.Node
	kp   string
}

// subAgentDecl is one entry of agents:, for the checks that need the whole
// file.
type subAgentDecl struct {
	key  string
	k    *yaml.Node
	kp   string
	refs []agentRef
}

// agentDecls collects what the cross checks of checkAgents need: the
// references of every agent, and where the names were written.
type agentDecls struct {
	mainRefs []agentRef
	mainName *yaml.Node // the value of agent.name, nil when left out
	mainKP   string
	subs     []subAgentDecl
}

// model reads a model section (`model:` or an agent's `model:`). A null
// value is no model (Set false); a mapping is a whole model, Set even when
// it is empty, which is an error since the model's name is required.
func (p *parser) model(se entry, kp string) Model {
	if isNull(deref(se.v)) {
		return Model{}
	}
	m := Model{Provider: ProviderOpenAI}
	hasName := false
	var initial, maxB *yaml.Node
	ok := p.fields(se.v, kp, modelKeys, func(e entry, fp string) {
		switch e.key {
		case "provider":
			if s, ok := p.choice(e.v, fp, "provider", modelProviders); ok {
				m.Provider = s
			}
		case "base_url":
			if s, ok := p.expandStr(e.v, fp, false); ok && s != "" {
				if msg := checkURL(s); msg != "" {
					p.errAt(e.v, fp, "%s", msg)
				} else {
					m.BaseURL = s
				}
			}
		case "api_key":
			m.APIKey, _ = p.expandStr(e.v, fp, false)
		case "model":
			hasName = true
			if s, ok := p.text(e.v, fp); ok {
				if strings.TrimSpace(s) == "" {
					p.errAt(e.v, fp, "must not be blank")
				} else {
					m.Name = s
				}
			}
		case "temperature":
			if f, ok := p.number(e.v, fp, 0, maxTemperature, false); ok {
				m.Temperature = &f
			}
		case "top_p":
			if f, ok := p.number(e.v, fp, 0, 1, true); ok {
				m.TopP = &f
			}
		case "max_tokens":
			m.MaxTokens, _ = p.integer(e.v, fp, 1, maxModelTokens)
		case "timeout":
			m.Timeout, _ = p.duration(e.v, fp)
		case "retry":
			p.fields(e.v, fp, modelRetryKeys, func(r entry, rp string) {
				switch r.key {
				case "max_attempts":
					m.Retry.MaxAttempts, _ = p.integer(r.v, rp, 1, maxModelAttempts)
				case "initial_backoff":
					initial = r.v
					m.Retry.InitialBackoff, _ = p.duration(r.v, rp)
				case "max_backoff":
					maxB = r.v
					m.Retry.MaxBackoff, _ = p.duration(r.v, rp)
				}
			})
			if r := m.Retry; initial != nil && maxB != nil && r.InitialBackoff > 0 && r.MaxBackoff > 0 && r.InitialBackoff > r.MaxBackoff {
				p.errAt(e.v, fp, "initial_backoff (%s) is longer than max_backoff (%s)", r.InitialBackoff, r.MaxBackoff)
			}
		case "extra":
			m.Extra = p.extra(e.v, fp)
		}
	})
	if !ok {
		return Model{}
	}
	m.Set = true
	if !hasName {
		p.errAt(se.k, kp, "model is required: the model's name as its server knows it, such as \"gpt-4o\" or \"qwen3:8b\"")
	}
	return m
}

// number reads a number between lo and hi, both included unless openLo,
// which excludes lo. Integers are numbers too.
func (p *parser) number(n *yaml.Node, kp string, lo, hi float64, openLo bool) (float64, bool) {
	v := deref(n)
	var f float64
	if v.Kind != yaml.ScalarNode || v.Tag != "!!int" && v.Tag != "!!float" || v.Decode(&f) != nil {
		p.errAt(n, kp, "expected a number, got %s", describe(v))
		return 0, false
	}
	if math.IsNaN(f) || f < lo || f > hi || openLo && f == lo {
		if openLo {
			p.errAt(n, kp, "must be greater than %s and at most %s, got %s", fmtNum(lo), fmtNum(hi), shorten(v.Value))
		} else {
			p.errAt(n, kp, "must be between %s and %s, got %s", fmtNum(lo), fmtNum(hi), shorten(v.Value))
		}
		return 0, false
	}
	return f, true
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// extra reads the vendor fields of a model: a mapping of JSON-compatible
// values, taken as written (strings are not expanded: they are the
// vendor's, and may hold "$"). null is nil, {} an empty map.
func (p *parser) extra(n *yaml.Node, kp string) map[string]any {
	v := deref(n)
	if isNull(v) {
		return nil
	}
	if v.Kind != yaml.MappingNode {
		p.errAt(n, kp, "expected a mapping of request fields, got %s", describe(v))
		return nil
	}
	budget := maxExtraNodes
	out, _ := p.jsonValue(n, kp, 0, &budget).(map[string]any)
	return out
}

// jsonValue converts a YAML value into the Go value encoding/json would
// decode it to (integers as int64). budget bounds the nodes converted, so
// aliases cannot make a small file expand into a huge value.
func (p *parser) jsonValue(n *yaml.Node, kp string, depth int, budget *int) any {
	v := deref(n)
	if *budget--; *budget < 0 {
		if *budget == -1 {
			p.errAt(n, kp, "too large (more than %d values, aliases expanded)", maxExtraNodes)
		}
		return nil
	}
	if depth > maxExtraDepth {
		p.errAt(n, kp, "nested too deeply (more than %d levels)", maxExtraDepth)
		return nil
	}
	switch v.Kind {
	case yaml.MappingNode:
		es, _ := p.entries(v, kp)
		out := make(map[string]any, len(es))
		for _, e := range es {
			out[e.key] = p.jsonValue(e.v, join(kp, e.key), depth+1, budget)
		}
		return out
	case yaml.SequenceNode:
		out := make([]any, 0, len(v.Content))
		for i, it := range v.Content {
			out = append(out, p.jsonValue(it, fmt.Sprintf("%s[%d]", kp, i), depth+1, budget))
		}
		return out
	case yaml.ScalarNode:
		switch {
		case isNull(v):
			return nil
		case v.Tag == "!!bool":
			var b bool
			if v.Decode(&b) == nil {
				return b
			}
		case v.Tag == "!!int":
			var i int64
			if v.Decode(&i) == nil {
				return i
			}
			p.errAt(n, kp, "%s is out of the range of a 64-bit integer", shorten(v.Value))
			return nil
		case v.Tag == "!!float":
			var f float64
			if v.Decode(&f) == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
				return f
			}
			p.errAt(n, kp, "%s is not a JSON number", quote(v.Value))
			return nil
		}
		// Strings, and the scalars JSON has no type for (timestamps,
		// binary, custom tags), are taken as written.
		return v.Value
	}
	p.errAt(n, kp, "expected a JSON value, got %s", describe(v))
	return nil
}

// agent reads the main agent over base.
func (p *parser) agent(se entry, kp string, base Agent, decls *agentDecls) Agent {
	a := base
	a.Tools = slices.Clone(base.Tools)
	a.Agents = slices.Clone(base.Agents)
	decls.mainKP = kp
	decls.mainRefs = p.agentBody(se.v, kp, &a, false, decls)
	return a
}

// agents reads the sub-agents, in file order. Each starts from the
// defaults, not from the main agent.
func (p *parser) agents(n *yaml.Node, kp string, decls *agentDecls) []Agent {
	es, _ := p.entries(n, kp)
	var out []Agent
	for _, e := range es {
		ap := join(kp, e.key)
		if !agentNameRE.MatchString(e.key) {
			p.errAt(e.k, ap, "%s is not a valid sub-agent name (%s)", quote(e.key), agentNameChars)
		}
		a := DefaultAgent(e.key)
		a.Tool = DefaultSubAgentTool
		if v := deref(e.v); !isNull(v) && v.Kind != yaml.MappingNode {
			p.errAt(e.v, ap, "expected a mapping of the sub-agent's settings, got %s", describe(v))
			decls.subs = append(decls.subs, subAgentDecl{key: e.key, k: e.k, kp: ap})
			continue
		}
		refs := p.agentBody(e.v, ap, &a, true, decls)
		decls.subs = append(decls.subs, subAgentDecl{key: e.key, k: e.k, kp: ap, refs: refs})
		out = append(out, a)
	}
	return out
}

// agentBody reads the keys of an agent into a, and returns the names of
// its agents list, checked later by checkAgents.
func (p *parser) agentBody(n *yaml.Node, kp string, a *Agent, sub bool, decls *agentDecls) []agentRef {
	known, other := mainAgentKeys, subAgentOnly
	if sub {
		known, other = subAgentKeys, mainAgentOnly
	}
	es, _ := p.entries(n, kp)
	var refs []agentRef
	var prompt *yaml.Node
	for _, e := range es {
		fp := join(kp, e.key)
		if slices.Contains(other, e.key) {
			if sub {
				p.errAt(e.k, fp, "a sub-agent's name is its key in agents: (%s belongs to agent:, the main agent)", e.key)
			} else {
				p.errAt(e.k, fp, "%s belongs to sub-agents, the entries of agents: (the main agent is not called as a tool)", e.key)
			}
			continue
		}
		if !slices.Contains(known, e.key) {
			p.errAt(e.k, fp, "%s", unknownKeyMsg(e.key, known, nil))
			continue
		}
		switch e.key {
		case "name":
			if s, ok := p.str(e.v, fp); ok {
				if !agentNameRE.MatchString(s) {
					p.errAt(e.v, fp, "%s is not a valid agent name (%s)", quote(s), agentNameChars)
				} else {
					a.Name = s
					decls.mainName = e.v
				}
			}
		case "display_name":
			a.DisplayName, _ = p.str(e.v, fp)
		case "description":
			a.Description, _ = p.str(e.v, fp)
		case "tool":
			if s, ok := p.str(e.v, fp); ok {
				if !agentNameRE.MatchString(s) {
					p.errAt(e.v, fp, "%s is not a valid tool name (%s)", quote(s), agentNameChars)
				} else {
					a.Tool = s
				}
			}
		case "namespace":
			if s, ok := p.str(e.v, fp); ok {
				if !agentNamespaceRE.MatchString(s) {
					p.errAt(e.v, fp, "%s is not a valid namespace (%s)", quote(s), agentNamespaceChar)
				} else {
					a.Namespace = s
				}
			}
		case "system_prompt", "system_prompt_file":
			if prompt != nil {
				p.errAt(e.k, fp, "use either system_prompt or system_prompt_file, not both")
				continue
			}
			prompt = e.k
			if e.key == "system_prompt" {
				a.SystemPrompt, _ = p.str(e.v, fp)
			} else {
				if s, ok := p.readPrompt(e.v, fp); ok {
					a.SystemPrompt = s
				}
			}
		case "model":
			a.Model = p.model(e, fp)
		case "tools":
			a.Tools = p.patterns(e.v, fp, true)
		case "agents":
			var names []string
			refs, names = p.agentNames(e.v, fp)
			a.Agents = names
		case "tool_protocol":
			a.ToolProtocol, _ = p.choice(e.v, fp, "tool protocol", toolProtocols)
		case "code_mode":
			a.CodeMode, _ = p.choice(e.v, fp, "code mode", agentCodeModes)
		case "max_turns":
			a.MaxTurns, _ = p.integer(e.v, fp, 1, maxAgentCount)
		case "max_consecutive_rollbacks":
			a.MaxConsecutiveRollbacks, _ = p.integer(e.v, fp, 0, maxAgentCount)
		case "boxed_answer":
			a.BoxedAnswer, _ = p.boolean(e.v, fp)
		case "refusal_patterns":
			a.RefusalPatterns = p.refusals(e.v, fp)
		case "context":
			p.fields(e.v, fp, agentContextKeys, func(f entry, cp string) {
				switch f.key {
				case "max_tokens":
					a.Context.MaxTokens, _ = p.integer(f.v, cp, 0, maxModelTokens)
				case "keep_tool_results":
					a.Context.KeepToolResults, _ = p.integer(f.v, cp, -1, maxAgentCount)
				}
			})
		case "selection":
			p.fields(e.v, fp, toolSelectionKeys, func(f entry, sp string) {
				switch f.key {
				case "threshold":
					a.Selection.Threshold, _ = p.integer(f.v, sp, -1, maxAgentCount)
				case "top_k":
					a.Selection.TopK, _ = p.integer(f.v, sp, 1, maxAgentCount)
				case "pinned":
					a.Selection.Pinned = p.patterns(f.v, sp, true)
				}
			})
		case "loop_detection":
			p.fields(e.v, fp, loopDetectionKeys, func(f entry, lp string) {
				if r, ok := p.integer(f.v, lp, -1, maxAgentCount); ok {
					if r == 0 || r == 1 {
						p.errAt(f.v, lp, "must be at least 2, or -1 to turn loop detection off, got %d", r)
					} else {
						a.LoopDetection.Repeats = r
					}
				}
			})
		}
	}
	return refs
}

// readPrompt reads the file of system_prompt_file, relative to the config
// file's directory.
func (p *parser) readPrompt(n *yaml.Node, kp string) (string, bool) {
	s, ok := p.text(n, kp)
	if !ok {
		return "", false
	}
	path, err := resolvePath(s, p.dir, p.lookup)
	if err != nil {
		p.errAt(n, kp, "%v", err)
		return "", false
	}
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		p.errAt(n, kp, "cannot read the system prompt: %v", err)
		return "", false
	case fi.IsDir():
		p.errAt(n, kp, "%s is a directory, not a file", quote(path))
		return "", false
	case fi.Size() > maxSystemPromptSz:
		p.errAt(n, kp, "%s is too large for a system prompt (%d bytes; at most 16MiB)", quote(path), fi.Size())
		return "", false
	}
	data, err := os.ReadFile(path)
	if err != nil {
		p.errAt(n, kp, "cannot read the system prompt: %v", err)
		return "", false
	}
	if !utf8.Valid(data) {
		p.errAt(n, kp, "%s is not UTF-8 text", quote(path))
		return "", false
	}
	return string(data), true
}

// agentNames reads an agents list: names of sub-agents, each once. Whether
// they exist is checked by checkAgents, once all are known.
func (p *parser) agentNames(n *yaml.Node, kp string) ([]agentRef, []string) {
	items, ok := p.list(n, kp)
	if !ok {
		return nil, nil
	}
	refs := make([]agentRef, 0, len(items))
	names := make([]string, 0, len(items))
	first := map[string]int{}
	for i, it := range items {
		ip := fmt.Sprintf("%s[%d]", kp, i)
		s, ok := p.str(it, ip)
		if !ok {
			continue
		}
		if j, dup := first[s]; dup {
			p.errAt(it, ip, "%s is listed twice (first as %s[%d])", quote(s), kp, j)
			continue
		}
		first[s] = i
		refs = append(refs, agentRef{name: s, n: it, kp: ip})
		names = append(names, s)
	}
	return refs, names
}

// refusals reads refusal_patterns: nil when left out or null (the
// defaults), non-nil when a list, even an empty one (none).
func (p *parser) refusals(n *yaml.Node, kp string) []string {
	items, ok := p.list(n, kp)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(items))
	for i, it := range items {
		ip := fmt.Sprintf("%s[%d]", kp, i)
		s, ok := p.str(it, ip)
		if !ok {
			continue
		}
		if strings.TrimSpace(s) == "" {
			p.errAt(it, ip, "must not be empty (a blank phrase would match every reply)")
			continue
		}
		out = append(out, s)
	}
	return out
}

// checkAgents runs the checks that need the whole file: sub-agent names
// against server names and the main agent's, every agents list against
// the sub-agents, and sub-agents calling each other in a cycle.
func (p *parser) checkAgents(cfg *Config, d *agentDecls) {
	if cfg == nil {
		return
	}
	servers := map[string]int{}
	for _, s := range cfg.Servers {
		servers[s.Name] = s.Line
	}
	for _, a := range cfg.OpenAPI {
		servers[a.Name] = a.Line
	}
	keys := make([]string, 0, len(d.subs))
	index := map[string]int{}
	for i, s := range d.subs {
		keys = append(keys, s.key)
		index[s.key] = i
		if line, clash := servers[agentServerPrefix+s.key]; clash {
			p.errAt(s.k, s.kp, "the sub-agent's tools are served as %q, but a server has that name (line %d); rename one of them", agentServerPrefix+s.key, line)
		}
		if s.key == cfg.Agent.Name {
			if d.mainName != nil {
				p.errAt(d.mainName, d.mainKP+".name", "the main agent must not have the name of a sub-agent (%s, line %d)", s.kp, s.k.Line)
			} else {
				p.errAt(s.k, s.kp, "%q is the main agent's name; give the sub-agent another name, or the main agent another one (agent.name)", s.key)
			}
		}
	}
	resolve := func(r agentRef, self string) bool {
		if _, ok := index[r.name]; ok {
			if r.name == self {
				p.errAt(r.n, r.kp, "a sub-agent cannot call itself")
				return false
			}
			return true
		}
		switch {
		case len(keys) == 0:
			p.errAt(r.n, r.kp, "unknown sub-agent %s (there is no agents: section defining sub-agents)", quote(r.name))
		default:
			msg := fmt.Sprintf("unknown sub-agent %s (agents: defines %s)", quote(r.name), orList(keys))
			if sug := suggest(r.name, keys); sug != "" {
				msg += "; did you mean " + sug + "?"
			}
			p.errAt(r.n, r.kp, "%s", msg)
		}
		return false
	}
	for _, r := range d.mainRefs {
		resolve(r, "")
	}
	edges := make([][]agentRef, len(d.subs))
	for i, s := range d.subs {
		for _, r := range s.refs {
			if resolve(r, s.key) {
				edges[i] = append(edges[i], r)
			}
		}
	}
	// Depth-first search in file order; an edge back to a sub-agent on the
	// current path closes a cycle, reported at the reference closing it.
	const (
		unseen = iota
		onPath
		done
	)
	state := make([]int, len(d.subs))
	var path []int
	var visit func(i int)
	visit = func(i int) {
		state[i] = onPath
		path = append(path, i)
		for _, r := range edges[i] {
			j := index[r.name]
			switch state[j] {
			case unseen:
				visit(j)
			case onPath:
				start := slices.Index(path, j)
				names := make([]string, 0, len(path)-start+1)
				for _, k := range path[start:] {
					names = append(names, d.subs[k].key)
				}
				names = append(names, d.subs[j].key)
				p.errAt(r.n, r.kp, "sub-agents call each other in a cycle: %s", strings.Join(names, " → "))
			}
		}
		path = path[:len(path)-1]
		state[i] = done
	}
	for i := range d.subs {
		if state[i] == unseen {
			visit(i)
		}
	}
}
