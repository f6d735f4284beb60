package mcpsource

import (
	"strconv"
	"sync"
	"time"

	"github.com/toolmux/toolmux/tool"
)

// progressTokens are the progress tokens of a source's calls and whom
// their reports go to. The go-sdk queues notifications for a handler
// goroutine but hands responses straight to the caller, so a report sent
// just before the result can be handled just after it: a token is kept
// progressGrace after its call returns, so the last report (often "100%")
// is not lost. The tokens retiring are swept by one timer for the whole
// source, not one per call.
type progressTokens struct {
	mu       sync.Mutex
	next     uint64
	fns      map[string]tool.ProgressFunc
	retiring []retiree // in the order their calls returned
	timer    *time.Timer
	armed    bool
	closed   bool
}

type retiree struct {
	token string
	at    time.Time // when it goes
}

// add registers fn under a new token and returns the token.
func (p *progressTokens) add(fn tool.ProgressFunc) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	token := "toolmux-" + strconv.FormatUint(p.next, 10)
	if p.fns == nil {
		p.fns = make(map[string]tool.ProgressFunc)
	}
	p.fns[token] = fn
	return token
}

// get returns the function of token, or nil.
func (p *progressTokens) get(token string) tool.ProgressFunc {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fns[token]
}

// retire drops token progressGrace from now.
func (p *progressTokens) retire(token string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		delete(p.fns, token)
		return
	}
	p.retiring = append(p.retiring, retiree{token, time.Now().Add(progressGrace)})
	if !p.armed {
		p.armed = true
		if p.timer == nil {
			p.timer = time.AfterFunc(progressGrace, p.sweep)
		} else {
			p.timer.Reset(progressGrace)
		}
	}
}

// sweep drops the tokens whose time has come and arms the timer for the
// next one.
func (p *progressTokens) sweep() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = false
	now := time.Now()
	n := 0
	for n < len(p.retiring) && !p.retiring[n].at.After(now) {
		delete(p.fns, p.retiring[n].token)
		n++
	}
	p.retiring = append(p.retiring[:0], p.retiring[n:]...)
	if len(p.retiring) > 0 && !p.closed {
		p.armed = true
		p.timer.Reset(p.retiring[0].at.Sub(now))
	}
}

// close stops the sweeps and drops every token.
func (p *progressTokens) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.timer != nil {
		p.timer.Stop()
	}
	p.fns, p.retiring = nil, nil
}
