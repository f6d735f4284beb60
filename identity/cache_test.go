package identity_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolmux/toolmux/identity"
)

// counting verifies tokens "good-N" (expiring at exp) and counts how often
// it is asked.
type counting struct {
	calls atomic.Int64
	exp   time.Time
}

func (v *counting) Verify(_ context.Context, token string) (*identity.Caller, error) {
	v.calls.Add(1)
	if len(token) < 5 || token[:5] != "good-" {
		return nil, &identity.Error{Kind: identity.KindInvalid, Message: "bad"}
	}
	return &identity.Caller{Subject: token, Name: token, Method: identity.MethodJWT, Expires: v.exp}, nil
}

// A token's caller is verified once and then remembered, until its own
// expiry or the cache's age, whichever is first; refusals are not
// remembered; the cache keeps at most MaxEntries, the least recently used
// going first.
func TestCache(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_000_000, 0)
	v := &counting{exp: now.Add(time.Minute)}
	c := &identity.Cache{Verifier: v, MaxAge: 10 * time.Minute, MaxEntries: 3, Now: func() time.Time { return now }}
	for range 3 {
		if got, err := c.Verify(ctx, "good-1"); err != nil || got.Name != "good-1" {
			t.Fatalf("%+v %v", got, err)
		}
	}
	if n := v.calls.Load(); n != 1 {
		t.Fatalf("verified %d times, want once", n)
	}
	for range 2 {
		if _, err := c.Verify(ctx, "bad"); identity.KindOf(err) != identity.KindInvalid {
			t.Fatal(err)
		}
	}
	if n := v.calls.Load(); n != 3 {
		t.Fatalf("refusals remembered: %d verifications, want 3", n)
	}
	now = now.Add(time.Minute) // the token's own expiry
	c.Verify(ctx, "good-1")
	if n := v.calls.Load(); n != 4 {
		t.Fatalf("an expired token's caller was kept: %d verifications", n)
	}
	// Bounded: one more than allowed evicts the least recently used.
	v.exp = now.Add(time.Hour)
	for i := range 4 {
		c.Verify(ctx, fmt.Sprintf("good-%d", i+10))
	}
	if c.Len() != 3 {
		t.Fatalf("%d entries, want 3", c.Len())
	}
	before := v.calls.Load()
	c.Verify(ctx, "good-10") // the oldest: forgotten
	c.Verify(ctx, "good-13") // the newest: kept
	if n := v.calls.Load() - before; n != 1 {
		t.Fatalf("%d verifications, want 1 (good-10 again)", n)
	}
	// The cache's own age bounds a token that lives longer.
	now = now.Add(11 * time.Minute)
	before = v.calls.Load()
	c.Verify(ctx, "good-13")
	if n := v.calls.Load() - before; n != 1 {
		t.Fatalf("kept past MaxAge: %d verifications", n)
	}
}

// What a cached token costs per request, whatever the number of tokens
// kept.
func BenchmarkCache(b *testing.B) {
	for _, n := range []int{1, 1000, 10_000} {
		b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
			v := &counting{exp: time.Now().Add(time.Hour)}
			c := &identity.Cache{Verifier: v, MaxEntries: n}
			ctx := context.Background()
			token := "good-" + string(make([]byte, 800)) // about a JWT's length
			for i := range n - 1 {
				c.Verify(ctx, fmt.Sprintf("good-%d", i))
			}
			c.Verify(ctx, token)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := c.Verify(ctx, token); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
