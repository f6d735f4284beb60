package policy

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/tool"
)

// Action is what a rule decides for the calls it matches.
type Action string

// The actions. The strings are the values of `action:` in toolmux.yaml.
const (
	// Allow runs the call without asking.
	Allow Action = "allow"
	// Deny refuses the call; the model is told why (the rule's message).
	Deny Action = "deny"
	// Ask runs the call only if a person approves it.
	Ask Action = "ask"
)

// Mode is the approval mode: how much runs without asking. Each mode adds
// its own default rules after the user's (see [DefaultRules]).
type Mode string

// The modes, from the most to the least cautious. The strings are the
// values of `policy.mode` in toolmux.yaml and of the --approval-mode flag.
const (
	// ModePlan allows only read-only tools and refuses everything else, for
	// an agent that should look and plan but change nothing.
	ModePlan Mode = "plan"
	// ModeDefault allows read-only tools and asks for everything else.
	ModeDefault Mode = "default"
	// ModeAutoEdit also allows the built-in file edits; the shell and other
	// tools still ask.
	ModeAutoEdit Mode = "auto_edit"
	// ModeYolo allows everything the user's rules do not deny, and never asks.
	ModeYolo Mode = "yolo"
)

// Modes returns every mode, from the most to the least cautious.
func Modes() []Mode { return []Mode{ModePlan, ModeDefault, ModeAutoEdit, ModeYolo} }

// ParseMode returns the mode named s; the empty string is ModeDefault, so
// an unset flag or key means the default.
func ParseMode(s string) (Mode, error) {
	if s == "" {
		return ModeDefault, nil
	}
	for _, m := range Modes() {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("unknown approval mode %q (expected plan, default, auto_edit or yolo)", s)
}

func parseAction(s Action) bool { return s == Allow || s == Deny || s == Ask }

// Rule allows, denies or asks for the calls it matches. A call matches when
// every condition that is set holds; a rule with no conditions matches
// every call.
type Rule struct {
	// Name identifies the rule in decisions, messages and reports; an empty
	// name becomes "rule N", N counting from 1 in the order given to New.
	Name string
	// Tools are tool patterns: "server/tool" globs, or bare "tool" globs
	// matching in any server, in the syntax of path.Match (as the global
	// allow and deny lists). The call's tool must match one. Empty: any tool.
	Tools []string
	// Server is a glob over the server name. Empty: any server.
	Server string
	// Args maps argument names to regular expressions (Go syntax, not
	// anchored: use ^ and $ for a whole value) that the argument's value
	// must match. String values are matched as they are; other values by
	// their JSON encoding (42, true, null, ["a","b"], {"k":"v"} with keys
	// sorted). All must match; an absent argument does not match.
	Args map[string]string
	// ReadOnly and Destructive match the tool's readOnlyHint and
	// destructiveHint. A tool that does not declare readOnlyHint is not
	// read-only; one that declares neither is destructive (MCP's defaults).
	// Nil: either.
	ReadOnly, Destructive *bool
	// Callers are globs (path.Match syntax) over who made the call: the
	// caller's name or its subject ("alice", "key:ci-*"). The call's
	// caller must match one. Empty: any caller.
	Callers []string
	// Groups are group names: the call's caller must be in one of them.
	// Empty: any caller. A call without a caller (no authentication is
	// configured) matches no rule that names callers or groups.
	Groups []string
	// Modes restricts the rule to these approval modes. Empty: every mode,
	// except that such a rule never lets a tool that is not read-only run
	// in plan mode, and never asks in yolo mode (name the mode to do that).
	Modes []Mode
	// Action is what the rule decides.
	Action Action
	// Priority orders the rules, higher first; rules of equal priority keep
	// the order they were given in. The mode's default rules come after all
	// of the user's, whatever their priority.
	Priority int
	// Message is shown to the model when the rule denies a call, and to the
	// person asked when it asks.
	Message string
}

// Decision is the outcome of the policy for one call.
type Decision struct {
	// Action is what to do with the call.
	Action Action
	// Rule names the rule that decided.
	Rule string
	// Message is that rule's message, if it has one.
	Message string
	// Once asks about this call alone: no "always" answer given earlier
	// covers it, and an "always" answer to it counts as once (the
	// question about a changed tool definition, which is settled by
	// accepting the definition, not by trusting the tool).
	Once bool
}

// RuleError is a problem with one rule given to New.
type RuleError struct {
	// Index is the rule's position among the rules given to New, from 1.
	Index int
	// Rule is the rule's name, or "rule N" for an unnamed rule.
	Rule string
	// Field is the offending field as the configuration spells it
	// ("tools[1]", "args.command", "action"); "" for the rule as a whole.
	Field string
	// Msg says what is wrong.
	Msg string
}

// Error formats as: policy rule "name": field: msg.
func (e *RuleError) Error() string {
	var b strings.Builder
	b.WriteString("policy ")
	if e.Rule == autoName(e.Index) {
		b.WriteString(e.Rule)
	} else {
		fmt.Fprintf(&b, "rule %s (rule %d)", strconv.Quote(e.Rule), e.Index)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func autoName(i int) string { return "rule " + strconv.Itoa(i) }

// Engine decides calls for one mode, and, with WithGroupModes, the calls
// of members of some groups in their group's mode. It is immutable, so
// one engine can serve any number of goroutines.
type Engine struct {
	mode Mode
	user []Rule // as given, names filled in, for WithMode and Rules
	// groupModes are the approval modes of groups (WithGroupModes), and
	// siblings the engines of those modes, with the same rules.
	groupModes map[string]Mode
	siblings   map[Mode]*Engine
	// rules are the compiled rules that can apply in mode, in the order
	// they are tried.
	rules []compiled
	// byName finds a rule's priority for messages (first rule of a name).
	byName map[string]*compiled
}

// New returns an engine for mode with the user's rules followed by the
// mode's default rules. It reports every invalid rule (a bad pattern,
// regular expression, action or mode) as a *RuleError, joined with
// errors.Join.
func New(mode Mode, rules []Rule) (*Engine, error) {
	if _, err := ParseMode(string(mode)); err != nil || mode == "" {
		return nil, fmt.Errorf("policy: unknown approval mode %q (expected plan, default, auto_edit or yolo)", mode)
	}
	user := make([]Rule, len(rules))
	var errs []error
	cs := make([]compiled, 0, len(rules))
	for i, r := range rules {
		if r.Name == "" {
			r.Name = autoName(i + 1)
		}
		user[i] = r
		c, rerrs := compile(r, i+1)
		for _, e := range rerrs {
			errs = append(errs, e)
		}
		if rerrs == nil {
			cs = append(cs, c)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return build(mode, user, cs), nil
}

// build assembles the engine from already compiled user rules.
func build(mode Mode, user []Rule, cs []compiled) *Engine {
	e := &Engine{mode: mode, user: user, byName: map[string]*compiled{}}
	var active []compiled
	for _, c := range cs {
		if c.applies(mode) {
			active = append(active, c)
		}
	}
	// Stable: equal priorities keep the order of definition.
	slices.SortStableFunc(active, func(a, b compiled) int { return cmp.Compare(b.priority, a.priority) })
	for _, r := range DefaultRules(mode) {
		c, errs := compile(r, 0)
		if errs != nil {
			panic(fmt.Sprintf("policy: invalid default rule %q: %v", r.Name, errs))
		}
		c.isDefault = true
		active = append(active, c)
	}
	e.rules = active
	for i := range e.rules {
		if _, ok := e.byName[e.rules[i].name]; !ok {
			e.byName[e.rules[i].name] = &e.rules[i]
		}
	}
	return e
}

// WithMode returns an engine with the same user rules for another mode,
// for switching modes during a session. The modes of groups stay.
func (e *Engine) WithMode(mode Mode) (*Engine, error) {
	if mode == e.mode {
		return e, nil
	}
	n, err := New(mode, e.user)
	if err != nil {
		return nil, err
	}
	return n.WithGroupModes(e.groupModes)
}

// WithGroupModes returns an engine with the same rules that decides the
// calls of a member of a group of modes in that group's mode: the `groups:
// NAME: approval_mode` settings of the configuration. A caller in several
// such groups gets the most cautious of their modes (plan, then default,
// auto_edit, yolo: Modes' order), so that putting someone in one more
// group never lets more of their calls through unasked; a caller in none
// of them, and a call without a caller, get e's mode.
func (e *Engine) WithGroupModes(modes map[string]Mode) (*Engine, error) {
	if len(modes) == 0 && len(e.groupModes) == 0 {
		return e, nil
	}
	n := build(e.mode, e.user, e.compiledUser())
	if len(modes) == 0 {
		return n, nil
	}
	n.groupModes = make(map[string]Mode, len(modes))
	n.siblings = map[Mode]*Engine{}
	for g, m := range modes {
		if g == "" {
			return nil, errors.New("policy: a group's approval mode names no group")
		}
		if _, err := ParseMode(string(m)); err != nil || m == "" {
			return nil, fmt.Errorf("policy: group %q: unknown approval mode %q (expected plan, default, auto_edit or yolo)", g, m)
		}
		n.groupModes[g] = m
		if _, ok := n.siblings[m]; !ok && m != e.mode {
			n.siblings[m] = build(m, e.user, e.compiledUser())
		}
	}
	return n, nil
}

// compiledUser compiles the user's rules again, for an engine of another
// mode (they were checked by New).
func (e *Engine) compiledUser() []compiled {
	cs := make([]compiled, 0, len(e.user))
	for i, r := range e.user {
		c, _ := compile(r, i+1)
		cs = append(cs, c)
	}
	return cs
}

// Mode returns the engine's approval mode: the mode of calls by callers
// in no group with a mode of its own (ModeFor).
func (e *Engine) Mode() Mode { return e.mode }

// GroupModes returns the approval modes of groups (WithGroupModes).
func (e *Engine) GroupModes() map[string]Mode { return maps.Clone(e.groupModes) }

// ModeFor returns the approval mode of c's calls: the most cautious mode
// of its groups that have one, else the engine's.
func (e *Engine) ModeFor(c *identity.Caller) Mode { return e.forCaller(c).mode }

// forCaller returns the engine that decides c's calls.
func (e *Engine) forCaller(c *identity.Caller) *Engine {
	if c == nil || len(e.groupModes) == 0 {
		return e
	}
	best := -1
	for _, g := range c.Groups {
		m, ok := e.groupModes[g]
		if !ok {
			continue
		}
		if i := slices.Index(Modes(), m); best < 0 || i < best {
			best = i
		}
	}
	if best < 0 || Modes()[best] == e.mode {
		return e
	}
	return e.siblings[Modes()[best]]
}

// Rules returns the rules that can apply in the engine's mode in the order
// they are tried: the user's (those whose Modes allow this mode) by
// priority, then the mode's defaults.
func (e *Engine) Rules() []Rule {
	out := make([]Rule, len(e.rules))
	for i, c := range e.rules {
		out[i] = c.rule
	}
	return out
}

// Decide returns the decision of the first rule that matches the call to
// t made without a caller (no authentication: rules that name callers or
// groups do not match, and the engine's mode decides). The tool's
// identity is t's (Server, Name), falling back to the call's when t does
// not say. Decide does not allocate for arguments that are strings,
// numbers, booleans or null; a list or object named by an argument
// condition is encoded with encoding/json.
func (e *Engine) Decide(t tool.Tool, call tool.Call) Decision {
	return e.DecideFor(nil, t, call)
}

// DecideFor returns the decision of the first rule that matches the call
// to t made by c (nil: no caller), in c's mode (ModeFor).
func (e *Engine) DecideFor(c *identity.Caller, t tool.Tool, call tool.Call) Decision {
	e = e.forCaller(c)
	server, name := toolID(t, call)
	ro, destr := t.IsReadOnly(), t.IsDestructive()
	for i := range e.rules {
		r := &e.rules[i]
		if r.matchTool(server, name, ro, destr) && r.matchCaller(c) && r.matchArgs(call.Arguments) {
			return r.decision()
		}
	}
	// Unreachable: every mode ends with a rule that matches everything.
	return Decision{Action: Deny, Rule: "none", Message: "no policy rule matched"}
}

// Requires returns what calling t could need, whatever the arguments,
// for a call without a caller: Ask if some call could prompt, otherwise
// Allow if some call could run, otherwise Deny. Rules with argument
// conditions count as possibly matching. It is meant for listings (which
// tools need approval), not for deciding calls.
func (e *Engine) Requires(t tool.Tool) Action { return e.RequiresFor(nil, t) }

// RequiresFor is Requires for the calls of c (nil: no caller), in c's
// mode.
func (e *Engine) RequiresFor(caller *identity.Caller, t tool.Tool) Action {
	e = e.forCaller(caller)
	ro, destr := t.IsReadOnly(), t.IsDestructive()
	canAsk, canAllow := false, false
	for i := range e.rules {
		c := &e.rules[i]
		if !c.matchTool(t.Server, t.Name, ro, destr) || !c.matchCaller(caller) {
			continue
		}
		switch c.action {
		case Ask:
			canAsk = true
		case Allow:
			canAllow = true
		}
		if len(c.args) == 0 {
			// Matches every call of the tool: no later rule is reached.
			break
		}
	}
	switch {
	case canAsk:
		return Ask
	case canAllow:
		return Allow
	}
	return Deny
}

// trustAllows reports whether `trust: true` on the call's server would
// let the call run without asking: the configuration turns it into an
// allow rule after the user's own (ForConfig), so a user rule that asks
// first, or plan mode, still decides. The engine is built again with
// that rule and decides; refusals are rare enough for that. The built-in
// tools have no server entry to trust.
func (e *Engine) trustAllows(c *identity.Caller, t tool.Tool, call tool.Call) bool {
	server, _ := toolID(t, call)
	if server == "" || server == builtinServer {
		return false
	}
	rules := append(slices.Clone(e.user), Rule{Name: "trusted server " + server, Server: escapeGlob(server), Action: Allow})
	trusted, err := New(e.mode, rules)
	if err == nil {
		trusted, err = trusted.WithGroupModes(e.groupModes)
	}
	return err == nil && trusted.DecideFor(c, t, call).Action == Allow
}

// priority returns the priority of the named rule and whether it is one of
// the user's.
func (e *Engine) priority(name string) (int, bool) {
	if c, ok := e.byName[name]; ok {
		return c.priority, !c.isDefault
	}
	return 0, false
}

// toolID returns the identity of the tool called: t's, else the call's.
func toolID(t tool.Tool, call tool.Call) (server, name string) {
	server, name = t.Server, t.Name
	if server == "" {
		server = call.Server
	}
	if name == "" {
		name = call.Tool
	}
	return server, name
}
