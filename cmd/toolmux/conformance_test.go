package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolmux/toolmux/internal/testservers"
)

// The official MCP conformance suite (@modelcontextprotocol/conformance,
// on the Node 22 of the test peers) runs against the go-sdk's conformance
// server directly and through toolmux serve's passthrough route, for each
// era: the default suite (sessions, 2025-11-25) against the server with
// sessions, and the 2026-07-28 requirements (sessionless) against the
// server in stateless mode, the two in parallel. Every scenario that passes
// directly must pass through the gateway. The Inspector CLI then lists and
// calls a tool on the aggregated /mcp.
func TestConformanceThroughPassthrough(t *testing.T) {
	t.Parallel()
	node := testservers.Node22(t)
	suite := testservers.NodeModule(t, "@modelcontextprotocol/conformance/dist/index.js")
	inspector := testservers.NodeBin(t, "mcp-inspector")

	t.Run("2026-07-28", func(t *testing.T) {
		t.Parallel()
		conformanceThrough(t, node, suite, startConformanceServerMode(t, true), 30, unsettledThroughModern, "--requirements", "2026-07-28")
	})
	t.Run("2025-11-25", func(t *testing.T) {
		t.Parallel()
		addr := conformanceThrough(t, node, suite, startConformanceServer(t), 20, unsettledThroughLegacy)
		t.Run("inspector", func(t *testing.T) {
			out := runInspector(t, inspector, "http://"+addr+"/mcp", "--method", "tools/list")
			if !strings.Contains(out, `"everything__test_simple_text"`) {
				t.Errorf("tools/list on /mcp lacks everything__test_simple_text:\n%.2000s", out)
			}
			out = runInspector(t, inspector, "http://"+addr+"/mcp", "--method", "tools/call", "--tool-name", "everything__test_simple_text")
			if !strings.Contains(out, "This is a simple text response for testing.") || strings.Contains(out, `"isError": true`) {
				t.Errorf("tools/call on /mcp:\n%s", out)
			}
		})
	})
}

// The checks of the conformance suite that come back SKIPPED or WARNING
// through the passthrough route, in each era, and why (checkUnsettled).
var (
	unsettledThroughModern = map[string]expectedCheck{
		// Skipped by the suite itself, directly too: its harness awaits
		// a rewrite for SEP-2663's notifications on the listen stream.
		"tasks-status-notifications/tasks-status-notifications": {"SKIPPED", "the suite's harness skips it (SEP-2663)"},
	}
	unsettledThroughLegacy = map[string]expectedCheck{}
)

// conformanceThrough runs the suite (with args) against upstream directly,
// expecting at least `least` scenarios to pass, then through the passthrough
// route of a toolmux serve in front of it, and reports every scenario that
// passed directly and fails through the route, and every check that came
// back SKIPPED or WARNING through it and is not listed in unsettled
// (checkUnsettled). It returns the gateway's address.
func conformanceThrough(t *testing.T, node, suite, upstream string, least int, unsettled map[string]expectedCheck, args ...string) string {
	direct := runConformance(t, node, suite, upstream, args...)
	passing := direct.passing()
	if len(passing) < least {
		t.Fatalf("only %d scenarios pass against the conformance server itself: %s", len(passing), direct.summary())
	}

	dir := workspace(t, fmt.Sprintf("servers:\n  everything:\n    url: %s\n    trust: true\n", upstream))
	addr := serveGateway(t, dir)
	through := runConformance(t, node, suite, "http://"+addr+"/servers/everything/mcp", args...)
	t.Logf("directly: %s", direct.summary())
	t.Logf("through the gateway: %s", through.summary())
	var lost []string
	for _, name := range passing {
		sc, ok := through[name]
		switch {
		case !ok:
			lost = append(lost, name+": did not run")
		case !sc.passed():
			lost = append(lost, name+": "+strings.Join(sc.failures, "; "))
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d of the %d scenarios that pass directly fail through /servers/everything/mcp:\n  %s",
			len(lost), len(passing), strings.Join(lost, "\n  "))
	}
	checkUnsettled(t, "through /servers/everything/mcp", through.unsettled(), unsettled)
	return addr
}

// startConformanceServer builds the go-sdk's conformance everything-server
// (a package of the go-sdk module toolmux requires) and runs it over
// stateful streamable HTTP on a free port: the stateless default cannot
// send requests to clients, which the sampling and elicitation scenarios
// of the 2025-11-25 era need. It returns the endpoint's URL.
func startConformanceServer(t *testing.T) string {
	t.Helper()
	return startConformanceServerMode(t, false)
}

// buildEverythingServer builds the go-sdk's conformance everything-server
// (a package of the go-sdk module toolmux requires) and returns its path.
func buildEverythingServer(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "everything-server")
	build := exec.Command("go", "build", "-o", bin, "github.com/modelcontextprotocol/go-sdk/conformance/everything-server")
	build.Dir = testservers.ModuleRoot(tb)
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("building the conformance server: %v\n%s", err, out)
	}
	return bin
}

// startConformanceServerMode is startConformanceServer, stateless or not:
// stateless, the server serves 2026-07-28 requests (and older ones without
// requests to the client); with sessions, protocols up to 2025-11-25.
func startConformanceServerMode(t *testing.T, stateless bool) string {
	t.Helper()
	bin := buildEverythingServer(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testservers.FreePort(t))
	cmd := exec.Command(bin, "-http="+addr, fmt.Sprintf("-stateless=%t", stateless))
	var out testservers.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	ok := testservers.Eventually(15*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	if !ok {
		t.Fatalf("the conformance server did not listen on %s: %s", addr, out.String())
	}
	return "http://" + addr + "/mcp"
}

// serveGateway runs toolmux serve in dir on a free port until the test
// ends, then stops it with SIGTERM and expects a clean exit.
func serveGateway(t *testing.T, dir string) string {
	t.Helper()
	addr, _ := serveGatewayLog(t, dir)
	return addr
}

// serveGatewayLog is serveGateway, also returning what serve writes on
// stderr.
func serveGatewayLog(t *testing.T, dir string) (string, *testservers.SyncBuffer) {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", testservers.FreePort(t))
	cmd := exec.Command(binary, "serve", "--addr", addr)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+t.TempDir())
	var errb testservers.SyncBuffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve did not exit cleanly: %v\n%s", err, errb.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("serve did not exit within 30s of SIGTERM:\n%s", errb.String())
		}
	})
	if !testservers.Eventually(30*time.Second, func() bool { return strings.Contains(errb.String(), "serving") }) {
		t.Fatalf("serve did not start: %s", errb.String())
	}
	return addr, &errb
}

// scenario is the outcome of one conformance scenario.
type scenario struct {
	checks   int
	failures []string // "check-id: message" of each failed check
	// unsettled are the checks that came back SKIPPED or WARNING: neither
	// passed nor failed.
	unsettled []conformanceCheck
}

func (s scenario) passed() bool { return len(s.failures) == 0 }

type conformance map[string]scenario

func (c conformance) passing() []string {
	var out []string
	for name, s := range c {
		if s.passed() {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// unsettled are the checks of every scenario that came back SKIPPED or
// WARNING, by "scenario/check-id".
func (c conformance) unsettled() map[string]conformanceCheck {
	out := map[string]conformanceCheck{}
	for name, s := range c {
		for _, check := range s.unsettled {
			out[name+"/"+check.ID] = check
		}
	}
	return out
}

// expectedCheck is a check of a conformance run expected to come back
// SKIPPED or WARNING, and why.
type expectedCheck struct{ Status, Why string }

// checkUnsettled holds the checks of a conformance run that came back
// SKIPPED or WARNING (got, by "scenario/check-id") to the list of those
// expected to (want): each would otherwise pass silently. A new one fails
// the test (make it pass, or list it with the reason), and so does a listed
// one that no longer comes back so (it passes now, or fails: take it off the
// list), so that the list stays the run's.
func checkUnsettled(t testing.TB, run string, got map[string]conformanceCheck, want map[string]expectedCheck) {
	t.Helper()
	for _, key := range slices.Sorted(maps.Keys(got)) {
		g := got[key]
		w, ok := want[key]
		switch {
		case !ok:
			t.Errorf("%s: %s came back %s (%q), and is not on the list of checks expected to: make it pass, or list it with the reason",
				run, key, g.Status, g.ErrorMessage)
		case w.Status != g.Status:
			t.Errorf("%s: %s came back %s (%q), listed as expected to come back %s (%s): update the list",
				run, key, g.Status, g.ErrorMessage, w.Status, w.Why)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(want)) {
		if _, ok := got[key]; !ok {
			t.Errorf("%s: %s is listed as expected to come back %s (%s), and did not (it passes now, or fails, or did not run): take it off the list",
				run, key, want[key].Status, want[key].Why)
		}
	}
	t.Logf("%s: %d checks came back SKIPPED or WARNING, %d are listed as expected to", run, len(got), len(want))
}

func (c conformance) summary() string {
	checks, failed := 0, 0
	for _, s := range c {
		checks += s.checks
		failed += len(s.failures)
	}
	return fmt.Sprintf("%d of %d scenarios pass (%d of %d checks)", len(c.passing()), len(c), checks-failed, checks)
}

// runConformance runs the suite's server scenarios (its active suite, or
// those args select) against url and reads the checks.json it writes for each scenario. The
// suite's exit status only says whether something failed, so it is not
// used.
func runConformance(t *testing.T, node, suite, url string, args ...string) conformance {
	t.Helper()
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{suite, "server", "--url", url, "-o", out}, args...)...)
	cmd.Dir = out
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(node)+string(os.PathListSeparator)+os.Getenv("PATH"), "NO_COLOR=1")
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stdout
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("the conformance suite did not finish: %v\n%s", err, stdout.String())
	}
	// The scenarios run, from the suite's own report.
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(stdout.Bytes()))
	for sc.Scan() {
		if name, ok := strings.CutPrefix(sc.Text(), "=== Running scenario: "); ok {
			names = append(names, strings.TrimSuffix(name, " ==="))
		}
		// One scenario (--scenario) is announced so.
		if m := oneScenario.FindStringSubmatch(sc.Text()); m != nil {
			names = append(names, m[1])
		}
	}
	if len(names) == 0 {
		t.Fatalf("the conformance suite ran no scenario (%v):\n%s", err, stdout.String())
	}
	// Results are in OUT/server-SCENARIO-TIMESTAMP/checks.json.
	stamp := regexp.MustCompile(`-\d{4}-\d{2}-\d{2}T[\d-]+Z$`)
	dirs, rerr := os.ReadDir(out)
	if rerr != nil {
		t.Fatal(rerr)
	}
	res := conformance{}
	for _, name := range names {
		res[name] = scenario{failures: []string{"no results written"}}
	}
	for _, d := range dirs {
		name := stamp.ReplaceAllString(strings.TrimPrefix(d.Name(), "server-"), "")
		if !d.IsDir() || !slices.Contains(names, name) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(out, d.Name(), "checks.json"))
		if err != nil {
			t.Fatal(err)
		}
		var checks []struct {
			ID, Status, ErrorMessage string
		}
		if err := json.Unmarshal(b, &checks); err != nil {
			t.Fatalf("%s: %v", d.Name(), err)
		}
		s := scenario{checks: len(checks)}
		for _, c := range checks {
			switch c.Status {
			case "FAILURE":
				s.failures = append(s.failures, c.ID+": "+c.ErrorMessage)
			case "SKIPPED", "WARNING":
				s.unsettled = append(s.unsettled, conformanceCheck(c))
			}
		}
		res[name] = s
	}
	return res
}

// oneScenario is how the suite announces the one scenario --scenario runs.
var oneScenario = regexp.MustCompile(`^Running client scenario '([^']+)' against server`)

// runInspector runs the MCP Inspector's CLI mode against url.
func runInspector(t *testing.T, inspector, url string, args ...string) string {
	t.Helper()
	out, err := inspect(t, inspector, url, args...)
	if err != nil {
		t.Fatalf("inspector %v: %v\n%s", args, err, out)
	}
	return out
}

// inspect runs the MCP Inspector's CLI mode against url, returning its
// output and how it exited.
func inspect(t *testing.T, inspector, url string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, inspector, append([]string{"--cli", url, "--transport", "http"}, args...)...)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// errorsOf records a test's errors (and passes its logs on).
type errorsOf struct {
	testing.TB
	errs []string
}

func (e *errorsOf) Errorf(format string, args ...any) {
	e.errs = append(e.errs, fmt.Sprintf(format, args...))
}

// checkUnsettled fails a run whose SKIPPED and WARNING checks are not the
// ones listed: a new one, one that came back otherwise, one listed that
// came back settled; it passes the run that matches its list.
func TestCheckUnsettled(t *testing.T) {
	want := map[string]expectedCheck{"s/skipped": {"SKIPPED", "why"}, "s/warned": {"WARNING", "why"}}
	for _, c := range []struct {
		name string
		got  []conformanceCheck
		errs int
	}{
		{"as listed", []conformanceCheck{{ID: "skipped", Status: "SKIPPED"}, {ID: "warned", Status: "WARNING"}}, 0},
		{"a new one", []conformanceCheck{{ID: "skipped", Status: "SKIPPED"}, {ID: "warned", Status: "WARNING"}, {ID: "new", Status: "SKIPPED"}}, 1},
		{"one passes now", []conformanceCheck{{ID: "skipped", Status: "SKIPPED"}}, 1},
		{"skipped, not warned", []conformanceCheck{{ID: "skipped", Status: "SKIPPED"}, {ID: "warned", Status: "SKIPPED"}}, 1},
	} {
		got := conformance{"s": {unsettled: c.got}}.unsettled()
		e := &errorsOf{TB: t}
		checkUnsettled(e, "run", got, want)
		if len(e.errs) != c.errs {
			t.Errorf("%s: %d errors %q, want %d", c.name, len(e.errs), e.errs, c.errs)
		}
	}
}
