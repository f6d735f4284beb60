package mcpsource_test

import (
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/tool"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func fixture(t *testing.T, args ...string) *mcpsource.Source {
	t.Helper()
	s, err := mcpsource.New(mcpsource.Config{
		Name:           "fx",
		Transport:      mcpsource.Stdio,
		Command:        testservers.Fixture(t),
		Args:           args,
		ConnectTimeout: 10 * time.Second,
		MinBackoff:     10 * time.Millisecond,
		StopGrace:      time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func call(t *testing.T, s *mcpsource.Source, name string, args map[string]any) *tool.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := s.Call(ctx, name, args)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return r
}

func names(tools []tool.Tool) []string {
	var out []string
	for _, t := range tools {
		out = append(out, t.Name)
	}
	return out
}

func TestStdioDiscoveryAndCalls(t *testing.T) {
	s := fixture(t)
	tools, err := s.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"echo", "slow", "hang", "crash", "big", "parts", "progress"} {
		if !slices.Contains(names(tools), want) {
			t.Errorf("tool %q missing from %v", want, names(tools))
		}
	}
	for _, tl := range tools {
		if tl.Server != "fx" || tl.InputSchema["type"] != "object" {
			t.Errorf("tool %s: server %q, schema %v", tl.Name, tl.Server, tl.InputSchema)
		}
		if tl.Name == "echo" && !tl.IsReadOnly() {
			t.Errorf("echo should carry readOnlyHint")
		}
	}
	if got := call(t, s, "echo", map[string]any{"message": "hi"}).Text(); got != "Echo: hi" {
		t.Errorf("echo: %q", got)
	}
	if h := s.Health(); h.State != tool.StateReady || h.PID == 0 || h.Restarts != 0 {
		t.Errorf("health after calls: %+v", h)
	}
}

func TestEveryContentPartIsKept(t *testing.T) {
	s := fixture(t)
	r := call(t, s, "parts", nil)
	var types []string
	for _, c := range r.Content {
		types = append(types, c.Type)
	}
	want := []string{"text", "image", "audio", "resource", "resource_link", "text"}
	if !slices.Equal(types, want) {
		t.Fatalf("content types %v, want %v", types, want)
	}
	if r.Text() != "first\nembedded\nlast" {
		t.Errorf("Text() = %q", r.Text())
	}
	if string(r.Content[1].Data) != "\x89PNG" || r.Content[1].MIMEType != "image/png" {
		t.Errorf("image part: %+v", r.Content[1])
	}
	if r.Content[4].URI != "file:///l.bin" || r.Content[4].Size == nil || *r.Content[4].Size != 3 {
		t.Errorf("resource link: %+v", r.Content[4])
	}
	sc, ok := r.Structured.(map[string]any)
	if !ok || sc["answer"] != float64(42) {
		t.Errorf("structured content: %#v", r.Structured)
	}
}

func TestToolErrorIsAResult(t *testing.T) {
	s := fixture(t)
	r := call(t, s, "fail", nil)
	if !r.IsError || !strings.Contains(r.Text(), "failed on purpose") {
		t.Errorf("fail: %+v", r)
	}
}

func TestProgressReachesCaller(t *testing.T) {
	s := fixture(t)
	var mu sync.Mutex
	var got []tool.Progress
	ctx := tool.WithProgress(context.Background(), func(p tool.Progress) {
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
	})
	r, err := s.Call(ctx, "progress", map[string]any{"steps": 3, "delay_ms": 50})
	if err != nil {
		t.Fatal(err)
	}
	if r.Text() != "3 steps" {
		t.Fatalf("result %q", r.Text())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 || got[2].Progress != 3 || got[2].Total != 3 || got[2].Message != "step 3" {
		t.Errorf("progress reports: %+v", got)
	}
}

func TestConcurrentCallsShareOneProcess(t *testing.T) {
	s := fixture(t)
	var wg sync.WaitGroup
	pids := make([]string, 64)
	errs := make([]error, 64)
	for i := range pids {
		wg.Go(func() {
			r, err := s.Call(context.Background(), "pid", nil)
			if err != nil {
				errs[i] = err
				return
			}
			pids[i] = r.Text()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, p := range pids {
		if p != pids[0] {
			t.Fatalf("calls ran in different processes: %v", pids)
		}
	}
	if h := s.Health(); strconv.Itoa(h.PID) != pids[0] || h.Restarts != 0 {
		t.Errorf("health %+v, pid %s", h, pids[0])
	}
}

func TestCrashIsReportedThenRestarted(t *testing.T) {
	s := fixture(t)
	first := call(t, s, "pid", nil).Text()
	_, err := s.Call(context.Background(), "crash", map[string]any{"code": 3})
	var te *tool.Error
	if !errors.As(err, &te) || te.Kind != tool.KindServerUnavailable {
		t.Fatalf("crash: got %v, want server_unavailable", err)
	}
	if !strings.Contains(te.Message, "exited with status 3") {
		t.Errorf("message does not say how the server died: %q", te.Message)
	}
	if !strings.Contains(te.Detail, "simulated crash with status 3") {
		t.Errorf("detail does not quote stderr: %q", te.Detail)
	}
	pid, _ := strconv.Atoi(first)
	if !testservers.Eventually(5*time.Second, func() bool { return testservers.ProcessGone(pid) }) {
		t.Errorf("crashed process %d still present", pid)
	}
	if h := s.Health(); h.State != tool.StateDegraded || h.Error == "" {
		t.Errorf("health after crash: %+v", h)
	}
	second := call(t, s, "pid", nil).Text()
	if second == first {
		t.Errorf("expected a new process after the crash, got the same pid %s", first)
	}
	if h := s.Health(); h.Restarts != 1 || h.State != tool.StateReady {
		t.Errorf("health after restart: %+v", h)
	}
}

func TestTimeoutCancelsServerHandler(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "marker")
	s := fixture(t, "-marker", marker)
	// Started first, so that the 300ms are the call's, at the server.
	call(t, s, "pid", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := s.Call(ctx, "hang", nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hang: %v", err)
	}
	ok := testservers.Eventually(5*time.Second, func() bool {
		b, _ := os.ReadFile(marker)
		return strings.Contains(string(b), "cancelled hang")
	})
	if !ok {
		t.Fatal("the server never saw the cancellation")
	}
	// The session survives a cancelled call.
	if got := call(t, s, "echo", map[string]any{"message": "still here"}).Text(); got != "Echo: still here" {
		t.Errorf("after cancel: %q", got)
	}
}

func TestHungHandshakeTimesOutWithoutWaitingForTheKill(t *testing.T) {
	s, err := mcpsource.New(mcpsource.Config{
		Name: "hung", Transport: mcpsource.Stdio, Command: testservers.Fixture(t),
		Args:           []string{"-hang-init", "-ignore-term", "-stderr", "booting slowly"},
		ConnectTimeout: 300 * time.Millisecond,
		StopGrace:      2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var pid int
	ctx := context.Background()
	_, err = s.Tools(ctx)
	var te *tool.Error
	if !errors.As(err, &te) || te.Kind != tool.KindServerUnavailable {
		t.Fatalf("got %v, want server_unavailable", err)
	}
	if !strings.Contains(te.Message, "did not complete the MCP handshake within 300ms") {
		t.Errorf("message: %q", te.Message)
	}
	if !strings.Contains(te.Detail, "booting slowly") {
		t.Errorf("detail lacks stderr: %q", te.Detail)
	}
	// The process ignores SIGTERM, so killing it takes two grace periods;
	// Tools returned before that, so it must still be alive now.
	pid = findPID(t, "-hang-init")
	if pid == 0 || testservers.ProcessGone(pid) {
		t.Fatalf("hung process should still be shutting down (pid %d)", pid)
	}
	s.Close()
	if !testservers.ProcessGone(pid) {
		t.Errorf("Close left the hung process %d running", pid)
	}
	if h := s.Health(); h.State != tool.StateFailed {
		t.Errorf("health: %+v", h)
	}
}

// findPID finds a running fixture process whose command line has arg.
func findPID(t *testing.T, arg string) int {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		args := strings.Split(string(b), "\x00")
		if len(args) > 0 && args[0] == testservers.Fixture(t) && slices.Contains(args, arg) && !testservers.ProcessGone(pid) {
			return pid
		}
	}
	return 0
}

func TestServerThatDiesAtStartQuotesStderr(t *testing.T) {
	s := fixture(t, "-exit", "2")
	_, err := s.Tools(context.Background())
	var te *tool.Error
	if !errors.As(err, &te) || te.Kind != tool.KindServerUnavailable {
		t.Fatalf("got %v", err)
	}
	if !strings.Contains(te.Message, "exited with status 2") || !strings.Contains(te.Detail, "FIXTURE_API_KEY is not set") {
		t.Errorf("error does not explain the failure: %v", te)
	}
	if h := s.Health(); h.State != tool.StateFailed || h.Error == "" {
		t.Errorf("health: %+v", h)
	}
}

func TestGarbageOnStdout(t *testing.T) {
	s := fixture(t, "-garbage")
	_, err := s.Tools(context.Background())
	if tool.KindOf(err) != tool.KindServerUnavailable {
		t.Fatalf("got %v, want server_unavailable", err)
	}
	if !strings.Contains(err.Error(), "invalid character") {
		t.Errorf("error should say the output was not JSON: %v", err)
	}
}

func TestMissingCommand(t *testing.T) {
	s, err := mcpsource.New(mcpsource.Config{Name: "nope", Transport: mcpsource.Stdio, Command: "/nonexistent/server"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Call(context.Background(), "x", nil)
	if tool.KindOf(err) != tool.KindServerUnavailable || !strings.Contains(err.Error(), "cannot start") {
		t.Fatalf("got %v", err)
	}
}

// A 20 MB text is not held: it is streamed into a file as it arrives, the
// result keeping its beginning and end and saying where the rest is.
func TestLargeResult(t *testing.T) {
	dir := t.TempDir()
	s, err := mcpsource.New(mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio, Command: testservers.Fixture(t),
		ConnectTimeout: 10 * time.Second, StopGrace: time.Second, SpillDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const size = 20 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r, err := s.Call(ctx, "big", map[string]any{"bytes": size})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Content) != 1 || r.Content[0].Spill == nil {
		t.Fatalf("not spilled: %d parts", len(r.Content))
	}
	sp, text := r.Content[0].Spill, r.Content[0].Text
	if sp.Bytes != size || sp.Chars != size || !strings.HasPrefix(sp.Path, filepath.Join(dir, "fx")) {
		t.Errorf("spill %+v", sp)
	}
	if len(text) > mcpsource.DefaultMaxResultBytes || !strings.Contains(text, sp.Path) {
		t.Errorf("the result holds %d bytes, or does not name %s", len(text), sp.Path)
	}
	want := testservers.BigText(size)
	if got, err := os.ReadFile(sp.Path); err != nil || string(got) != want {
		t.Fatalf("the file differs from what the server sent (%v, %d bytes)", err, len(got))
	}
	head := text[:strings.Index(text, "\n\n[... toolmux cut")]
	tail := text[strings.Index(text, "...]\n\n")+len("...]\n\n"):]
	if len(head) == 0 || len(tail) == 0 || !strings.HasPrefix(want, head) || !strings.HasSuffix(want, tail) {
		t.Errorf("kept %d bytes of head, %d of tail, not the text's", len(head), len(tail))
	}
	// The session is intact: the next call is answered whole.
	if got := call(t, s, "echo", map[string]any{"message": "after"}).Text(); got != "Echo: after" {
		t.Errorf("next call: %q", got)
	}
}

// Several parts, an embedded resource, every character JSON escapes: each
// long text is spilled whole and exactly, the short ones are kept.
func TestLargeResultParts(t *testing.T) {
	dir := t.TempDir()
	s, err := mcpsource.New(mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio, Command: testservers.Fixture(t),
		ConnectTimeout: 10 * time.Second, StopGrace: time.Second, SpillDir: dir, MaxResultBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 100 << 10
	r := call(t, s, "bulk", map[string]any{"parts": 3, "bytes": n, "resource": true})
	if len(r.Content) != 3 || r.Content[2].Type != tool.ContentResource {
		t.Fatalf("parts: %+v", r.Content)
	}
	for i, c := range r.Content {
		want := testservers.BulkText(i, n)
		if c.Spill == nil {
			t.Fatalf("part %d was held (%d bytes) past MaxResultBytes", i, len(c.Text))
		}
		got, err := os.ReadFile(c.Spill.Path)
		if err != nil || string(got) != want {
			t.Errorf("part %d: the file differs (%v): %.60q", i, err, got)
		}
	}
	small := call(t, s, "bulk", map[string]any{"parts": 2, "bytes": 1000})
	for i, c := range small.Content {
		if c.Spill != nil || c.Text != testservers.BulkText(i, 1000) {
			t.Errorf("small part %d changed: %+v", i, c.Spill)
		}
	}
}

func TestToolListChanged(t *testing.T) {
	s := fixture(t)
	changed := make(chan struct{}, 10)
	s.OnToolsChanged(func() { changed <- struct{}{} })
	if _, err := s.Tools(context.Background()); err != nil {
		t.Fatal(err)
	}
	call(t, s, "add_tool", nil)
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("no tools/list_changed notification")
	}
	tools, err := s.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names(tools), "added_1") {
		t.Errorf("added tool missing: %v", names(tools))
	}
}

func TestCloseKillsProcessGroup(t *testing.T) {
	s := fixture(t, "-child")
	call(t, s, "echo", map[string]any{"message": "x"})
	leader := s.Health().PID
	m := regexp.MustCompile(`child pid (\d+)`).FindStringSubmatch(s.StderrTail(10))
	if m == nil {
		t.Fatalf("no child pid in stderr: %q", s.StderrTail(10))
	}
	child, _ := strconv.Atoi(m[1])
	if testservers.ProcessGone(child) {
		t.Fatal("child should be running before Close")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// SIGKILL is delivered asynchronously; the child is gone a moment later.
	gone := testservers.Eventually(5*time.Second, func() bool {
		return testservers.ProcessGone(leader) && testservers.ProcessGone(child)
	})
	if !gone {
		t.Errorf("after Close: leader gone %v, child gone %v", testservers.ProcessGone(leader), testservers.ProcessGone(child))
	}
	if _, err := s.Call(context.Background(), "echo", nil); tool.KindOf(err) != tool.KindServerUnavailable {
		t.Errorf("call after Close: %v", err)
	}
}

func TestCloseDuringCall(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "marker")
	s := fixture(t, "-marker", marker)
	errc := make(chan error, 1)
	go func() {
		_, err := s.Call(context.Background(), "hang", nil)
		errc <- err
	}()
	// Close once the call is at the server: a Close before it would end
	// a call not yet in flight.
	entered := testservers.Eventually(10*time.Second, func() bool {
		b, _ := os.ReadFile(marker)
		return strings.Contains(string(b), "entered hang")
	})
	if !entered {
		t.Fatal("the call never reached the server")
	}
	s.Close()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("in-flight call succeeded after Close")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("in-flight call did not return after Close")
	}
}

func TestHTTPTransports(t *testing.T) {
	srv := testservers.NewServer(testservers.Options{})
	for _, tc := range []struct {
		transport string
		handler   func() (string, func())
	}{
		{mcpsource.StreamableHTTP, func() (string, func()) {
			h := mcp.NewStreamableHTTPHandler(func(r *httpRequest) *mcp.Server { return srv }, nil)
			ts := httptest.NewServer(requireHeader(h))
			return ts.URL, ts.Close
		}},
		{mcpsource.SSE, func() (string, func()) {
			h := mcp.NewSSEHandler(func(r *httpRequest) *mcp.Server { return srv }, nil)
			ts := httptest.NewServer(requireHeader(h))
			return ts.URL, ts.Close
		}},
	} {
		t.Run(tc.transport, func(t *testing.T) {
			url, stop := tc.handler()
			defer stop()
			s, err := mcpsource.New(mcpsource.Config{Name: "web", Transport: tc.transport, URL: url,
				Headers: map[string]string{"X-Team": "core"}, BearerToken: "sekret"})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			tools, err := s.Tools(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(names(tools), "echo") {
				t.Fatalf("tools: %v", names(tools))
			}
			if got := call(t, s, "echo", map[string]any{"message": tc.transport}).Text(); got != "Echo: "+tc.transport {
				t.Errorf("echo: %q", got)
			}
			r := call(t, s, "parts", nil)
			if len(r.Content) != 6 || r.Structured == nil {
				t.Errorf("parts over %s: %d parts, structured %v", tc.transport, len(r.Content), r.Structured)
			}
		})
	}
}

func TestHTTPServerDown(t *testing.T) {
	srv := testservers.NewServer(testservers.Options{})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*httpRequest) *mcp.Server { return srv }, nil))
	// The abrupt shutdown below leaves the server side of the session open;
	// it is the test's server, not toolmux, that must release it.
	defer func() {
		for ss := range srv.Sessions() {
			ss.Close()
		}
	}()
	s, err := mcpsource.New(mcpsource.Config{Name: "web", Transport: mcpsource.StreamableHTTP, URL: ts.URL, MinBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	call(t, s, "echo", map[string]any{"message": "up"})
	ts.CloseClientConnections()
	ts.Close()
	_, err = s.Call(context.Background(), "echo", map[string]any{"message": "down"})
	if tool.KindOf(err) != tool.KindServerUnavailable {
		t.Fatalf("got %v, want server_unavailable", err)
	}
	_, err = s.Call(context.Background(), "echo", map[string]any{"message": "still down"})
	if tool.KindOf(err) != tool.KindServerUnavailable || !strings.Contains(err.Error(), "connect") {
		t.Fatalf("reconnect attempt: %v", err)
	}
}

func TestEverythingServer(t *testing.T) {
	transports := map[string]func(t *testing.T) mcpsource.Config{
		"stdio": func(t *testing.T) mcpsource.Config {
			return mcpsource.Config{Transport: mcpsource.Stdio, Command: testservers.NodeBin(t, "mcp-server-everything")}
		},
		"sse": func(t *testing.T) mcpsource.Config {
			return mcpsource.Config{Transport: mcpsource.SSE, URL: testservers.StartEverything(t, "sse")}
		},
		"http": func(t *testing.T) mcpsource.Config {
			return mcpsource.Config{Transport: mcpsource.StreamableHTTP, URL: testservers.StartEverything(t, "streamableHttp")}
		},
	}
	for name, mk := range transports {
		t.Run(name, func(t *testing.T) {
			cfg := mk(t)
			cfg.Name = "everything"
			cfg.ConnectTimeout = 30 * time.Second
			s, err := mcpsource.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			tools, err := s.Tools(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"echo", "get-sum", "get-tiny-image", "get-structured-content", "trigger-long-running-operation"} {
				if !slices.Contains(names(tools), want) {
					t.Errorf("%s missing: %v", want, names(tools))
				}
			}
			if got := call(t, s, "echo", map[string]any{"message": "hello"}).Text(); !strings.Contains(got, "hello") {
				t.Errorf("echo: %q", got)
			}
			if got := call(t, s, "get-sum", map[string]any{"a": 2, "b": 40}).Text(); !strings.Contains(got, "42") {
				t.Errorf("get-sum: %q", got)
			}
			img := call(t, s, "get-tiny-image", nil)
			if !slices.ContainsFunc(img.Content, func(c tool.Content) bool { return c.Type == tool.ContentImage && len(c.Data) > 0 }) {
				t.Errorf("get-tiny-image has no image part: %s", img.Summary())
			}
			sc := call(t, s, "get-structured-content", map[string]any{"location": "Chicago"})
			if m, ok := sc.Structured.(map[string]any); !ok || m["temperature"] == nil {
				t.Errorf("structured content: %#v", sc.Structured)
			}
			var mu sync.Mutex
			var reports int
			ctx := tool.WithProgress(context.Background(), func(tool.Progress) { mu.Lock(); reports++; mu.Unlock() })
			if _, err := s.Call(ctx, "trigger-long-running-operation", map[string]any{"duration": 1, "steps": 3}); err != nil {
				t.Fatal(err)
			}
			testservers.Eventually(2*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return reports >= 3 })
			mu.Lock()
			if reports < 3 {
				t.Errorf("got %d progress reports, want 3", reports)
			}
			mu.Unlock()
		})
	}
}

func TestFilesystemServer(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "note.txt"), []byte("filesystem peer works"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := mcpsource.New(mcpsource.Config{Name: "fs", Transport: mcpsource.Stdio,
		Command: testservers.NodeBin(t, "mcp-server-filesystem"), Args: []string{dir}, ConnectTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tools, err := s.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var readOnly, destructive int
	for _, tl := range tools {
		if tl.IsReadOnly() {
			readOnly++
		}
		if tl.IsDestructive() {
			destructive++
		}
	}
	if len(tools) < 10 || readOnly == 0 || destructive == 0 {
		t.Errorf("%d tools, %d read-only, %d destructive: %v", len(tools), readOnly, destructive, names(tools))
	}
	got := call(t, s, "read_text_file", map[string]any{"path": filepath.Join(dir, "note.txt")}).Text()
	if !strings.Contains(got, "filesystem peer works") {
		t.Errorf("read_text_file: %q", got)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, cfg := range []mcpsource.Config{
		{Transport: mcpsource.Stdio, Command: "x"},
		{Name: "a", Transport: mcpsource.Stdio},
		{Name: "a", Transport: mcpsource.SSE},
		{Name: "a", Transport: "carrier-pigeon", URL: "http://x"},
	} {
		if _, err := mcpsource.New(cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}

// Over streamable HTTP (answers as an event stream or as JSON) and SSE, a
// long result text is streamed to a file as over stdio.
func TestLargeResultOverHTTP(t *testing.T) {
	srv := testservers.NewServer(testservers.Options{})
	for _, tc := range []struct {
		name, transport string
		handler         httpHandler
	}{
		{"streamable", mcpsource.StreamableHTTP, mcp.NewStreamableHTTPHandler(func(*httpRequest) *mcp.Server { return srv }, nil)},
		{"streamable-json", mcpsource.StreamableHTTP, mcp.NewStreamableHTTPHandler(func(*httpRequest) *mcp.Server { return srv },
			&mcp.StreamableHTTPOptions{JSONResponse: true})},
		{"sse", mcpsource.SSE, mcp.NewSSEHandler(func(*httpRequest) *mcp.Server { return srv }, nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := httptest.NewServer(tc.handler)
			defer ts.Close()
			dir := t.TempDir()
			s, err := mcpsource.New(mcpsource.Config{Name: "web", Transport: tc.transport, URL: ts.URL,
				SpillDir: dir, MaxResultBytes: 64 << 10})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			const n = 100 << 10
			r := call(t, s, "bulk", map[string]any{"parts": 2, "bytes": n, "resource": true})
			for i, c := range r.Content {
				if c.Spill == nil {
					t.Fatalf("part %d held (%d bytes)", i, len(c.Text))
				}
				if got, err := os.ReadFile(c.Spill.Path); err != nil || string(got) != testservers.BulkText(i, n) {
					t.Errorf("part %d: the file differs (%v)", i, err)
				}
			}
			const size = 5 << 20
			r = call(t, s, "big", map[string]any{"bytes": size})
			if len(r.Content) != 1 || r.Content[0].Spill == nil || r.Content[0].Spill.Bytes != size {
				t.Fatalf("big: %+v", r.Content[0].Spill)
			}
			if got, err := os.ReadFile(r.Content[0].Spill.Path); err != nil || string(got) != testservers.BigText(size) {
				t.Errorf("big: the file differs (%v)", err)
			}
			if got := call(t, s, "echo", map[string]any{"message": "after"}).Text(); got != "Echo: after" {
				t.Errorf("next call: %q", got)
			}
		})
	}
}

// A server that cannot be reached says why first (the refused connection,
// the unknown host), with the whole chain of errors as the detail.
func TestHTTPServerUnreachableSaysWhy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String() + "/mcp"
	ln.Close() // nothing listens there now
	for _, c := range []struct{ transport, url, want string }{
		{mcpsource.StreamableHTTP, refused, "cannot reach " + refused + ": connection refused"},
		{mcpsource.SSE, refused, "cannot reach " + refused + ": connection refused"},
		{mcpsource.StreamableHTTP, "http://toolmux-test.invalid/mcp", "cannot resolve toolmux-test.invalid"},
	} {
		t.Run(c.transport+" "+c.url, func(t *testing.T) {
			s, err := mcpsource.New(mcpsource.Config{Name: "remote", Transport: c.transport, URL: c.url, ConnectTimeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			_, err = s.Tools(context.Background())
			te := tool.AsError(err)
			if te == nil || te.Kind != tool.KindServerUnavailable || !strings.Contains(te.Message, c.want) || te.Detail == "" {
				t.Fatalf("got %#v, want server_unavailable saying %q, with a detail", te, c.want)
			}
			if h := s.Health(); !strings.Contains(h.Error, c.want) || h.Detail != te.Detail {
				t.Errorf("health %+v", h)
			}
		})
	}
}
