package policy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds on what a prompt shows of a call, so that a call with a huge
// argument (a whole file to write) still fits on a screen.
const (
	maxArgLines    = 30
	maxValueLines  = 10
	maxLineRunes   = 160
	maxAnswerBytes = 1024 // longer input lines are not answers
)

// Terminal asks a person at a terminal: it writes the request to out and
// reads one answer per line from in. Prompts are put one at a time, even
// when several gates share the terminal.
//
// Input is read only while a prompt waits for it, one line at a time, by a
// short-lived goroutine, because a read cannot be interrupted when a
// prompt's context ends. Such a read stays outstanding until a line or the
// end of input arrives; its line goes to the next prompt if that prompt is
// showing by then, and is dropped as typed for no prompt otherwise. After
// the end of input every prompt is answered Decline.
type Terminal struct {
	in  *bufio.Reader
	out io.Writer

	turn chan struct{} // one prompt at a time; a channel so waiting honours ctx

	// The fields below belong to the holder of turn.
	result  chan lineResult // the outstanding read's line; buffered
	reading bool            // a read is outstanding
	ended   error           // io.EOF or the read error, once input has ended
}

type lineResult struct {
	line string
	err  error
}

// NewTerminal returns a terminal approver reading answers from in and
// writing prompts to out (typically os.Stdin and os.Stderr).
func NewTerminal(in io.Reader, out io.Writer) *Terminal {
	return &Terminal{in: bufio.NewReaderSize(in, maxAnswerBytes), out: out,
		turn: make(chan struct{}, 1), result: make(chan lineResult, 1)}
}

// Approve shows the request and waits for an answer: y or 1 (once), t or 2
// (always this tool), s or 3 (always this server), n or 4 (deny). Other
// input is refused with a reminder and the question asked again; end of
// input is Decline. When ctx ends first, Approve returns ctx.Err().
func (t *Terminal) Approve(ctx context.Context, req Request) (Answer, error) {
	select {
	case t.turn <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-t.turn }()

	if t.reading {
		// A line that came in while no prompt was showing was typed for a
		// prompt that is gone; it must not answer this different one.
		select {
		case r := <-t.result:
			t.reading = false
			t.ended = r.err
		default:
		}
	}
	if _, err := io.WriteString(t.out, formatRequest(req)); err != nil {
		return 0, fmt.Errorf("writing the approval prompt: %w", err)
	}
	for t.ended == nil {
		if _, err := io.WriteString(t.out, "> "); err != nil {
			return 0, fmt.Errorf("writing the approval prompt: %w", err)
		}
		if !t.reading {
			t.reading = true
			go t.readOne()
		}
		var r lineResult
		select {
		case <-ctx.Done():
			io.WriteString(t.out, "\n(no longer needed: "+ctx.Err().Error()+")\n")
			return 0, ctx.Err()
		case r = <-t.result:
			t.reading = false
		}
		if a, ok := ParseAnswer(r.line); ok {
			return a, nil
		}
		t.ended = r.err
		if r.err == nil {
			io.WriteString(t.out, "Please answer y (yes, once), t (always this tool), s (always this server) or n (no), or 1-4.\n")
		}
	}
	if !errors.Is(t.ended, io.EOF) {
		return 0, fmt.Errorf("reading the answer: %w", t.ended)
	}
	io.WriteString(t.out, "\n(end of input: denied)\n")
	return Decline, nil
}

// readOne reads one line for the prompt that is waiting.
func (t *Terminal) readOne() {
	line, err := readLine(t.in)
	t.result <- lineResult{line, err}
}

// readLine reads one line. A line longer than maxAnswerBytes is read to
// its end but returned empty: it is not an answer, and keeping it whole
// would let endless input exhaust memory.
func readLine(r *bufio.Reader) (string, error) {
	var kept []byte
	tooLong := false
	for {
		frag, isPrefix, err := r.ReadLine()
		if !tooLong {
			if len(kept)+len(frag) > maxAnswerBytes {
				tooLong, kept = true, nil
			} else {
				kept = append(kept, frag...)
			}
		}
		if err != nil || !isPrefix {
			return string(kept), err
		}
	}
}

// formatRequest renders a request for a person: what would run, where,
// with which arguments, and why the policy asks. Everything that comes from
// a server or a model is cleaned of control characters, so it cannot move
// the cursor or rewrite what the prompt says.
func formatRequest(req Request) string {
	var b strings.Builder
	server, name := toolID(req.Tool, req.Call)
	b.WriteString("\nApprove this tool call?\n")
	fmt.Fprintf(&b, "  tool:    %s", clean(name))
	if req.Tool.Title != "" && req.Tool.Title != name {
		fmt.Fprintf(&b, " (%s)", clean(req.Tool.Title))
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  server:  %s\n", clean(server))
	switch {
	case req.Tool.IsReadOnly():
		b.WriteString("  effect:  read-only\n")
	case req.Tool.IsDestructive():
		b.WriteString("  effect:  may modify or delete data\n")
	default:
		b.WriteString("  effect:  may modify data (not destructive)\n")
	}
	b.WriteString("  arguments:")
	if len(req.Call.Arguments) == 0 {
		b.WriteString(" none\n")
	} else {
		b.WriteString("\n")
		for _, l := range argLines(req.Call.Arguments) {
			b.WriteString("    ")
			b.WriteString(l)
			b.WriteString("\n")
		}
	}
	if req.Decision.Rule != "" {
		fmt.Fprintf(&b, "  policy:  %s\n", clean(req.Decision.Rule))
	}
	if req.Decision.Message != "" {
		fmt.Fprintf(&b, "  note:    %s\n", clean(req.Decision.Message))
	}
	b.WriteString("[y/1] yes, once   [t/2] always this tool   [s/3] always this server   [n/4] no\n")
	return b.String()
}

// argLines pretty-prints the arguments one by one, in name order, so
// that one huge argument (a whole file to write) cannot hide the others:
// each gets at most maxValueLines lines of at most maxLineRunes characters,
// and the whole at most maxArgLines lines. Multi-line strings are shown as
// lines, everything else as indented JSON.
func argLines(args map[string]any) []string {
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []string
	for i, k := range keys {
		if len(out) >= maxArgLines {
			out = append(out, fmt.Sprintf("… (%d more arguments)", len(keys)-i))
			break
		}
		out = append(out, valueLines(k, args[k])...)
	}
	return out
}

func valueLines(key string, v any) []string {
	var lines []string
	if s, ok := v.(string); ok && strings.Contains(s, "\n") {
		lines = append(lines, key+": |")
		for _, l := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
			lines = append(lines, "  "+l)
		}
	} else {
		var w bytes.Buffer
		enc := json.NewEncoder(&w)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		text := ""
		if err := enc.Encode(v); err != nil {
			text = fmt.Sprint(v)
		} else {
			text = strings.TrimSuffix(w.String(), "\n")
		}
		lines = strings.Split(text, "\n")
		lines[0] = key + ": " + lines[0]
	}
	if n := len(lines) - maxValueLines; n > 0 {
		lines = append(lines[:maxValueLines], fmt.Sprintf("  … (%d more lines)", n))
	}
	for i, l := range lines {
		l = clean(l)
		if utf8.RuneCountInString(l) > maxLineRunes {
			r := []rune(l)
			l = string(r[:maxLineRunes]) + fmt.Sprintf("… (%d more characters)", len(r)-maxLineRunes)
		}
		lines[i] = l
	}
	return lines
}

// clean replaces characters that are not printable (escape sequences,
// carriage returns, bidirectional overrides) with "?" and newlines and tabs
// with spaces.
func clean(s string) string {
	ok := true
	for _, r := range s {
		if !unicode.IsPrint(r) || r == utf8.RuneError {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return ' '
		case !unicode.IsPrint(r) || r == utf8.RuneError:
			return '?'
		}
		return r
	}, s)
}
