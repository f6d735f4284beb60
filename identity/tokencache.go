package identity

import (
	"container/list"
	"crypto/sha256"
	"sync"
	"time"
)

// tokenCache keeps what a verifier found of a token (its caller, or that
// it is not good) by the token's SHA-256, until a time the verifier sets:
// the token's expiry, at most the cache's max age. It holds at most max
// entries; a new one pushes out the oldest.
type tokenCache struct {
	mu    sync.Mutex
	max   int
	m     map[[sha256.Size]byte]*list.Element
	order *list.List // of *cached, oldest first
}

// cached is one token's verdict: its caller, or the refusal.
type cached struct {
	key    [sha256.Size]byte
	caller *Caller
	err    error
	until  time.Time
}

func newTokenCache(max int) *tokenCache {
	return &tokenCache{max: max, m: make(map[[sha256.Size]byte]*list.Element), order: list.New()}
}

// get returns the verdict kept for key, if it is still good at now.
func (c *tokenCache) get(key [sha256.Size]byte, now time.Time) (*cached, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[key]
	if !ok {
		return nil, false
	}
	e := el.Value.(*cached)
	if !now.Before(e.until) {
		c.order.Remove(el)
		delete(c.m, key)
		return nil, false
	}
	return e, true
}

// put keeps a verdict until until.
func (c *tokenCache) put(e *cached) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[e.key]; ok {
		c.order.Remove(el)
		delete(c.m, e.key)
	}
	for c.order.Len() >= c.max {
		oldest := c.order.Front()
		c.order.Remove(oldest)
		delete(c.m, oldest.Value.(*cached).key)
	}
	c.m[e.key] = c.order.PushBack(e)
}

// len returns how many verdicts are kept.
func (c *tokenCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

// earlier returns the earlier of a and b.
func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
