package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
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
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
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
		t.Fatalf("no VmRSS/VmHWM in /proc/%d/status", p.cmd.Process.Pid)
	}
	return m
}

// resetPeak makes the process's peak its current resident set (Linux's
// clear_refs "5"), so that the next peak is the peak of what follows. Where
// that is not allowed the old peak stays, which only makes the bounds
// checked below stricter.
func (p *serveProc) resetPeak() {
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.cmd.Process.Pid), []byte("5"), 0)
}

// settles waits for the resident set to come back within margin of base:
// memory is given back after the calls, not kept while idle.
func (p *serveProc) settles(t *testing.T, what string, base, margin int64) {
	t.Helper()
	var last memory
	if !testservers.Eventually(30*time.Second, func() bool {
		last = p.memory(t)
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
