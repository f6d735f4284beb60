package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
)

// codeRun is what run_code answers, as structured content.
type codeRun struct {
	Result  json.RawMessage
	Console []string
	Calls   int
	Error   *struct {
		Kind, Bound, Message string
		Limit                int64
		ToolKind             string `json:"tool_kind"`
	}
}

func runCode(t *testing.T, ctx context.Context, cs *mcp.ClientSession, code string) (codeRun, *mcp.CallToolResult) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": code}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res.StructuredContent)
	var out codeRun
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if res.IsError != (out.Error != nil) {
		t.Fatalf("isError %v with %s", res.IsError, b)
	}
	return out, res
}

// serve --code-mode: run_code is listed beside the tools, its description
// declaring them; a program that calls 20 tools returns a summary, each of
// its calls a record of the client's task beside the run_code call's own
// (its code as its arguments); a call the policy asks about is refused
// inside the program (approval_unavailable: nobody to ask), which the
// program catches; a program that loops ends by its time, one that
// allocates without bound by its memory, both with a typed error naming
// the bound; require, fetch and process are not there, and nothing is
// reached. Over a session (2025-11-25) and without one (2026-07-28).
func TestServeCodeMode(t *testing.T) {
	t.Parallel()
	dir := workspace(t, fmt.Sprintf(`servers:
  fx:
    command: %[1]s
  cat:
    command: %[1]s
    args: ["-catalog", "20"]
policy:
  rules:
    - {name: ask before appending, tools: [fx/append], action: ask}
virtual_servers:
  - {name: two, tools: ["fx/echo", "cat/*"], rename: {"fx/echo": said}}
code_mode:
  timeout: 10s
  max_calls: 21
  max_memory_bytes: 64MiB
`, testservers.Fixture(t)))
	p := startServeProc(t, dir, "", "--code-mode")
	if want := "toolmux: code mode on: run_code (engine " + filepath.Join(filepath.Dir(binary), "toolmux-codemode") + ", timeout 10s, max_calls 21, max_output_bytes 65536, max_memory_bytes 67108864)"; !strings.Contains(p.stderr.String(), want) {
		t.Errorf("serve does not say code mode is on (%q):\n%s", want, p.stderr.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := p.connect(t, ctx)
	defer cs.Close()

	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := testservers.CatalogTool(0)
	i := slices.IndexFunc(lt.Tools, func(tl *mcp.Tool) bool { return tl.Name == "run_code" })
	// Declared in the catalog's order, as many as its bound holds.
	if i < 0 || !strings.Contains(lt.Tools[i].Description, "cat__"+first+"(args") || !strings.Contains(lt.Tools[i].Description, "more tools are not declared here") {
		t.Fatalf("run_code is not listed with the tools declared (at %d of %d): %s", i, len(lt.Tools), lt.Tools[max(i, 0)].Description)
	}

	// 20 calls, one program, a summary back.
	var calls []string
	for n := range 20 {
		name, _ := testservers.CatalogTool(n)
		calls = append(calls, "cat__"+name)
	}
	names, _ := json.Marshal(calls)
	code := `const names = ` + string(names) + `;
		let done = 0;
		for (const n of names) {
			const out = await tools.call(n, {target: "acme"});
			if (out.endsWith('done for "acme"')) done++;
		}
		console.log("called", names.length);
		return {done};`
	out, _ := runCode(t, ctx, cs, code)
	if out.Error != nil || string(out.Result) != `{"done":20}` || out.Calls != 20 || !slices.Equal(out.Console, []string{"called 20"}) {
		t.Fatalf("20 calls: %+v %s", out, out.Result)
	}
	var task struct {
		Calls []struct {
			ID, Parent   string
			Server, Tool string
			Arguments    map[string]any
			Error        *struct{ Kind string }
			Result       *struct {
				StructuredContent struct{ Result struct{ Done int } }
			}
		}
	}
	p.getJSON(t, "/api/tasks/"+cs.ID(), &task)
	if len(task.Calls) != 21 {
		t.Fatalf("the task has %d calls, want 20 and run_code's", len(task.Calls))
	}
	var inner []string
	var program int
	programID := ""
	for _, c := range task.Calls {
		switch {
		case c.Server == "toolmux" && c.Tool == "run_code":
			program++
			programID = c.ID
			if c.Arguments["code"] != code || c.Error != nil || c.Result == nil || c.Result.StructuredContent.Result.Done != 20 {
				t.Errorf("run_code's record: error %+v, result %+v", c.Error, c.Result)
			}
		case c.Server == "cat" && c.Error == nil:
			inner = append(inner, "cat__"+c.Tool)
			// Its parent is the program (the page nests it under it);
			// the program's record is the first, it started first.
			if c.Parent == "" || c.Parent != programID {
				t.Errorf("%s's record names %q as its parent, not the program %q", c.Tool, c.Parent, programID)
			}
		default:
			t.Errorf("a call of the task: %+v", c)
		}
	}
	if program != 1 || !slices.Equal(inner, calls) {
		t.Fatalf("the task's records: run_code %d, inner %v", program, inner)
	}

	// An approval nobody can answer (this client has no elicitation),
	// caught by the program; nothing appended.
	target := filepath.Join(dir, "appended.txt")
	out, _ = runCode(t, ctx, cs, fmt.Sprintf(`try { await tools.fx__append({path: %q, line: "x"}); return "appended"; }
		catch (e) { return [e.kind, e.tool]; }`, target))
	if string(out.Result) != `["approval_unavailable","append"]` {
		t.Fatalf("a call that needs approval: %+v %s", out, out.Result)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("the refused call appended: %v", err)
	}
	// Not caught, its kind is the program's error's.
	out, _ = runCode(t, ctx, cs, fmt.Sprintf(`await tools.fx__append({path: %q, line: "x"})`, target))
	if out.Error == nil || out.Error.Kind != "thrown" || out.Error.ToolKind != "approval_unavailable" {
		t.Fatalf("an uncaught refusal: %+v", out.Error)
	}

	// The bounds, each a typed error naming its key. (The timeout is long
	// enough that a loaded machine's engine reaches the memory bound
	// before it.)
	out, _ = runCode(t, ctx, cs, `let i = 0; for (;;) { i++ }`)
	if out.Error == nil || out.Error.Kind != "timeout" || out.Error.Bound != "timeout" || out.Error.Limit != 10000 {
		t.Fatalf("a loop: %+v", out.Error)
	}
	out, _ = runCode(t, ctx, cs, `const a = []; for (let i = 0; ; i++) a.push(new Array(1 << 20).fill(i));`)
	if out.Error == nil || out.Error.Kind != "max_memory_bytes" || out.Error.Limit != 64<<20 {
		t.Fatalf("unbounded allocation: %+v", out.Error)
	}
	out, _ = runCode(t, ctx, cs, `for (let i = 0; i < 22; i++) await tools.call("fx__echo", {message: "e"});`)
	if out.Error == nil || out.Error.Kind != "max_calls" || out.Calls != 21 {
		t.Fatalf("22 calls of 21: %+v (%d calls)", out.Error, out.Calls)
	}

	// Nothing of the host.
	out, _ = runCode(t, ctx, cs, `const got = [];
		for (const f of [() => require("fs"), () => fetch("http://127.0.0.1/"), () => process.exit(1), () => setTimeout(() => {}, 1)]) {
			try { f(); got.push("reached"); } catch (e) { got.push(e.name); }
		}
		return got;`)
	if string(out.Result) != `["ReferenceError","ReferenceError","ReferenceError","ReferenceError"]` || out.Calls != 0 {
		t.Fatalf("the host: %+v %s", out, out.Result)
	}

	// Without a session: the same program, the same answer; a client that
	// would answer an approval by retrying its request cannot be asked
	// inside a program.
	modern := connectEra(t, ctx, "modern", "2026-07-28", &mcp.StreamableClientTransport{Endpoint: p.url("/mcp")})
	out, _ = runCode(t, ctx, modern.cs, code)
	if out.Error != nil || string(out.Result) != `{"done":20}` {
		t.Fatalf("20 calls without a session: %+v", out)
	}
	out, _ = runCode(t, ctx, modern.cs, fmt.Sprintf(`try { await tools.fx__append({path: %q, line: "x"}); return "appended"; }
		catch (e) { return e.kind; }`, target))
	if string(out.Result) != `"approval_unavailable"` || len(modern.asked) != 0 {
		t.Fatalf("an approval without a session: %s, asked %q", out.Result, modern.asked)
	}
	// A session's client that elicits is asked, and the program waits for
	// its answer.
	asker := connectEra(t, ctx, "asker", legacyProtocol, &mcp.StreamableClientTransport{Endpoint: p.url("/mcp")})
	out, _ = runCode(t, ctx, asker.cs, fmt.Sprintf(`await tools.fx__append({path: %q, line: "x"}); return "appended"`, target))
	if string(out.Result) != `"appended"` || len(asker.asked) != 1 {
		t.Fatalf("an approval in a session: %+v %s, asked %q", out.Error, out.Result, asker.asked)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "x\n" {
		t.Fatalf("appended %q, %v", b, err)
	}

	// A virtual server's program calls its tools by the names it shows,
	// and no other.
	vs := connectEra(t, ctx, "virtual", legacyProtocol, &mcp.StreamableClientTransport{Endpoint: p.url("/virtual/two/mcp")})
	out, _ = runCode(t, ctx, vs.cs, `const said = await tools.said({message: "hi"});
		try { await tools.call("fx__append", {path: "x", line: "y"}); } catch (e) { return [said, e.kind]; }`)
	if string(out.Result) != `["Echo: hi","tool_not_registered"]` {
		t.Fatalf("a virtual server's program: %+v %s", out.Error, out.Result)
	}
}

// serve --stdio --code-mode: the client that starts toolmux runs a
// program that reads a file with the built-in reader, governed like a
// direct call, and gets only what the program returns.
func TestServeStdioCodeMode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := startStdio(t, ctx, workspace(t, ""), "--code-mode")
	out, _ := runCode(t, ctx, cs, `const text = await tools.builtin__read_file({path: "notes.txt"});
		return String(text).split("\n").filter(l => l.includes("et"));`)
	if out.Error != nil || !strings.Contains(string(out.Result), "beta") || strings.Contains(string(out.Result), "alpha") || out.Calls != 1 {
		t.Fatalf("run_code over stdio: %+v %s", out.Error, out.Result)
	}
}
