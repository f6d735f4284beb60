package policy

import (
	"errors"
	"fmt"
	"slices"

	"github.com/toolmux/toolmux/config"
)

// FromConfig returns the engine the `policy:` section describes. The
// section was checked when the file was loaded, so errors here are rare;
// they name the rule's line in the file.
func FromConfig(cfg config.Policy) (*Engine, error) {
	mode, err := ParseMode(cfg.Mode)
	if err != nil {
		return nil, fmt.Errorf("policy.mode: %w", err)
	}
	rules := RulesFromConfig(cfg)
	e, err := New(mode, rules)
	if err != nil {
		var errs []error
		for _, err := range unjoin(err) {
			var re *RuleError
			if errors.As(err, &re) && re.Index >= 1 && re.Index <= len(cfg.Rules) {
				err = fmt.Errorf("policy.rules[%d] (line %d): %w", re.Index-1, cfg.Rules[re.Index-1].Line, err)
			}
			errs = append(errs, err)
		}
		return nil, errors.Join(errs...)
	}
	return e, nil
}

// ForConfig returns the engine of a whole configuration: the policy
// section's rules, then an allow rule for each trusted server (`trust:
// true`), after the user's rules so those still decide first, and the
// approval modes of the groups section (WithGroupModes). Like any rule
// without modes, a trusted server's rule does not open plan mode.
func ForConfig(c *config.Config) (*Engine, error) {
	pc := c.Policy
	pc.Rules = slices.Clone(pc.Rules)
	for _, s := range c.Servers {
		if s.Trust && !s.Disabled {
			pc.Rules = append(pc.Rules, config.PolicyRule{Name: "trusted server " + s.Name,
				Server: escapeGlob(s.Name), Action: string(Allow), Line: s.Line})
		}
	}
	e, err := FromConfig(pc)
	if err != nil {
		return nil, err
	}
	return e.WithGroupModes(GroupModes(c))
}

// GroupModes returns the approval modes the groups section sets, by
// group (those that set none are left out).
func GroupModes(c *config.Config) map[string]Mode {
	var out map[string]Mode
	for name, g := range c.Groups {
		if g.ApprovalMode == "" {
			continue
		}
		if out == nil {
			out = map[string]Mode{}
		}
		out[name] = Mode(g.ApprovalMode)
	}
	return out
}

// RulesFromConfig converts the section's rules, in file order.
func RulesFromConfig(cfg config.Policy) []Rule {
	rules := make([]Rule, len(cfg.Rules))
	for i, r := range cfg.Rules {
		var modes []Mode
		for _, m := range r.Modes {
			modes = append(modes, Mode(m))
		}
		rules[i] = Rule{
			Name:        r.Name,
			Tools:       r.Tools,
			Server:      r.Server,
			Args:        r.Args,
			ReadOnly:    r.ReadOnly,
			Destructive: r.Destructive,
			Callers:     r.Callers,
			Groups:      r.Groups,
			Modes:       modes,
			Action:      Action(r.Action),
			Priority:    r.Priority,
			Message:     r.Message,
		}
	}
	return rules
}

// ConfigRule is r as a rule of the configuration's policy section, the
// inverse of RulesFromConfig.
func ConfigRule(r Rule) config.PolicyRule {
	var modes []string
	for _, m := range r.Modes {
		modes = append(modes, string(m))
	}
	return config.PolicyRule{
		Name:        r.Name,
		Tools:       r.Tools,
		Server:      r.Server,
		Args:        r.Args,
		ReadOnly:    r.ReadOnly,
		Destructive: r.Destructive,
		Callers:     r.Callers,
		Groups:      r.Groups,
		Modes:       modes,
		Action:      string(r.Action),
		Priority:    r.Priority,
		Message:     r.Message,
	}
}

// SaveRule adds r to the rules of the configuration file at path, after
// checking that it is a valid rule: what WithPersist is given to save
// "always" answers. The file is edited by config.SaveRule, which owns the
// file's format.
func SaveRule(path string, r Rule) error {
	if _, errs := compile(r, 1); errs != nil {
		return fmt.Errorf("policy: not saving an invalid rule: %w", errs[0])
	}
	return config.SaveRule(path, ConfigRule(r))
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
