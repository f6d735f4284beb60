package main_test

import (
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/tasklog"
)

// slowConfig is fixtureConfig with a server, late, that takes 4 seconds to
// come up: longer than toolmux waits before it names a server as slow.
func slowConfig(t *testing.T) string {
	return strings.Replace(fixtureConfig(t), "servers:\n", fmt.Sprintf(`servers:
  late:
    command: %s
    args: ["-start-delay", "4s"]
    trust: true
`, testservers.Fixture(t)), 1)
}

// Off a terminal, start-up is quiet but for a server slower than a few
// seconds: a line names it while it is awaited, one says when it is up.
// The failed server's error is in the table (stdout); stderr only names
// it at the end, as the reason for exit 1.
func TestStartupOffATerminal(t *testing.T) {
	t.Parallel()
	const failed = "toolmux: 1 server failed to come up: broken (the list says why)"
	dir := workspace(t, fixtureConfig(t))
	r := toolmux(t, dir, "", "tools", "--json")
	if r.code != 1 || r.stderr != failed+"\n" {
		t.Errorf("quick start: exit %d, stderr %q", r.code, r.stderr)
	}

	dir = workspace(t, slowConfig(t))
	r = toolmux(t, dir, "", "tools")
	if r.code != 1 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "toolmux: waiting for late (") ||
		!regexp.MustCompile(`^toolmux: late is up after [0-9.]+s: \d+ tools$`).MatchString(lines[1]) || lines[2] != failed {
		t.Errorf("stderr:\n%s", r.stderr)
	}
	// Every server is counted in the summary: three of four up.
	if !regexp.MustCompile(`\n\d+ tools from 3 of 4 servers \(1 failed\); approval mode default\n$`).MatchString(r.stdout) {
		t.Errorf("summary:\n%s", r.stdout)
	}
}

// serve names a slow server while it starts, then says how many servers
// are up.
func TestServeStartupNamesSlowServers(t *testing.T) {
	t.Parallel()
	dir := workspace(t, slowConfig(t))
	p := startServeProc(t, dir, "")
	out := p.stderr.String()
	waiting := strings.Index(out, "toolmux: waiting for late (")
	serving := strings.Index(out, "toolmux: serving ")
	if waiting < 0 || serving < waiting || !strings.Contains(out, "toolmux: late is up after") {
		t.Errorf("stderr:\n%s", out)
	}
	if !regexp.MustCompile(`toolmux: serving \d+ tools from 3 of 4 servers \(1 failed\) at http://`).MatchString(out) ||
		!strings.Contains(out, "toolmux: server broken failed: ") {
		t.Errorf("the serving line or the failure:\n%s", out)
	}
}

// A tool can be named as models see it, SERVER__TOOL, with or without
// arguments; SERVER TOOL still works. A name that is no tool is refused
// with the closest exposed name, and recorded like any refused call.
func TestCallByExposedName(t *testing.T) {
	t.Parallel()
	dir := workspace(t, fixtureConfig(t))
	data := t.TempDir()
	call := func(stdin string, args ...string) result {
		return toolmux(t, dir, stdin, append([]string{"--data-dir", data, "call"}, args...)...)
	}
	if r := call("", "builtin__read_file", `{"path": "notes.txt", "offset": 1, "limit": 1}`); r.code != 0 || !strings.HasPrefix(r.stdout, "beta\n") {
		t.Errorf("builtin__read_file: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	if r := call(`{"message": "piped"}`, "fx__echo", "-"); r.code != 0 || strings.TrimSpace(r.stdout) != "Echo: piped" {
		t.Errorf("fx__echo -: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	r := call("", "fx__echo", `{"message": "j"}`, "--json")
	var rec struct {
		Server, Tool, Name string
		Error              *struct{ Kind string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil || r.code != 0 || rec.Server != "fx" || rec.Tool != "echo" || rec.Name != "fx__echo" {
		t.Errorf("fx__echo --json: exit %d %v %+v", r.code, err, rec)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"fx__pid"}, "policy_violation"},
		{[]string{"broken__echo", `{}`}, "server_unavailable"},
		{[]string{"fx__ecoh", `{"message": "x"}`}, `tool_not_registered: no tool is exposed as "fx__ecoh"`},
		{[]string{"nope__echo"}, `no server named "nope"`},
		{[]string{"read_file"}, `(did you mean "builtin__read_file"?)`},
	} {
		if r := call("", c.args...); r.code != 1 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", c.args, r.code, r.stderr, c.want)
		}
	}
	if r := call("", "fx__ecoh"); !strings.Contains(r.stderr, `did you mean "fx__echo"`) {
		t.Errorf("no suggestion: %q", r.stderr)
	}

	// The refusals are in the task log: the misspelt tool under the
	// server its name starts with.
	r = toolmux(t, dir, "", "--data-dir", data, "logs", "--json", "--status", "failed")
	var tasks []tasklog.TaskSummary
	if err := json.Unmarshal([]byte(r.stdout), &tasks); err != nil {
		t.Fatalf("logs: %v\n%s", err, r.stdout)
	}
	found := false
	for _, tk := range tasks {
		if tk.Input != `toolmux call fx__ecoh` {
			continue
		}
		found = true
		r := toolmux(t, dir, "", "--data-dir", data, "logs", "show", tk.ID, "--json")
		var d tasklog.TaskDetail
		if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || len(d.Calls) != 1 || d.Calls[0].Server != "fx" ||
			d.Calls[0].Tool != "ecoh" || d.Calls[0].Error == nil || d.Calls[0].Error.Kind != "tool_not_registered" {
			t.Errorf("the refused call's record: %v %+v", err, d.Calls)
			continue
		}
		// Its rollback verdict is noted once.
		rollbacks := 0
		for _, n := range d.Calls[0].Notes {
			if n.Layer == "rollback" {
				rollbacks++
			}
		}
		if rollbacks != 1 {
			t.Errorf("the refused call's notes: %+v", d.Calls[0].Notes)
		}
	}
	if tk := len(tasks); !found || tk != 6 {
		t.Errorf("%d failed tasks, the fx__ecoh one found: %v", tk, found)
	}
}

// --timeout bounds the call, not the start of its server; a call that
// runs out of time is a timeout (not cancelled) that says which limit
// ended it, and its task failed.
func TestCallTimeout(t *testing.T) {
	t.Parallel()
	dir := workspace(t, slowConfig(t))
	data := t.TempDir()
	// late takes 4 seconds to start, more than the call's second.
	r := toolmux(t, dir, "", "--data-dir", data, "call", "late", "echo", `{"message": "worth the wait"}`, "--timeout", "1s")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "Echo: worth the wait" {
		t.Errorf("a slow start under --timeout 1s: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	r = toolmux(t, dir, "", "--data-dir", data, "call", "fx", "slow", `{"ms": 60000}`, "--timeout", "1s", "--json")
	var rec struct {
		Error *struct{ Kind, Message string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil || r.code != 1 || rec.Error == nil ||
		rec.Error.Kind != "timeout" || !strings.Contains(rec.Error.Message, "--timeout 1s ran out") {
		t.Errorf("a call past --timeout: exit %d %v %+v", r.code, err, rec.Error)
	}
	r = toolmux(t, dir, "", "--data-dir", data, "logs", "--json", "--limit", "1")
	var tasks []tasklog.TaskSummary
	if err := json.Unmarshal([]byte(r.stdout), &tasks); err != nil || len(tasks) != 1 || tasks[0].Status != tasklog.StatusFailed {
		t.Errorf("the timed-out call's task: %v %+v", err, tasks)
	}
}

// A server reached over HTTP that refuses the connection shows the
// cause in the table's detail block and in --json.
func TestToolsShowsUnreachableHTTPServer(t *testing.T) {
	t.Parallel()
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", testservers.FreePort(t)) // nothing listens there
	dir := workspace(t, "servers:\n  remote:\n    url: "+url+"\n")
	r := toolmux(t, dir, "", "tools")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1 (a server failed): %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "\nremote (failed): server remote: cannot reach "+url+": connection refused\n  ") {
		t.Errorf("no cause in the detail block:\n%s", r.stdout)
	}
	if !regexp.MustCompile(`\n\d+ tools from 1 of 2 servers \(1 failed\); approval mode default\n$`).MatchString(r.stdout) {
		t.Errorf("summary:\n%s", r.stdout)
	}
	r = toolmux(t, dir, "", "tools", "--json")
	var entries []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil {
		t.Fatal(err)
	}
	last := entries[len(entries)-1]
	if last["server"] != "remote" || last["state"] != "failed" || !strings.Contains(fmt.Sprint(last["error"]), "connection refused") ||
		!strings.Contains(fmt.Sprint(last["detail"]), "dial tcp") {
		t.Errorf("--json entry: %v", last)
	}
}

// Counts are in words that agree with them.
func TestPlurals(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "")
	r := toolmux(t, dir, "", "tools")
	if !regexp.MustCompile(`\n\d+ tools from 1 server; approval mode default\n$`).MatchString(r.stdout) {
		t.Errorf("tools:\n%s", r.stdout)
	}
	m := llmtest.OpenAI(t, llmtest.Replies(llmtest.Reply{Content: "Nothing to do."}))
	r = runToolmux(t, dir, nil, "run", "--model", "scripted", "--base-url", m.BaseURL(), "Say nothing.")
	if r.code != 0 || !strings.Contains(r.stderr, "● answered after 1 turn, 0 tool calls, 0 rollbacks, ") {
		t.Errorf("run: exit %d\n%s", r.code, r.stderr)
	}
	m = llmtest.OpenAI(t, llmtest.Replies(
		llmtest.Reply{Calls: []llmtest.Call{{Name: "builtin__read_file", Args: `{"path": "notes.txt"}`}}},
		llmtest.Reply{Content: "alpha"},
	))
	r = runToolmux(t, dir, nil, "run", "--model", "scripted", "--base-url", m.BaseURL(), "Read notes.txt.")
	if r.code != 0 || !strings.Contains(r.stderr, "● answered after 2 turns, 1 tool call, 0 rollbacks, ") {
		t.Errorf("run: exit %d\n%s", r.code, r.stderr)
	}
}

// A mistake in the command line exits 2 with a message, the command's
// usage line and where to read more; a bad configuration is no such
// mistake and shows no usage.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	dir := workspace(t, fixtureConfig(t))
	for _, c := range []struct {
		args            []string
		msg, usage, cmd string
	}{
		{[]string{"call"}, "name the tool to call", "toolmux call SERVER TOOL [ARGS_JSON | -] [flags]", "toolmux call"},
		{[]string{"call", "fx", "echo", "{}", "more"}, "too many arguments", "toolmux call SERVER TOOL [ARGS_JSON | -] [flags]", "toolmux call"},
		{[]string{"call", "fx", "echo", `{"message":`}, "arguments are not valid JSON", "toolmux call SERVER TOOL [ARGS_JSON | -] [flags]", "toolmux call"},
		{[]string{"call", "fx", "echo", "--nope"}, "unknown flag: --nope", "toolmux call SERVER TOOL [ARGS_JSON | -] [flags]", "toolmux call"},
		{[]string{"tools", "extra"}, `unknown command "extra"`, "toolmux tools [flags]", "toolmux tools"},
		{[]string{"run", "Summarise", "README.md"}, `the task must be one argument: quote it, as in toolmux run "Summarise README.md"`, "toolmux run TASK [flags]", "toolmux run"},
		{[]string{"run"}, "say what the agent should do", "toolmux run TASK [flags]", "toolmux run"},
		{[]string{"run", "--max-turns", "0", "Summarise README.md"}, "--max-turns must be at least 1, not 0", "toolmux run TASK [flags]", "toolmux run"},
		{[]string{"run", "--serve", "localhost", "--model", "m", "task"}, `address "localhost" has no port`, "toolmux run TASK [flags]", "toolmux run"},
		{[]string{"run", "--metrics", "--model", "m", "task"}, "--metrics needs --serve ADDR", "toolmux run TASK [flags]", "toolmux run"},
		{[]string{"serve", "--addr", "localhost"}, `address "localhost" has no port`, "toolmux serve [flags]", "toolmux serve"},
		{[]string{"logs", "show"}, "accepts 1 arg", "toolmux logs show ID [flags]", "toolmux logs show"},
		{[]string{"bogus"}, `unknown command "bogus"`, "toolmux COMMAND [flags]", "toolmux"},
	} {
		r := runToolmux(t, dir, nil, c.args...)
		want := "Usage: " + c.usage + "\nRun '" + c.cmd + " --help' for more.\n"
		if r.code != 2 || !strings.HasPrefix(r.stderr, "toolmux: ") || !strings.Contains(r.stderr, c.msg) || !strings.HasSuffix(r.stderr, want) {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant %q and, at the end:\n%s", c.args, r.code, r.stderr, c.msg, want)
		}
	}
	bad := workspace(t, "servers:\n  fx:\n    comand: x\n")
	if r := toolmux(t, bad, "", "tools"); r.code != 2 || strings.Contains(r.stderr, "Usage:") {
		t.Errorf("a configuration error: exit %d\n%s", r.code, r.stderr)
	}
}

// serve on an address in use exits 2 at once, naming the address and
// how to choose another.
func TestServePortInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	r := toolmux(t, workspace(t, slowConfig(t)), "", "serve", "--addr", addr)
	if r.code != 2 || !strings.Contains(r.stderr, "toolmux: "+addr+" is already in use") || !strings.Contains(r.stderr, "--addr") ||
		strings.Contains(r.stderr, "serving") || strings.Contains(r.stderr, "waiting for late") {
		t.Errorf("exit %d\n%s", r.code, r.stderr)
	}
}

func TestVersionJSON(t *testing.T) {
	t.Parallel()
	r := toolmux(t, t.TempDir(), "", "version", "--json")
	var v struct{ Version, Go, OS, Arch string }
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != 0 {
		t.Fatalf("exit %d %v\n%s", r.code, err, r.stdout)
	}
	if v.Version == "" || v.Go != runtime.Version() || v.OS != runtime.GOOS || v.Arch != runtime.GOARCH {
		t.Errorf("%+v", v)
	}
	if plain := toolmux(t, t.TempDir(), "", "version"); !strings.HasPrefix(plain.stdout, "toolmux "+v.Version) {
		t.Errorf("version %q, --json %+v", plain.stdout, v)
	}
}
