package policy

// Buffered reports whether a line read by the terminal waits for a prompt.
func (t *Terminal) Buffered() bool { return len(t.result) > 0 }
