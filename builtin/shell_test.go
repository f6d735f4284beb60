//go:build unix

package builtin_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolmux/toolmux/builtin"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/tool"
)

// gone is how long a killed process may take to disappear. It bounds a
// wait for something that must happen; it is not a measured duration.
const gone = 10 * time.Second

// event is one live-output callback.
type event struct{ stream, chunk string }

// recorder collects live-output events and lets a test wait for one.
type recorder struct {
	mu     sync.Mutex
	events []event
	notify chan struct{}
}

func newRecorder() *recorder { return &recorder{notify: make(chan struct{}, 1)} }

func (r *recorder) fn(stream, chunk string) {
	r.mu.Lock()
	r.events = append(r.events, event{stream, chunk})
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// output joins the chunks of one stream received so far.
func (r *recorder) output(stream string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, e := range r.events {
		if e.stream == stream {
			b.WriteString(e.chunk)
		}
	}
	return b.String()
}

func (r *recorder) all() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event(nil), r.events...)
}

// waitFor blocks until cond holds for the events so far, or the call
// ends first (done closes), which fails the test.
func (r *recorder) waitFor(t *testing.T, done <-chan struct{}, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-r.notify:
		case <-done:
			if !cond() {
				t.Fatalf("the call ended before %s", what)
			}
			return
		}
	}
}

// outcome is what a call running in the background returned.
type outcome struct {
	res *tool.Result
	err error
}

// start runs a shell call in the background. done closes when it returns.
func start(ctx context.Context, s *builtin.Source, args map[string]any) (<-chan struct{}, *outcome) {
	done := make(chan struct{})
	out := &outcome{}
	go func() {
		defer close(done)
		out.res, out.err = s.Call(ctx, "shell", args)
	}()
	return done, out
}

// pidLine waits for the first line of stdout and parses it as a pid.
func pidLine(t *testing.T, rec *recorder, done <-chan struct{}) int {
	t.Helper()
	rec.waitFor(t, done, "the command printed a pid", func() bool { return strings.Contains(rec.output("stdout"), "\n") })
	line, _, _ := strings.Cut(rec.output("stdout"), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("first line %q is not a pid", line)
	}
	return pid
}

func wantGone(t *testing.T, what string, pid int) {
	t.Helper()
	if !testservers.Eventually(gone, func() bool { return testservers.ProcessGone(pid) }) {
		t.Errorf("%s (pid %d) is still running", what, pid)
		syscallKill(pid)
	}
}

func syscallKill(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		p.Kill()
	}
}

func TestShell(t *testing.T) {
	root := t.TempDir()
	write(t, root, "sub/file.txt", "x")
	s := newSource(t, root)
	res, err := call(t, s, "shell", map[string]any{"command": "echo hello; echo oops >&2"})
	if err != nil {
		t.Fatal(err)
	}
	st := res.Structured.(map[string]any)
	pid, _ := st["pid"].(int)
	want := fmt.Sprintf("Exit code: 0\nDirectory: .\nPID: %d\nOutput:\n", pid)
	if got := res.Text(); res.IsError || !strings.HasPrefix(got, want) || !strings.Contains(got, "hello\n") || !strings.Contains(got, "oops\n") {
		t.Errorf("result %q (isError %v), want prefix %q and both streams", got, res.IsError, want)
	}
	if pid <= 0 || st["exit_code"] != 0 || st["truncated"] != false || st["cwd"] != "." {
		t.Errorf("structured %v", st)
	}

	// cwd, relative or absolute, is where the command runs.
	for _, cwd := range []string{"sub", filepath.Join(root, "sub")} {
		got := text(t, s, "shell", map[string]any{"command": "pwd; ls", "cwd": cwd})
		if !strings.Contains(got, "Directory: sub\n") || !strings.HasSuffix(got, "\n"+filepath.Join(s.Root(), "sub")+"\nfile.txt\n") {
			t.Errorf("cwd %s: %q", cwd, got)
		}
	}
	// Stdin is /dev/null: a command that reads it ends at once.
	if got := text(t, s, "shell", map[string]any{"command": "cat; readlink /proc/self/fd/0 || echo no-proc"}); !strings.Contains(got, "/dev/null") && !strings.Contains(got, "no-proc") {
		t.Errorf("stdin: %q", got)
	}
	// No output at all.
	if got := text(t, s, "shell", map[string]any{"command": "true"}); !strings.HasSuffix(got, "Output: (none)") {
		t.Errorf("no output: %q", got)
	}
	// The environment is toolmux's own.
	t.Setenv("TOOLMUX_SHELL_TEST", "inherited value")
	if got := text(t, s, "shell", map[string]any{"command": `echo "$TOOLMUX_SHELL_TEST"`}); !strings.HasSuffix(got, "inherited value\n") {
		t.Errorf("env: %q", got)
	}
	// ... unless replaced.
	s2 := newSource(t, root, builtin.WithShellEnv([]string{"ONLY=this", "PATH=" + os.Getenv("PATH")}))
	if got := text(t, s2, "shell", map[string]any{"command": `echo "$ONLY-$TOOLMUX_SHELL_TEST"`}); !strings.HasSuffix(got, "this-\n") {
		t.Errorf("replaced env: %q", got)
	}
}

func TestShellExitStatus(t *testing.T) {
	s := newSource(t, t.TempDir())
	res, err := call(t, s, "shell", map[string]any{"command": "echo partial; echo failure >&2; exit 3"})
	if err != nil {
		t.Fatalf("a non-zero exit is a result, not an error: %v", err)
	}
	got := res.Text()
	if !res.IsError || !strings.HasPrefix(got, "Exit code: 3\n") || !strings.Contains(got, "partial\n") || !strings.Contains(got, "failure\n") {
		t.Errorf("result %q (isError %v)", got, res.IsError)
	}
	if st := res.Structured.(map[string]any); st["exit_code"] != 3 {
		t.Errorf("structured %v", st)
	}

	res, err = call(t, s, "shell", map[string]any{"command": "echo before; kill -KILL $$"})
	if err != nil {
		t.Fatal(err)
	}
	got = res.Text()
	if !res.IsError || !strings.HasPrefix(got, "Killed by signal SIGKILL (killed).\n") || !strings.Contains(got, "before\n") {
		t.Errorf("signal result %q (isError %v)", got, res.IsError)
	}
	if st := res.Structured.(map[string]any); st["signal"] != "SIGKILL (killed)" || st["exit_code"] != nil {
		t.Errorf("structured %v", st)
	}
}

// TestShellLiveOutput checks that output reaches the callback while the
// command still runs: the command blocks on a FIFO that only the test
// opens, after it has seen the first line.
func TestShellLiveOutput(t *testing.T) {
	defer goleak.VerifyNone(t)
	root := t.TempDir()
	fifo := filepath.Join(root, "gate")
	if err := mkfifo(fifo); err != nil {
		t.Skip(err)
	}
	s := newSource(t, root)
	rec := newRecorder()
	ctx := tool.WithOutput(context.Background(), rec.fn)
	done, out := start(ctx, s, map[string]any{"command": "echo first; echo err-first >&2; cat gate; echo second"})

	rec.waitFor(t, done, `"first" was streamed`, func() bool {
		return strings.Contains(rec.output("stdout"), "first\n") && strings.Contains(rec.output("stderr"), "err-first\n")
	})
	select {
	case <-done:
		t.Fatal("the call returned while the command was blocked")
	default:
	}
	// Open the gate: the command reads what is written and finishes.
	f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("middle\n")
	f.Close()
	<-done
	if out.err != nil {
		t.Fatal(out.err)
	}
	if got := rec.output("stdout"); got != "first\nmiddle\nsecond\n" {
		t.Errorf("streamed stdout %q", got)
	}
	events := rec.all()
	pid := out.res.Structured.(map[string]any)["pid"].(int)
	if events[0] != (event{builtin.StreamPID, strconv.Itoa(pid)}) {
		t.Errorf("first event %v, want the pid %d", events[0], pid)
	}
	for _, e := range events[1:] {
		if e.stream != builtin.StreamStdout && e.stream != builtin.StreamStderr {
			t.Errorf("event on stream %q", e.stream)
		}
	}
	if got := out.res.Text(); !strings.HasSuffix(got, "\nsecond\n") || !strings.Contains(got, "first\n") || !strings.Contains(got, "middle\n") {
		t.Errorf("result %q", got)
	}
}

// TestShellCancel checks that cancelling the call kills the whole process
// group, the command's children included, and returns the context's error.
func TestShellCancel(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, c := range []struct {
		name    string
		command string
		opts    []builtin.Option
	}{
		{"terminates", "sleep 300 & echo $!; wait", nil},
		// A group that ignores SIGTERM gets SIGKILL after the grace period.
		{"ignores SIGTERM", "trap '' TERM; sleep 300 & echo $!; wait", []builtin.Option{builtin.WithShellKillGrace(100 * time.Millisecond)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSource(t, t.TempDir(), c.opts...)
			rec := newRecorder()
			ctx, cancel := context.WithCancel(tool.WithOutput(context.Background(), rec.fn))
			defer cancel()
			done, out := start(ctx, s, map[string]any{"command": c.command})
			child := pidLine(t, rec, done)
			shellPID, _ := strconv.Atoi(rec.all()[0].chunk)
			cancel()
			<-done
			if !errors.Is(out.err, context.Canceled) {
				t.Errorf("err = %v, want context.Canceled", out.err)
			}
			wantGone(t, "the shell", shellPID)
			wantGone(t, "the background child", child)
		})
	}
}

func TestShellInactivityTimeout(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := newSource(t, t.TempDir(), builtin.WithShellInactivityTimeout(300*time.Millisecond))
	rec := newRecorder()
	ctx := tool.WithOutput(context.Background(), rec.fn)
	done, out := start(ctx, s, map[string]any{"command": "sleep 30 & echo $!; echo waiting; wait"})
	child := pidLine(t, rec, done)
	<-done
	te, ok := errors.AsType[*tool.Error](out.err)
	if !ok || te.Kind != tool.KindTimeout {
		t.Fatalf("err = %v, want a timeout", out.err)
	}
	if !strings.Contains(te.Message, "no output for 300ms") || !strings.Contains(te.Detail, "waiting") {
		t.Errorf("error %q, detail %q", te.Message, te.Detail)
	}
	wantGone(t, "the background child", child)
}

// TestShellInactivityResets checks that output keeps a command alive past
// the inactivity limit: it writes every 100ms for longer than the limit.
func TestShellInactivityResets(t *testing.T) {
	s := newSource(t, t.TempDir(), builtin.WithShellInactivityTimeout(time.Second))
	got := text(t, s, "shell", map[string]any{"command": "for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do echo $i; sleep 0.1; done"})
	if !strings.HasSuffix(got, "\n14\n15\n") {
		t.Errorf("result %q", got)
	}
}

func TestShellTimeout(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := newSource(t, t.TempDir())
	rec := newRecorder()
	ctx := tool.WithOutput(context.Background(), rec.fn)
	done, out := start(ctx, s, map[string]any{"command": "sleep 30 & echo $!; wait", "timeout_ms": 300.0})
	child := pidLine(t, rec, done)
	<-done
	te, ok := errors.AsType[*tool.Error](out.err)
	if !ok || te.Kind != tool.KindTimeout || !strings.Contains(te.Message, "did not finish within 300ms") {
		t.Fatalf("err = %v, want a timeout after 300ms", out.err)
	}
	wantGone(t, "the background child", child)

	// A context deadline is the caller's timeout: its error is returned.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := s.Call(ctx, "shell", map[string]any{"command": "sleep 30"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want context.DeadlineExceeded", err)
	}

	// A timeout over the maximum is lowered to it.
	s = newSource(t, t.TempDir(), builtin.WithShellMaxTimeout(time.Minute))
	got := text(t, s, "shell", map[string]any{"command": "echo ok", "timeout_ms": 1e12})
	if !strings.HasSuffix(got, "ok\n\n[timeout_ms was lowered to the maximum, 60000]") {
		t.Errorf("lowered: %q", got)
	}
}

// TestShellBackground checks that what a command leaves running is killed
// when it ends, and that a process that escaped the group (setsid) while
// holding the output open does not hold the call.
func TestShellBackground(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := newSource(t, t.TempDir())
	res, err := call(t, s, "shell", map[string]any{"command": "sleep 300 & echo $!"})
	if err != nil {
		t.Fatal(err)
	}
	out := res.Text()
	child, err := strconv.Atoi(strings.TrimSpace(out[strings.LastIndex(out, "Output:\n")+len("Output:\n"):]))
	if err != nil {
		t.Fatalf("result %q", out)
	}
	wantGone(t, "the background child", child)

	if _, err := os.Stat("/usr/bin/setsid"); err != nil {
		testservers.Missing(t, "no /usr/bin/setsid (util-linux): %v", err)
	}
	// The escaped process writes its pid to a file and keeps the output
	// pipes open; the call must still end.
	res, err = call(t, s, "shell", map[string]any{"command": "setsid sh -c 'echo $$ > escaped.pid; exec sleep 300' & while [ ! -s escaped.pid ]; do sleep 0.01; done; echo started"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(res.Text(), "Output:\nstarted\n") {
		t.Errorf("result %q", res.Text())
	}
	b, err := os.ReadFile(filepath.Join(s.Root(), "escaped.pid"))
	if err != nil {
		t.Fatal(err)
	}
	if escaped, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
		syscallKill(escaped)
	}
}

func TestShellOutputLimit(t *testing.T) {
	spill := filepath.Join(t.TempDir(), "spill")
	s := newSource(t, t.TempDir(), builtin.WithShellMaxOutputBytes(1000), builtin.WithSpillDir(spill))
	rec := newRecorder()
	ctx := tool.WithOutput(context.Background(), rec.fn)
	res, err := s.Call(ctx, "shell", map[string]any{"command": "seq 1 20000; echo done >&2"})
	if err != nil {
		t.Fatal(err)
	}
	var full strings.Builder
	for i := 1; i <= 20000; i++ {
		fmt.Fprintf(&full, "%d\n", i)
	}
	st := res.Structured.(map[string]any)
	path, _ := st["output_file"].(string)
	if st["truncated"] != true || filepath.Dir(path) != spill || st["output_bytes"] != int64(full.Len()+len("done\n")) {
		t.Fatalf("structured %v", st)
	}
	saved, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The file holds the whole output; stderr may come anywhere in it.
	if got := strings.Replace(string(saved), "done\n", "", 1); got != full.String() {
		t.Errorf("spill file holds %d bytes, want the %d of the output", len(got), full.Len())
	}
	got := res.Text()
	if !strings.Contains(got, "Output:\n1\n2\n3\n") || !strings.Contains(got, "19999\n20000\n") && !strings.Contains(got, "20000\ndone\n") {
		t.Errorf("result lacks the head or the tail:\n%s", got)
	}
	if !strings.Contains(got, "bytes of output omitted; the whole output is in "+path) || len(got) > 1300 {
		t.Errorf("result (%d bytes) lacks the marker:\n%s", len(got), got)
	}
	// Live output is not cut.
	if streamed := rec.output("stdout"); streamed != full.String() {
		t.Errorf("streamed %d bytes, want %d", len(streamed), full.Len())
	}
	os.Remove(path)
}

func TestShellErrors(t *testing.T) {
	root := t.TempDir()
	write(t, root, "file.txt", "x")
	s := newSource(t, root)
	for _, c := range []struct {
		args map[string]any
		kind tool.Kind
		msg  string
	}{
		{map[string]any{}, tool.KindInvalidParams, `"command"`},
		{map[string]any{"command": ""}, tool.KindInvalidParams, "empty"},
		{map[string]any{"command": "  \n"}, tool.KindInvalidParams, "blank"},
		{map[string]any{"command": "echo a\x00b"}, tool.KindInvalidParams, "NUL"},
		{map[string]any{"command": 3.0}, tool.KindInvalidParams, "string"},
		{map[string]any{"command": "true", "timeout_ms": 0.0}, tool.KindInvalidParams, "timeout_ms"},
		{map[string]any{"command": "true", "timeout_ms": "10"}, tool.KindInvalidParams, "integer"},
		{map[string]any{"command": "true", "cwd": "file.txt"}, tool.KindInvalidParams, "not a directory"},
		{map[string]any{"command": "true", "cwd": "missing"}, tool.KindFileNotFound, "does not exist"},
		{map[string]any{"command": "true", "cwd": ".."}, tool.KindPathNotInWorkspace, "outside"},
		{map[string]any{"command": "true", "cwd": "/tmp"}, tool.KindPathNotInWorkspace, "outside"},
		{map[string]any{"command": "true", "env": map[string]any{}}, tool.KindInvalidParams, `"env"`},
	} {
		te := wantErr(t, s, "shell", c.args, c.kind)
		if !strings.Contains(te.Message, c.msg) {
			t.Errorf("%v: message %q does not contain %q", c.args, te.Message, c.msg)
		}
	}
}
