package ratelimit

import "time"

// SetClock makes l read the time from now (tests move it by hand).
func SetClock(l *Limiter, now func() time.Time) { l.now = now }

// Kept is how many callers' own limits l keeps besides the named ones.
func Kept(l *Limiter) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byKey)
}
