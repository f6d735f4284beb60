// Package ratelimit limits the tool calls of each caller, and of each
// group of callers together: calls per minute (a token bucket of
// golang.org/x/time/rate) and calls in flight at once (a count that
// refuses rather than waits). The gateway asks it before it makes a call
// (docs/operations.md "Limits per caller"); a call over a limit is
// refused at once with an *Error saying which limit, and when to retry.
//
// A caller's own limit is per caller: Options.PerCaller, or the caller's
// entry of Options.Callers. A group's limit is one budget shared by all
// its members; a call takes from its caller's own limit and from every
// budget of a group its caller is in, or from none of them. Without
// authentication (no caller in the context) there is one caller,
// anonymous, held to PerCaller.
//
// Memory is bounded by configuration, never by callers: the limits of
// callers Options.Callers names and of groups are kept for as long as
// they are configured; every other caller's (a token's subject, an API
// key not named) in a map of at most Options.MaxCallers, from which the
// least recently active caller with no call in flight is forgotten first
// (it starts again with a full budget when it comes back). The labels of
// the counts it reports (Stats) are bounded too: the names of callers
// Options.Callers names, of API keys up to Options.MaxLabels, and
// "other" for everyone else, so a subject never becomes a label.
package ratelimit

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/toolmux/toolmux/identity"
)

// Limit is one limit: calls per minute, with a burst, and calls in flight
// at once. A field 0 limits nothing; in Options.Callers it takes
// PerCaller's, and Unlimited lifts PerCaller's.
type Limit struct {
	// CallsPerMinute is the rate at which calls are allowed.
	CallsPerMinute int
	// Burst is how many calls may be made at once after a quiet
	// minute: the size of the bucket. 0 means CallsPerMinute.
	Burst int
	// Concurrent is how many calls may be in flight at once; one more
	// is refused at once.
	Concurrent int
}

// Unlimited, in a field of an entry of Options.Callers, lifts the limit
// PerCaller sets.
const Unlimited = -1

func (l Limit) isZero() bool { return l.CallsPerMinute <= 0 && l.Concurrent <= 0 }

// Options configure a Limiter. The zero value limits nothing.
type Options struct {
	// PerCaller is every caller's own limit, but for those Callers
	// names; without authentication, the one anonymous caller's.
	PerCaller Limit
	// Callers are the own limits of callers by name (identity.Caller's
	// Name: an API key's name, a token's name claim): each field set
	// replaces PerCaller's, each field 0 is PerCaller's.
	Callers map[string]Limit
	// Groups are budgets shared by all the members of each group, on top
	// of each member's own limit.
	Groups map[string]Limit
	// MaxCallers bounds the callers whose own limits are kept at once,
	// besides those Callers names; 0 means DefaultMaxCallers.
	MaxCallers int
	// MaxLabels bounds the API keys' names Stats reports calls under,
	// besides those Callers names; 0 means DefaultMaxLabels.
	MaxLabels int
}

// Defaults of Options.
const (
	// DefaultMaxCallers keeps the budgets of 10000 callers: some 2 MB.
	DefaultMaxCallers = 10_000
	// DefaultMaxLabels keeps the metrics of a gateway with a few hundred
	// keys readable, while a store of thousands stays a bounded set of
	// series.
	DefaultMaxLabels = 256
)

// The label values Stats reports besides callers' names.
const (
	// LabelAnonymous counts the calls made without authentication.
	LabelAnonymous = "anonymous"
	// LabelOther counts every caller that is neither named in
	// Options.Callers nor an API key within Options.MaxLabels.
	LabelOther = "other"
)

// Limiter admits calls within the limits. Safe for concurrent use; a nil
// *Limiter admits everything.
type Limiter struct {
	snap atomic.Pointer[snapshot]
	now  func() time.Time

	mu     sync.Mutex
	anon   *entry
	named  map[string]*entry    // callers of Options.Callers
	groups map[string]*entry    // groups of Options.Groups
	byKey  map[callerKey]*entry // every other caller: at most MaxCallers
	// idle are the entries of byKey with no call in flight, the most
	// recently active first: the last is the one forgotten first.
	idle     idleList
	refusals map[refusalKey]uint64

	labels labels
}

// callerKey identifies a caller across requests (identity.Caller.Key,
// without building its string).
type callerKey struct{ issuer, subject string }

// snapshot is one configuration, swapped whole by Set.
type snapshot struct {
	gen        uint64
	limited    bool // some limit is set
	maxCallers int
	perCaller  spec
	callers    map[string]spec
	groups     map[string]spec
}

// spec is a limit resolved, with the configuration keys that set it, for
// the messages.
type spec struct {
	cpm, burst, concurrent int
	rateKey, concKey       string
}

func (s spec) isZero() bool { return s.cpm == 0 && s.concurrent == 0 }

// entry is the state of one caller's own limit, or one group's budget.
type entry struct {
	name     string // the caller's or the group's, for messages
	group    bool
	key      callerKey
	inByKey  bool // in Limiter.byKey (forgettable)
	spec     spec
	gen      uint64
	lim      *rate.Limiter // nil: no rate
	inflight int
	// prev and next link e in Limiter.idle, while it is there (idle).
	prev, next *entry
	idle       bool
}

type refusalKey struct{ caller, group, limit string }

// New returns a Limiter of o.
func New(o Options) *Limiter {
	l := &Limiter{now: time.Now, named: map[string]*entry{}, groups: map[string]*entry{},
		byKey: map[callerKey]*entry{}, refusals: map[refusalKey]uint64{}}
	l.labels.byName = map[string]*counts{}
	l.labels.anonymous.name, l.labels.other.name = LabelAnonymous, LabelOther
	l.set(o, 1)
	return l
}

// Set replaces the limits (a reload of the configuration). Budgets of
// callers and groups still configured carry over, changed to the new
// limits; those of callers and groups no longer named are dropped, their
// calls in flight no longer counted.
func (l *Limiter) Set(o Options) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.set(o, l.snap.Load().gen+1)
}

// set builds the snapshot of o; l.mu is held (or l is new).
func (l *Limiter) set(o Options, gen uint64) {
	s := &snapshot{gen: gen, maxCallers: o.MaxCallers, callers: map[string]spec{}, groups: map[string]spec{}}
	s.maxCallers = cmp.Or(max(s.maxCallers, 0), DefaultMaxCallers)
	l.labels.mu.Lock()
	l.labels.max = cmp.Or(max(o.MaxLabels, 0), DefaultMaxLabels)
	l.labels.mu.Unlock()
	s.perCaller = resolve(Limit{}, o.PerCaller, "rate_limits.per_caller", "rate_limits.per_caller")
	s.limited = !s.perCaller.isZero()
	for name, lim := range o.Callers {
		sp := resolve(o.PerCaller, lim, "rate_limits.per_caller", "rate_limits.callers."+name)
		s.callers[name] = sp
		s.limited = s.limited || !sp.isZero()
	}
	for name, lim := range o.Groups {
		if sp := resolve(Limit{}, lim, "", "rate_limits.groups."+name); !sp.isZero() {
			s.groups[name] = sp
			s.limited = true
		}
	}
	l.snap.Store(s)
	for name := range l.named {
		if _, ok := s.callers[name]; !ok {
			delete(l.named, name)
		}
	}
	for name := range l.groups {
		if _, ok := s.groups[name]; !ok {
			delete(l.groups, name)
		}
	}
	if s.perCaller.isZero() {
		l.anon = nil
	}
	// Callers no longer held to a limit of their own, or more of them
	// than now kept, are forgotten (those with a call in flight when it
	// ends).
	for e := l.idle.last(); e != nil && (s.perCaller.isZero() || len(l.byKey) > s.maxCallers); e = l.idle.last() {
		l.forgetLocked(e)
	}
}

// resolve is lim over base, field by field (a field 0 is base's,
// Unlimited lifts it), with the keys that set each; a field of base is
// named by baseKey.
func resolve(base, lim Limit, baseKey, key string) spec {
	sp := spec{cpm: base.CallsPerMinute, burst: base.Burst, concurrent: base.Concurrent,
		rateKey: baseKey + ".calls_per_minute", concKey: baseKey + ".concurrent"}
	if lim.CallsPerMinute != 0 {
		// The burst goes with the rate it was given with.
		sp.cpm, sp.burst, sp.rateKey = lim.CallsPerMinute, lim.Burst, key+".calls_per_minute"
	}
	if lim.Concurrent != 0 {
		sp.concurrent, sp.concKey = lim.Concurrent, key+".concurrent"
	}
	sp.cpm, sp.concurrent = max(sp.cpm, 0), max(sp.concurrent, 0)
	if sp.cpm > 0 && sp.burst <= 0 {
		sp.burst = sp.cpm
	}
	if sp.cpm == 0 {
		sp.burst = 0
	}
	return sp
}

// noRelease is what an admission without anything to give back returns.
func noRelease() {}

// Admit takes n calls (a batch holds several; one otherwise) of the
// caller ctx carries (identity.From; none: anonymous) from its limits:
// release gives back their places once they have ended. A call over a
// limit gets an *Error, and takes nothing. Without any limit it costs an
// atomic load (and, for a caller, a count by its label).
func (l *Limiter) Admit(ctx context.Context, n int) (release func(), err error) {
	if l == nil {
		return noRelease, nil
	}
	c := identity.From(ctx)
	s := l.snap.Load()
	if !s.limited {
		if c != nil {
			l.labels.of(c, s).calls.Add(uint64(n))
		}
		return noRelease, nil
	}
	lab := l.labels.of(c, s)
	now := l.now()
	t := &ticket{l: l, n: n}
	l.mu.Lock()
	// The configuration again, under the lock Set takes: the entries
	// are made and refreshed by the one in use.
	s = l.snap.Load()
	own, err := l.ownLocked(c, s, now)
	if err != nil {
		l.refusals[refusalKey{lab.name, "", LimitCallers}]++
		l.mu.Unlock()
		return nil, err
	}
	es := t.buf[:0]
	if own != nil {
		es = append(es, own)
	}
	if c != nil {
		for _, g := range c.Groups {
			if sp, ok := s.groups[g]; ok && !holds(es, g) {
				es = append(es, l.groupLocked(g, sp, s.gen, now))
			}
		}
	}
	if e := l.checkLocked(es, n, now); e != nil {
		e.Caller = lab.name
		if c != nil {
			e.Caller = c.Name
		}
		l.refusals[refusalKey{lab.name, groupOf(e), e.Limit}]++
		l.mu.Unlock()
		return nil, e
	}
	for _, e := range es {
		if e.lim != nil {
			e.lim.AllowN(now, n)
		}
		if e.idle {
			l.idle.remove(e)
		}
		e.inflight += n
	}
	l.mu.Unlock()
	lab.calls.Add(uint64(n))
	if len(es) == 0 {
		return noRelease, nil
	}
	t.es = es
	return t.release, nil
}

// holds reports whether es holds the budget of group g (a caller whose
// groups name one twice takes from it once).
func holds(es []*entry, g string) bool {
	for _, e := range es {
		if e.group && e.name == g {
			return true
		}
	}
	return false
}

func groupOf(e *Error) string { return e.Group }

// ticket is what an admission took, given back by release.
type ticket struct {
	l        *Limiter
	n        int
	es       []*entry
	buf      [4]*entry // es, for a caller in up to three limited groups
	released bool
}

// release gives back the places of the ticket's calls, once.
func (t *ticket) release() {
	l := t.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if t.released {
		return
	}
	t.released = true
	for _, e := range t.es {
		e.inflight -= t.n
		if e.inflight == 0 && e.inByKey {
			l.idle.pushFront(e)
		}
	}
}

// ownLocked returns the entry of c's own limit, made if need be; nil when
// c has none. An *Error when c is a caller not yet kept and every caller
// kept has a call in flight. l.mu is held.
func (l *Limiter) ownLocked(c *identity.Caller, s *snapshot, now time.Time) (*entry, error) {
	var e *entry
	switch {
	case c == nil:
		if s.perCaller.isZero() {
			return nil, nil
		}
		if l.anon == nil {
			l.anon = &entry{name: LabelAnonymous}
		}
		e = l.anon
		e.refresh(s.perCaller, s.gen, now)
		return e, nil
	default:
		if sp, ok := s.callers[c.Name]; ok {
			if sp.isZero() {
				return nil, nil
			}
			if e = l.named[c.Name]; e == nil {
				e = &entry{name: c.Name}
				l.named[c.Name] = e
			}
			e.refresh(sp, s.gen, now)
			return e, nil
		}
	}
	if s.perCaller.isZero() {
		return nil, nil
	}
	k := callerKey{c.Issuer, c.Subject}
	if e = l.byKey[k]; e == nil {
		for len(l.byKey) >= s.maxCallers {
			old := l.idle.last()
			if old == nil {
				return nil, &Error{Limit: LimitCallers, Key: "rate_limits.max_callers", Max: s.maxCallers, RetryAfter: time.Second}
			}
			l.forgetLocked(old)
		}
		e = &entry{name: c.Name, key: k, inByKey: true}
		l.byKey[k] = e
		l.idle.pushFront(e)
	} else if e.idle {
		l.idle.remove(e)
		l.idle.pushFront(e)
	}
	e.refresh(s.perCaller, s.gen, now)
	return e, nil
}

// forgetLocked drops an idle entry of byKey. l.mu is held.
func (l *Limiter) forgetLocked(e *entry) {
	l.idle.remove(e)
	delete(l.byKey, e.key)
}

// groupLocked returns the budget of group g, made if need be. l.mu is
// held.
func (l *Limiter) groupLocked(g string, sp spec, gen uint64, now time.Time) *entry {
	e := l.groups[g]
	if e == nil {
		e = &entry{name: g, group: true}
		l.groups[g] = e
	}
	e.refresh(sp, gen, now)
	return e
}

// refresh makes e's limits those of sp, when the configuration changed
// since e last looked (gen): the tokens left carry over.
func (e *entry) refresh(sp spec, gen uint64, now time.Time) {
	if e.gen == gen {
		return
	}
	e.gen = gen
	old := e.spec
	e.spec = sp
	switch {
	case sp.cpm == 0:
		e.lim = nil
	case e.lim == nil:
		e.lim = rate.NewLimiter(perSecond(sp.cpm), sp.burst)
	case old.cpm != sp.cpm || old.burst != sp.burst:
		e.lim.SetLimitAt(now, perSecond(sp.cpm))
		e.lim.SetBurstAt(now, sp.burst)
	}
}

func perSecond(cpm int) rate.Limit { return rate.Limit(float64(cpm) / 60) }

// checkLocked returns the refusal of n calls by the limits es, if any:
// calls in flight first (nothing waits for those), then the rates, the
// longest wait among them. l.mu is held.
func (l *Limiter) checkLocked(es []*entry, n int, now time.Time) *Error {
	for _, e := range es {
		if e.spec.concurrent > 0 && e.inflight+n > e.spec.concurrent {
			return e.refusal(LimitConcurrent, e.spec.concKey, e.spec.concurrent, time.Second)
		}
	}
	var worst *Error
	for _, e := range es {
		if e.lim == nil || e.lim.TokensAt(now) >= float64(n) {
			continue
		}
		// How long until the tokens are there: the limiter's own answer,
		// asked by a reservation given back at once.
		r := e.lim.ReserveN(now, n)
		if !r.OK() {
			return e.refusal(LimitBurst, e.spec.rateKey, e.spec.burst, 0)
		}
		d := r.DelayFrom(now)
		r.CancelAt(now)
		if worst == nil || d > worst.RetryAfter {
			worst = e.refusal(LimitRate, e.spec.rateKey, e.spec.cpm, d)
		}
	}
	return worst
}

func (e *entry) refusal(limit, key string, max int, after time.Duration) *Error {
	r := &Error{Limit: limit, Key: key, Max: max, RetryAfter: after}
	if e.group {
		r.Group = e.name
	}
	return r
}

// The limits an Error names.
const (
	// LimitRate: calls per minute.
	LimitRate = "calls_per_minute"
	// LimitConcurrent: calls in flight at once.
	LimitConcurrent = "concurrent"
	// LimitBurst: a batch of more calls than the burst, which never fits.
	LimitBurst = "burst"
	// LimitCallers: a caller not yet kept while every caller kept
	// (max_callers) has a call in flight.
	LimitCallers = "max_callers"
)

// Kind is the kind of refusal every Error is: what the JSON-RPC error's
// data and the API's error say.
const Kind = "rate_limited"

// Error is a call refused for a limit. Its message says which, and when
// to retry.
type Error struct {
	// Caller is the caller's name (LabelAnonymous without
	// authentication).
	Caller string
	// Group is the group whose budget refused the call; "" for the
	// caller's own limit.
	Group string
	// Limit is LimitRate, LimitConcurrent, LimitBurst or LimitCallers.
	Limit string
	// Key is the configuration key that sets the limit.
	Key string
	// Max is the limit's value.
	Max int
	// RetryAfter is how long until the call would be admitted (for
	// LimitRate, when the bucket has the tokens; for the others, a
	// second); 0 when it never would (LimitBurst).
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	who := fmt.Sprintf("caller %q", e.Caller)
	if e.Group != "" {
		who = fmt.Sprintf("group %q (shared by its members)", e.Group)
	}
	switch e.Limit {
	case LimitRate:
		return fmt.Sprintf("rate limited: %s has used its %d calls per minute (%s): retry in %ds", who, e.Max, e.Key, e.RetryAfterSeconds())
	case LimitConcurrent:
		return fmt.Sprintf("rate limited: %s has %d calls in flight, the most allowed (%s): retry when one ends", who, e.Max, e.Key)
	case LimitBurst:
		return fmt.Sprintf("rate limited: the batch holds more calls than the burst of %s, %d (%s): send fewer at once", who, e.Max, e.Key)
	}
	return fmt.Sprintf("rate limited: the gateway keeps the limits of %d callers and every one has a call in flight (%s): retry in %ds", e.Max, e.Key, e.RetryAfterSeconds())
}

// RetryAfterSeconds is RetryAfter in whole seconds, rounded up, as an
// HTTP Retry-After says it; 0 when the call would never be admitted.
func (e *Error) RetryAfterSeconds() int {
	if e.RetryAfter <= 0 {
		return 0
	}
	return int(math.Ceil(e.RetryAfter.Seconds()))
}

// idleList links the idle entries of byKey, the most recently active
// first, in the entries themselves: going idle and busy again costs no
// allocation.
type idleList struct{ first, tail *entry }

func (q *idleList) pushFront(e *entry) {
	e.prev, e.next, e.idle = nil, q.first, true
	if q.first != nil {
		q.first.prev = e
	} else {
		q.tail = e
	}
	q.first = e
}

func (q *idleList) remove(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		q.first = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		q.tail = e.prev
	}
	e.prev, e.next, e.idle = nil, nil, false
}

// last returns the least recently active idle entry; nil when none.
func (q *idleList) last() *entry { return q.tail }
