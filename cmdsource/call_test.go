package cmdsource_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmux/toolmux/cmdsource"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/tool"
)

// tools declares the tools the call scripts below answer to.
const tools = `[{"functionDeclarations": [
	{"name": "echo", "description": "Prints its argv and stdin.", "parameters": {"type": "OBJECT", "properties": {"text": {"type": "STRING"}}}},
	{"name": "greet"}, {"name": "json"}, {"name": "list"}, {"name": "fail"}, {"name": "crash"}, {"name": "hang"},
	{"name": "stubborn"}, {"name": "orphan"}, {"name": "big"}, {"name": "deaf"}, {"name": "env"}
]}]`

// caller is a call script implementing the tools above.
const caller = `
for tool; do :; done # the last argument
case "$tool" in
echo) printf 'argc=%s argv=%s\n' "$#" "$*"; printf 'stdin='; cat; echo ;;
greet) echo "Hello!" ;;
json) printf '{"answer": 42, "unit": "none"}\n' ;;
list) echo '[1, 2, 3]' ;;
fail) echo "partial result"; echo "boom: the input was bad" >&2; exit 3 ;;
crash) echo "about to crash" >&2; kill -9 $$ ;;
hang) sleep 300 & echo $! > "$PIDFILE"; echo "started" >&2; wait ;;
stubborn) trap '' TERM; sleep 300 & echo $! > "$PIDFILE"; wait; wait ;;
orphan) sleep 300 & echo $! > "$PIDFILE"; echo "left one behind" ;;
big) head -c 3000000 /dev/zero | tr '\0' 'x'; head -c 3000000 /dev/zero | tr '\0' 'e' >&2; echo "END OF STDERR" >&2 ;;
deaf) echo "not reading" ;;
env) echo "FOO=$FOO PWD=$(pwd)" ;;
*) echo "unknown tool $tool" >&2; exit 2 ;;
esac`

type fixture struct {
	src     *cmdsource.Source
	pidFile string
	dir     string
}

func newFixture(t *testing.T, mod func(*cmdsource.Config)) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{pidFile: filepath.Join(dir, "pid"), dir: dir}
	cfg := cmdsource.Config{
		Discover: printing(t, tools),
		Call:     []string{script(t, "call.sh", caller), "fixed-arg"},
		Env:      []string{"PIDFILE=" + f.pidFile, "FOO=bar"},
	}
	if mod != nil {
		mod(&cfg)
	}
	f.src = newSource(t, cfg)
	return f
}

func (f *fixture) call(t *testing.T, name string, args map[string]any) (*tool.Result, error) {
	t.Helper()
	return f.src.Call(testContext(t), name, args)
}

func TestCallPassesNameAsLastArgumentAndArgumentsOnStdin(t *testing.T) {
	f := newFixture(t, nil)
	args := map[string]any{"text": "it's \"quoted\"\nand multi-line", "n": 3, "nested": map[string]any{"ok": true}, "html": "<a&b>"}
	res, err := f.call(t, "echo", args)
	if err != nil {
		t.Fatal(err)
	}
	text := res.Text()
	if !strings.Contains(text, "argc=2 argv=fixed-arg echo\n") {
		t.Errorf("argv not as expected: %q", text)
	}
	_, stdin, _ := strings.Cut(text, "stdin=")
	var got map[string]any
	if err := json.Unmarshal([]byte(stdin), &got); err != nil {
		t.Fatalf("stdin %q is not JSON: %v", stdin, err)
	}
	want := map[string]any{"text": "it's \"quoted\"\nand multi-line", "n": 3.0, "nested": map[string]any{"ok": true}, "html": "<a&b>"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stdin = %v, want %v", got, want)
	}
	// One line, ended by a newline, without HTML escaping.
	if !strings.HasSuffix(stdin, `"text":"it's \"quoted\"\nand multi-line"}`+"\n\n") || !strings.Contains(stdin, `"html":"<a&b>"`) {
		t.Errorf("stdin = %q", stdin)
	}
	if res.Structured != nil || res.IsError {
		t.Errorf("plain text result has structured content or is an error: %+v", res)
	}

	// No arguments arrive as an empty object.
	res, err = f.call(t, "echo", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Text(), "stdin={}") {
		t.Errorf("nil arguments: %q", res.Text())
	}
}

func TestCallJSONOutputIsStructured(t *testing.T) {
	f := newFixture(t, nil)
	res, err := f.call(t, "json", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]any{"answer": 42.0, "unit": "none"}; !reflect.DeepEqual(res.Structured, want) {
		t.Errorf("structured = %#v", res.Structured)
	}
	if res.Text() != "{\"answer\": 42, \"unit\": \"none\"}\n" {
		t.Errorf("text = %q", res.Text())
	}
	// MCP wants structuredContent to be an object: an array stays text.
	res, err = f.call(t, "list", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Structured != nil || res.Text() != "[1, 2, 3]\n" {
		t.Errorf("array result = %+v", res)
	}
}

func TestCallNonZeroExitIsAToolError(t *testing.T) {
	f := newFixture(t, nil)
	res, err := f.call(t, "fail", nil)
	te := tool.AsError(err)
	if res != nil || te == nil || te.Kind != tool.KindToolError || te.Tool != "fail" || te.Server != "discovered" {
		t.Fatalf("result %+v, error %+v", res, err)
	}
	if !strings.Contains(te.Message, "call.sh fixed-arg fail` exited with status 3") {
		t.Errorf("message = %q", te.Message)
	}
	for _, want := range []string{"stdout:\npartial result", "stderr:\nboom: the input was bad"} {
		if !strings.Contains(te.Detail, want) || !strings.Contains(err.Error(), want) {
			t.Errorf("detail %q does not quote %q", te.Detail, want)
		}
	}
	var ce *cmdsource.CommandError
	if !errors.As(err, &ce) || ce.ExitCode != 3 || ce.Stdout != "partial result\n" || ce.Stderr != "boom: the input was bad\n" {
		t.Errorf("command error = %+v", ce)
	}
}

func TestCallKilledBySignalIsExecutionFailed(t *testing.T) {
	f := newFixture(t, nil)
	_, err := f.call(t, "crash", nil)
	te := tool.AsError(err)
	if te == nil || te.Kind != tool.KindExecutionFailed || !strings.Contains(te.Message, "was killed by SIGKILL") || !strings.Contains(te.Detail, "about to crash") {
		t.Fatalf("error = %+v", err)
	}
	var ce *cmdsource.CommandError
	if !errors.As(err, &ce) || ce.Signal != "SIGKILL" || ce.ExitCode != -1 {
		t.Errorf("command error = %+v", ce)
	}
}

func TestCallCancelKillsTheWholeGroup(t *testing.T) {
	for _, name := range []string{"hang", "stubborn"} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := f.src.Call(ctx, name, nil)
				done <- err
			}()
			pid := waitPID(t, f.pidFile)
			cancel()
			// "stubborn" ignores SIGTERM: it takes the kill grace (500ms)
			// and SIGKILL, or it would hold the call for its sleep's 300s.
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("error = %v, want context.Canceled", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the call did not return after cancel")
			}
			assertGone(t, pid)
		})
	}
}

func TestCallTimeout(t *testing.T) {
	f := newFixture(t, func(c *cmdsource.Config) { c.CallTimeout = 500 * time.Millisecond })
	_, err := f.call(t, "hang", nil)
	te := tool.AsError(err)
	if te == nil || te.Kind != tool.KindTimeout || !strings.Contains(te.Message, "did not finish within 500ms and was killed") || !strings.Contains(te.Detail, "stderr:\nstarted") {
		t.Fatalf("error = %+v", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v does not wrap context.DeadlineExceeded", err)
	}
	assertGone(t, waitPID(t, f.pidFile))
}

func TestCallKillsWhatTheCommandLeftBehind(t *testing.T) {
	f := newFixture(t, nil)
	start := time.Now()
	res, err := f.call(t, "orphan", nil)
	if err != nil {
		t.Fatal(err)
	}
	// The background sleep holds stdout open: the call must not wait for it.
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the call took %s", d)
	}
	if res.Text() != "left one behind\n" {
		t.Errorf("text = %q", res.Text())
	}
	assertGone(t, waitPID(t, f.pidFile))
}

func TestCallUnknownToolSuggests(t *testing.T) {
	f := newFixture(t, nil)
	_, err := f.call(t, "gret", nil)
	te := tool.AsError(err)
	if te == nil || te.Kind != tool.KindToolNotRegistered || te.Suggestion != "greet" || te.Tool != "gret" {
		t.Fatalf("error = %+v", err)
	}
}

func TestCallDiscoversFirstWhenNeeded(t *testing.T) {
	f := newFixture(t, nil)
	// No Tools before: Call lists the tools itself.
	res, err := f.call(t, "greet", nil)
	if err != nil || res.Text() != "Hello!\n" {
		t.Fatalf("result %+v, error %v", res, err)
	}
	if h := f.src.Health(); h.State != tool.StateReady || h.Tools != 12 {
		t.Errorf("health = %+v", h)
	}

	// A discovery that fails fails the call with its error.
	broken := newSource(t, cmdsource.Config{Discover: []string{"sh", "-c", "echo nope >&2; exit 5"}})
	_, err = broken.Call(testContext(t), "greet", nil)
	if te := tool.AsError(err); te == nil || te.Kind != tool.KindServerUnavailable || !strings.Contains(te.Message, "exited with status 5") {
		t.Errorf("error = %v", err)
	}
}

func TestCallOutputLimits(t *testing.T) {
	f := newFixture(t, func(c *cmdsource.Config) { c.MaxOutput = 1024 })
	res, err := f.call(t, "big", nil)
	if err != nil {
		t.Fatal(err)
	}
	text := res.Text()
	if !strings.HasPrefix(text, strings.Repeat("x", 1024)+"\n[toolmux: output cut at 1024 of 3000000 bytes]") || len(text) > 1200 {
		t.Errorf("text (%d bytes) = %.100q...", len(text), text)
	}

	// The arguments are larger than a pipe holds and the command does not
	// read them: it must still finish.
	res, err = f.call(t, "deaf", map[string]any{"blob": strings.Repeat("y", 4<<20)})
	if err != nil || res.Text() != "not reading\n" {
		t.Fatalf("result %+v, error %v", res, err)
	}
}

func TestCallStderrTailIsKept(t *testing.T) {
	body := `head -c 100000 /dev/zero | tr '\0' 'e' >&2; echo "the real error" >&2; exit 1`
	s := newSource(t, cmdsource.Config{Discover: printing(t, `[{"name": "t"}]`), Call: []string{"sh", "-c", body}, MaxOutput: 512})
	_, err := s.Call(testContext(t), "t", nil)
	var ce *cmdsource.CommandError
	if !errors.As(err, &ce) || len(ce.Stderr) != 512 || !strings.HasSuffix(ce.Stderr, "eeethe real error\n") {
		t.Fatalf("error %v, stderr %q", err, ce.Stderr)
	}
	if d := tool.AsError(err).Detail; !strings.Contains(d, "stderr (100015 bytes, shown in part):\n[…]\neee") || !strings.HasSuffix(d, "eeethe real error") {
		t.Errorf("detail = %q", d)
	}
}

func TestEnvironmentAndDirectory(t *testing.T) {
	var dir string
	f := newFixture(t, func(c *cmdsource.Config) {
		// A relative program is found relative to Dir.
		dir = filepath.Dir(c.Call[0])
		c.Dir, c.Call = dir, []string{"./call.sh"}
	})
	res, err := f.call(t, "env", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "FOO=bar PWD=" + dir + "\n"; res.Text() != want {
		t.Errorf("text = %q", res.Text())
	}
}

func TestCloseKillsRunningCalls(t *testing.T) {
	f := newFixture(t, nil)
	var wg sync.WaitGroup
	var err error
	wg.Go(func() { _, err = f.src.Call(context.Background(), "hang", nil) })
	pid := waitPID(t, f.pidFile)
	if cerr := f.src.Close(); cerr != nil {
		t.Fatal(cerr)
	}
	// Close returned: the call has ended, and its processes with it (the
	// kernel may take a moment to finish them off).
	wg.Wait()
	assertGone(t, pid)
	if te := tool.AsError(err); te == nil || te.Kind != tool.KindServerUnavailable || !strings.Contains(te.Message, "is closed") {
		t.Errorf("running call: %v", err)
	}
	_, err = f.call(t, "greet", nil)
	if te := tool.AsError(err); te == nil || te.Kind != tool.KindServerUnavailable || !errors.Is(err, tool.ErrNotSent) {
		t.Errorf("call after Close: %v", err)
	}
	if _, err := f.src.Tools(testContext(t)); tool.KindOf(err) != tool.KindServerUnavailable {
		t.Errorf("Tools after Close: %v", err)
	}
	if err := f.src.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestConcurrentCalls(t *testing.T) {
	f := newFixture(t, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			res, err := f.call(t, "greet", nil)
			if err == nil && res.Text() != "Hello!\n" {
				err = errors.New(res.Text())
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestBehindTheManager(t *testing.T) {
	f := newFixture(t, nil)
	broken := newSource(t, cmdsource.Config{Name: "broken", Discover: []string{"sh", "-c", `echo "no registry" >&2; exit 4`}})
	m, err := manager.New(
		manager.WithSource(f.src, manager.ServerOptions{}),
		manager.WithSource(broken, manager.ServerOptions{}),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := testContext(t)
	cat, err := m.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	echo, ok := cat.Lookup("discovered__echo")
	if !ok || echo.Description != "Prints its argv and stdin." || echo.InputSchema["type"] != "object" {
		t.Fatalf("discovered__echo = %+v (found %v)", echo, ok)
	}
	if h, _ := cat.Server("discovered"); h.State != tool.StateReady || h.Tools != 12 || h.Transport != "command" {
		t.Errorf("health = %+v", h)
	}
	if h, _ := cat.Server("broken"); h.State != tool.StateFailed || !strings.Contains(h.Error, "exited with status 4") || !strings.Contains(h.Detail, "no registry") {
		t.Errorf("broken health = %+v", h)
	}

	rec := m.Call(ctx, tool.Call{Server: "discovered", Tool: "json", Arguments: map[string]any{}})
	if rec.Error != nil || rec.Result == nil || rec.Result.Structured == nil || rec.Name != "discovered__json" {
		t.Fatalf("record = %+v", rec)
	}
	rec = m.Call(ctx, tool.Call{Server: "discovered", Tool: "fail"})
	if rec.Error == nil || rec.Error.Kind != tool.KindToolError || !strings.Contains(rec.Error.Detail, "boom") {
		t.Errorf("failing call record = %+v", rec.Error)
	}
	rec = m.Call(ctx, tool.Call{Server: "discovered", Tool: "gret"})
	if rec.Error == nil || rec.Error.Kind != tool.KindToolNotRegistered || rec.Error.Suggestion != "greet" {
		t.Errorf("unknown tool record = %+v", rec.Error)
	}

	// The manager's timeout ends the call and its processes.
	slow := newFixture(t, nil)
	m2, err := manager.New(manager.WithSource(slow.src, manager.ServerOptions{Timeout: 500 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	rec = m2.Call(ctx, tool.Call{Server: "discovered", Tool: "hang"})
	if rec.Error == nil || rec.Error.Kind != tool.KindTimeout || !strings.Contains(rec.Error.Message, "timed out after 500ms") {
		t.Errorf("record of a call past the manager's timeout = %+v", rec.Error)
	}
	assertGone(t, waitPID(t, slow.pidFile))
}

func TestShellLineGetsTheToolNameAsDollarOne(t *testing.T) {
	s := newSource(t, cmdsource.Config{
		Discover: []string{"sh", "-c", `echo '[{"name": "greet"}]'`},
		Call:     []string{"sh", "-c", `echo "tool=$1 args=$(cat)"`, "sh"},
	})
	res, err := s.Call(testContext(t), "greet", map[string]any{"a": 1})
	if err != nil || res.Text() != "tool=greet args={\"a\":1}\n" {
		t.Fatalf("result %+v, error %v", res, err)
	}
}

func TestCallWithAnEndedContextRunsNothing(t *testing.T) {
	f := newFixture(t, nil)
	if _, err := f.src.Tools(testContext(t)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.src.Call(ctx, "hang", nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v", err)
	}
	if _, err := os.Stat(f.pidFile); err == nil {
		t.Error("the command ran")
	}
}
