package config

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// Keys and values of the pipeline's pii section.
var (
	piiKeys       = []string{"rules", "regions", "max_findings"}
	piiRuleKeys   = []string{"kinds", "on", "action", "tools"}
	piiKinds      = []string{"email", "phone", "card", "iban", "secret"}
	piiDirections = []string{"arguments", "result"}
	piiActions    = []string{"mask", "refuse", "note"}
)

// maxPIIFindings bounds pii.max_findings: a note listing more is no
// longer read by anyone.
const maxPIIFindings = 10_000

func (p *parser) pii(n *yaml.Node, kp string) PII {
	var c PII
	p.fields(n, kp, piiKeys, func(e entry, fp string) {
		switch e.key {
		case "rules":
			for i, it := range p.items(e.v, fp) {
				c.Rules = append(c.Rules, p.piiRule(it, fmt.Sprintf("%s[%d]", fp, i)))
			}
		case "regions":
			c.Regions = p.nonEmptyStrings(e.v, fp, checkRegion)
		case "max_findings":
			c.MaxFindings, _ = p.integer(e.v, fp, 1, maxPIIFindings)
		}
	})
	return c
}

func (p *parser) piiRule(n *yaml.Node, kp string) PIIRule {
	var r PIIRule
	hasAction := false
	ok := p.element(n, kp, piiRuleKeys, func(e entry, fp string) {
		switch e.key {
		case "kinds":
			r.Kinds = p.nonEmptyStrings(e.v, fp, oneOf("kind", piiKinds))
		case "on":
			r.On = p.nonEmptyStrings(e.v, fp, oneOf("direction", piiDirections))
		case "action":
			hasAction = true
			r.Action, _ = p.choice(e.v, fp, "action", piiActions)
		case "tools":
			r.Tools = p.strList(e.v, fp, checkToolPattern)
		}
	})
	if ok && !hasAction {
		p.errAt(n, kp, "missing action (mask, refuse or note)")
	}
	return r
}

// checkRegion checks a region code's shape: two capital letters, as
// ISO 3166 writes them (the pipeline checks that libphonenumber knows it).
func checkRegion(s string) string {
	if len(s) != 2 || s[0] < 'A' || s[0] > 'Z' || s[1] < 'A' || s[1] > 'Z' {
		return fmt.Sprintf("%s is not a region code (two capital letters, ISO 3166: US, GB, DE)", quote(s))
	}
	return ""
}
