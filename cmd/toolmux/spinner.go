package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/toolmux/toolmux/tool"
)

// spinner shows what a slow call is doing, on a terminal only, and only once
// the call has taken more than a second, so quick calls print nothing extra.
type spinner struct {
	w     io.Writer
	label string
	start time.Time
	done  chan struct{}
	wg    sync.WaitGroup

	mu   sync.Mutex
	note string
}

const spinnerDelay = time.Second

func startSpinner(w io.Writer, label string) *spinner {
	s := &spinner{w: w, label: label, start: time.Now(), done: make(chan struct{})}
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return s
	}
	s.wg.Go(s.loop)
	return s
}

func (s *spinner) loop() {
	frames := []rune("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")
	select {
	case <-time.After(spinnerDelay):
	case <-s.done:
		return
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for i := 0; ; i++ {
		s.mu.Lock()
		note := s.note
		s.mu.Unlock()
		fmt.Fprintf(s.w, "\r\x1b[2K%c %s %.1fs%s", frames[i%len(frames)], s.label, time.Since(s.start).Seconds(), note)
		select {
		case <-t.C:
		case <-s.done:
			fmt.Fprint(s.w, "\r\x1b[2K")
			return
		}
	}
}

// progress shows the tool's own progress reports next to the elapsed time.
func (s *spinner) progress(p tool.Progress) {
	note := fmt.Sprintf(" · %g", p.Progress)
	if p.Total > 0 {
		note = fmt.Sprintf(" · %g/%g", p.Progress, p.Total)
	}
	if p.Message != "" {
		note += " " + p.Message
	}
	s.mu.Lock()
	s.note = note
	s.mu.Unlock()
}

func (s *spinner) stop() {
	close(s.done)
	s.wg.Wait()
}

// lazySpinner is a spinner started on demand, at most once, from any
// goroutine: the call's spinner starts when the call starts executing.
type lazySpinner struct {
	w     io.Writer
	label string

	mu      sync.Mutex
	sp      *spinner
	stopped bool
}

func (l *lazySpinner) start() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sp == nil && !l.stopped {
		l.sp = startSpinner(l.w, l.label)
	}
}

func (l *lazySpinner) progress(p tool.Progress) {
	l.mu.Lock()
	sp := l.sp
	l.mu.Unlock()
	if sp != nil {
		sp.progress(p)
	}
}

func (l *lazySpinner) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	if l.sp != nil {
		l.sp.stop()
	}
}
