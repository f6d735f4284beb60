//go:build !unix

package builtin

// shellSupported is false: without process groups and signals, shell could
// not stop what a command starts.
const shellSupported = false
