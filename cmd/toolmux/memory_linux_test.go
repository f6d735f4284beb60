package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
)

// The memory tests read a real `toolmux serve` process's resident memory
// from /proc. They use a build without the race detector, whose shadow
// memory would swamp what is measured.
var (
	plainOnce sync.Once
	plainBin  string
	plainErr  error
)

func plainBinary(t *testing.T) string {
	t.Helper()
	plainOnce.Do(func() {
		plainBin = filepath.Join(filepath.Dir(binary), "toolmux-plain")
		out, err := exec.Command("go", "build", "-o", plainBin, ".").CombinedOutput()
		if err != nil {
			plainErr = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if plainErr != nil {
		t.Fatalf("building toolmux: %v", plainErr)
	}
	return plainBin
}

// memory is a process's resident set now and at its peak, in bytes.
type memory struct{ rss, hwm int64 }

func (p *serveProc) memory(t *testing.T) memory {
	t.Helper()
	return pidMemory(t, p.cmd.Process.Pid)
}

// pidMemory is the resident set of process pid, now and at its peak.
func pidMemory(t *testing.T, pid int) memory {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	var m memory
	for _, line := range strings.Split(string(b), "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "VmRSS":
			m.rss = kb << 10
		case "VmHWM":
			m.hwm = kb << 10
		}
	}
	if m.rss == 0 || m.hwm == 0 {
		t.Fatalf("no VmRSS/VmHWM in /proc/%d/status", pid)
	}
	return m
}

// resetPeak makes the process's peak its current resident set (Linux's
// clear_refs "5"), so that the next peak is the peak of what follows. Where
// that is not allowed the old peak stays, which only makes the bounds
// checked below stricter.
func (p *serveProc) resetPeak() { resetPeak(p.cmd.Process.Pid) }

func resetPeak(pid int) {
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// settles waits for the resident set to come back within margin of base:
// memory is given back after the calls, not kept while idle.
func (p *serveProc) settles(t *testing.T, what string, base, margin int64) {
	t.Helper()
	settles(t, p.cmd.Process.Pid, what, base, margin)
}

func settles(t *testing.T, pid int, what string, base, margin int64) {
	t.Helper()
	var last memory
	if !testservers.Eventually(30*time.Second, func() bool {
		last = pidMemory(t, pid)
		return last.rss <= base+margin
	}) {
		t.Errorf("%s: resident memory stayed at %d MB, %d MB above its baseline (allowed: %d MB)",
			what, last.rss>>20, (last.rss-base)>>20, margin>>20)
	}
}

const mb = 1 << 20

// One 20 MB result costs the gateway at most three times its size at its
// peak, through /mcp and through the HTTP API, and the memory is given back
// after the call. The whole text is in the call's spill file, whose path
// both the model's text and the record give.
func TestServeMemoryOfALargeResult(t *testing.T) {
	t.Parallel()
	const size = 20 * mb
	bin := plainBinary(t)
	dir := workspace(t, fmt.Sprintf("servers:\n  fx:\n    command: %s\n    trust: true\n", testservers.Fixture(t)))
	data := t.TempDir()
	p := startServeBinary(t, bin, dir, data)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := p.connect(t, ctx)
	defer cs.Close()
	// Warm up: the server started, both routes used once.
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__echo", Arguments: map[string]any{"message": "warm"}}); err != nil {
		t.Fatal(err)
	}
	postCall(t, p, "fx", "echo", `{"arguments": {"message": "warm"}}`)
	base := p.memory(t).rss
	want := testservers.BigText(size)
	spillOf := regexp.MustCompile(`the full output is in (\S+\.txt)`)

	p.resetPeak()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__big", Arguments: map[string]any{"bytes": size}})
	if err != nil {
		t.Fatal(err)
	}
	peak := p.memory(t).hwm
	text := res.Content[0].(*mcp.TextContent).Text
	m := spillOf.FindStringSubmatch(text)
	if len(text) > 60_000 || m == nil {
		t.Fatalf("MCP answer: %d bytes, no spill path: %.200q", len(text), text)
	}
	if got, err := os.ReadFile(m[1]); err != nil || string(got) != want {
		t.Errorf("MCP call: the spill file is not the whole result (%v, %d bytes)", err, len(got))
	}
	t.Logf("/mcp: peak %d MB above the baseline of %d MB for a %d MB result", (peak-base)/mb, base/mb, size/mb)
	if peak-base > 3*size {
		t.Errorf("/mcp: the peak was %d MB above the baseline, more than 3 × %d MB", (peak-base)/mb, size/mb)
	}
	p.settles(t, "/mcp", base, size/2)

	p.resetPeak()
	var rec struct {
		Result struct{ Content []struct{ Text string } }
		Notes  []struct {
			Layer string
			Data  map[string]any
		}
	}
	if code := postCall(t, p, "fx", "big", fmt.Sprintf(`{"arguments": {"bytes": %d}}`, size), &rec); code != 200 {
		t.Fatalf("API call: %d", code)
	}
	peak = p.memory(t).hwm
	var path string
	for _, n := range rec.Notes {
		if n.Layer == "truncate" {
			path, _ = n.Data["spill_path"].(string)
		}
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != want {
		t.Errorf("API call: the record's spill path %q is not the whole result (%v, %d bytes)", path, err, len(got))
	}
	t.Logf("API: peak %d MB above the baseline of %d MB for a %d MB result", (peak-base)/mb, base/mb, size/mb)
	if peak-base > 3*size {
		t.Errorf("API: the peak was %d MB above the baseline, more than 3 × %d MB", (peak-base)/mb, size/mb)
	}
	p.settles(t, "API", base, size/2)
}

// Pathologically nested arguments, six requests at once on each route, are
// refused with invalid_tool_params at a cost that does not depend on their
// nesting, and leave nothing behind.
func TestServeMemoryOfNestedArguments(t *testing.T) {
	t.Parallel()
	bin := plainBinary(t)
	dir := workspace(t, fmt.Sprintf("servers:\n  fx:\n    command: %s\n    trust: true\n", testservers.Fixture(t)))
	p := startServeBinary(t, bin, dir, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := p.connect(t, ctx)
	defer cs.Close()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__echo", Arguments: map[string]any{"message": "warm"}}); err != nil {
		t.Fatal(err)
	}
	postCall(t, p, "fx", "echo", `{"arguments": {"message": "warm"}}`)
	base := p.memory(t).rss
	p.resetPeak()

	const depth = 9000 // as deep as encoding/json decodes; 18 KB of brackets
	deep := strings.Repeat("[", depth) + strings.Repeat("]", depth)
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			var e struct {
				Error struct{ Kind, Message string }
			}
			code := postCall(t, p, "fx", "echo", `{"arguments": {"message": `+deep+`}}`, &e)
			if code != 400 || e.Error.Kind != "invalid_tool_params" || !strings.Contains(e.Error.Message, "limits.max_depth") {
				t.Errorf("API: %d %+v", code, e)
			}
		})
		wg.Go(func() {
			// Deeper than the go-sdk reads: a JSON-RPC error saying so.
			body := `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"fx__echo","arguments":{"message":` + deep + `}}}`
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.url("/mcp"), strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Mcp-Session-Id", cs.ID())
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 400 || !bytes.Contains(b, []byte(`"id":5`)) || !bytes.Contains(b, []byte("invalid_tool_params")) {
				t.Errorf("/mcp: %d %s", resp.StatusCode, b)
			}
		})
		wg.Go(func() {
			// Within the go-sdk's bound, past toolmux's: an error result.
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__echo", Arguments: map[string]any{"message": nestedValue(900)}})
			if err != nil || !res.IsError || res.Meta["toolmux/error_kind"] != "invalid_tool_params" {
				t.Errorf("/mcp within the go-sdk's bound: %v %+v", err, res)
			}
		})
	}
	wg.Wait()
	peak := p.memory(t).hwm
	t.Logf("18 nested requests: peak %d MB above the baseline of %d MB", (peak-base)/mb, base/mb)
	if peak-base > 64*mb {
		t.Errorf("the nested requests cost %d MB at the peak", (peak-base)/mb)
	}
	p.settles(t, "nested", base, 16*mb)
	// The process is as responsive as before.
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__echo", Arguments: map[string]any{"message": "still here"}}); err != nil || res.IsError {
		t.Errorf("after: %v %+v", err, res)
	}
}

func nestedValue(depth int) any {
	var v any = "x"
	for range depth {
		v = []any{v}
	}
	return v
}

// postCall calls a tool through the process's HTTP API, decoding the answer
// into the optional v, and returns the status.
func postCall(t *testing.T, p *serveProc, server, tool, body string, v ...any) int {
	t.Helper()
	resp, err := http.Post(p.url("/api/tools/"+server+"/"+tool+"/call"), "application/json", strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0
	}
	defer resp.Body.Close()
	if len(v) > 0 {
		if err := json.NewDecoder(resp.Body).Decode(v[0]); err != nil {
			t.Errorf("POST %s/%s: %v", server, tool, err)
		}
	} else {
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	return resp.StatusCode
}

// The shapes of a large request the memory tests send: each builds a
// tools/call's params of about n bytes (meta is the _meta every request
// of the era carries). args says the bulk is in the arguments (refused as
// a tool's error, invalid_tool_params, over validate.max_argument_bytes),
// not in the rest of the message (refused with a JSON-RPC error).
var largeRequestShapes = []struct {
	name   string
	modern bool // only 2026-07-28 requests have it
	args   bool
	params func(tool string, n int, meta map[string]any) map[string]any
}{
	{"one long string", false, true, func(tool string, n int, meta map[string]any) map[string]any {
		return map[string]any{"name": tool, "_meta": meta, "arguments": map[string]any{"data": strings.Repeat("a", n)}}
	}},
	{"escaped string", false, true, func(tool string, n int, meta map[string]any) map[string]any {
		return map[string]any{"name": tool, "_meta": meta, "arguments": map[string]any{"data": strings.Repeat("\"\n\\é", n/8)}}
	}},
	{"many keys", false, true, func(tool string, n int, meta map[string]any) map[string]any {
		args := map[string]any{}
		for i := range n / 14 {
			args[fmt.Sprintf("k%07d", i)] = 1
		}
		return map[string]any{"name": tool, "_meta": meta, "arguments": args}
	}},
	{"long array", false, true, func(tool string, n int, meta map[string]any) map[string]any {
		return map[string]any{"name": tool, "_meta": meta, "arguments": map[string]any{"data": make([]int, n/2)}}
	}},
	{"many _meta keys", false, false, func(tool string, n int, meta map[string]any) map[string]any {
		m := maps.Clone(meta)
		if m == nil {
			m = map[string]any{}
		}
		for i := range n / 14 {
			m[fmt.Sprintf("k%07d", i)] = 1
		}
		return map[string]any{"name": tool, "_meta": m, "arguments": map[string]any{}}
	}},
	{"many inputResponses", true, false, func(tool string, n int, meta map[string]any) map[string]any {
		answers := map[string]any{}
		for i := range n / 40 {
			answers[fmt.Sprintf("k%07d", i)] = map[string]any{"action": "accept"}
		}
		return map[string]any{"name": tool, "_meta": meta, "arguments": map[string]any{}, "inputResponses": answers}
	}},
}

var modernMeta = map[string]any{
	"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
	"io.modelcontextprotocol/clientCapabilities": map[string]any{},
	"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "memory", "version": "1.0"},
}

// checkLargeAnswer checks the answer to a large request of shape: a tool's
// error for arguments over validate.max_argument_bytes, a JSON-RPC error
// for the rest of a message over it.
func checkLargeAnswer(t *testing.T, name string, args bool, answer []byte) {
	t.Helper()
	if i := bytes.Index(answer, []byte("data: ")); i >= 0 {
		answer = answer[i+len("data: "):] // an event stream's one message
	}
	var msg struct {
		Result *struct {
			IsError bool
			Meta    map[string]any `json:"_meta"`
			Content []struct{ Text string }
		}
		Error *struct {
			Code    int
			Message string
		}
	}
	if err := json.Unmarshal(bytes.TrimSpace(answer), &msg); err != nil {
		t.Errorf("%s: the answer is not one JSON-RPC message: %v: %.300s", name, err, answer)
		return
	}
	switch {
	case args:
		if msg.Result == nil || !msg.Result.IsError || msg.Result.Meta["toolmux/error_kind"] != "invalid_tool_params" ||
			len(msg.Result.Content) == 0 || !strings.Contains(msg.Result.Content[0].Text, "over the limit of 1048576 bytes") {
			t.Errorf("%s: want an invalid_tool_params result naming the limit, got %.300s", name, answer)
		}
	default:
		if msg.Error == nil || msg.Error.Code != -32602 || !strings.Contains(msg.Error.Message, "validate.max_argument_bytes") {
			t.Errorf("%s: want a JSON-RPC error -32602 naming the limit, got %.300s", name, answer)
		}
	}
}

// A request of 12 MB, under --max-request-bytes, costs the gateway at most
// four times its size at the peak, whatever its shape, on every route of
// HTTP and in both protocol eras, and the memory is given back after it:
// its arguments, or the rest of it, are over validate.max_argument_bytes,
// and it is refused before anything decodes it. A call within the bound
// (a 900 KB argument) is made.
func TestServeMemoryOfLargeRequests(t *testing.T) {
	t.Parallel()
	const size = 12 * mb
	bin := plainBinary(t)
	dir := workspace(t, fmt.Sprintf(`servers:
  fx:
    command: %s
    trust: true
virtual_servers:
  - name: v
    tools: ["fx/sink"]
`, testservers.Fixture(t)))
	p := startServeBinary(t, bin, dir, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	type route struct{ path, tool string }
	routes := []route{{"/mcp", "fx__sink"}, {"/virtual/v/mcp", "fx__sink"}, {"/servers/fx/mcp", "sink"}}
	sessions := map[string]string{}
	for _, r := range routes {
		client := mcp.NewClient(&mcp.Implementation{Name: "memory"}, nil)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.url(r.path)}, &mcp.ClientSessionOptions{ProtocolVersion: legacyProtocol})
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		sessions[r.path] = cs.ID()
	}
	post := func(path, tool string, modern bool, params map[string]any) (int, []byte) {
		b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.url(path), bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if modern {
			req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
			req.Header.Set("Mcp-Method", "tools/call")
			req.Header.Set("Mcp-Name", tool)
		} else {
			req.Header.Set("Mcp-Protocol-Version", legacyProtocol)
			req.Header.Set("Mcp-Session-Id", sessions[path])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return len(b), out
	}
	var rest int64 // the resident set at rest, after the first calls
	for _, r := range routes {
		for _, modern := range []bool{false, true} {
			era := legacyProtocol
			var meta map[string]any
			if modern {
				era, meta = "2026-07-28", modernMeta
			}
			// Warm up, and a call within the bound is made.
			const within = 900_000
			if _, answer := post(r.path, r.tool, modern, map[string]any{"name": r.tool, "_meta": meta,
				"arguments": map[string]any{"data": strings.Repeat("w", within)}}); !bytes.Contains(answer, []byte(fmt.Sprintf(`"%d bytes"`, within+11))) {
				t.Errorf("%s %s: a call within the bound got %.300s", r.path, era, answer)
			}
			if rest == 0 {
				rest = p.memory(t).rss
			}
			for _, shape := range largeRequestShapes {
				if shape.modern && !modern {
					continue
				}
				name := r.path + " " + era + " " + shape.name
				// Each request from the resident set at rest: memory is
				// given back after a request, and what the heap kept of
				// the last cannot hide the next one's cost.
				p.settles(t, "before "+name, rest, 8*mb)
				base := p.memory(t).rss
				p.resetPeak()
				n, answer := post(r.path, r.tool, modern, shape.params(r.tool, size, meta))
				peak := p.memory(t).hwm
				t.Logf("%s: %d MB request, peak %d MB above the baseline of %d MB (%.1f×)",
					name, n/mb, (peak-base)/mb, base/mb, float64(peak-base)/float64(n))
				checkLargeAnswer(t, name, shape.args, answer)
				if peak-base > 4*int64(n) {
					t.Errorf("%s: the peak was %d MB above the baseline, more than 4 × %d MB", name, (peak-base)/mb, n/mb)
				}
			}
		}
	}
	// Four at once, of the worst shape before the bounds, on /mcp and the
	// passthrough route in the 2026-07-28 era: four times the cost of one.
	p.settles(t, "before four at once", rest, 8*mb)
	base := p.memory(t).rss
	p.resetPeak()
	var wg sync.WaitGroup
	var total atomic.Int64
	for i := range 4 {
		r := routes[2*(i%2)] // /mcp, /servers/fx/mcp
		wg.Go(func() {
			n, answer := post(r.path, r.tool, true, largeRequestShapes[5].params(r.tool, size, modernMeta))
			total.Add(int64(n))
			checkLargeAnswer(t, "four at once "+r.path, false, answer)
		})
	}
	wg.Wait()
	peak := p.memory(t).hwm
	t.Logf("four at once: %d MB of requests, peak %d MB above the baseline of %d MB (%.1f×)",
		total.Load()/mb, (peak-base)/mb, base/mb, float64(peak-base)/float64(total.Load()))
	if peak-base > 4*total.Load() {
		t.Errorf("four at once: the peak was %d MB above the baseline, more than 4 × %d MB", (peak-base)/mb, total.Load()/mb)
	}
	p.settles(t, "after the large requests", rest, 8*mb)
}

// serve --stdio holds its client's messages to the same bounds as the HTTP
// routes, in both eras, at the same cost; a line longer than
// --max-request-bytes is refused and skipped, and the session goes on.
func TestServeStdioMemoryOfLargeRequests(t *testing.T) {
	t.Parallel()
	const size = 12 * mb
	bin := plainBinary(t)
	dir := workspace(t, fmt.Sprintf("servers:\n  fx:\n    command: %s\n    trust: true\n", testservers.Fixture(t)))
	cmd := exec.Command(bin, "serve", "--stdio", "--max-request-bytes", fmt.Sprint(14*mb))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+t.TempDir())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testservers.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("serve --stdio: %v\n%s", err, stderr.String())
		}
	})
	out := bufio.NewReaderSize(stdout, 1<<20)
	id := 0
	// send writes a message and reads the answer of its id.
	send := func(method string, params any) []byte {
		id++
		b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stdin.Write(append(b, '\n')); err != nil {
			t.Fatal(err)
		}
		return readAnswer(t, out, id)
	}
	send("initialize", map[string]any{"protocolVersion": legacyProtocol, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "memory", "version": "1"}})
	if _, err := stdin.Write([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	var rest int64
	for _, modern := range []bool{false, true} {
		era := legacyProtocol
		var meta map[string]any
		if modern {
			era, meta = "2026-07-28", modernMeta
		}
		if answer := send("tools/call", map[string]any{"name": "fx__sink", "_meta": meta, "arguments": map[string]any{"data": "warm"}}); !bytes.Contains(answer, []byte(`"15 bytes"`)) {
			t.Fatalf("stdio %s: %s", era, answer)
		}
		for _, shape := range largeRequestShapes {
			if shape.modern && !modern {
				continue
			}
			name := "stdio " + era + " " + shape.name
			if rest == 0 {
				rest = pidMemory(t, pid).rss
			}
			settles(t, pid, "before "+name, rest, 8*mb)
			base := pidMemory(t, pid).rss
			resetPeak(pid)
			answer := send("tools/call", shape.params("fx__sink", size, meta))
			peak := pidMemory(t, pid).hwm
			t.Logf("%s: peak %d MB above the baseline of %d MB (%.1f×)", name, (peak-base)/mb, base/mb, float64(peak-base)/float64(size))
			checkLargeAnswer(t, name, shape.args, answer)
			if peak-base > 4*size {
				t.Errorf("%s: the peak was %d MB above the baseline, more than 4 × %d MB", name, (peak-base)/mb, size/mb)
			}
		}
	}
	settles(t, pid, "after the large requests", rest, 8*mb)
	// A line over --max-request-bytes: refused, skipped, and the session
	// goes on.
	long := append([]byte(`{"jsonrpc":"2.0","id":"long","method":"tools/call","params":{"name":"fx__sink","arguments":{"data":"`),
		bytes.Repeat([]byte("x"), 15*mb)...)
	long = append(long, []byte(`"}}}`+"\n")...)
	if _, err := stdin.Write(long); err != nil {
		t.Fatal(err)
	}
	answer := readAnswer(t, out, nil)
	if !bytes.Contains(answer, []byte("--max-request-bytes")) || !bytes.Contains(answer, []byte(`"code":-32600`)) {
		t.Errorf("a line too long: %s", answer)
	}
	if answer := send("tools/call", map[string]any{"name": "fx__sink", "arguments": map[string]any{"data": "after"}}); !bytes.Contains(answer, []byte(`"16 bytes"`)) {
		t.Errorf("after a line too long: %s", answer)
	}
}

// readAnswer reads the client's stdout up to the answer with id (nil:
// null), skipping notifications.
func readAnswer(t *testing.T, out *bufio.Reader, id any) []byte {
	t.Helper()
	want, _ := json.Marshal(id)
	for {
		line, err := out.ReadBytes('\n')
		if err != nil {
			t.Fatalf("reading the answer %s: %v", want, err)
		}
		var m struct {
			ID     json.RawMessage
			Method string
		}
		if json.Unmarshal(line, &m) == nil && m.Method == "" && bytes.Equal(m.ID, want) {
			return line
		}
	}
}
