package identity_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolmux/toolmux/identity"
)

// storeOf writes a store of n keys (the file as KeyStore writes it) and
// returns it with the secret of its last key.
func storeOf(b testing.TB, n int) (*identity.KeyStore, string) {
	b.Helper()
	type key struct {
		Name    string    `json:"name"`
		Groups  []string  `json:"groups"`
		SHA256  string    `json:"sha256"`
		Created time.Time `json:"created"`
	}
	keys := make([]key, n)
	var secret string
	for i := range keys {
		secret = identity.NewKeySecret()
		keys[i] = key{Name: fmt.Sprint("key-", i), Groups: []string{"dev"}, SHA256: fmt.Sprintf("%x", identity.HashKey(secret)), Created: time.Now()}
	}
	body, err := json.Marshal(map[string]any{"version": 1, "keys": keys})
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "keys.json")
	if err := os.WriteFile(path, body, 0o600); err != nil {
		b.Fatal(err)
	}
	return identity.NewKeyStore(path), secret
}

// The cost of verifying an API key, as serve does on every request (the
// file followed, looked at once a second), with 1, 100 and 10 000 keys in
// the store: the same time and allocations whatever their number.
func BenchmarkStoreKeysVerify(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1, 100, 10_000} {
		b.Run(fmt.Sprint("keys=", n), func(b *testing.B) {
			s, secret := storeOf(b, n)
			v, err := s.Follow(identity.FollowOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if v.Len() != n {
				b.Fatalf("%d keys", v.Len())
			}
			b.ReportAllocs()
			for b.Loop() {
				if c, err := v.Verify(ctx, secret); err != nil || c == nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Verifying a key allocates as much with ten thousand keys in the store
// as with one, and at most the hash's copy of the key: what a
// verification costs does not grow with the keys.
func TestStoreKeysVerifyAllocations(t *testing.T) {
	ctx := context.Background()
	var allocs []float64
	for _, n := range []int{1, 10_000} {
		s, secret := storeOf(t, n)
		v, err := s.Follow(identity.FollowOptions{})
		if err != nil {
			t.Fatal(err)
		}
		allocs = append(allocs, testing.AllocsPerRun(100, func() {
			if _, err := v.Verify(ctx, secret); err != nil {
				t.Fatal(err)
			}
		}))
	}
	if allocs[0] != allocs[1] || allocs[1] > 1 {
		t.Errorf("allocations a verification, with 1 and 10 000 keys: %v", allocs)
	}
}
