package policy_test

import (
	"context"
	"errors"
	"github.com/toolmux/toolmux/internal/testservers"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

func TestParseAnswer(t *testing.T) {
	for in, want := range map[string]policy.Answer{
		"y": policy.ProceedOnce, "Y": policy.ProceedOnce, "yes": policy.ProceedOnce, " 1 ": policy.ProceedOnce,
		"t": policy.AlwaysTool, "T\r": policy.AlwaysTool, "2": policy.AlwaysTool,
		"s": policy.AlwaysServer, "3": policy.AlwaysServer,
		"n": policy.Decline, "No": policy.Decline, "4": policy.Decline,
	} {
		if got, ok := policy.ParseAnswer(in); !ok || got != want {
			t.Errorf("%q: got %v %v, want %v", in, got, ok, want)
		}
	}
	for _, in := range []string{"", " ", "yy", "5", "0", "always", "y n", "ye", "\x1b[A", "yes please"} {
		if got, ok := policy.ParseAnswer(in); ok {
			t.Errorf("%q accepted as %v", in, got)
		}
	}
	for a, s := range map[policy.Answer]string{policy.ProceedOnce: "once", policy.AlwaysTool: "always_tool",
		policy.AlwaysServer: "always_server", policy.Decline: "deny", 0: "answer(0)"} {
		if a.String() != s {
			t.Errorf("%d: %s", a, a)
		}
	}
}

func request(args map[string]any) policy.Request {
	return policy.Request{Tool: shell, Call: call(shell, args),
		Decision: policy.Decision{Action: policy.Ask, Rule: "default mode: everything else"}}
}

func TestTerminalAnswers(t *testing.T) {
	for _, tc := range []struct {
		input   string
		want    policy.Answer
		prompts int // "> " shown
	}{
		{"y\n", policy.ProceedOnce, 1},
		{"1\r\n", policy.ProceedOnce, 1},
		{"t\n", policy.AlwaysTool, 1},
		{"2\n", policy.AlwaysTool, 1},
		{"  S \n", policy.AlwaysServer, 1},
		{"3", policy.AlwaysServer, 1},
		{"n\n", policy.Decline, 1},
		{"4\n", policy.Decline, 1},
		{"maybe\n\nyes\n", policy.ProceedOnce, 3},
		{"\n", policy.Decline, 2},                                      // Enter is not an answer; then end of input
		{"", policy.Decline, 1},                                        // end of input
		{"garbage", policy.Decline, 2},                                 // garbage, then end of input
		{"y" + strings.Repeat(" ", 5000) + "\nn\n", policy.Decline, 2}, // an over-long line is not an answer
	} {
		out := &strings.Builder{}
		term := policy.NewTerminal(strings.NewReader(tc.input), out)
		got, err := term.Approve(context.Background(), request(nil))
		if err != nil || got != tc.want {
			t.Errorf("%.20q: got %v, %v; want %v", tc.input, got, err, tc.want)
		}
		if n := strings.Count(out.String(), "> "); n != tc.prompts {
			t.Errorf("%.20q: %d prompts, want %d:\n%s", tc.input, n, tc.prompts, out)
		}
		if tc.prompts > 1 && tc.input != "" && !strings.Contains(out.String(), "Please answer y (yes, once), t (always this tool), s (always this server) or n (no), or 1-4.") {
			t.Errorf("%.20q: no reminder:\n%s", tc.input, out)
		}
		if tc.want == policy.Decline && !strings.Contains(tc.input, "n\n") && !strings.Contains(tc.input, "4") && !strings.Contains(out.String(), "(end of input: denied)") {
			t.Errorf("%.20q: end of input not reported:\n%s", tc.input, out)
		}
		// After the end of input, every request is refused at once.
		if tc.input == "" {
			if got, err := term.Approve(context.Background(), request(nil)); got != policy.Decline || err != nil {
				t.Errorf("after end of input: %v, %v", got, err)
			}
		}
	}
}

func TestTerminalPrompt(t *testing.T) {
	out := &strings.Builder{}
	term := policy.NewTerminal(strings.NewReader("y\n"), out)
	long := strings.Repeat("x", 500)
	lines := make([]any, 100)
	for i := range lines {
		lines[i] = i
	}
	req := policy.Request{
		Tool: tool.Tool{Server: "evil\x1b[2J", Name: "write\u202efile", Title: "Write a file",
			Annotations: tool.Annotations{Destructive: tool.Bool(true)}},
		Call: tool.Call{Arguments: map[string]any{"path": "a<b>.txt", "content": long, "lines": lines,
			"script": "set -e\necho \"hi\" \x1b[0m\n"}},
		Decision: policy.Decision{Action: policy.Ask, Rule: "careful", Message: "Writes outside ./docs\nneed a review."},
	}
	if _, err := term.Approve(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"Approve this tool call?\n",
		"  tool:    write?file (Write a file)\n",
		"  server:  evil?[2J\n",
		"  effect:  may modify or delete data\n",
		"  arguments:\n    content: \"" + strings.Repeat("x", 160-len(`content: "`)) + "… (351 more characters)\n",
		"    lines: [\n      0,\n",
		"      8,\n      … (92 more lines)\n",
		"    path: \"a<b>.txt\"\n",
		"    script: |\n      set -e\n      echo \"hi\" ?[0m\n",
		"  policy:  careful\n",
		"  note:    Writes outside ./docs need a review.\n",
		"[y/1] yes, once   [t/2] always this tool   [s/3] always this server   [n/4] no\n> ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("prompt lacks %q:\n%s", want, got)
		}
	}
	if strings.ContainsAny(got, "\x1b\u202e") {
		t.Errorf("control characters reached the terminal:\n%q", got)
	}
	if n := strings.Count(got, "\n"); n > 40 {
		t.Errorf("prompt has %d lines:\n%s", n, got)
	}
	// Read-only and no arguments.
	out.Reset()
	term = policy.NewTerminal(strings.NewReader("y\n"), out)
	if _, err := term.Approve(context.Background(), policy.Request{Tool: readFile, Call: call(readFile, nil)}); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "  effect:  read-only\n  arguments: none\n") || strings.Contains(got, "policy:") {
		t.Errorf("read-only prompt:\n%s", got)
	}
}

func TestTerminalErrors(t *testing.T) {
	readErr := errors.New("tty gone")
	term := policy.NewTerminal(iotest.ErrReader(readErr), io.Discard)
	if _, err := term.Approve(context.Background(), request(nil)); !errors.Is(err, readErr) {
		t.Errorf("read error: %v", err)
	}
	writeErr := errors.New("stdout closed")
	term = policy.NewTerminal(strings.NewReader("y\n"), errWriter{writeErr})
	if _, err := term.Approve(context.Background(), request(nil)); !errors.Is(err, writeErr) {
		t.Errorf("write error: %v", err)
	}
}

type errWriter struct{ err error }

func (w errWriter) Write([]byte) (int, error) { return 0, w.err }

func TestTerminalCancel(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	out := &testservers.SyncBuffer{}
	term := policy.NewTerminal(pr, out)

	// Cancelled while waiting for the answer.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := term.Approve(ctx, request(nil))
		done <- err
	}()
	waitFor(t, func() bool { return strings.Contains(out.String(), "> ") })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Approve did not return when its context was cancelled")
	}
	if !strings.Contains(out.String(), "(no longer needed: context canceled)") {
		t.Errorf("cancellation not shown:\n%s", out)
	}

	// Cancelled while waiting for another prompt to finish.
	first := make(chan policy.Answer, 1)
	go func() {
		a, _ := term.Approve(context.Background(), request(nil))
		first <- a
	}()
	waitFor(t, func() bool { return strings.Count(out.String(), "> ") == 2 })
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := term.Approve(ctx, request(nil)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiting for a turn: %v", err)
	}
	if _, err := io.WriteString(pw, "t\n"); err != nil {
		t.Fatal(err)
	}
	if a := <-first; a != policy.AlwaysTool {
		t.Errorf("first prompt got %v", a)
	}

	// A line typed after its prompt was cancelled and before the next one
	// showed does not answer the next one.
	ctx, cancel = context.WithCancel(context.Background())
	go func() {
		_, err := term.Approve(ctx, request(nil))
		done <- err
	}()
	waitFor(t, func() bool { return strings.Count(out.String(), "> ") == 3 })
	cancel()
	<-done
	if _, err := io.WriteString(pw, "y\n"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, term.Buffered)
	next := make(chan policy.Answer, 1)
	go func() {
		a, _ := term.Approve(context.Background(), request(nil))
		next <- a
	}()
	waitFor(t, func() bool { return strings.Count(out.String(), "> ") == 4 })
	if _, err := io.WriteString(pw, "n\n"); err != nil {
		t.Fatal(err)
	}
	if a := <-next; a != policy.Decline {
		t.Errorf("the stale line answered: %v", a)
	}
}

// Concurrent prompts on one terminal are put one after the other, each
// whole, and each gets its own answer.
func TestTerminalConcurrent(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	out := &testservers.SyncBuffer{}
	term := policy.NewTerminal(pr, out)
	const n = 8
	results := make(chan policy.Answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			a, err := term.Approve(context.Background(), request(map[string]any{"i": i}))
			if err != nil {
				t.Error(err)
			}
			results <- a
		})
	}
	for i := range n {
		waitFor(t, func() bool { return strings.Count(out.String(), "> ") == i+1 })
		answer := "y\n"
		if i%2 == 1 {
			answer = "n\n"
		}
		if _, err := io.WriteString(pw, answer); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(results)
	yes, no := 0, 0
	for a := range results {
		switch a {
		case policy.ProceedOnce:
			yes++
		case policy.Decline:
			no++
		}
	}
	if yes != n/2 || no != n/2 {
		t.Errorf("%d yes, %d no", yes, no)
	}
	// Each prompt is whole: its lines were not interleaved with another's.
	blocks := strings.Split(out.String(), "\nApprove this tool call?\n")[1:]
	if len(blocks) != n {
		t.Fatalf("%d prompts:\n%s", len(blocks), out)
	}
	for _, b := range blocks {
		if strings.Count(b, "    i: ") != 1 || !strings.HasSuffix(b, "[n/4] no\n> ") {
			t.Errorf("interleaved prompt:\n%s", b)
		}
	}
}
