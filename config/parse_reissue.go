package config

import "go.yaml.in/yaml/v3"

// This file reads the reissue section: the window of re-issued tools/call
// requests of toolmux serve (docs/gateway.md, "Re-issued requests").

var reissueKeys = []string{"enabled", "window", "grace", "max_entries", "max_result_bytes"}

// Bounds of the reissue section: each entry may hold a result of
// max_result_bytes, so both are bounded, and a typo of a few digits more
// is caught rather than let the window take the machine's memory.
const (
	maxReissueEntries     = 1_000_000
	maxReissueResultBytes = 64 << 20
)

// reissue reads a reissue section.
func (p *parser) reissue(n *yaml.Node, kp string) Reissue {
	var r Reissue
	p.fields(n, kp, reissueKeys, func(e entry, fp string) {
		switch e.key {
		case "enabled":
			if on, ok := p.boolean(e.v, fp); ok {
				r.Disabled = !on
			}
		case "window":
			p.setDuration(&r.Window, e.v, fp)
		case "grace":
			p.setDuration(&r.Grace, e.v, fp)
		case "max_entries":
			r.MaxEntries, _ = p.integer(e.v, fp, 1, maxReissueEntries)
		case "max_result_bytes":
			r.MaxResultBytes, _ = p.sizeUpTo(e.v, fp, maxReissueResultBytes, "64MiB")
		}
	})
	return r
}
