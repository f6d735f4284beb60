package ratelimit

import "github.com/toolmux/toolmux/config"

// FromConfig returns the Options of a rate_limits section: the only use
// of package config here.
func FromConfig(c config.RateLimits) Options {
	o := Options{PerCaller: limitOf(c.PerCaller), MaxCallers: c.MaxCallers}
	if len(c.Callers) > 0 {
		o.Callers = make(map[string]Limit, len(c.Callers))
		for name, l := range c.Callers {
			o.Callers[name] = limitOf(l)
		}
	}
	if len(c.Groups) > 0 {
		o.Groups = make(map[string]Limit, len(c.Groups))
		for name, l := range c.Groups {
			o.Groups[name] = limitOf(l)
		}
	}
	return o
}

// limitOf is a configured limit; config.Unlimited is Unlimited.
func limitOf(l config.RateLimit) Limit {
	return Limit{CallsPerMinute: l.CallsPerMinute, Burst: l.Burst, Concurrent: l.Concurrent}
}
