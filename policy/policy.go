package policy

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

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

// Engine decides calls for one mode. It is immutable, so one engine can
// serve any number of goroutines.
type Engine struct {
	mode Mode
	user []Rule // as given, names filled in, for WithMode and Rules
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
// for switching modes during a session.
func (e *Engine) WithMode(mode Mode) (*Engine, error) {
	if mode == e.mode {
		return e, nil
	}
	return New(mode, e.user)
}

// Mode returns the engine's approval mode.
func (e *Engine) Mode() Mode { return e.mode }

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
// t. The tool's identity is t's (Server, Name), falling back to the call's
// when t does not say. Decide does not allocate for arguments that are
// strings, numbers, booleans or null; a list or object named by an argument
// condition is encoded with encoding/json.
func (e *Engine) Decide(t tool.Tool, call tool.Call) Decision {
	server, name := identity(t, call)
	ro, destr := t.IsReadOnly(), t.IsDestructive()
	for i := range e.rules {
		c := &e.rules[i]
		if c.matchTool(server, name, ro, destr) && c.matchArgs(call.Arguments) {
			return c.decision()
		}
	}
	// Unreachable: every mode ends with a rule that matches everything.
	return Decision{Action: Deny, Rule: "none", Message: "no policy rule matched"}
}

// Requires returns what calling t could need, whatever the arguments: Ask
// if some call could prompt, otherwise Allow if some call could run,
// otherwise Deny. Rules with argument conditions count as possibly
// matching. It is meant for listings (which tools need approval), not for
// deciding calls.
func (e *Engine) Requires(t tool.Tool) Action {
	ro, destr := t.IsReadOnly(), t.IsDestructive()
	canAsk, canAllow := false, false
	for i := range e.rules {
		c := &e.rules[i]
		if !c.matchTool(t.Server, t.Name, ro, destr) {
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
func (e *Engine) trustAllows(t tool.Tool, call tool.Call) bool {
	server, _ := identity(t, call)
	if server == "" || server == builtinServer {
		return false
	}
	rules := append(slices.Clone(e.user), Rule{Name: "trusted server " + server, Server: escapeGlob(server), Action: Allow})
	trusted, err := New(e.mode, rules)
	return err == nil && trusted.Decide(t, call).Action == Allow
}

// priority returns the priority of the named rule and whether it is one of
// the user's.
func (e *Engine) priority(name string) (int, bool) {
	if c, ok := e.byName[name]; ok {
		return c.priority, !c.isDefault
	}
	return 0, false
}

func identity(t tool.Tool, call tool.Call) (server, name string) {
	server, name = t.Server, t.Name
	if server == "" {
		server = call.Server
	}
	if name == "" {
		name = call.Tool
	}
	return server, name
}
