package ratelimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/ratelimit"
)

// The cost of the check of one call (BENCHMARKS.md §24): admitted and
// given back, by a caller held to its own rate and concurrency and to a
// group's, among many callers kept; counted by caller only (no limits);
// and with nothing configured (no limits, no authentication).
func BenchmarkAdmit(b *testing.B) {
	o := ratelimit.Options{
		PerCaller: ratelimit.Limit{CallsPerMinute: 120, Burst: 20, Concurrent: 8},
		Groups:    map[string]ratelimit.Limit{"ci": {CallsPerMinute: 600, Concurrent: 32}},
	}
	for _, kept := range []int{1, 10_000} {
		b.Run(fmt.Sprintf("callers=%d", kept), func(b *testing.B) {
			l := ratelimit.New(o)
			// Each call a minute after the last: the bucket never runs
			// dry, so every call is admitted.
			now := time.Now()
			ratelimit.SetClock(l, func() time.Time { now = now.Add(time.Minute); return now })
			for i := range kept - 1 {
				if err := admit(l, jwt(fmt.Sprint("u", i), "ci")); err != nil {
					b.Fatal(err)
				}
			}
			ctx := identity.With(context.Background(), &identity.Caller{Subject: "ann", Name: "ann", Issuer: "https://idp.example",
				Groups: []string{"dev", "ci"}, Method: identity.MethodJWT})
			b.ReportAllocs()
			for b.Loop() {
				release, err := l.Admit(ctx, 1)
				if err != nil {
					b.Fatal(err)
				}
				release()
			}
		})
	}
	// Authentication on, no limits: the call is counted by its caller.
	b.Run("counted-only", func(b *testing.B) {
		l := ratelimit.New(ratelimit.Options{})
		ctx := key("ci-bot")
		b.ReportAllocs()
		for b.Loop() {
			release, _ := l.Admit(ctx, 1)
			release()
		}
	})
	b.Run("nothing-configured", func(b *testing.B) {
		l := ratelimit.New(ratelimit.Options{})
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			release, _ := l.Admit(ctx, 1)
			release()
		}
	})
}
