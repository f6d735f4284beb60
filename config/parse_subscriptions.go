package config

import "go.yaml.in/yaml/v3"

// This file reads the subscriptions section: the bounds of the
// subscriptions/listen streams of toolmux serve's MCP routes
// (docs/gateway.md, "Listen streams").

var subscriptionsKeys = []string{"max_listens", "max_listens_per_client"}

// maxListens bounds both keys: each stream holds a connection, a file
// descriptor and some 130 KB of the process, so a typo of a few digits
// more is caught rather than let the streams take the machine.
const maxListens = 1_000_000

// subscriptions reads a subscriptions section.
func (p *parser) subscriptions(n *yaml.Node, kp string) Subscriptions {
	var s Subscriptions
	p.fields(n, kp, subscriptionsKeys, func(e entry, fp string) {
		switch e.key {
		case "max_listens":
			s.MaxListens, _ = p.integer(e.v, fp, 1, maxListens)
		case "max_listens_per_client":
			s.MaxListensPerClient, _ = p.integer(e.v, fp, 1, maxListens)
		}
	})
	return s
}
