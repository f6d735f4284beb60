package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

// legacyProtocol is the newest protocol with sessions: the go-sdk's
// client asks for 2026-07-28 unless told otherwise.
const legacyProtocol = "2025-11-25"

// eraConfig serves the fixture as fx with a rule that asks before
// fx/append; extra is appended (more servers).
func eraConfig(t *testing.T, extra string) string {
	return fmt.Sprintf(`servers:
  fx:
    command: %s
%spolicy:
  rules:
    - name: ask before appending
      tools: [fx/append]
      action: ask
`, testservers.Fixture(t), extra)
}

// eraClient is a go-sdk client of one protocol era that answers approval
// questions with "once" and counts what it is told.
type eraClient struct {
	name     string
	cs       *mcp.ClientSession
	changed  atomic.Int64
	progress atomic.Int64
	mu       sync.Mutex
	asked    []string
}

// connectEra connects a client asking for protocol version to transport.
func connectEra(t *testing.T, ctx context.Context, name, version string, transport mcp.Transport) *eraClient {
	t.Helper()
	ec := &eraClient{name: name}
	client := mcp.NewClient(&mcp.Implementation{Name: name, Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { ec.changed.Add(1) },
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			ec.progress.Add(1)
		},
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			ec.mu.Lock()
			ec.asked = append(ec.asked, r.Params.Message)
			ec.mu.Unlock()
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "once"}}, nil
		},
	})
	cs, err := client.Connect(ctx, transport, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	t.Cleanup(func() { cs.Close() })
	if got := cs.InitializeResult().ProtocolVersion; got != version {
		t.Fatalf("%s asked for %s and got %s", name, version, got)
	}
	ec.cs = cs
	return ec
}

func (ec *eraClient) tools(t *testing.T, ctx context.Context) []string {
	t.Helper()
	res, err := ec.cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("%s: %v", ec.name, err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	return names
}

// exercise lists the tools (sorted), makes a call with progress, and a
// call the policy asks about, which the client approves.
func (ec *eraClient) exercise(t *testing.T, ctx context.Context, dir string) {
	t.Helper()
	names := ec.tools(t, ctx)
	if !slices.Contains(names, "fx__echo") || !slices.IsSorted(names) {
		t.Errorf("%s: tools %v", ec.name, names)
	}
	if again := ec.tools(t, ctx); !slices.Equal(names, again) {
		t.Errorf("%s: the order changed between two lists: %v, then %v", ec.name, names, again)
	}
	// A pause after each step: progress sent at the moment of the answer
	// may come after it (docs/gateway.md), and is then not counted.
	p := &mcp.CallToolParams{Name: "fx__progress", Arguments: map[string]any{"steps": 3, "delay_ms": 100}}
	p.SetProgressToken(ec.name)
	res, err := ec.cs.CallTool(ctx, p)
	if err != nil || res.IsError || testservers.ResultText(res) != "3 steps" {
		t.Fatalf("%s: progress call: %v %+v", ec.name, err, res)
	}
	if !testservers.Eventually(10*time.Second, func() bool { return ec.progress.Load() >= 3 }) {
		t.Errorf("%s: %d progress notifications, want 3", ec.name, ec.progress.Load())
	}
	file := filepath.Join(dir, ec.name+".log")
	res, err = ec.cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__append", Arguments: map[string]any{"path": file, "line": ec.name}})
	if err != nil || res.IsError {
		t.Fatalf("%s: the call to approve: %v %+v", ec.name, err, res)
	}
	ec.mu.Lock()
	asked := slices.Clone(ec.asked)
	ec.mu.Unlock()
	if len(asked) != 1 || !strings.Contains(asked[0], "approve the call to fx/append") {
		t.Errorf("%s was asked %q", ec.name, asked)
	}
	if b, err := os.ReadFile(file); err != nil || strings.TrimSpace(string(b)) != ec.name {
		t.Errorf("%s: the approved call did not run: %q %v", ec.name, b, err)
	}
}

// waitTool waits for a list change that brings name.
func (ec *eraClient) waitTool(t *testing.T, ctx context.Context, since int64, name string) {
	t.Helper()
	if !testservers.Eventually(30*time.Second, func() bool {
		return ec.changed.Load() > since && slices.Contains(ec.tools(t, ctx), name)
	}) {
		t.Fatalf("%s was never told of %s (list changes: %d, was %d)", ec.name, name, ec.changed.Load(), since)
	}
}

// The done-when test of both protocol eras on /mcp: a 2026-07-28 client
// (no session, each request's _meta; approvals by input_required, list
// changes on subscriptions/listen) and a 2025-11-25 client (a session;
// approvals by elicitation/create, list changes on its GET stream) use
// one serve process at once: tools/list, a call with progress, an
// approval, and a server added by a reload seen by both. Each client's
// calls are in a task of its own.
func TestServeBothEras(t *testing.T) {
	t.Parallel()
	dir := workspace(t, eraConfig(t, ""))
	p := startServeProc(t, dir, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	old := connectEra(t, ctx, "old", legacyProtocol, &mcp.StreamableClientTransport{Endpoint: p.url("/mcp")})
	modern := connectEra(t, ctx, "modern", "2026-07-28", &mcp.StreamableClientTransport{Endpoint: p.url("/mcp")})
	if old.cs.ID() == "" || modern.cs.ID() != "" {
		t.Fatalf("session ids: old %q, modern %q", old.cs.ID(), modern.cs.ID())
	}
	var wg sync.WaitGroup
	for _, ec := range []*eraClient{old, modern} {
		wg.Go(func() { ec.exercise(t, ctx, dir) })
	}
	wg.Wait()

	sinceOld, sinceModern := old.changed.Load(), modern.changed.Load()
	writeFile(t, filepath.Join(dir, "toolmux.yaml"), eraConfig(t, fmt.Sprintf("  added:\n    command: %s\n", testservers.Fixture(t))))
	if err := p.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	old.waitTool(t, ctx, sinceOld, "added__echo")
	modern.waitTool(t, ctx, sinceModern, "added__echo")

	// The tasks: the session's, and the sessionless client's.
	var tasks []struct {
		ID    string `json:"id"`
		Input string `json:"input"`
	}
	p.getJSON(t, "/api/tasks?limit=100", &tasks)
	var inputs []string
	for _, task := range tasks {
		inputs = append(inputs, task.Input)
	}
	if !slices.Contains(inputs, "MCP session of old 1 on /mcp") ||
		!slices.Contains(inputs, "MCP calls of modern 1 on /mcp (protocol 2026-07-28, no session)") {
		t.Errorf("tasks: %q", inputs)
	}
}

// serve --stdio serves both eras, one process each: the list, progress,
// an approval (2025-11-25 by elicitation/create, 2026-07-28 by
// input_required) and a list change by a reload.
func TestServeStdioBothEras(t *testing.T) {
	t.Parallel()
	for _, version := range []string{legacyProtocol, "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			t.Parallel()
			dir := workspace(t, eraConfig(t, ""))
			cmd, stderr := stdioServe(t, dir)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			ec := connectEra(t, ctx, "stdio-"+version, version, &mcp.CommandTransport{Command: cmd})
			ec.exercise(t, ctx, dir)
			since := ec.changed.Load()
			writeFile(t, filepath.Join(dir, "toolmux.yaml"), eraConfig(t, fmt.Sprintf("  added:\n    command: %s\n", testservers.Fixture(t))))
			if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			ec.waitTool(t, ctx, since, "added__echo")
			if t.Failed() {
				t.Log(stderr.String())
			}
		})
	}
}

// conformanceOnMCP are the official conformance suite's scenarios of the
// sessionless protocol (--requirements 2026-07-28) run against the
// gateway's own routes, and the checks that cannot pass there, with why.
// Everything else must pass, or be listed in conformanceUnsettledOnMCP as
// skipped or warning (on a SHOULD that needs the suite's own tools). The full suite, fixture tools and all, runs
// through the passthrough route (TestConformanceThroughPassthrough).
var conformanceOnMCP = []string{"server-stateless", "caching", "http-header-validation"}

var conformanceNotOnMCP = map[string]string{
	// These need the suite's diagnostic tools (test_missing_capability,
	// test_streaming_elicitation, test_logging_tool) under their own
	// names, answering with the client's capabilities, questions and
	// log level: on /mcp tools are named server__tool and run over the
	// gateway's own session with their server.
	"sep-2575-server-rejects-undeclared-capability":          "needs the suite's tool test_missing_capability",
	"sep-2575-missing-capability-http-400":                   "needs the suite's tool test_missing_capability",
	"sep-2575-http-server-no-independent-requests-on-stream": "needs the suite's tool test_streaming_elicitation",
	"sep-2575-server-no-log-without-loglevel":                "needs the suite's tool test_logging_tool",
	// /mcp and the virtual servers serve tools only, and declare no
	// other capability; prompts and resources are passthrough routes'.
	"sep-2549-prompts-list-caching-hints":             "no prompts on /mcp",
	"sep-2549-resources-list-caching-hints":           "no resources on /mcp",
	"sep-2549-resources-templates-list-caching-hints": "no resources on /mcp",
}

// conformanceUnsettledOnMCP are the checks of conformanceOnMCP that come
// back SKIPPED or WARNING on /mcp and on a virtual server, and why
// (checkUnsettled): each would otherwise pass silently.
var conformanceUnsettledOnMCP = map[string]expectedCheck{
	"caching/sep-2549-resources-read-caching-hints": {"SKIPPED", "no resources on /mcp: resources/read is not exercised"},
	"server-stateless/sep-2575-server-sends-prompts-list-changed-on-subscription": {"SKIPPED",
		"no prompts on /mcp: prompts.listChanged is not declared"},
	// The suite changes the tool list by calling its diagnostic tool
	// test_trigger_tool_change, which /mcp does not have. A list change
	// by a reload reaching the listen stream: TestServeBothEras.
	"server-stateless/sep-2575-server-sends-tools-list-changed-on-subscription": {"WARNING",
		"needs the suite's tool test_trigger_tool_change"},
}

// The conformance suite's sessionless scenarios against /mcp and a
// virtual server: every check passes but those conformanceNotOnMCP names.
func TestConformanceSessionlessOnMCP(t *testing.T) {
	t.Parallel()
	node := testservers.Node22(t)
	suite := testservers.NodeModule(t, "@modelcontextprotocol/conformance/dist/index.js")
	dir := workspace(t, fmt.Sprintf(`servers:
  fx:
    command: %s
virtual_servers:
  - name: echoes
    tools: ["fx/echo"]
`, testservers.Fixture(t)))
	addr := serveGateway(t, dir)
	for _, route := range []string{"/mcp", "/virtual/echoes/mcp"} {
		unsettled := map[string]conformanceCheck{}
		for _, name := range conformanceOnMCP {
			checks := runScenario(t, node, suite, "http://"+addr+route, name)
			passed := 0
			for _, c := range checks {
				switch {
				case c.Status == "SUCCESS":
					passed++
				case c.Status == "FAILURE" && conformanceNotOnMCP[c.ID] == "":
					t.Errorf("%s on %s: %s: %s", name, route, c.ID, c.ErrorMessage)
				case c.Status == "SKIPPED" || c.Status == "WARNING":
					unsettled[name+"/"+c.ID] = c
				}
			}
			if passed == 0 {
				t.Errorf("%s on %s: no check passed", name, route)
			}
			t.Logf("%s on %s: %d of %d checks pass", name, route, passed, len(checks))
		}
		checkUnsettled(t, "on "+route, unsettled, conformanceUnsettledOnMCP)
	}
}

type conformanceCheck struct {
	ID, Status, ErrorMessage string
}

// runScenario runs one scenario of the conformance suite against url and
// returns its checks.
func runScenario(t *testing.T, node, suite, url, name string) []conformanceCheck {
	t.Helper()
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, suite, "server", "--url", url, "--scenario", name, "-o", out)
	cmd.Dir = out
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	b, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish: %v\n%s", name, err, b)
	}
	found, _ := filepath.Glob(filepath.Join(out, "server-"+name+"-*", "checks.json"))
	if len(found) != 1 {
		t.Fatalf("%s wrote no checks (%v):\n%s", name, err, b)
	}
	raw, err := os.ReadFile(found[0])
	if err != nil {
		t.Fatal(err)
	}
	var checks []conformanceCheck
	if err := json.Unmarshal(raw, &checks); err != nil {
		t.Fatal(err)
	}
	return checks
}
