package config

import (
	"errors"
	"fmt"
	"path"

	"go.yaml.in/yaml/v3"

	"github.com/toolmux/toolmux/internal/toolglob"
)

// Keys of the policy section, in the order docs/policy.md documents them.
var (
	policyKeys     = []string{"mode", "persist", "rules"}
	policyRuleKeys = []string{"name", "tools", "server", "args", "read_only", "destructive", "callers", "groups", "modes", "action", "priority", "message"}

	// The words of package policy (config does not import it; a test there
	// keeps the two in step).
	policyModes   = []string{"plan", "default", "auto_edit", "yolo"}
	policyActions = []string{"allow", "deny", "ask"}
)

// maxPolicyPriority bounds priorities: far beyond any sensible setting, and
// leaving room for the "one above" that saved rules use.
const maxPolicyPriority = 1_000_000

// policy reads the policy section; a key left out keeps its zero value.
func (p *parser) policy(n *yaml.Node, kp string) Policy {
	var pol Policy
	p.fields(n, kp, policyKeys, func(e entry, fp string) {
		switch e.key {
		case "mode":
			pol.Mode, _ = p.choice(e.v, fp, "mode", policyModes)
		case "persist":
			pol.Persist, _ = p.boolean(e.v, fp)
		case "rules":
			for i, it := range p.items(e.v, fp) {
				pol.Rules = append(pol.Rules, p.policyRule(it, fmt.Sprintf("%s[%d]", fp, i)))
			}
		}
	})
	return pol
}

func (p *parser) policyRule(n *yaml.Node, kp string) PolicyRule {
	r := PolicyRule{Line: n.Line}
	hasAction := false
	ok := p.element(n, kp, policyRuleKeys, func(e entry, fp string) {
		switch e.key {
		case "name":
			r.Name, _ = p.text(e.v, fp)
		case "tools":
			r.Tools = p.nonEmptyStrings(e.v, fp, checkToolPattern)
			if v := deref(e.v); isNull(v) {
				p.errAt(e.v, fp, "expected a list of tool patterns, got null (leave tools out to match any tool)")
			}
		case "server":
			if s, ok := p.text(e.v, fp); ok {
				if msg := checkServerGlob(s); msg != "" {
					p.errAt(e.v, fp, "%s", msg)
				} else {
					r.Server = s
				}
			}
		case "args":
			r.Args = p.argPatterns(e.v, fp)
		case "read_only":
			if b, ok := p.boolean(e.v, fp); ok {
				r.ReadOnly = &b
			}
		case "destructive":
			if b, ok := p.boolean(e.v, fp); ok {
				r.Destructive = &b
			}
		case "callers":
			r.Callers = p.nonEmptyStrings(e.v, fp, checkCallerGlob)
		case "groups":
			r.Groups = p.nonEmptyStrings(e.v, fp, checkGroupName)
		case "modes":
			r.Modes = p.nonEmptyStrings(e.v, fp, checkMode)
		case "action":
			hasAction = true
			r.Action, _ = p.choice(e.v, fp, "action", policyActions)
		case "priority":
			r.Priority, _ = p.integer(e.v, fp, -maxPolicyPriority, maxPolicyPriority)
		case "message":
			r.Message, _ = p.expandStr(e.v, fp, false)
		}
	})
	if ok && !hasAction {
		p.errAt(n, kp, "missing action (allow, deny or ask)")
	}
	return r
}

// argPatterns reads a mapping of argument names to regular expressions.
func (p *parser) argPatterns(n *yaml.Node, kp string) map[string]string {
	es, ok := p.entries(n, kp)
	if !ok {
		return nil
	}
	if isNull(deref(n)) || len(es) == 0 {
		p.errAt(n, kp, "expected a mapping of argument names to regular expressions (leave args out for no condition)")
		return nil
	}
	out := make(map[string]string, len(es))
	for _, e := range es {
		fp := join(kp, e.key)
		if e.key == "" {
			p.errAt(e.k, kp, "an argument name must not be empty")
			continue
		}
		s, ok := p.expandStr(e.v, fp, false)
		if !ok {
			continue
		}
		if s == "" {
			p.errAt(e.v, fp, "must not be empty (use \".*\" to match any value of a present argument)")
			continue
		}
		if msg := checkRegexp(s); msg != "" {
			p.errAt(e.v, fp, "%s", msg)
			continue
		}
		out[e.key] = s
	}
	return out
}

// checkServerGlob checks a glob over server names.
func checkServerGlob(s string) string {
	var e *toolglob.Error
	if err := toolglob.CheckServer(s); errors.As(err, &e) {
		return e.Explain(quote)
	}
	return ""
}

// checkCallerGlob checks a glob over callers' names and subjects.
func checkCallerGlob(s string) string {
	if s == "" {
		return "a caller pattern must not be empty"
	}
	if _, err := path.Match(s, ""); err != nil {
		return fmt.Sprintf("%s is not a valid glob: %v", quote(s), err)
	}
	return ""
}

// checkMode checks an approval mode, suggesting the nearest.
func checkMode(s string) string {
	for _, m := range policyModes {
		if s == m {
			return ""
		}
	}
	msg := fmt.Sprintf("unknown mode %s (expected %s)", quote(s), orList(policyModes))
	if sug := suggest(s, policyModes); sug != "" {
		msg += "; did you mean " + sug + "?"
	}
	return msg
}
