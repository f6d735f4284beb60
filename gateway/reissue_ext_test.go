package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/policy"
)

// A call the re-issue window would keep (shell is not idempotent) that
// waits for approval when its client's connection ends is withdrawn at
// once, not kept for the grace: nobody could answer it.
func TestWaitingNonIdempotentCallIsNotKept(t *testing.T) {
	a := newApprovalsGateway(t, time.Minute, 0)
	a.attach(t)
	cs := a.connectHTTP(t, "plain", nil)
	ctx, cancel := context.WithCancel(context.Background())
	body := `{"jsonrpc":"2.0","id":78,"method":"tools/call","params":{"name":"builtin__shell","arguments":{"command":"touch ran.txt"}}}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.url+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", cs.ID())
	req.Header.Set("Mcp-Protocol-Version", cs.InitializeResult().ProtocolVersion)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	p := a.waitPending(t, 1)[0]
	cancel()
	<-done
	// Withdrawn well before the grace (30s) would end.
	a.waitPending(t, 0)
	if err := a.queue.Decide(p.ID, policy.ProceedOnce); err == nil {
		t.Fatal("a withdrawn call took an answer")
	}
	if a.written("ran.txt") {
		t.Fatal("a withdrawn call ran")
	}
}
