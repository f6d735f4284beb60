package identity

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"slices"
	"strings"
	"sync"
)

// API keys: named secrets with groups, for callers without an identity
// provider (scripts, CI, agents). A key is 32 random bytes, written
// "tmx_" and their base64url; what is kept of it is its SHA-256 only. The
// secret has 256 bits of entropy, so a fast hash is as good as a slow
// one: there is nothing to guess.

// KeyPrefix begins every key NewKeySecret makes, so that a credential can
// be told for a key (and a key leaked in a log found by secret scanners).
const KeyPrefix = "tmx_"

// Key is an API key as kept: its name, groups, and hash.
type Key struct {
	Name   string   `json:"name"`
	Groups []string `json:"groups,omitempty"`
	// Hash is the SHA-256 of the secret.
	Hash [sha256.Size]byte `json:"-"`
}

// HashKey returns what is kept of a key's secret.
func HashKey(secret string) [sha256.Size]byte { return tokenHash(secret) }

// NewKeySecret returns a new key's secret: KeyPrefix and 32 random bytes
// in base64url.
func NewKeySecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return KeyPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// KeySubject is the subject of the caller of the key named name.
func KeySubject(name string) string { return "key:" + name }

// Keys verifies API keys. It is safe for concurrent use; Set replaces the
// keys (a revocation takes effect at the next request).
type Keys struct {
	mu     sync.RWMutex
	byHash map[[sha256.Size]byte]*Caller
}

// NewKeys returns a verifier of keys.
func NewKeys(keys ...Key) *Keys {
	k := &Keys{}
	k.Set(keys)
	return k
}

// Set replaces the keys.
func (k *Keys) Set(keys []Key) {
	m := make(map[[sha256.Size]byte]*Caller, len(keys))
	for _, key := range keys {
		m[key.Hash] = &Caller{Subject: KeySubject(key.Name), Name: key.Name, Groups: slices.Clone(key.Groups), Method: MethodKey}
	}
	k.mu.Lock()
	k.byHash = m
	k.mu.Unlock()
}

// Len returns how many keys there are.
func (k *Keys) Len() int {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return len(k.byHash)
}

// Verify implements Verifier: a known key's caller; a credential with
// the key prefix that is no key (unknown, revoked) is invalid; any other
// is not this verifier's (a token an issuer may know), unless it has
// nobody to hand it to (last).
func (k *Keys) Verify(_ context.Context, token string) (*Caller, error) {
	h := HashKey(token)
	k.mu.RLock()
	c := k.byHash[h]
	k.mu.RUnlock()
	if c != nil {
		return c, nil
	}
	if strings.HasPrefix(token, KeyPrefix) {
		return nil, &Error{Kind: KindInvalid, Message: "the API key is not one of this gateway's (unknown, or revoked)"}
	}
	return nil, ErrNotMine
}
