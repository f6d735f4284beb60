package config

import "go.yaml.in/yaml/v3"

// This file reads the rate_limits section: calls per minute and calls at
// once, per caller and per group (docs/operations.md "Limits per
// caller").

var (
	rateLimitsKeys = []string{"per_caller", "callers", "groups", "max_callers"}
	rateLimitKeys  = []string{"calls_per_minute", "burst", "concurrent"}
)

// Bounds of the rate_limits section: a typo of a few digits more is
// caught rather than taken for a limit nobody meant.
const (
	maxCallsPerMinute = 1_000_000
	maxConcurrent     = 100_000
	maxRateCallers    = 10_000_000
	maxRateNames      = 10_000
)

// rateLimits reads a rate_limits section.
func (p *parser) rateLimits(n *yaml.Node, kp string) RateLimits {
	var r RateLimits
	p.fields(n, kp, rateLimitsKeys, func(e entry, fp string) {
		switch e.key {
		case "per_caller":
			r.PerCaller = p.rateLimit(e.v, fp, false)
		case "callers":
			r.Callers = p.rateLimitMap(e.v, fp, "caller", true)
		case "groups":
			r.Groups = p.rateLimitMap(e.v, fp, "group", false)
		case "max_callers":
			r.MaxCallers, _ = p.integer(e.v, fp, 1, maxRateCallers)
		}
	})
	return r
}

// rateLimitMap reads the limits of callers or groups by name.
func (p *parser) rateLimitMap(n *yaml.Node, kp, what string, lift bool) map[string]RateLimit {
	es, _ := p.entries(n, kp)
	if len(es) > maxRateNames {
		p.errAt(n, kp, "at most %d %ss", maxRateNames, what)
		return nil
	}
	out := make(map[string]RateLimit, len(es))
	for _, e := range es {
		fp := join(kp, e.key)
		if e.key == "" {
			p.errAt(e.k, fp, "a %s's name must not be empty", what)
			continue
		}
		if l := p.rateLimit(e.v, fp, lift); !l.IsZero() {
			out[e.key] = l
		}
	}
	return out
}

// rateLimit reads one limit; lift allows "unlimited" (a caller's own
// limit lifting per_caller's). A limit that sets nothing is an error:
// it would change nothing.
func (p *parser) rateLimit(n *yaml.Node, kp string, lift bool) RateLimit {
	var l RateLimit
	var burst *yaml.Node
	ok := p.fields(n, kp, rateLimitKeys, func(e entry, fp string) {
		switch e.key {
		case "calls_per_minute":
			l.CallsPerMinute = p.limitValue(e.v, fp, maxCallsPerMinute, lift)
		case "burst":
			l.Burst, _ = p.integer(e.v, fp, 1, maxCallsPerMinute)
			burst = e.k
		case "concurrent":
			l.Concurrent = p.limitValue(e.v, fp, maxConcurrent, lift)
		}
	})
	switch {
	case !ok:
	case burst != nil && (l.CallsPerMinute == 0 || l.CallsPerMinute == Unlimited):
		p.errAt(burst, join(kp, "burst"), "burst needs calls_per_minute beside it (the rate the burst refills at)")
	case l.IsZero() && p.clean(kp):
		p.errAt(n, kp, "sets no limit: give calls_per_minute (with burst) or concurrent")
	}
	return l
}

// clean reports whether no error was reported under kp, so that a limit
// whose keys were all wrong is not also said to set nothing.
func (p *parser) clean(kp string) bool {
	for _, e := range p.errs {
		if e.Key == kp || len(e.Key) > len(kp) && e.Key[:len(kp)] == kp && e.Key[len(kp)] == '.' {
			return false
		}
	}
	return true
}

// limitValue reads a count from 1 to hi, or, where lift allows it,
// "unlimited" (Unlimited).
func (p *parser) limitValue(n *yaml.Node, kp string, hi int, lift bool) int {
	v := deref(n)
	if v.Kind == yaml.ScalarNode && v.Tag == "!!str" && v.Value == "unlimited" {
		if !lift {
			p.errAt(n, kp, "unlimited lifts a per_caller limit for a caller of rate_limits.callers; here, leave the key out for no limit")
			return 0
		}
		return Unlimited
	}
	if v.Kind == yaml.ScalarNode && v.Tag == "!!int" {
		i, _ := p.integer(n, kp, 1, hi)
		return i
	}
	if lift {
		p.errAt(n, kp, "expected an integer or unlimited, got %s", describe(v))
	} else {
		p.errAt(n, kp, "expected an integer, got %s", describe(v))
	}
	return 0
}
