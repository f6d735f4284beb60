package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/internal/testservers"
)

// The figures of BENCHMARKS.md §34, counts rather than timings (so they
// hold on a loaded machine), against real MCP servers: the npm
// everything, filesystem and memory servers of `make peers`. Run with -v
// to see them:
//
//	go test -run 'TestCodeModeFigures' -v ./cmd/toolmux/

// npmPeersConfig is a configuration of the three npm servers, without
// the built-in tools, plus extra.
func npmPeersConfig(t *testing.T, extra string) string {
	files := t.TempDir()
	return fmt.Sprintf(`builtin: {enabled: false}
servers:
  everything:
    command: %s
    connect_timeout: 60s
  filesystem:
    command: %s
    args: [%q]
    connect_timeout: 60s
  memory:
    command: %s
    env: {MEMORY_FILE_PATH: %q}
    connect_timeout: 60s
%s`, testservers.NodeBin(t, "mcp-server-everything"), testservers.NodeBin(t, "mcp-server-filesystem"), files,
		testservers.NodeBin(t, "mcp-server-memory"), filepath.Join(files, "memory.jsonl"), extra)
}

// logTable logs a Markdown table, as BENCHMARKS.md has it.
func logTable(t *testing.T, header []string, rows [][]any) {
	t.Helper()
	t.Logf("| %s |", strings.Join(header, " | "))
	t.Logf("|%s", strings.Repeat(" --- |", len(header)))
	for _, r := range rows {
		cells := make([]string, len(r))
		for i, c := range r {
			cells[i] = fmt.Sprint(c)
		}
		t.Logf("| %s |", strings.Join(cells, " | "))
	}
}

// What a client is sent by tools/list on /mcp: the tools, and the bytes
// of their definitions (each as compact JSON, every page), in each mode.
func TestCodeModeFiguresToolsList(t *testing.T) {
	dir := workspace(t, npmPeersConfig(t, ""))
	type figure struct {
		mode          string
		tools, bytes  int
		runCode       int
		servers, seen map[string]bool
	}
	var figs []figure
	for _, args := range [][]string{nil, {"--code-mode"}, {"--tool-search"}, {"--tool-search", "--code-mode"}} {
		p := startServeProc(t, dir, "", args...)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cs := p.connect(t, ctx)
		f := figure{mode: strings.Join(args, " "), seen: map[string]bool{}}
		for tl, err := range cs.Tools(ctx, nil) {
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal(tl)
			if err != nil {
				t.Fatal(err)
			}
			f.tools++
			f.bytes += len(b)
			if tl.Name == "run_code" {
				f.runCode = len(b)
			}
			if server, _, ok := strings.Cut(tl.Name, "__"); ok {
				f.seen[server] = true
			}
		}
		cs.Close()
		cancel()
		figs = append(figs, f)
	}
	rows := make([][]any, len(figs))
	for i, f := range figs {
		mode := "every tool"
		if f.mode != "" {
			mode = "`" + f.mode + "`"
		}
		rows[i] = []any{mode, f.tools, f.bytes, f.runCode}
	}
	logTable(t, []string{"`/mcp`", "tools listed", "definitions' bytes", "of which `run_code`"}, rows)
	every, code, search, both := figs[0], figs[1], figs[2], figs[3]
	if !every.seen["everything"] || !every.seen["filesystem"] || !every.seen["memory"] {
		t.Fatalf("the catalog lacks a server: %v", every.seen)
	}
	if code.tools != every.tools+1 || code.runCode == 0 || code.bytes != every.bytes+code.runCode {
		t.Errorf("code mode alone: %+v, every tool: %+v", code, every)
	}
	if both.tools != search.tools+1 || both.runCode == 0 || both.bytes >= every.bytes/4 {
		t.Errorf("tool search and code mode: %+v, every tool: %+v", both, every)
	}
}

// A 20-call task through toolmux run against the scripted model: one
// call per turn, or one program making the 20 calls; the model turns and
// the bytes of the requests the model was sent.
func TestCodeModeFiguresTwentyCalls(t *testing.T) {
	const n = 20
	dir := workspace(t, npmPeersConfig(t, ""))
	code := fmt.Sprintf(`let echoed = 0;
for (let i = 1; i <= %d; i++) {
  const out = await tools.everything__echo({message: "m" + i});
  if (JSON.stringify(out).includes("m" + i)) echoed++;
}
return {echoed};`, n)
	program, _ := json.Marshal(map[string]string{"code": code})
	type figure struct {
		mode                     string
		turns, bytes, max, first int
		answer                   string
	}
	var figs []figure
	for _, mode := range []string{"", "--code-mode", "--code-mode=beside"} {
		m := llmtest.OpenAI(t, func(_ int, req llmtest.Request) llmtest.Reply {
			_, assistants, results := req.Dialogue()
			switch {
			case mode != "" && assistants == 0:
				return llmtest.Reply{Calls: []llmtest.Call{{Name: "run_code", Args: string(program)}}}
			case mode != "":
				return llmtest.Reply{Content: "program said: " + oneLineOf(results[len(results)-1])}
			case assistants < n:
				return llmtest.Reply{Calls: []llmtest.Call{{Name: "everything__echo", Args: fmt.Sprintf(`{"message": "m%d"}`, assistants+1)}}}
			}
			return llmtest.Reply{Content: fmt.Sprintf("echoed %d", len(results))}
		})
		args := []string{"run", "--yes", "--model", "scripted", "--base-url", m.BaseURL(), "--max-turns", "30"}
		if mode != "" {
			args = append(args, mode)
		}
		r := runToolmux(t, dir, nil, append(args, "echo m1 to m20")...)
		if r.code != 0 {
			t.Fatalf("%s: exit %d\n%s", mode, r.code, r.stderr)
		}
		f := figure{mode: mode, answer: strings.TrimSpace(r.stdout)}
		for i, req := range m.Requests() {
			f.turns++
			f.bytes += req.Bytes
			f.max = max(f.max, req.Bytes)
			if i == 0 {
				f.first = req.Bytes
			}
		}
		if calls := strings.Count(r.stderr, "✓ everything/echo"); calls != n {
			t.Errorf("%s: %d echo calls, want %d\n%s", mode, calls, n, r.stderr)
		}
		figs = append(figs, f)
	}
	rows := make([][]any, len(figs))
	for i, f := range figs {
		mode := "one call per turn"
		if f.mode != "" {
			mode = "`" + f.mode + "`, one program"
		}
		rows[i] = []any{mode, f.turns, f.bytes, f.first, f.max}
	}
	logTable(t, []string{"`toolmux run`", "model turns", "bytes sent to the model", "first request", "largest request"}, rows)
	plain, only := figs[0], figs[1]
	if plain.turns != n+1 || plain.answer != "echoed 20" {
		t.Errorf("one call per turn: %+v", plain)
	}
	if only.turns != 2 || only.answer != `program said: {"echoed":20}` || only.bytes*5 > plain.bytes {
		t.Errorf("code mode: %+v, one call per turn: %+v", only, plain)
	}
}
