package gateway

import (
	"strings"
	"testing"
)

// FuzzBearerToken feeds the Authorization header's reading any value: it
// never panics; it finds a token exactly when the value, without the
// whitespace around it, is the Bearer scheme in any case, one or more
// spaces and something more, and the token is that something; the case of
// the scheme never changes the token found. (The seed corpus is under
// testdata/fuzz/FuzzBearerToken.)
func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer s3cret", "bearer s3cret", "BEARER  s3cret ", "Basic czNjcmV0", "Bearer", "Bearer ", "Bearers3cret", " Bearer\tx", "bearer é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		token, ok := bearerToken(header)
		scheme, rest, cut := strings.Cut(strings.TrimSpace(header), " ")
		want := strings.TrimLeft(rest, " ")
		if wantOK := cut && strings.EqualFold(scheme, "Bearer") && want != ""; ok != wantOK || token != want && ok {
			t.Fatalf("%q: token %q, %v; want %q, %v", header, token, ok, want, wantOK)
		}
		if !ok {
			return
		}
		for _, s := range []string{"Bearer", "bearer", "BEARER", "bEARER"} {
			if again, ok := bearerToken(s + " " + token); !ok || again != token {
				t.Fatalf("%q: %q with scheme %s reads as %q, %v", header, token, s, again, ok)
			}
		}
	})
}
