package main

import (
	"github.com/toolmux/toolmux/metrics"
	"github.com/toolmux/toolmux/ratelimit"
)

// callerMetrics converts the limiter's counts for the metrics, which do
// not know package ratelimit.
func callerMetrics(st ratelimit.Stats) metrics.Callers {
	var c metrics.Callers
	for _, n := range st.Calls {
		c.Calls = append(c.Calls, metrics.CallerCalls{Caller: n.Caller, Calls: n.Calls})
	}
	for _, r := range st.Refused {
		c.Refused = append(c.Refused, metrics.CallerRefused{Caller: r.Caller, Group: r.Group, Limit: r.Limit, Refused: r.Count})
	}
	return c
}
