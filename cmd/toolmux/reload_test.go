package main_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
)

// reloadClient is a go-sdk client of a serve process that counts the
// tools/list_changed notifications it receives.
type reloadClient struct {
	cs      *mcp.ClientSession
	changed atomic.Int64
}

func connectCounting(t *testing.T, ctx context.Context, p *serveProc) *reloadClient {
	t.Helper()
	rc := &reloadClient{}
	client := mcp.NewClient(&mcp.Implementation{Name: "reload-test"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { rc.changed.Add(1) },
	})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.url("/mcp")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	rc.cs = cs
	return rc
}

func (rc *reloadClient) tools(t *testing.T, ctx context.Context) []string {
	t.Helper()
	res, err := rc.cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	return names
}

// call calls a tool and returns its text, or an error for a failed call
// (a protocol error or a result marked isError).
func (rc *reloadClient) call(ctx context.Context, name string, args map[string]any) (string, error) {
	res, err := rc.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return "", err
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	if res.IsError {
		return text.String(), fmt.Errorf("%s failed: %s", name, text.String())
	}
	return text.String(), nil
}

// waitTools waits until the catalog has every name of want and none of
// gone, and a tools/list_changed notification came after since.
func (rc *reloadClient) waitTools(t *testing.T, ctx context.Context, p *serveProc, since int64, want, gone []string) {
	t.Helper()
	ok := testservers.Eventually(30*time.Second, func() bool {
		if rc.changed.Load() <= since {
			return false
		}
		names := rc.tools(t, ctx)
		for _, w := range want {
			if !slices.Contains(names, w) {
				return false
			}
		}
		for _, g := range gone {
			if slices.Contains(names, g) {
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("tools never became %v without %v (list_changed %d, was %d): %v\n%s",
			want, gone, rc.changed.Load(), since, rc.tools(t, ctx), p.stderr.String())
	}
}

// callRunning starts a call of an append tool (the fixture's) that
// sleeps ms once it has started, and waits until it has; the call's error
// comes on the channel when it ends.
func (rc *reloadClient) callRunning(t *testing.T, ctx context.Context, name string, ms int) <-chan error {
	t.Helper()
	started := filepath.Join(t.TempDir(), "started")
	ended := make(chan error, 1)
	go func() {
		_, err := rc.call(ctx, name, map[string]any{"path": started, "line": "x", "ms": ms})
		ended <- err
	}()
	if !testservers.Eventually(30*time.Second, func() bool { _, err := os.Stat(started); return err == nil }) {
		select {
		case err := <-ended:
			t.Fatalf("the call of %s never started: %v", name, err)
		default:
		}
		t.Fatalf("the call of %s never started", name)
	}
	return ended
}

// caller calls name in a loop until stopped, and keeps every failure.
type caller struct {
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	fails []error
	calls int
}

func startCaller(ctx context.Context, rc *reloadClient, name string, args map[string]any) *caller {
	c := &caller{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			select {
			case <-c.stop:
				return
			default:
			}
			_, err := rc.call(ctx, name, args)
			c.mu.Lock()
			c.calls++
			if err != nil {
				c.fails = append(c.fails, err)
			}
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *caller) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// waitMore waits until the caller made n more calls than it had: calls
// went on through a reload.
func (c *caller) waitMore(t *testing.T, n int) {
	t.Helper()
	from := c.count()
	if !testservers.Eventually(30*time.Second, func() bool { return c.count() >= from+n }) {
		t.Fatalf("the client's calls stopped after %d", c.count())
	}
}

func (c *caller) end(t *testing.T) {
	t.Helper()
	close(c.stop)
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == 0 {
		t.Fatal("the client made no call")
	}
	for _, err := range c.fails {
		t.Errorf("a call failed during the reloads: %v", err)
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A serve process reloads on SIGHUP while a client keeps calling: a
// server added, one removed while a call of it runs (which ends well),
// one changed (a new process), a policy rule added, then a configuration
// with an error refused with its position, the one in use kept. No call
// of the client fails, and it is told each time the tools change.
func TestServeReloadsOnSIGHUP(t *testing.T) {
	t.Parallel()
	fx := testservers.Fixture(t)
	v1 := fmt.Sprintf(`servers:
  a:
    command: %[1]s
  b:
    command: %[1]s
    trust: true
`, fx)
	dir := workspace(t, v1)
	cfgPath := filepath.Join(dir, "toolmux.yaml")
	p := startServeProc(t, dir, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rc := connectCounting(t, ctx, p)
	names := rc.tools(t, ctx)
	if !slices.Contains(names, "a__echo") || !slices.Contains(names, "b__echo") {
		t.Fatalf("tools at start: %v", names)
	}
	pidA, err := rc.call(ctx, "a__pid", nil)
	if err != nil {
		t.Fatal(err)
	}
	loop := startCaller(ctx, rc, "a__echo", map[string]any{"message": "hi"})
	loop.waitMore(t, 3)

	// A call of b runs while b is removed: it finishes.
	inFlight := rc.callRunning(t, ctx, "b__append", 1500)

	// b removed, c added, a changed (an environment variable of its own).
	v2 := fmt.Sprintf(`servers:
  a:
    command: %[1]s
    env: {RELOADED: "1"}
  c:
    command: %[1]s
`, fx)
	writeFile(t, cfgPath, v2)
	before := rc.changed.Load()
	if err := p.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	rc.waitTools(t, ctx, p, before, []string{"a__echo", "c__echo"}, []string{"b__echo"})
	if err := <-inFlight; err != nil {
		t.Fatalf("the call in flight on the removed server failed: %v", err)
	}
	if pid, err := rc.call(ctx, "a__pid", nil); err != nil || pid == pidA {
		t.Fatalf("a was not restarted: pid %s (was %s), %v", pid, pidA, err)
	}
	if _, err := rc.call(ctx, "c__echo", map[string]any{"message": "new"}); err != nil {
		t.Fatalf("the added server: %v", err)
	}
	if !strings.Contains(p.stderr.String(), "added c; removed b; restarted a") {
		t.Errorf("serve did not say what the reload did:\n%s", p.stderr.String())
	}
	loop.waitMore(t, 3)

	// A policy rule added: the next call of c/echo is refused.
	v3 := v2 + `policy:
  rules:
    - name: no c echo
      tools: [c/echo]
      action: deny
`
	writeFile(t, cfgPath, v3)
	mark := len(p.stderr.String())
	if err := p.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if !testservers.Eventually(30*time.Second, func() bool { return strings.Contains(p.stderr.String()[mark:], "reloaded") }) {
		t.Fatalf("no reload:\n%s", p.stderr.String())
	}
	if _, err := rc.call(ctx, "c__echo", map[string]any{"message": "x"}); err == nil || !strings.Contains(err.Error(), "no c echo") {
		t.Fatalf("the rule added by the reload did not refuse the call: %v", err)
	}
	loop.waitMore(t, 3)

	// An invalid configuration: refused, with its position; the one in
	// use stays.
	writeFile(t, cfgPath, v3+"unknown_key: 1\n")
	mark = len(p.stderr.String())
	if err := p.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if !testservers.Eventually(30*time.Second, func() bool { return strings.Contains(p.stderr.String()[mark:], "stays") }) {
		t.Fatalf("no refusal:\n%s", p.stderr.String())
	}
	refusal := p.stderr.String()[mark:]
	if !regexp.MustCompile(`toolmux\.yaml:\d+:\d+`).MatchString(refusal) || !strings.Contains(refusal, "unknown_key") {
		t.Fatalf("the refusal does not give the error's position:\n%s", refusal)
	}
	if _, err := rc.call(ctx, "c__echo", map[string]any{"message": "x"}); err == nil {
		t.Fatal("the policy in use was dropped by a refused reload")
	}
	names = rc.tools(t, ctx)
	if !slices.Contains(names, "c__echo") || slices.Contains(names, "b__echo") {
		t.Fatalf("the servers changed after a refused reload: %v", names)
	}
	loop.waitMore(t, 3)
	loop.end(t)
}

// With --watch, writing the file reloads it: a server added appears and
// the client is told.
func TestServeReloadsOnWatch(t *testing.T) {
	t.Parallel()
	fx := testservers.Fixture(t)
	v1 := fmt.Sprintf(`servers:
  a:
    command: %[1]s
`, fx)
	dir := workspace(t, v1)
	p := startServeProc(t, dir, "", "--watch")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rc := connectCounting(t, ctx, p)
	loop := startCaller(ctx, rc, "a__echo", map[string]any{"message": "hi"})
	loop.waitMore(t, 3)
	before := rc.changed.Load()
	writeFile(t, filepath.Join(dir, "toolmux.yaml"), v1+fmt.Sprintf(`  d:
    command: %s
`, fx))
	rc.waitTools(t, ctx, p, before, []string{"a__echo", "d__echo"}, nil)
	if _, err := rc.call(ctx, "d__echo", map[string]any{"message": "x"}); err != nil {
		t.Fatal(err)
	}
	loop.waitMore(t, 3)

	// A save with an error is refused; the servers stay.
	mark := len(p.stderr.String())
	writeFile(t, filepath.Join(dir, "toolmux.yaml"), "servers:\n  a:\n    comand: x\n")
	if !testservers.Eventually(30*time.Second, func() bool { return strings.Contains(p.stderr.String()[mark:], "stays") }) {
		t.Fatalf("no refusal:\n%s", p.stderr.String())
	}
	if refusal := p.stderr.String()[mark:]; !regexp.MustCompile(`toolmux\.yaml:3:5: `).MatchString(refusal) {
		t.Fatalf("the refusal does not give the error's position:\n%s", refusal)
	}
	if names := rc.tools(t, ctx); !slices.Contains(names, "d__echo") {
		t.Fatalf("the servers changed after a refused reload: %v", names)
	}
	loop.waitMore(t, 3)
	loop.end(t)
}

// reloadStatus is the reload part of GET /api/info.
type reloadStatus struct {
	Path             string
	Applied, Refused int
	Running, Pending bool
	Last             *struct {
		Trigger string
		Error   *struct{ Kind, Message string }
	}
}

func (p *serveProc) reloadStatus(t *testing.T) reloadStatus {
	t.Helper()
	var in struct{ Reload *reloadStatus }
	p.getJSON(t, "/api/info", &in)
	if in.Reload == nil {
		t.Fatal("/api/info has no reload status")
	}
	return *in.Reload
}

// renameFile replaces path by a file holding text, written next to it
// and renamed over it, as docs/operations.md asks writers to.
func renameFile(t *testing.T, path, text string) {
	t.Helper()
	tmp := path + ".tmp"
	writeFile(t, tmp, text)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// A reload of a file without servers (empty, comments only, "servers:"
// alone, cut while it was written before its servers) is refused while
// servers run: they stay and the client's calls go on, and the refusal,
// naming the file and why, is on stderr, in /api/info and in the
// metrics. servers: {} says it on purpose: it removes them.
func TestServeReloadRefusesNoServers(t *testing.T) {
	t.Parallel()
	fx := testservers.Fixture(t)
	v1 := fmt.Sprintf(`pipeline:
  truncate:
    max_chars: 5000
servers:
  a:
    command: %[1]s
  b:
    command: %[1]s
`, fx)
	dir := workspace(t, v1)
	cfgPath := filepath.Join(dir, "toolmux.yaml")
	p := startServeProc(t, dir, "", "--metrics")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rc := connectCounting(t, ctx, p)
	loop := startCaller(ctx, rc, "a__echo", map[string]any{"message": "hi"})
	loop.waitMore(t, 3)

	cases := []struct{ name, body string }{
		{"empty file", ""},
		{"servers: alone", "servers:\n"},
		{"comments only", "# the servers moved to another file\n"},
		{"cut while written", v1[:strings.Index(v1, "servers:")-3]}, // ...max_chars: 50
	}
	for i, c := range cases {
		mark := len(p.stderr.String())
		writeFile(t, cfgPath, c.body)
		if err := p.signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if !testservers.Eventually(30*time.Second, func() bool { return strings.Contains(p.stderr.String()[mark:], "stays") }) {
			t.Fatalf("%s: no refusal:\n%s", c.name, p.stderr.String())
		}
		refusal := p.stderr.String()[mark:]
		for _, want := range []string{"reload of " + cfgPath + " (SIGHUP) refused", "has no server", "(a, b)", "servers: {}"} {
			if !strings.Contains(refusal, want) {
				t.Errorf("%s: the refusal does not say %q:\n%s", c.name, want, refusal)
			}
		}
		st := p.reloadStatus(t)
		if st.Path != cfgPath || st.Refused != i+1 || st.Applied != 0 || st.Last == nil || st.Last.Trigger != "SIGHUP" ||
			st.Last.Error == nil || st.Last.Error.Kind != "no_servers" || !strings.Contains(st.Last.Error.Message, "has no server") {
			t.Fatalf("%s: /api/info reload: %+v", c.name, st)
		}
		if names := rc.tools(t, ctx); !slices.Contains(names, "a__echo") || !slices.Contains(names, "b__echo") {
			t.Fatalf("%s: the servers changed after a refused reload: %v", c.name, names)
		}
		if _, err := rc.call(ctx, "b__echo", map[string]any{"message": "x"}); err != nil {
			t.Fatalf("%s: b after the refusal: %v", c.name, err)
		}
		loop.waitMore(t, 3)
	}
	loop.end(t)
	fams := scrape(t, p, "")
	wantSample(t, fams, "toolmux_config_reloads_total", map[string]string{"result": "refused"}, float64(len(cases)))
	wantSample(t, fams, "toolmux_config_reloads_total", map[string]string{"result": "applied"}, 0)
	wantSample(t, fams, "toolmux_config_last_reload_successful", nil, 0)
	checkDocumented(t, fams)

	// On purpose: every server removed.
	before := rc.changed.Load()
	writeFile(t, cfgPath, "servers: {}\n")
	if err := p.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	rc.waitTools(t, ctx, p, before, nil, []string{"a__echo", "b__echo"})
	if !strings.Contains(p.stderr.String(), "removed a, b") {
		t.Errorf("serve did not say what the reload did:\n%s", p.stderr.String())
	}
	if st := p.reloadStatus(t); st.Applied != 1 || st.Last == nil || st.Last.Error != nil {
		t.Errorf("/api/info reload after servers: {}: %+v", st)
	}
	fams = scrape(t, p, "")
	wantSample(t, fams, "toolmux_config_reloads_total", map[string]string{"result": "applied"}, 1)
	wantSample(t, fams, "toolmux_config_last_reload_successful", nil, 1)
}

// A client calls a server that is in every version of the file while the
// file is rewritten over and over: in place, with a SIGHUP after each
// write (a reload may read the file truncated, between the two steps of
// the write), then by rename, seen by --watch. No call fails, and the last
// version of each round is applied.
func TestServeReloadUnderRewrites(t *testing.T) {
	t.Parallel()
	fx := testservers.Fixture(t)
	// version i has a, b or c by turns, and a deny list of its own;
	// last names one more server, to tell when it is applied.
	version := func(i int, last string) string {
		servers := []string{"a", []string{"b", "c"}[i%2]}
		if last != "" {
			servers = append(servers, last)
		}
		var b strings.Builder
		b.WriteString("servers:\n")
		for _, s := range servers {
			fmt.Fprintf(&b, "  %s:\n    command: %s\n", s, fx)
		}
		fmt.Fprintf(&b, "deny: [\"a/v%d\"]\n", i)
		return b.String()
	}
	dir := workspace(t, version(0, ""))
	cfgPath := filepath.Join(dir, "toolmux.yaml")
	p := startServeProc(t, dir, "", "--watch")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rc := connectCounting(t, ctx, p)
	loop := startCaller(ctx, rc, "a__echo", map[string]any{"message": "hi"})
	loop.waitMore(t, 3)

	const rewrites = 100
	for round, write := range []func(t *testing.T, path, text string){writeFile, renameFile} {
		last := []string{"d", "e"}[round]
		before := rc.changed.Load()
		for i := 1; i <= rewrites; i++ {
			text := version(i, "")
			if i == rewrites {
				text = version(i, last)
			}
			write(t, cfgPath, text)
			if round == 0 {
				if err := p.signal(syscall.SIGHUP); err != nil {
					t.Fatal(err)
				}
			}
		}
		rc.waitTools(t, ctx, p, before, []string{"a__echo", last + "__echo"}, nil)
		loop.waitMore(t, 3)
	}
	loop.end(t)
}

// SIGHUPs and changes of the file that come while a reload runs make one
// more reload, not one each: the first reload is held (it drains a
// removed server whose call goes on) while a storm of SIGHUPs and a
// rename of the file come; once it ends, exactly one more reload reads
// the file, with what was written during the first.
func TestServeReloadCoalescesSIGHUPs(t *testing.T) {
	t.Parallel()
	fx := testservers.Fixture(t)
	server := func(name string) string { return fmt.Sprintf("  %s:\n    command: %s\n", name, fx) }
	dir := workspace(t, "servers:\n"+server("a")+server("b")+"    trust: true\n")
	cfgPath := filepath.Join(dir, "toolmux.yaml")
	p := startServeProc(t, dir, "", "--watch", "--reload-drain", "10m")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rc := connectCounting(t, ctx, p)

	// A call of b that runs until the test cancels it.
	callCtx, stopCall := context.WithCancel(ctx)
	defer stopCall()
	inFlight := rc.callRunning(t, callCtx, "b__append", 600000)

	// The first reload removes b: it waits for b's call.
	renameFile(t, cfgPath, "servers:\n"+server("a"))
	if err := p.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if !testservers.Eventually(30*time.Second, func() bool { return p.reloadStatus(t).Running }) {
		t.Fatalf("no reload ran: %+v\n%s", p.reloadStatus(t), p.stderr.String())
	}

	// The storm, and a new version of the file, while it runs.
	for i := range 50 {
		if i == 25 {
			renameFile(t, cfgPath, "servers:\n"+server("a")+server("c"))
		}
		if err := p.signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	if !testservers.Eventually(30*time.Second, func() bool { st := p.reloadStatus(t); return st.Running && st.Pending }) {
		t.Fatalf("the storm left no reload pending: %+v", p.reloadStatus(t))
	}
	if st := p.reloadStatus(t); st.Applied != 0 || st.Refused != 0 {
		t.Fatalf("a reload ended while b's call went on: %+v\n%s", st, p.stderr.String())
	}

	// b's call ends, and with it the first reload; then one more.
	before := rc.changed.Load()
	stopCall()
	<-inFlight
	rc.waitTools(t, ctx, p, before, []string{"a__echo", "c__echo"}, []string{"b__echo"})
	if !testservers.Eventually(30*time.Second, func() bool { st := p.reloadStatus(t); return !st.Running && !st.Pending }) {
		t.Fatalf("reloads never settled: %+v", p.reloadStatus(t))
	}
	st := p.reloadStatus(t)
	reloaded := regexp.MustCompile(`(?m)^toolmux: reloaded .*$`).FindAllString(p.stderr.String(), -1)
	if st.Applied != 2 || st.Refused != 0 || len(reloaded) != 2 {
		t.Fatalf("%d reloads applied, %d refused, want 2 and 0:\n%s", st.Applied, st.Refused, p.stderr.String())
	}
	// The second reload says what it answers: the signals and the change
	// (the kernel and the signal channel may merge signals, so how many
	// is not asserted).
	if !strings.Contains(reloaded[0], "removed b") || !strings.Contains(reloaded[1], "added c") ||
		!regexp.MustCompile(`\((SIGHUP|\d+ SIGHUPs) and (a change|changes) of the file\)`).MatchString(reloaded[1]) {
		t.Errorf("the reloads did not read the file in turn:\n%s", strings.Join(reloaded, "\n"))
	}
	if _, err := rc.call(ctx, "c__echo", map[string]any{"message": "x"}); err != nil {
		t.Fatal(err)
	}
}
