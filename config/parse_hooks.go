package config

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// This file reads the hooks section, Claude Code's hooks object as its
// settings spell it (PreToolUse, PostToolUse: lists of a matcher and its
// hooks) with toolmux's bounds beside it, and the guardrails section, the
// webhooks asked the same question (docs/hooks.md).

var (
	hooksKeys       = []string{"PreToolUse", "PostToolUse", "max_timeout", "max_output_bytes", "on_error"}
	hookMatcherKeys = []string{"matcher", "hooks"}
	hookKeys        = []string{"type", "command", "timeout"}
	guardrailKeys   = []string{"name", "url", "events", "matcher", "timeout", "max_response_bytes", "fail", "headers"}
)

// Bounds of the hooks and guardrails sections: a typo of a few digits
// more is caught rather than let a hook hold a call for a day or its
// output take the machine's memory.
const (
	maxHookTimeoutSeconds = 24 * 60 * 60
	maxHookOutputBytes    = 64 << 20
)

// hooks reads a hooks section.
func (p *parser) hooks(n *yaml.Node, kp string) Hooks {
	var h Hooks
	p.fields(n, kp, hooksKeys, func(e entry, fp string) {
		switch e.key {
		case "PreToolUse":
			h.PreToolUse = p.hookMatchers(e.v, fp)
		case "PostToolUse":
			h.PostToolUse = p.hookMatchers(e.v, fp)
		case "max_timeout":
			p.setDuration(&h.MaxTimeout, e.v, fp)
		case "max_output_bytes":
			h.MaxOutputBytes, _ = p.sizeUpTo(e.v, fp, maxHookOutputBytes, "64MiB")
		case "on_error":
			h.OnError, _ = p.choice(e.v, fp, "on_error", []string{"continue", "block"})
		}
	})
	return h
}

func (p *parser) hookMatchers(n *yaml.Node, kp string) []HookMatcher {
	items, _ := p.list(n, kp)
	var out []HookMatcher
	for i, it := range items {
		ip := fmt.Sprintf("%s[%d]", kp, i)
		var m HookMatcher
		p.element(it, ip, hookMatcherKeys, func(e entry, fp string) {
			switch e.key {
			case "matcher":
				m.Matcher = p.matcher(e.v, fp)
			case "hooks":
				hs, _ := p.list(e.v, fp)
				for j, hn := range hs {
					m.Hooks = append(m.Hooks, p.hookCommand(hn, fmt.Sprintf("%s[%d]", fp, j)))
				}
			}
		})
		if len(m.Hooks) == 0 {
			p.errAt(it, ip, "has no hooks")
		}
		out = append(out, m)
	}
	return out
}

// hookCommand reads one hook. Its command is not expanded: it is given to
// the shell, which expands its variables as Claude Code's does.
func (p *parser) hookCommand(n *yaml.Node, kp string) HookCommand {
	var c HookCommand
	typed := false
	p.element(n, kp, hookKeys, func(e entry, fp string) {
		switch e.key {
		case "type":
			// Claude Code's other types (prompt, http, ...) are not run
			// by toolmux.
			typed = true
			p.choice(e.v, fp, "hook type", []string{"command"})
		case "command":
			if s, ok := p.str(e.v, fp); ok {
				if strings.TrimSpace(s) == "" {
					p.errAt(e.v, fp, "must not be empty")
				}
				c.Command = s
			}
		case "timeout":
			// Claude Code's timeout is a number of seconds.
			if s, ok := p.integer(e.v, fp, 1, maxHookTimeoutSeconds); ok {
				c.Timeout = time.Duration(s) * time.Second
			}
		}
	})
	if v := deref(n); v.Kind == yaml.MappingNode {
		if !typed {
			p.errAt(n, kp, "needs type: command")
		}
		if c.Command == "" {
			p.errAt(n, kp, "needs a command")
		}
	}
	return c
}

// matcher reads a Claude Code matcher: "" or "*" (every tool), else a
// regular expression (names joined by "|" are one).
func (p *parser) matcher(n *yaml.Node, kp string) string {
	s, ok := p.str(n, kp)
	if !ok || s == "" || s == "*" {
		return s
	}
	if _, err := regexp.Compile(s); err != nil {
		p.errAt(n, kp, "%s is not a regular expression: %v", quote(s), err)
	}
	return s
}

// guardrails reads the guardrails section.
func (p *parser) guardrails(n *yaml.Node, kp string) []Guardrail {
	items, _ := p.list(n, kp)
	var out []Guardrail
	names := map[string]bool{}
	for i, it := range items {
		ip := fmt.Sprintf("%s[%d]", kp, i)
		var g Guardrail
		given := map[string]bool{}
		p.element(it, ip, guardrailKeys, func(e entry, fp string) {
			given[e.key] = true
			switch e.key {
			case "name":
				if s, ok := p.str(e.v, fp); ok {
					if names[s] {
						p.errAt(e.v, fp, "%s is the name of another guardrail", quote(s))
					}
					names[s] = true
					g.Name = s
				}
			case "url":
				g.URL = p.httpURL(e.v, fp, false)
			case "events":
				for i, ev := range p.items(e.v, fp) {
					if s, ok := p.choice(ev, fmt.Sprintf("%s[%d]", fp, i), "event", []string{"PreToolUse", "PostToolUse"}); ok {
						g.Events = append(g.Events, s)
					}
				}
			case "matcher":
				g.Matcher = p.matcher(e.v, fp)
			case "timeout":
				p.setDuration(&g.Timeout, e.v, fp)
			case "max_response_bytes":
				g.MaxResponseBytes, _ = p.sizeUpTo(e.v, fp, maxHookOutputBytes, "64MiB")
			case "fail":
				g.Fail, _ = p.choice(e.v, fp, "fail", []string{"open", "closed"})
			case "headers":
				g.Headers = p.stringMap(e.v, fp, false, validHeaderName, "a header name")
			}
		})
		if v := deref(it); v.Kind == yaml.MappingNode && (!given["name"] || !given["url"]) {
			p.errAt(it, ip, "needs a name and a url")
		}
		out = append(out, g)
	}
	return out
}
