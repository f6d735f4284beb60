package ratelimit

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/toolmux/toolmux/identity"
)

// labels are the bounded names calls and refusals are counted under
// (docs/operations.md "Labels stay bounded"): a caller Options.Callers
// names, an API key's name (MaxLabels of them), LabelAnonymous, or
// LabelOther. A token's subject or name, which its issuer chooses, is
// never one unless the configuration names it.
type labels struct {
	max int // of names not configured

	mu     sync.RWMutex
	byName map[string]*counts
	// configured counts the names of byName that were configured when
	// first seen: they do not take from max.
	configured int

	anonymous, other counts
}

// counts are the calls admitted under one label.
type counts struct {
	name  string
	calls atomic.Uint64
}

// of returns the counts of c's label under the configuration s.
func (ls *labels) of(c *identity.Caller, s *snapshot) *counts {
	if c == nil {
		return &ls.anonymous
	}
	_, configured := s.callers[c.Name]
	if !configured && c.Method != identity.MethodKey {
		return &ls.other
	}
	ls.mu.RLock()
	x := ls.byName[c.Name]
	ls.mu.RUnlock()
	if x != nil {
		return x
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if x = ls.byName[c.Name]; x != nil {
		return x
	}
	if !configured && len(ls.byName)-ls.configured >= ls.max {
		return &ls.other
	}
	if configured {
		ls.configured++
	}
	x = &counts{name: c.Name}
	ls.byName[c.Name] = x
	return x
}

// Stats are the counts of calls admitted and refused, by label.
type Stats struct {
	// Calls are the calls admitted by caller label, sorted.
	Calls []CallerCalls
	// Refused are the calls refused, by caller label, group and limit,
	// sorted.
	Refused []Refused
}

// CallerCalls counts the calls admitted of one caller label.
type CallerCalls struct {
	Caller string
	Calls  uint64
}

// Refused counts the calls refused of one caller label for one limit:
// Group is the group whose budget refused them, "" for the callers' own
// limits.
type Refused struct {
	Caller, Group, Limit string
	Count                uint64
}

// Stats returns the counts so far. Only labels that counted something
// are reported.
func (l *Limiter) Stats() Stats {
	var st Stats
	if l == nil {
		return st
	}
	add := func(c *counts) {
		if n := c.calls.Load(); n > 0 {
			st.Calls = append(st.Calls, CallerCalls{Caller: c.name, Calls: n})
		}
	}
	l.labels.mu.RLock()
	for _, c := range l.labels.byName {
		add(c)
	}
	l.labels.mu.RUnlock()
	add(&l.labels.anonymous)
	add(&l.labels.other)
	slices.SortFunc(st.Calls, func(a, b CallerCalls) int { return strings.Compare(a.Caller, b.Caller) })
	l.mu.Lock()
	for k, n := range l.refusals {
		st.Refused = append(st.Refused, Refused{Caller: k.caller, Group: k.group, Limit: k.limit, Count: n})
	}
	l.mu.Unlock()
	slices.SortFunc(st.Refused, func(a, b Refused) int {
		if c := strings.Compare(a.Caller, b.Caller); c != 0 {
			return c
		}
		if c := strings.Compare(a.Group, b.Group); c != 0 {
			return c
		}
		return strings.Compare(a.Limit, b.Limit)
	})
	return st
}
