//go:build !linux

package web

// hardLimitMemory does nothing outside Linux, where RLIMIT_DATA does not
// reliably cover Go's heap; the soft limit and the time limit remain.
func hardLimitMemory(int64) {}
