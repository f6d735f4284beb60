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
// just before the result can be handled just after it: a token is kept at
// least progressGrace after its call returns (at most a quarter more), so
// the last report (often "100%") is not lost. The tokens retiring are
// swept by one timer for the whole source, at most every quarter of the
// grace, not one timer per call.
type progressTokens struct {
	mu       sync.Mutex
	next     uint64
	fns      map[string]tool.ProgressFunc
	retiring []retiree // from head on, in the order their calls returned
	head     int
	timer    *time.Timer
	armed    bool
	closed   bool
	sweeps   int // for tests
}

// sweepEvery is the least time between two sweeps.
const sweepEvery = progressGrace / 4

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
// next ones, a quarter of the grace from now at the soonest: at a high
// rate of calls, one sweep takes many tokens.
func (p *progressTokens) sweep() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = false
	p.sweeps++
	now := time.Now()
	for p.head < len(p.retiring) && !p.retiring[p.head].at.After(now) {
		delete(p.fns, p.retiring[p.head].token)
		p.retiring[p.head] = retiree{}
		p.head++
	}
	if p.head == len(p.retiring) {
		p.retiring, p.head = p.retiring[:0], 0
	} else if p.head > len(p.retiring)/2 {
		n := copy(p.retiring, p.retiring[p.head:])
		clear(p.retiring[n:])
		p.retiring, p.head = p.retiring[:n], 0
	}
	if len(p.retiring) > p.head && !p.closed {
		p.armed = true
		p.timer.Reset(max(p.retiring[p.head].at.Sub(now), sweepEvery))
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
	p.fns, p.retiring, p.head = nil, nil, 0
}
