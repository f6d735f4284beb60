package config

import (
	"fmt"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// This file reads the `groups:` section: the settings of callers' groups
// (docs/identity.md "Governance per caller"). The groups named by policy
// rules, virtual servers and passthrough routes need not appear in it:
// callers' groups come from their tokens or keys, not from this file.

var groupKeys = []string{"approval_mode", "tools"}

// maxGroups bounds the groups section, as virtual_servers is bounded.
const maxGroups = 1000

// groups reads the groups section: a mapping of group names to their
// settings.
func (p *parser) groups(n *yaml.Node, kp string) map[string]Group {
	es, ok := p.entries(n, kp)
	if !ok {
		return nil
	}
	if len(es) > maxGroups {
		p.errAt(n, kp, "at most %d groups", maxGroups)
		return nil
	}
	out := make(map[string]Group, len(es))
	for _, e := range es {
		fp := join(kp, e.key)
		if msg := checkGroupName(e.key); msg != "" {
			p.errAt(e.k, fp, "%s", msg)
			continue
		}
		g := Group{Line: e.k.Line}
		p.element(e.v, fp, groupKeys, func(f entry, gp string) {
			switch f.key {
			case "approval_mode":
				g.ApprovalMode, _ = p.choice(f.v, gp, "approval mode", policyModes)
			case "tools":
				g.Tools = p.strList(f.v, gp, func(s string) string { return checkPattern(s, true) })
				if isNull(deref(f.v)) {
					p.errAt(f.v, gp, "expected a list of tool patterns, got null (write [] for none; leave tools out to grant none)")
				}
			}
		})
		out[e.key] = g
	}
	return out
}

// checkGroupName checks the name of a group: not empty, no control
// characters and no space around it (a group comes from a token's claim
// or a key, and is compared exactly).
func checkGroupName(s string) string {
	switch {
	case s == "":
		return "a group name must not be empty"
	case unicode.IsSpace(rune(s[0])) || unicode.IsSpace(rune(s[len(s)-1])):
		return fmt.Sprintf("group name %s has space around it; groups are compared exactly", quote(s))
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Sprintf("group name %s holds a control character", quote(s))
		}
	}
	return ""
}
