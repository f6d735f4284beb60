package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/tool"
)

// slowStart is how long a server may take to come up before it is named as
// the one being waited for: most start in well under a second, and a
// person should know what a longer wait is for.
const slowStart = 3 * time.Second

// startup shows the servers coming up while `tools` and `serve` discover
// them. On a terminal: a line per server as it comes up (its tool count
// or its error, and the time it took), and a line naming the servers
// still awaited once they take longer than slowStart. Elsewhere stderr
// stays quiet, but for a server slower than slowStart: a line when it
// passes that mark and one when it is up or has failed. Scripts read
// stdout (--json), never this.
type startup struct {
	w   io.Writer
	tty bool

	mu       sync.Mutex
	active   bool
	pending  map[string]time.Time // servers being listed, and since when
	order    []string             // the same, in the order they started
	named    map[string]bool      // servers said to be slow
	reported map[string]bool      // servers whose outcome was printed
	status   bool                 // a status line is on the terminal
	frame    int
	stop     chan struct{}
	wg       sync.WaitGroup
}

func newStartup(w io.Writer) *startup {
	return &startup{w: w, tty: isTerminal(w), pending: map[string]time.Time{},
		named: map[string]bool{}, reported: map[string]bool{}}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// option is the manager option that reports discovery here.
func (s *startup) option() manager.Option { return manager.WithListingObserver(s.observe) }

// begin starts showing discovery; end stops, once discovery has returned.
// Listings outside begin and end (a refresh while serving) show nothing.
func (s *startup) begin() {
	s.mu.Lock()
	s.active = true
	s.stop = make(chan struct{})
	s.mu.Unlock()
	s.wg.Go(s.tick)
}

func (s *startup) end() {
	close(s.stop)
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clearStatus()
	s.active = false
}

// wasReported reports whether a server's outcome was printed already.
func (s *startup) wasReported(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reported[name]
}

func (s *startup) observe(l manager.Listing) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.active {
		return
	}
	if !l.Done {
		if _, dup := s.pending[l.Server]; !dup {
			s.order = append(s.order, l.Server)
		}
		s.pending[l.Server] = time.Now()
		return
	}
	delete(s.pending, l.Server)
	for i, n := range s.order {
		if n == l.Server {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
	if !s.tty && !s.named[l.Server] {
		return
	}
	s.clearStatus()
	s.reported[l.Server] = true
	took := roundDuration(l.Took)
	if l.Took < time.Millisecond {
		took = l.Took.Round(time.Microsecond) // the built-in tools list at once
	}
	switch {
	case l.Err != nil && s.tty:
		fmt.Fprintf(s.w, "✗ %s: %s (%s)\n", l.Server, oneLine(tool.AsError(l.Err).Message, 160), took)
	case l.Err != nil:
		fmt.Fprintf(s.w, "toolmux: %s failed after %s: %s\n", l.Server, took, oneLine(tool.AsError(l.Err).Message, 300))
	case s.tty:
		fmt.Fprintf(s.w, "✓ %s: %s (%s)\n", l.Server, plural(l.Tools, "tool"), took)
	default:
		fmt.Fprintf(s.w, "toolmux: %s is up after %s: %s\n", l.Server, took, plural(l.Tools, "tool"))
	}
	s.drawStatus()
}

func (s *startup) tick() {
	every := 250 * time.Millisecond
	if s.tty {
		every = 100 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.mu.Lock()
		if s.tty {
			s.frame++
			s.drawStatus()
		} else {
			s.nameSlow()
		}
		s.mu.Unlock()
	}
}

// slow returns the servers awaited for longer than slowStart, and the
// longest wait.
func (s *startup) slow() (names []string, longest time.Duration) {
	now := time.Now()
	for _, n := range s.order {
		if d := now.Sub(s.pending[n]); d >= slowStart {
			names = append(names, n)
			longest = max(longest, d)
		}
	}
	return names, longest
}

// nameSlow says, off a terminal, which servers have just become slow.
func (s *startup) nameSlow() {
	names, longest := s.slow()
	var fresh []string
	for _, n := range names {
		if !s.named[n] {
			s.named[n] = true
			fresh = append(fresh, n)
		}
	}
	if len(fresh) > 0 {
		fmt.Fprintf(s.w, "toolmux: waiting for %s (%s)…\n", strings.Join(fresh, ", "), longest.Truncate(time.Second))
	}
}

// drawStatus shows, on a terminal, the servers awaited for long.
func (s *startup) drawStatus() {
	if !s.tty {
		return
	}
	names, longest := s.slow()
	if len(names) == 0 {
		s.clearStatus()
		return
	}
	for _, n := range names {
		s.named[n] = true
	}
	frames := []rune("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")
	fmt.Fprintf(s.w, "\r\x1b[2K%c waiting for %s (%s)…", frames[s.frame%len(frames)], strings.Join(names, ", "), longest.Truncate(time.Second))
	s.status = true
}

func (s *startup) clearStatus() {
	if s.status {
		fmt.Fprint(s.w, "\r\x1b[2K")
		s.status = false
	}
}

// serverCount says how many servers are up (ready or degraded) of how
// many, and what the others are: "2 servers", "1 of 3 servers (2 failed)".
func serverCount(servers []tool.ServerHealth) string {
	up := 0
	others := map[tool.State]int{}
	var order []tool.State
	for _, h := range servers {
		switch h.State {
		case tool.StateReady, tool.StateDegraded:
			up++
		default:
			if others[h.State] == 0 {
				order = append(order, h.State)
			}
			others[h.State]++
		}
	}
	if up == len(servers) {
		return plural(len(servers), "server")
	}
	var parts []string
	for _, st := range order {
		parts = append(parts, fmt.Sprintf("%d %s", others[st], st))
	}
	noun := "servers"
	if len(servers) == 1 {
		noun = "server"
	}
	return fmt.Sprintf("%d of %d %s (%s)", up, len(servers), noun, strings.Join(parts, ", "))
}
