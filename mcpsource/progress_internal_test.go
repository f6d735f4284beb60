package mcpsource

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/tool"
)

// A call's progress token reaches its function until a grace after the
// call returned, then goes: many calls' tokens are retired by the one
// timer, which stops once nothing is left to retire, and Close drops
// every token.
func TestProgressTokensRetireAfterTheGrace(t *testing.T) {
	var p progressTokens
	var got atomic.Int32
	fn := func(tool.Progress) { got.Add(1) }
	tokens := make([]string, 100)
	for i := range tokens {
		tokens[i] = p.add(fn)
	}
	for _, tok := range tokens[:99] {
		p.retire(tok)
	}
	if f := p.get(tokens[0]); f == nil {
		t.Fatal("a token went at once, before the grace")
	}
	f := p.get(tokens[0])
	f(tool.Progress{Progress: 1})
	if got.Load() != 1 {
		t.Fatal("the token's function was not the call's")
	}
	if !testservers.Eventually(10*progressGrace, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.fns) == 1 && len(p.retiring) == p.head && !p.armed
	}) {
		p.mu.Lock()
		t.Fatalf("after the grace: %d tokens, %d retiring, armed %v", len(p.fns), len(p.retiring), p.armed)
	}
	if p.get(tokens[0]) != nil || p.get(tokens[99]) == nil {
		t.Error("the wrong tokens went")
	}
	p.mu.Lock()
	sweeps := p.sweeps
	p.mu.Unlock()
	if sweeps > 2 {
		t.Errorf("%d sweeps for 99 tokens retired together; a sweep takes every token due", sweeps)
	}
	p.close()
	if p.get(tokens[99]) != nil {
		t.Error("a token outlived close")
	}
	tok := p.add(fn)
	p.retire(tok)
	if p.get(tok) != nil {
		t.Error("a token retired after close waits for a timer that is stopped")
	}
}

// The session's requests are watched by one timer: it is armed when the
// first request waits and not again while it is; slots are reused; after
// the session ends nothing is armed.
func TestCallWatchSharesOneTimer(t *testing.T) {
	s := &Source{cfg: Config{HealthCheck: HealthCheck{PingAfter: time.Hour, PingTimeout: time.Second}}}
	c := &conn{}
	slots := make([]int, 10)
	for i := range slots {
		slots[i] = s.waitFor(c, "echo", false)
	}
	w := &c.watch
	timer := w.timer
	if timer == nil || !w.armed {
		t.Fatal("no timer armed for waiting requests")
	}
	for _, i := range slots {
		w.done(i)
	}
	again := s.waitFor(c, "echo", false)
	if w.timer != timer || len(w.slots) != 10 {
		t.Errorf("a new timer or a new slot for the next request (%d slots)", len(w.slots))
	}
	w.done(again)
	w.stop()
	if s.waitFor(c, "echo", false) != -1 {
		t.Error("a request was watched after the session ended")
	}
}
