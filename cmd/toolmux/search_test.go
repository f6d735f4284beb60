package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
)

// serve --tool-search in front of a server of 1 000 tools: a real client,
// the MCP Inspector's CLI, lists three tools (the pinned one, find_tools,
// call_tool), finds a tool by what it does and calls it through call_tool;
// a go-sdk client's call_tool of a tool the policy denies is refused like
// a direct call; both calls are in the task log under the client's
// session. A virtual server of the same configuration serves its subset.
func TestServeToolSearch(t *testing.T) {
	t.Parallel()
	pin, _ := testservers.CatalogTool(0)
	name, desc := testservers.CatalogTool(437)
	denied, _ := testservers.CatalogTool(438)
	dir := workspace(t, fmt.Sprintf(`servers:
  fx:
    command: %s
    args: ["-catalog", "1000"]
    trust: true
policy:
  rules:
    - {tools: ["fx/%s"], action: deny}
virtual_servers:
  - name: two
    tools: ["fx/%s", "fx/%s"]
    rename: {"fx/%s": picked}
`, testservers.Fixture(t), denied, name, pin, name))
	p := startServeProc(t, dir, "", "--tool-search", "--pin", "fx/"+pin)
	if !strings.Contains(p.stderr.String(), "tool search on /mcp: ") || !strings.Contains(p.stderr.String(), "pinned: fx/"+pin) {
		t.Errorf("serve does not say tool search is on:\n%s", p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "virtual servers two at") {
		t.Errorf("serve does not say where the virtual servers are:\n%s", p.stderr.String())
	}

	inspector := testservers.NodeBin(t, "mcp-inspector")
	var list struct{ Tools []struct{ Name string } }
	if err := json.Unmarshal([]byte(runInspector(t, inspector, p.url("/mcp"), "--method", "tools/list")), &list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"call_tool", "find_tools", "fx__" + pin}) {
		t.Fatalf("the inspector lists %v", names)
	}
	out := runInspector(t, inspector, p.url("/mcp"), "--method", "tools/call", "--tool-name", "find_tools",
		"--tool-arg", "query="+desc, "--tool-arg", "limit=3")
	var res struct {
		StructuredContent struct {
			Tools []struct{ Name, Server string }
		}
		IsError bool
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if res.IsError || len(res.StructuredContent.Tools) != 3 || res.StructuredContent.Tools[0].Name != "fx__"+name {
		t.Fatalf("find_tools %q: %s", desc, out)
	}
	out = runInspector(t, inspector, p.url("/mcp"), "--method", "tools/call", "--tool-name", "call_tool",
		"--tool-arg", "name=fx__"+name, "--tool-arg", `arguments={"target": "acme"}`)
	if !strings.Contains(out, name+` done for \"acme\"`) || strings.Contains(out, `"isError": true`) {
		t.Fatalf("call_tool: %s", out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := p.connect(t, ctx)
	defer cs.Close()
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "call_tool", Arguments: map[string]any{"name": "fx__" + denied, "arguments": map[string]any{}}})
	if err != nil {
		t.Fatal(err)
	}
	if !r.IsError || r.Meta["toolmux/error_kind"] != "policy_violation" {
		t.Fatalf("call_tool of a denied tool: %v %s", r.Meta, testservers.ResultText(r))
	}
	if r, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "call_tool", Arguments: map[string]any{"name": "fx__" + name}}); err != nil || r.IsError {
		t.Fatalf("call_tool: %v %s", err, testservers.ResultText(r))
	}
	var task struct {
		Calls []struct {
			Server, Tool string
			Error        *struct{ Kind string }
		}
	}
	p.getJSON(t, "/api/tasks/"+cs.ID(), &task)
	if len(task.Calls) != 2 || task.Calls[0].Tool != denied || task.Calls[0].Error == nil || task.Calls[0].Error.Kind != "policy_violation" ||
		task.Calls[1].Tool != name || task.Calls[1].Server != "fx" || task.Calls[1].Error != nil {
		t.Errorf("the session's task: %+v", task)
	}

	vs, err := mcp.NewClient(&mcp.Implementation{Name: "virtual"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.url("/virtual/two/mcp")},
		&mcp.ClientSessionOptions{ProtocolVersion: legacyProtocol})
	if err != nil {
		t.Fatal(err)
	}
	defer vs.Close()
	lt, err := vs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(lt.Tools) != 2 || lt.Tools[0].Name != "fx__"+pin || lt.Tools[1].Name != "picked" {
		t.Fatalf("the virtual server lists %+v", lt.Tools)
	}
	if r, err = vs.CallTool(ctx, &mcp.CallToolParams{Name: "picked", Arguments: map[string]any{"target": "v"}}); err != nil || testservers.ResultText(r) != name+` done for "v"` {
		t.Fatalf("a virtual server's call: %v %s", err, testservers.ResultText(r))
	}
	var vtask struct {
		Input string
		Calls []struct{ Server, Tool string }
	}
	p.getJSON(t, "/api/tasks/"+vs.ID(), &vtask)
	if !strings.Contains(vtask.Input, "/virtual/two/mcp") || len(vtask.Calls) != 1 || vtask.Calls[0].Tool != name {
		t.Errorf("the virtual server's session task: %+v", vtask)
	}

	// A client of 2026-07-28 (no session) sees the same list and calls
	// the same way.
	modern, err := mcp.NewClient(&mcp.Implementation{Name: "modern"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.url("/virtual/two/mcp")},
		&mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	defer modern.Close()
	if modern.ID() != "" || modern.InitializeResult().ProtocolVersion != "2026-07-28" {
		t.Fatalf("the 2026-07-28 client has session %q, protocol %s", modern.ID(), modern.InitializeResult().ProtocolVersion)
	}
	if lt2, err := modern.ListTools(ctx, nil); err != nil || len(lt2.Tools) != 2 || lt2.Tools[0].Name != lt.Tools[0].Name || lt2.Tools[1].Name != "picked" {
		t.Fatalf("the virtual server lists %+v to a 2026-07-28 client (%v)", lt2, err)
	}
	if r, err = modern.CallTool(ctx, &mcp.CallToolParams{Name: "picked", Arguments: map[string]any{"target": "m"}}); err != nil || testservers.ResultText(r) != name+` done for "m"` {
		t.Fatalf("a virtual server's call by a 2026-07-28 client: %v %s", err, testservers.ResultText(r))
	}
}

// startStdio starts serve --stdio with args in dir, as a client that
// starts toolmux does, and returns the client's session, closed at the
// end of the test.
func startStdio(t *testing.T, ctx context.Context, dir string, args ...string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"serve", "--stdio"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+t.TempDir())
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "stdio-client"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// Flags that cannot be right are refused before anything starts.
func TestServeToolSearchFlagErrors(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "")
	for _, args := range [][]string{{"--pin", "a/[b"}, {"--tool-search-above", "-1"}} {
		r := toolmux(t, dir, "", append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, args[0]) {
			t.Errorf("%v: %d %s", args, r.code, r.stderr)
		}
	}
}

// serve --stdio --tool-search: the client that starts toolmux (Claude
// Desktop's way) sees the meta-tools, finds the built-in file reader and
// reads a file through call_tool.
func TestServeStdioToolSearch(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := startStdio(t, ctx, workspace(t, ""), "--tool-search")
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(lt.Tools) != 2 || lt.Tools[0].Name != "call_tool" || lt.Tools[1].Name != "find_tools" {
		t.Fatalf("listed %+v", lt.Tools)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "find_tools", Arguments: map[string]any{"query": "read a file", "limit": 3}})
	if err != nil || !strings.Contains(testservers.ResultText(res), `"name":"builtin__read_file"`) {
		t.Fatalf("find_tools: %v %s", err, testservers.ResultText(res))
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "call_tool", Arguments: map[string]any{"name": "builtin__read_file", "arguments": map[string]any{"path": "notes.txt"}}})
	if err != nil || res.IsError || !strings.Contains(testservers.ResultText(res), "beta") {
		t.Fatalf("call_tool: %v %s", err, testservers.ResultText(res))
	}
}
