package web

import "syscall"

// hardLimitMemory sets RLIMIT_DATA, which on Linux (since 4.7) covers the
// heap and every private writable mapping, so an allocation past it fails
// at once, ending the worker with "out of memory". RLIMIT_AS would be
// simpler but counts the address space Go reserves without using it.
func hardLimitMemory(n int64) {
	_ = syscall.Setrlimit(syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: uint64(n), Max: uint64(n)})
}
