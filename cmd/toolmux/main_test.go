package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "toolmux-cli-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "toolmux")
	out, err := exec.Command("go", "build", "-race", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building toolmux: %v\n%s", err, out)
		os.Exit(1)
	}
	// Code mode's engine beside it, where make build puts it and toolmux
	// looks for it first.
	out, err = exec.Command("go", "build", "-o", filepath.Join(dir, "toolmux-codemode"), "../toolmux-codemode").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building toolmux-codemode: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	stdout, stderr string
	code           int
}

func toolmux(t *testing.T, dir, stdin string, args ...string) result {
	t.Helper()
	// State (the task log, spilled outputs) goes to a directory of the
	// test's own, never to the home directory of whoever runs the tests.
	return execToolmux(t, dir, stdin, append(os.Environ(), "XDG_DATA_HOME="+t.TempDir()), args...)
}

// execToolmux runs the binary in dir with exactly env, stdin as its input.
func execToolmux(t *testing.T, dir, stdin string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	code := exitCode(t, cmd.Run()) // before the output is read
	return result{out.String(), errb.String(), code}
}

// exitCode is the exit status of a finished run of the binary; an error
// other than a non-zero exit fails the test.
func exitCode(t *testing.T, err error) int {
	t.Helper()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0
}

// workspace makes a directory with a file and, when cfg is not empty, a
// toolmux.yaml.
func workspace(t testing.TB, cfg string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("alpha\nbeta\ngamma\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if cfg != "" {
		if err := os.WriteFile(filepath.Join(dir, "toolmux.yaml"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func fixtureConfig(t *testing.T) string {
	return fmt.Sprintf(`servers:
  fx:
    command: %s
    trust: true
  broken:
    command: %s
    args: ["-exit", "2"]
deny: ["fx/pid"]
`, testservers.Fixture(t), testservers.Fixture(t))
}

func TestToolsWithoutConfig(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "")
	r := toolmux(t, dir, "", "tools")
	if r.code != 0 || !strings.Contains(r.stdout, "builtin__read_file") || !strings.Contains(r.stdout, "ready") {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = toolmux(t, dir, "", "tools", "--json")
	var entries []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil {
		t.Fatalf("--json output is not a JSON array: %v\n%s", err, r.stdout)
	}
	names := map[string]bool{}
	for _, e := range entries {
		for _, k := range []string{"server", "tool", "name", "description", "input_schema"} {
			if _, ok := e[k]; !ok {
				t.Errorf("entry lacks %q: %v", k, e)
			}
		}
		names[e["name"].(string)] = true
	}
	for _, n := range []string{"builtin__list_directory", "builtin__read_file", "builtin__glob", "builtin__grep"} {
		if !names[n] {
			t.Errorf("%s missing", n)
		}
	}
}

// A server that fails to come up is listed with its error, and tools
// exits 1 naming it (a CI step can check that all servers come up); a
// disabled server is no failure.
func TestToolsShowsFailedServers(t *testing.T) {
	t.Parallel()
	dir := workspace(t, fixtureConfig(t))
	r := toolmux(t, dir, "", "tools", "--json")
	if r.code != 1 || !strings.Contains(r.stderr, "1 server failed to come up: broken") {
		t.Fatalf("exit %d, want 1 naming the failed server: %s", r.code, r.stderr)
	}
	var entries []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil {
		t.Fatal(err)
	}
	var sawEcho, sawBroken bool
	for _, e := range entries {
		switch {
		case e["name"] == "fx__echo":
			sawEcho = true
		case e["name"] == "fx__pid":
			t.Error("denied tool fx__pid listed")
		case e["server"] == "broken":
			sawBroken = e["state"] == "failed" && strings.Contains(fmt.Sprint(e["error"]), "exited with status 2")
		}
	}
	if !sawEcho || !sawBroken {
		t.Errorf("echo %v, broken server entry %v:\n%s", sawEcho, sawBroken, r.stdout)
	}
	r = toolmux(t, dir, "", "tools")
	if !strings.Contains(r.stdout, "FIXTURE_API_KEY is not set") || !strings.Contains(r.stdout, "broken (failed): server broken exited with status 2") {
		t.Errorf("table does not show the failed server's error and stderr:\n%s", r.stdout)
	}
	if r.code != 1 || !strings.Contains(r.stderr, "1 server failed to come up: broken") {
		t.Errorf("table: exit %d, want 1 naming the failed server: %s", r.code, r.stderr)
	}
	dir = workspace(t, fmt.Sprintf("servers:\n  fx:\n    command: %s\n  off:\n    command: %s\n    args: [\"-exit\", \"2\"]\n    disabled: true\n",
		testservers.Fixture(t), testservers.Fixture(t)))
	r = toolmux(t, dir, "", "tools")
	if r.code != 0 || !regexp.MustCompile(`\noff +disabled `).MatchString(r.stdout) {
		t.Errorf("a disabled server: exit %d, want 0 with it listed as disabled\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

func TestCall(t *testing.T) {
	t.Parallel()
	dir := workspace(t, fixtureConfig(t))
	r := toolmux(t, dir, "", "call", "builtin", "read_file", `{"path": "notes.txt", "offset": 1, "limit": 1}`)
	if r.code != 0 || !strings.Contains(r.stdout, "beta") || strings.Contains(r.stdout, "alpha") {
		t.Errorf("read_file: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = toolmux(t, dir, `{"message": "from stdin"}`, "call", "fx", "echo", "-")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "Echo: from stdin" {
		t.Errorf("echo from stdin: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	r = toolmux(t, dir, "", "call", "fx", "echo", `{"message": "rec"}`, "--json")
	var rec map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil {
		t.Fatalf("--json: %v\n%s", err, r.stdout)
	}
	for _, k := range []string{"server", "tool", "arguments", "result", "duration_ms", "attempts"} {
		if _, ok := rec[k]; !ok {
			t.Errorf("record lacks %q: %s", k, r.stdout)
		}
	}
	if r.code != 0 || rec["attempts"] != float64(1) {
		t.Errorf("exit %d, record %v", r.code, rec)
	}
}

func TestCallFailures(t *testing.T) {
	t.Parallel()
	dir := workspace(t, fixtureConfig(t))
	cases := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"tool error", []string{"call", "fx", "fail"}, 1, "tool_error"},
		{"denied", []string{"call", "fx", "pid"}, 1, "policy_violation"},
		{"typo", []string{"call", "fx", "ecoh"}, 1, `did you mean "echo"`},
		{"outside workspace", []string{"call", "builtin", "read_file", `{"path": "/etc/passwd"}`}, 1, "path_not_in_workspace"},
		{"crash", []string{"call", "fx", "crash"}, 1, "simulated crash"},
		{"failed server", []string{"call", "broken", "echo"}, 1, "server_unavailable"},
		{"unknown server", []string{"call", "nope", "echo"}, 1, "server_not_found"},
		{"bad json", []string{"call", "fx", "echo", `{"message":`}, 2, "not valid JSON"},
		{"not an object", []string{"call", "fx", "echo", `[1,2]`}, 2, "not an array"},
		{"missing tool", []string{"call", "fx"}, 2, "fx is a server: name one of its tools too"},
		{"unknown flag", []string{"call", "fx", "echo", "--nope"}, 2, "unknown flag"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := toolmux(t, dir, "", c.args...)
			if r.code != c.code || !strings.Contains(r.stderr, c.stderr) {
				t.Errorf("exit %d (want %d), stderr %q (want %q)", r.code, c.code, r.stderr, c.stderr)
			}
		})
	}
	r := toolmux(t, dir, "", "call", "fx", "fail", "--json")
	var rec struct {
		Error struct{ Kind, Message string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil || r.code != 1 || rec.Error.Kind != "tool_error" {
		t.Errorf("--json failure: exit %d, %v, %s", r.code, err, r.stdout)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "servers:\n  fx:\n    comand: x\n")
	r := toolmux(t, dir, "", "tools")
	if r.code != 2 || !strings.Contains(r.stderr, "toolmux.yaml:3:5") || !strings.Contains(r.stderr, "comand") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
	r = toolmux(t, dir, "", "tools", "--config", "missing.yaml")
	if r.code != 2 || !strings.Contains(r.stderr, "missing.yaml") {
		t.Errorf("missing file: exit %d, stderr %q", r.code, r.stderr)
	}
	// The common mcpServers JSON is accepted as is.
	js := fmt.Sprintf(`{"mcpServers": {"fx": {"command": %q, "excludeTools": ["pid"]}}, "theme": "dark"}`, testservers.Fixture(t))
	if err := os.WriteFile(filepath.Join(dir, "settings.json"), []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	r = toolmux(t, dir, "", "call", "fx", "pid", "--config", "settings.json")
	if r.code != 1 || !strings.Contains(r.stderr, "policy_violation") {
		t.Errorf("mcpServers config: exit %d, stderr %q", r.code, r.stderr)
	}
	r = toolmux(t, dir, "", "call", "fx", "echo", `{"message":"json config"}`, "--config", "settings.json")
	if r.code != 0 || !strings.Contains(r.stdout, "json config") {
		t.Errorf("mcpServers config call: exit %d, %s %s", r.code, r.stdout, r.stderr)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := toolmux(t, t.TempDir(), "", "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "toolmux ") {
		t.Errorf("exit %d %q", r.code, r.stdout)
	}
}

func TestServeHTTP(t *testing.T) {
	t.Parallel()
	dir := workspace(t, fixtureConfig(t))
	addr := fmt.Sprintf("127.0.0.1:%d", testservers.FreePort(t))
	cmd := exec.Command(binary, "serve", "--addr", addr)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+t.TempDir())
	var errb testservers.SyncBuffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	ok := testservers.Eventually(30*time.Second, func() bool { return strings.Contains(errb.String(), "serving") })
	if !ok {
		t.Fatalf("serve did not start: %s", errb.String())
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	exerciseGateway(t, ctx, cs)
	cs.Close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("serve did not exit cleanly on SIGTERM: %v\n%s", err, errb.String())
	}
}

func TestServeStdio(t *testing.T) {
	t.Parallel()
	dir := workspace(t, fixtureConfig(t))
	cmd := exec.Command(binary, "serve", "--stdio")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+t.TempDir())
	client := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	exerciseGateway(t, ctx, cs)
	if err := cs.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}

func exerciseGateway(t *testing.T, ctx context.Context, cs *mcp.ClientSession) {
	t.Helper()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, tl := range res.Tools {
		have[tl.Name] = true
	}
	for _, want := range []string{"fx__echo", "builtin__read_file"} {
		if !have[want] {
			t.Errorf("%s not served: %v", want, have)
		}
	}
	if have["fx__pid"] {
		t.Error("denied tool served")
	}
	out, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__echo", Arguments: map[string]any{"message": "via gateway"}})
	if err != nil || out.IsError || out.Content[0].(*mcp.TextContent).Text != "Echo: via gateway" {
		t.Errorf("fx__echo: %v %+v", err, out)
	}
	out, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "builtin__read_file", Arguments: map[string]any{"path": "/etc/passwd"}})
	if err != nil || !out.IsError || !strings.Contains(out.Content[0].(*mcp.TextContent).Text, "path_not_in_workspace") {
		t.Errorf("escape through the gateway: %v %+v", err, out)
	}
}

func TestServeRefusesOpenAddressWithoutToken(t *testing.T) {
	t.Parallel()
	r := toolmux(t, t.TempDir(), "", "serve", "--addr", "0.0.0.0:0")
	if r.code != 2 || !strings.Contains(r.stderr, "token") {
		t.Errorf("exit %d, %q", r.code, r.stderr)
	}
}

func TestCallThroughThePipeline(t *testing.T) {
	t.Parallel()
	cfg := fixtureConfig(t) + "pipeline:\n  truncate:\n    tools: {\"fx/big\": 300}\n"
	dir := workspace(t, cfg)
	data := t.TempDir()

	// Repaired through the pipeline; refused by the tool with --raw.
	r := toolmux(t, dir, "", "call", "builtin", "read_file", `{"Path": "notes.txt"}`)
	if r.code != 0 || !strings.Contains(r.stdout, "alpha") {
		t.Errorf("repaired call: exit %d %s %s", r.code, r.stdout, r.stderr)
	}
	r = toolmux(t, dir, "", "call", "builtin", "read_file", `{"Path": "notes.txt"}`, "--raw")
	if r.code != 1 || !strings.Contains(r.stderr, "invalid_tool_params") {
		t.Errorf("--raw call: exit %d %s", r.code, r.stderr)
	}

	// Truncated for the model, spilled in full under --data-dir.
	r = toolmux(t, dir, "", "call", "fx", "big", `{"bytes": 5000}`, "--json", "--data-dir", data)
	var rec struct {
		Result struct{ Content []struct{ Text string } }
		Notes  []struct {
			Layer string
			Data  map[string]any
		}
		Verdict *struct{ Rollback bool }
	}
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil || r.code != 0 {
		t.Fatalf("exit %d, %v\n%s", r.code, err, r.stdout)
	}
	if len(rec.Notes) != 1 || rec.Notes[0].Layer != "truncate" || rec.Verdict == nil {
		t.Fatalf("notes %+v verdict %+v", rec.Notes, rec.Verdict)
	}
	spill, _ := rec.Notes[0].Data["spill_path"].(string)
	if b, err := os.ReadFile(spill); err != nil || len(b) != 5000 || !strings.HasPrefix(spill, data) {
		t.Errorf("spill %q: %v, %d bytes", spill, err, len(b))
	}
	if n := len([]rune(rec.Result.Content[0].Text)); n > 300 {
		t.Errorf("the model sees %d characters, limit 300", n)
	}

	// Secrets are masked in the record.
	r = toolmux(t, dir, "", "call", "fx", "echo", `{"message": "Authorization: Bearer abcdefghijklmnopqrstuvwxyz"}`, "--json")
	if r.code != 0 || strings.Contains(r.stdout, "abcdefghijklmnop") || !strings.Contains(r.stdout, "[REDACTED]") {
		t.Errorf("masking: exit %d\n%s", r.code, r.stdout)
	}
}

// `toolmux call` refuses arguments nested deeper than limits.max_depth,
// with or without the pipeline, before anything is called.
func TestCallRefusesDeepArguments(t *testing.T) {
	t.Parallel()
	dir := workspace(t, fixtureConfig(t)+"limits:\n  max_depth: 3\n")
	for _, extra := range [][]string{nil, {"--raw"}} {
		args := append([]string{"call", "fx", "echo", `{"message": [[["too deep"]]]}`}, extra...)
		r := toolmux(t, dir, "", args...)
		if r.code != 2 || !strings.Contains(r.stderr, "invalid_tool_params") || !strings.Contains(r.stderr, "3 levels (limits.max_depth)") {
			t.Errorf("%v: exit %d %s", extra, r.code, r.stderr)
		}
	}
	if r := toolmux(t, dir, "", "call", "fx", "echo", `{"message": "shallow"}`); r.code != 0 {
		t.Errorf("within the limit: exit %d %s", r.code, r.stderr)
	}
}

// A server that does not finish its MCP handshake within its connect
// timeout fails with an error naming the key that raises the limit and
// its value: the server's own, else the global one.
func TestToolsHandshakeTimeoutNamesTheKey(t *testing.T) {
	t.Parallel()
	fx := testservers.Fixture(t)
	dir := workspace(t, fmt.Sprintf(`connect_timeout: 1s
servers:
  hangs:
    command: %s
    args: ["-hang-init"]
  own:
    command: %s
    args: ["-hang-init"]
    connect_timeout: 1500ms
`, fx, fx))
	r := toolmux(t, dir, "", "tools", "--json")
	var entries []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil {
		t.Fatalf("exit %d: %v\n%s\n%s", r.code, err, r.stdout, r.stderr)
	}
	want := map[string]string{
		"hangs": "server hangs did not complete the MCP handshake within 1s (connect_timeout is 1s: raise it, or servers.hangs.connect_timeout for this server alone)",
		"own":   "server own did not complete the MCP handshake within 1.5s (servers.own.connect_timeout is 1.5s: raise it for a server slower to start)",
	}
	for _, e := range entries {
		name, _ := e["server"].(string)
		if w, ok := want[name]; ok {
			if e["state"] != "failed" || e["error"] != w {
				t.Errorf("%s: %s %q\nwant %q", name, e["state"], e["error"], w)
			}
			delete(want, name)
		}
	}
	if len(want) > 0 {
		t.Errorf("not listed: %v\n%s", want, r.stdout)
	}
}
