package hooks

import (
	"path/filepath"

	"github.com/toolmux/toolmux/config"
)

// FromConfig returns the Options of c's hooks and guardrails sections,
// the commands run in c's workspace (Claude Code's project directory);
// what they leave out is defaulted by New.
func FromConfig(c *config.Config) Options {
	h := c.Hooks
	o := Options{MaxTimeout: h.MaxTimeout, MaxOutputBytes: int(h.MaxOutputBytes), OnError: OnError(h.OnError),
		PreToolUse: matchers(h.PreToolUse), PostToolUse: matchers(h.PostToolUse)}
	if c.Workspace != "" {
		o.Dir, _ = filepath.Abs(c.Workspace)
	}
	for _, g := range c.Guardrails {
		o.Guardrails = append(o.Guardrails, Guardrail{Name: g.Name, URL: g.URL, Events: g.Events, Matcher: g.Matcher,
			Timeout: g.Timeout, MaxResponseBytes: int(g.MaxResponseBytes), Fail: Fail(g.Fail), Headers: g.Headers})
	}
	return o
}

func matchers(ms []config.HookMatcher) []Matcher {
	out := make([]Matcher, 0, len(ms))
	for _, m := range ms {
		cs := make([]Command, 0, len(m.Hooks))
		for _, c := range m.Hooks {
			cs = append(cs, Command{Command: c.Command, Timeout: c.Timeout})
		}
		out = append(out, Matcher{Matcher: m.Matcher, Hooks: cs})
	}
	return out
}
