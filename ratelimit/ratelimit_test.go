package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/ratelimit"
)

// clock is a time moved by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newLimiter(t *testing.T, o ratelimit.Options) (*ratelimit.Limiter, *clock) {
	t.Helper()
	l := ratelimit.New(o)
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ratelimit.SetClock(l, c.now)
	return l, c
}

func key(name string, groups ...string) context.Context {
	return identity.With(context.Background(), &identity.Caller{Subject: identity.KeySubject(name), Name: name, Groups: groups, Method: identity.MethodKey})
}

func jwt(subject string, groups ...string) context.Context {
	return identity.With(context.Background(), &identity.Caller{Subject: subject, Name: subject, Issuer: "https://idp.example", Groups: groups, Method: identity.MethodJWT})
}

// admit admits one call and gives its place back at once.
func admit(l *ratelimit.Limiter, ctx context.Context) error {
	release, err := l.Admit(ctx, 1)
	if err == nil {
		release()
	}
	return err
}

func refusal(t *testing.T, err error) *ratelimit.Error {
	t.Helper()
	e, ok := errors.AsType[*ratelimit.Error](err)
	if !ok {
		t.Fatalf("not a refusal: %v", err)
	}
	return e
}

// A caller's own rate: the burst at once, then the rate; the refusal says
// when the next token is there, and the limit and key.
func TestCallerRate(t *testing.T) {
	l, clk := newLimiter(t, ratelimit.Options{PerCaller: ratelimit.Limit{CallsPerMinute: 60, Burst: 2}})
	ann := key("ann")
	for i := range 2 {
		if err := admit(l, ann); err != nil {
			t.Fatalf("call %d of the burst: %v", i+1, err)
		}
	}
	e := refusal(t, admit(l, ann))
	if e.Limit != ratelimit.LimitRate || e.Group != "" || e.Caller != "ann" || e.Max != 60 || e.Key != "rate_limits.per_caller.calls_per_minute" {
		t.Errorf("refusal: %+v", e)
	}
	if e.RetryAfter != time.Second || e.RetryAfterSeconds() != 1 {
		t.Errorf("retry after %v (%ds), want 1s: a token a second", e.RetryAfter, e.RetryAfterSeconds())
	}
	// Another caller has a budget of its own.
	if err := admit(l, key("bob")); err != nil {
		t.Errorf("bob: %v", err)
	}
	clk.t = clk.t.Add(time.Second)
	if err := admit(l, ann); err != nil {
		t.Errorf("a second later: %v", err)
	}
	if err := admit(l, ann); err == nil {
		t.Error("the token taken: admitted")
	}
}

// A group's budget is shared by its members, on top of each one's own
// limit; a caller outside the group is not held to it; a refusal takes
// nothing from the other limits.
func TestGroupBudget(t *testing.T) {
	l, clk := newLimiter(t, ratelimit.Options{
		PerCaller: ratelimit.Limit{CallsPerMinute: 60, Burst: 1},
		Groups:    map[string]ratelimit.Limit{"ci": {CallsPerMinute: 60, Burst: 2}},
	})
	for _, name := range []string{"a", "b"} {
		if err := admit(l, key(name, "ci")); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	e := refusal(t, admit(l, key("c", "other", "ci")))
	if e.Group != "ci" || e.Limit != ratelimit.LimitRate || e.Key != "rate_limits.groups.ci.calls_per_minute" || e.Caller != "c" {
		t.Errorf("refusal: %+v", e)
	}
	if err := admit(l, key("d", "other")); err != nil {
		t.Errorf("outside the group: %v", err)
	}
	// c's own token was not taken by the refusal: once the group has one
	// again, c is admitted.
	clk.t = clk.t.Add(time.Second)
	if err := admit(l, key("c", "ci")); err != nil {
		t.Errorf("c after a second: %v", err)
	}
	// The longest wait is said: b's own bucket is full, the group's empty.
	e = refusal(t, admit(l, key("b", "ci")))
	if e.Group != "ci" || e.RetryAfter != time.Second {
		t.Errorf("refusal: %+v", e)
	}
}

// Calls in flight: one more than allowed is refused at once (Retry-After
// a second), per caller and per group; a place given back is taken again.
func TestConcurrent(t *testing.T) {
	l, _ := newLimiter(t, ratelimit.Options{
		PerCaller: ratelimit.Limit{Concurrent: 2},
		Groups:    map[string]ratelimit.Limit{"ci": {Concurrent: 3}},
	})
	ann := key("ann")
	r1, err1 := l.Admit(ann, 1)
	r2, err2 := l.Admit(ann, 1)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	e := refusal(t, admit(l, ann))
	if e.Limit != ratelimit.LimitConcurrent || e.Max != 2 || e.RetryAfter != time.Second || e.Key != "rate_limits.per_caller.concurrent" {
		t.Errorf("refusal: %+v", e)
	}
	r1()
	r1() // once only
	if err := admit(l, ann); err != nil {
		t.Errorf("after one ended: %v", err)
	}
	r2()
	// The group: three members' calls in flight, the fourth refused.
	var rs []func()
	for _, name := range []string{"a", "b", "c"} {
		r, err := l.Admit(key(name, "ci"), 1)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rs = append(rs, r)
	}
	if e := refusal(t, admit(l, key("d", "ci"))); e.Group != "ci" || e.Limit != ratelimit.LimitConcurrent {
		t.Errorf("refusal: %+v", e)
	}
	// A batch counts each of its calls.
	if _, err := l.Admit(key("e"), 3); refusal(t, err).Limit != ratelimit.LimitConcurrent {
		t.Errorf("a batch of 3 over 2: %v", err)
	}
	for _, r := range rs {
		r()
	}
	if err := admit(l, key("d", "ci")); err != nil {
		t.Errorf("after they ended: %v", err)
	}
}

// A caller named in Callers: its entry's keys replace per_caller's, the
// others are per_caller's; Unlimited lifts one.
func TestNamedCaller(t *testing.T) {
	l, _ := newLimiter(t, ratelimit.Options{
		PerCaller: ratelimit.Limit{CallsPerMinute: 60, Burst: 1, Concurrent: 1},
		Callers: map[string]ratelimit.Limit{
			"ci-bot": {CallsPerMinute: 600, Burst: 3},
			"ann":    {Concurrent: ratelimit.Unlimited},
		},
	})
	bot := key("ci-bot")
	for i := range 3 {
		if err := admit(l, bot); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	if e := refusal(t, admit(l, bot)); e.Key != "rate_limits.callers.ci-bot.calls_per_minute" || e.Max != 600 || e.RetryAfter != 100*time.Millisecond || e.RetryAfterSeconds() != 1 {
		t.Errorf("refusal: %+v", e)
	}
	r, err := l.Admit(bot, 1)
	if err == nil {
		r()
	}
	// ci-bot's concurrency is per_caller's.
	ann := key("ann")
	r1, err1 := l.Admit(ann, 1)
	if err1 != nil {
		t.Fatal(err1)
	}
	defer r1()
	if e := refusal(t, admit(l, ann)); e.Limit != ratelimit.LimitRate || e.Key != "rate_limits.per_caller.calls_per_minute" {
		t.Errorf("ann, two at once, unlimited concurrency and per_caller's rate: %+v", e)
	}
}

// Without authentication there is one caller, held to per_caller.
func TestAnonymous(t *testing.T) {
	l, _ := newLimiter(t, ratelimit.Options{PerCaller: ratelimit.Limit{CallsPerMinute: 60, Burst: 1}})
	if err := admit(l, context.Background()); err != nil {
		t.Fatal(err)
	}
	e := refusal(t, admit(l, context.Background()))
	if e.Caller != ratelimit.LabelAnonymous {
		t.Errorf("refusal: %+v", e)
	}
	st := l.Stats()
	if !reflect.DeepEqual(st.Calls, []ratelimit.CallerCalls{{Caller: "anonymous", Calls: 1}}) ||
		!reflect.DeepEqual(st.Refused, []ratelimit.Refused{{Caller: "anonymous", Limit: "calls_per_minute", Count: 1}}) {
		t.Errorf("stats: %+v", st)
	}
}

// Nothing configured: nothing is limited, nothing allocated, nothing
// kept; a nil Limiter admits everything.
func TestNothingConfigured(t *testing.T) {
	l := ratelimit.New(ratelimit.Options{})
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		r, err := l.Admit(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		r()
	}); n != 0 {
		t.Errorf("%v allocations per call", n)
	}
	var nl *ratelimit.Limiter
	if r, err := nl.Admit(ctx, 1); err != nil || r == nil {
		t.Errorf("nil limiter: %v", err)
	}
	for i := range 3 {
		if err := admit(l, jwt(fmt.Sprint("u", i))); err != nil {
			t.Fatal(err)
		}
	}
	if ratelimit.Kept(l) != 0 {
		t.Errorf("kept %d callers", ratelimit.Kept(l))
	}
	// Calls are still counted by caller, under bounded labels.
	if st := l.Stats(); !reflect.DeepEqual(st.Calls, []ratelimit.CallerCalls{{Caller: "other", Calls: 3}}) {
		t.Errorf("stats: %+v", st)
	}
}

// The callers kept are bounded by MaxCallers: one more than it allows
// makes the least recently active idle one forgotten (it comes back with
// a full budget); when every one kept has a call in flight, a new caller
// is refused rather than kept.
func TestMaxCallers(t *testing.T) {
	const max = 3
	l, _ := newLimiter(t, ratelimit.Options{PerCaller: ratelimit.Limit{CallsPerMinute: 60, Burst: 1}, MaxCallers: max,
		Callers: map[string]ratelimit.Limit{"named": {Concurrent: 5}},
		Groups:  map[string]ratelimit.Limit{"ci": {Concurrent: 100}}})
	for i := range max {
		if err := admit(l, jwt(fmt.Sprint("u", i), "ci")); err != nil {
			t.Fatal(err)
		}
	}
	// Named callers and groups do not count.
	if err := admit(l, key("named", "ci")); err != nil {
		t.Fatal(err)
	}
	if got := ratelimit.Kept(l); got != max {
		t.Fatalf("kept %d, want %d", got, max)
	}
	// u1 is active again: u0 is now the least recently active.
	if err := admit(l, jwt("u1")); err == nil {
		t.Fatal("u1's second call within the second: admitted")
	}
	if err := admit(l, jwt("u3")); err != nil { // one more than allowed
		t.Fatal(err)
	}
	if got := ratelimit.Kept(l); got != max {
		t.Errorf("kept %d after one more caller, want %d", got, max)
	}
	// u0 was forgotten: a full budget again. u1 was not: still refused.
	if err := admit(l, jwt("u0")); err != nil {
		t.Errorf("u0, forgotten: %v", err)
	}
	if err := admit(l, jwt("u1")); err == nil {
		t.Error("u1, kept: admitted")
	}
	// Every caller kept has a call in flight: a new one is refused.
	l2, _ := newLimiter(t, ratelimit.Options{PerCaller: ratelimit.Limit{Concurrent: 1}, MaxCallers: max})
	for i := range max {
		r, err := l2.Admit(jwt(fmt.Sprint("u", i)), 1)
		if err != nil {
			t.Fatal(err)
		}
		defer r()
	}
	e := refusal(t, admit(l2, jwt("u3")))
	if e.Limit != ratelimit.LimitCallers || e.Max != max || e.RetryAfterSeconds() != 1 || ratelimit.Kept(l2) != max {
		t.Errorf("refusal: %+v, kept %d", e, ratelimit.Kept(l2))
	}
}

// The labels calls are counted under are bounded: configured callers'
// names, API keys' names up to MaxLabels, and "other" for the rest (a
// token's subject never).
func TestLabelsBounded(t *testing.T) {
	const maxLabels = 2
	l, _ := newLimiter(t, ratelimit.Options{PerCaller: ratelimit.Limit{Concurrent: 100}, MaxLabels: maxLabels,
		Callers: map[string]ratelimit.Limit{"alice": {Concurrent: 5}}})
	for _, ctx := range []context.Context{key("k1"), key("k2"), key("k3"), jwt("subject-1"), jwt("alice"), key("k1")} {
		if err := admit(l, ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := []ratelimit.CallerCalls{{Caller: "alice", Calls: 1}, {Caller: "k1", Calls: 2}, {Caller: "k2", Calls: 1}, {Caller: "other", Calls: 2}}
	if st := l.Stats(); !reflect.DeepEqual(st.Calls, want) {
		t.Errorf("calls:\n got %+v\nwant %+v", st.Calls, want)
	}
}

// A reload: the limits change, the tokens left carry over; a group no
// longer configured limits nothing.
func TestSet(t *testing.T) {
	l, _ := newLimiter(t, ratelimit.Options{Groups: map[string]ratelimit.Limit{"ci": {CallsPerMinute: 60, Burst: 1}}})
	if err := admit(l, key("a", "ci")); err != nil {
		t.Fatal(err)
	}
	l.Set(ratelimit.Options{Groups: map[string]ratelimit.Limit{"ci": {CallsPerMinute: 60, Burst: 2}}})
	if err := admit(l, key("a", "ci")); err == nil {
		t.Error("the bucket was emptied before the reload: admitted")
	}
	l.Set(ratelimit.Options{PerCaller: ratelimit.Limit{Concurrent: 1}})
	if err := admit(l, key("a", "ci")); err != nil {
		t.Errorf("the group's limit removed: %v", err)
	}
	l.Set(ratelimit.Options{})
	if ratelimit.Kept(l) != 0 {
		t.Errorf("no limits, %d callers kept", ratelimit.Kept(l))
	}
}

// The adapter: a configured section as Options, Unlimited the same value.
func TestFromConfig(t *testing.T) {
	if ratelimit.Unlimited != config.Unlimited {
		t.Fatalf("ratelimit.Unlimited %d, config.Unlimited %d", ratelimit.Unlimited, config.Unlimited)
	}
	got := ratelimit.FromConfig(config.RateLimits{
		PerCaller:  config.RateLimit{CallsPerMinute: 120, Burst: 20, Concurrent: 8},
		Callers:    map[string]config.RateLimit{"ann": {Concurrent: config.Unlimited}},
		Groups:     map[string]config.RateLimit{"ci": {CallsPerMinute: 600}},
		MaxCallers: 50,
	})
	want := ratelimit.Options{
		PerCaller:  ratelimit.Limit{CallsPerMinute: 120, Burst: 20, Concurrent: 8},
		Callers:    map[string]ratelimit.Limit{"ann": {Concurrent: ratelimit.Unlimited}},
		Groups:     map[string]ratelimit.Limit{"ci": {CallsPerMinute: 600}},
		MaxCallers: 50,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

// Many goroutines admitting and releasing while the limits are set
// again: no race (under -race), and every place is given back: at the
// end each caller and the group have their whole concurrency again.
func TestConcurrentUse(t *testing.T) {
	o := ratelimit.Options{PerCaller: ratelimit.Limit{Concurrent: 2}, MaxCallers: 4,
		Groups: map[string]ratelimit.Limit{"ci": {Concurrent: 3}}}
	l := ratelimit.New(o)
	done := make(chan struct{})
	for g := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 300 {
				ctx := jwt(fmt.Sprint("u", (g+i)%6), "ci")
				if r, err := l.Admit(ctx, 1); err == nil {
					r()
				}
				if i%100 == 0 {
					l.Set(o)
				}
			}
		}()
	}
	for range 8 {
		<-done
	}
	var rs []func()
	for i := range 3 {
		r, err := l.Admit(jwt(fmt.Sprint("u", i), "ci"), 1)
		if err != nil {
			t.Fatalf("after the storm, call %d: %v", i+1, err)
		}
		rs = append(rs, r)
	}
	if _, err := l.Admit(jwt("u5", "ci"), 1); err == nil {
		t.Error("the group's fourth call in flight admitted")
	}
	for _, r := range rs {
		r()
	}
	if got := ratelimit.Kept(l); got > 4 {
		t.Errorf("kept %d callers, at most 4", got)
	}
}
