package gateway_test

import (
	"testing"
	"time"
)

// A call the re-issue window would keep (shell is not idempotent) that
// waits for approval when its client's connection ends is withdrawn at
// once, not kept for the grace: nobody could answer it.
func TestWaitingNonIdempotentCallIsNotKept(t *testing.T) {
	a := newApprovalsGateway(t, time.Minute, 0)
	a.attach(t)
	cs := a.connectHTTP(t, "plain", nil)
	// Withdrawn at once, well before the grace (30s) would end.
	a.postThenLeave(t, cs, `{"jsonrpc":"2.0","id":78,"method":"tools/call","params":{"name":"builtin__shell","arguments":{"command":"touch ran.txt"}}}`)
	if a.written("ran.txt") {
		t.Fatal("a withdrawn call ran")
	}
}
