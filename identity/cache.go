package identity

import (
	"container/list"
	"context"
	"crypto/sha256"
	"sync"
	"time"
	"unsafe"
)

// Cache remembers the callers of the tokens a Verifier accepted, so that
// a client sending the same token with every request pays the signature
// check once, not per request (an RSA or ECDSA verification costs tens of
// microseconds; a hash and a lookup, about one). A token is remembered
// until its own expiry or MaxAge, whichever comes first, so a cached
// token is never good for longer than it is; at most MaxEntries are kept,
// the least recently used forgotten first. What is kept is the token's
// SHA-256 and its caller, never the token. Refusals are not remembered:
// a token that becomes good (an issuer's new key) is tried again.
type Cache struct {
	Verifier Verifier
	// MaxAge bounds how long a token's caller is kept; 0 means
	// DefaultCacheMaxAge.
	MaxAge time.Duration
	// MaxEntries bounds the tokens kept; 0 means DefaultCacheEntries.
	MaxEntries int
	// Now, when set, is the clock (tests).
	Now func() time.Time

	mu      sync.Mutex
	entries map[[sha256.Size]byte]*list.Element
	order   list.List // of *cacheEntry, most recently used first
}

// Defaults of Cache.
const (
	DefaultCacheMaxAge  = 5 * time.Minute
	DefaultCacheEntries = 10_000
)

type cacheEntry struct {
	key     [sha256.Size]byte
	caller  *Caller
	expires time.Time
}

func (c *Cache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Verify implements Verifier.
func (c *Cache) Verify(ctx context.Context, token string) (*Caller, error) {
	key := tokenHash(token)
	now := c.now()
	c.mu.Lock()
	if el, ok := c.entries[key]; ok {
		e := el.Value.(*cacheEntry)
		if now.Before(e.expires) {
			c.order.MoveToFront(el)
			c.mu.Unlock()
			return e.caller, nil
		}
		c.removeLocked(el)
	}
	c.mu.Unlock()
	caller, err := c.Verifier.Verify(ctx, token)
	if err != nil {
		return nil, err
	}
	maxAge := c.MaxAge
	if maxAge <= 0 {
		maxAge = DefaultCacheMaxAge
	}
	expires := now.Add(maxAge)
	if !caller.Expires.IsZero() && caller.Expires.Before(expires) {
		expires = caller.Expires
	}
	if !now.Before(expires) {
		return caller, nil // good only now: nothing to keep
	}
	max := c.MaxEntries
	if max <= 0 {
		max = DefaultCacheEntries
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[[sha256.Size]byte]*list.Element{}
	}
	if el, ok := c.entries[key]; ok {
		c.removeLocked(el) // verified twice at once: keep the newer
	}
	for len(c.entries) >= max {
		c.removeLocked(c.order.Back())
	}
	c.entries[key] = c.order.PushFront(&cacheEntry{key: key, caller: caller, expires: expires})
	return caller, nil
}

// tokenHash is the SHA-256 of token, read in place: converting a token of
// a kilobyte to bytes would allocate its copy on every request (crypto's
// assembly defeats escape analysis), and the hash only reads it.
func tokenHash(token string) [sha256.Size]byte {
	return sha256.Sum256(unsafe.Slice(unsafe.StringData(token), len(token)))
}

func (c *Cache) removeLocked(el *list.Element) {
	c.order.Remove(el)
	delete(c.entries, el.Value.(*cacheEntry).key)
}

// Len returns how many tokens are kept.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
