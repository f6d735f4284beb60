package identity_test

import (
	"context"
	"testing"
	"time"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/testservers"
)

// What verifying an access token of a real issuer (ORY Hydra) costs a
// request: "cached" is every request after a token's first (its verdict
// kept by the token's SHA-256, as a client sends the same token until it
// expires), "signature" a token seen for the first time (its signature
// checked against the issuer's keys, held). docs/identity.md, BENCHMARKS.md.
func BenchmarkJWTVerify(b *testing.B) {
	ctx := context.Background()
	h := testservers.StartHydra(b)
	const secret = "bench-secret-0123456789"
	h.CreateClient(b, testservers.HydraClient{ID: "bench", Secret: secret, Audience: []string{gwAudience}, Scope: "mcp"})
	tokens := identity.NewTokens(identity.TokenOptions{Issuers: []identity.Issuer{{URL: h.Issuer}}, JWKSRefetchInterval: time.Hour})
	if errs := tokens.Check(ctx); len(errs) > 0 {
		b.Fatal(errs)
	}
	tok := h.Token(b, "bench", secret, gwAudience, "mcp")
	b.Run("cached", func(b *testing.B) {
		if _, err := tokens.JWT.Verify(ctx, tok); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := tokens.JWT.Verify(ctx, tok); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("signature", func(b *testing.B) {
		// A cache of one entry, and two tokens taking turns: each
		// verification checks a signature.
		one := identity.NewTokens(identity.TokenOptions{Issuers: []identity.Issuer{{URL: h.Issuer}}, JWKSRefetchInterval: time.Hour, CacheMaxEntries: 1})
		if errs := one.Check(ctx); len(errs) > 0 {
			b.Fatal(errs)
		}
		toks := []string{tok, h.Token(b, "bench", secret, gwAudience, "mcp")}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := one.JWT.Verify(ctx, toks[i%2]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}
