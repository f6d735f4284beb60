package hooks

import "github.com/toolmux/toolmux/config"

// FromConfig returns the Options of the hooks and guardrails sections;
// what they leave out is defaulted by New.
func FromConfig(h config.Hooks, gs []config.Guardrail) Options {
	o := Options{MaxTimeout: h.MaxTimeout, MaxOutputBytes: int(h.MaxOutputBytes), OnError: OnError(h.OnError),
		PreToolUse: matchers(h.PreToolUse), PostToolUse: matchers(h.PostToolUse)}
	for _, g := range gs {
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
