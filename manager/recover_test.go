package manager_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/tool"
)

// quickRecovery retries fast, so that tests see several attempts.
var quickRecovery = manager.Recovery{MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}

// startCounter writes a script that appends a line to a file each time it
// starts, then runs the fixture with args; it returns the script and a
// function counting the starts.
func startCounter(t *testing.T, args ...string) (string, func() int) {
	t.Helper()
	dir := t.TempDir()
	counter := filepath.Join(dir, "starts")
	script := filepath.Join(dir, "server.sh")
	quoted := ""
	for _, a := range args {
		quoted += fmt.Sprintf(" %q", a)
	}
	body := fmt.Sprintf("#!/bin/sh\necho start >> %q\nexec %q%s\n", counter, testservers.Fixture(t), quoted)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, func() int {
		b, _ := os.ReadFile(counter)
		return strings.Count(string(b), "start")
	}
}

// catalogs collects what Recover's onChange is given.
type catalogs chan *tool.Catalog

func (c catalogs) onChange(cat *tool.Catalog) {
	select {
	case c <- cat:
	default:
	}
}

// waitFor waits for a catalog that has server/name.
func (c catalogs) waitFor(t *testing.T, server, name string) *tool.Catalog {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case cat := <-c:
			if _, ok := cat.Find(server, name); ok {
				return cat
			}
		case <-timeout:
			t.Fatalf("no catalog with %s/%s arrived", server, name)
			return nil
		}
	}
}

func TestServerThatFailedAtStartComesBackByItself(t *testing.T) {
	flag := filepath.Join(t.TempDir(), "ready")
	src, err := mcpsource.New(mcpsource.Config{Name: "late", Transport: mcpsource.Stdio, Command: testservers.Fixture(t),
		Args: []string{"-require", flag}, MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(t, manager.WithSource(src, manager.ServerOptions{Recovery: quickRecovery}))
	changes := make(catalogs, 16)
	m.Recover(changes.onChange)

	cat, err := m.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := cat.Server("late"); h.State != tool.StateFailed || !strings.Contains(h.Detail, "is missing") {
		t.Fatalf("health after a failed start: %+v", h)
	}
	// While it is down, its calls fail with its last error, stderr and all.
	r := do(m, "late", "echo", map[string]any{"message": "too early"})
	if kind(r) != tool.KindServerUnavailable || !strings.Contains(r.Error.Detail, flag+" is missing") {
		t.Fatalf("call while the server is down: %+v", r.Error)
	}
	if !errors.Is(r.Err(), tool.ErrNotSent) {
		t.Errorf("the refusal does not say the call was never sent: %v", r.Err())
	}

	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// No call, no listing: the server comes back, and its tools with it.
	cat = changes.waitFor(t, "late", "echo")
	if h, _ := cat.Server("late"); h.State != tool.StateReady || h.Tools == 0 {
		t.Errorf("health in the new catalog: %+v", h)
	}
	if r := do(m, "late", "echo", map[string]any{"message": "on time"}); r.Err() != nil || r.Result.Text() != "Echo: on time" {
		t.Errorf("call after the server came back: %+v", r.Error)
	}
}

func TestLostSessionIsRestartedWithoutACall(t *testing.T) {
	src, err := mcpsource.New(mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio, Command: testservers.Fixture(t),
		MinBackoff: 10 * time.Millisecond, StopGrace: 500 * time.Millisecond,
		HealthCheck: mcpsource.HealthCheck{PingAfter: 200 * time.Millisecond, PingTimeout: 300 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(t, manager.WithSource(src, manager.ServerOptions{Recovery: quickRecovery}))
	changes := make(catalogs, 16)
	m.Recover(changes.onChange)
	first, _ := strconv.Atoi(do(m, "fx", "pid", nil).Result.Text())

	// wedge is not safe to repeat: the manager does not retry it, so the
	// record is the in-flight call's own end.
	r := do(m, "fx", "wedge", nil)
	if kind(r) != tool.KindServerUnavailable || !errors.Is(r.Err(), mcpsource.ErrWedged) {
		t.Fatalf("the call in flight on the wedged server: %+v", r.Error)
	}
	changes.waitFor(t, "fx", "echo")
	h := m.Health()[0]
	if h.Restarts != 1 || h.PID == 0 || h.PID == first || !strings.Contains(h.Error, "stopped answering") {
		t.Errorf("health after the background restart: %+v (wedged pid %d)", h, first)
	}
	if !testservers.Eventually(10*time.Second, func() bool { return testservers.ProcessGone(first) }) {
		t.Errorf("the wedged process %d is still there", first)
	}
	if r := do(m, "fx", "pid", nil); r.Err() != nil || r.Result.Text() != strconv.Itoa(h.PID) {
		t.Errorf("the next call did not use the restarted server (pid %d): %+v %v", h.PID, r.Result, r.Err())
	}
}

func TestRecoveryRetriesWithBackoffUntilClose(t *testing.T) {
	before := goleak.IgnoreCurrent()
	script, starts := startCounter(t, "-exit", "2")
	src, err := mcpsource.New(mcpsource.Config{Name: "broken", Transport: mcpsource.Stdio, Command: script,
		MinBackoff: time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{Recovery: quickRecovery,
		Breaker: manager.Breaker{Failures: 2, Cooldown: 100 * time.Millisecond}}))
	if err != nil {
		t.Fatal(err)
	}
	m.Recover(nil)
	if _, err := m.Tools(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !testservers.Eventually(30*time.Second, func() bool { return starts() >= 4 }) {
		t.Fatalf("the failed server was started %d times, want retries in the background", starts())
	}
	// The breaker opened on the way, yet what health and calls quote is
	// still the server's own failure.
	if h := m.Health()[0]; !strings.Contains(h.Detail, "FIXTURE_API_KEY is not set") {
		t.Errorf("health does not quote the server's stderr: %+v", h)
	}
	if r := do(m, "broken", "echo", nil); kind(r) != tool.KindServerUnavailable || !strings.Contains(r.Error.Detail, "FIXTURE_API_KEY is not set") {
		t.Errorf("call of the broken server: %+v", r.Error)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	after := starts()
	// Close has ended the recovery: nothing of the manager's or the
	// source's still runs that could start the server again.
	goleak.VerifyNone(t, before)
	if n := starts(); n != after {
		t.Errorf("the server was started %d more times after Close", n-after)
	}
}

// Without Recover, nothing runs in the background: a failed server is
// tried again only when a listing or a call needs it.
func TestNoRecoveryWithoutRecover(t *testing.T) {
	before := goleak.IgnoreCurrent()
	script, starts := startCounter(t, "-exit", "2")
	src, err := mcpsource.New(mcpsource.Config{Name: "broken", Transport: mcpsource.Stdio, Command: script, MinBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(t, manager.WithSource(src, manager.ServerOptions{Recovery: quickRecovery}))
	if _, err := m.Tools(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Nothing runs that could try the server again.
	goleak.VerifyNone(t, before)
	if n := starts(); n != 1 {
		t.Errorf("started %d times without a call, want 1", n)
	}
	r := do(m, "broken", "echo", nil)
	if kind(r) != tool.KindServerUnavailable || starts() < 2 {
		t.Errorf("a call did not try the server again: %d starts, %+v", starts(), r.Error)
	}
}
