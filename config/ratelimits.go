package config

// RateLimits is the `rate_limits:` section: how many tool calls a caller,
// and the members of a group together, may make per minute and at once
// on toolmux serve's routes (docs/operations.md "Limits per caller").
// The zero value limits nothing. Defaults are package ratelimit's.
type RateLimits struct {
	// PerCaller is every caller's own limit, but for the callers Callers
	// names. Without authentication there is one caller (anonymous).
	PerCaller RateLimit
	// Callers are the own limits of callers by name (an API key's name,
	// a token's name claim): each key an entry sets replaces PerCaller's,
	// the others are PerCaller's.
	Callers map[string]RateLimit
	// Groups are budgets shared by all the members of a group, besides
	// each member's own limit: a call takes from every budget its caller
	// is in.
	Groups map[string]RateLimit
	// MaxCallers bounds the callers whose own limits are kept at once,
	// besides those Callers names; 0 means the default.
	MaxCallers int
}

// RateLimit is one limit: calls per minute (with a burst) and calls in
// flight at once. A field left out is 0; Unlimited lifts, for a caller of
// Callers, a limit PerCaller sets.
type RateLimit struct {
	// CallsPerMinute is the rate at which calls are allowed.
	CallsPerMinute int
	// Burst is how many calls may be made at once after a quiet time;
	// 0 (set only with CallsPerMinute) means CallsPerMinute.
	Burst int
	// Concurrent is how many calls may be in flight at once.
	Concurrent int
}

// Unlimited is the value of a RateLimit field that lifts a limit.
const Unlimited = -1

// IsZero reports whether l sets nothing.
func (l RateLimit) IsZero() bool { return l == RateLimit{} }

// IsZero reports whether the section limits nothing.
func (r RateLimits) IsZero() bool {
	return r.PerCaller.IsZero() && len(r.Callers) == 0 && len(r.Groups) == 0
}
