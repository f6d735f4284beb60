//go:build unix

package builtin

// shellSupported reports whether shell can run here: it needs process
// groups and signals.
const shellSupported = true
