package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
)

// A server that cannot start while toolmux serve runs is refused with its
// stderr on every route, tried again in the background, and served as
// soon as it can start, without anyone calling it.
func TestServeBringsBackAServerThatFailedAtStart(t *testing.T) {
	t.Parallel()
	flag := filepath.Join(t.TempDir(), "ready")
	dir := workspace(t, fmt.Sprintf(`servers:
  late:
    command: %s
    args: ["-require", %q]
    trust: true
    health_check: {min_backoff: 50ms, max_backoff: 200ms}
`, testservers.Fixture(t), flag))
	p := startServeProc(t, dir, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := p.connect(t, ctx)
	defer cs.Close()

	// /mcp: an isError result with the kind and the stderr.
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "late__echo", Arguments: map[string]any{"message": "early"}})
	if err != nil {
		t.Fatalf("late__echo on /mcp: %v", err)
	}
	text := res.Content[0].(*mcp.TextContent).Text
	if !res.IsError || res.Meta["toolmux/error_kind"] != "server_unavailable" || !strings.Contains(text, flag+" is missing") {
		t.Errorf("late__echo on /mcp: isError %v, meta %v, %q", res.IsError, res.Meta, text)
	}

	// The HTTP API: 503 and the record, stderr in its detail.
	resp, err := http.Post(p.url("/api/tools/late/echo/call"), "application/json", strings.NewReader(`{"arguments": {"message": "early"}}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var rec struct {
		Error struct{ Kind, Detail string }
	}
	if err := json.Unmarshal(body, &rec); err != nil || resp.StatusCode != http.StatusServiceUnavailable ||
		rec.Error.Kind != "server_unavailable" || !strings.Contains(rec.Error.Detail, flag+" is missing") {
		t.Errorf("API call: %d %s (%v)", resp.StatusCode, body, err)
	}

	// Health: failed, with the error and the stderr.
	var servers []struct{ Server, State, Error, Detail string }
	p.getJSON(t, "/api/servers", &servers)
	if i := slices.IndexFunc(servers, func(s struct{ Server, State, Error, Detail string }) bool { return s.Server == "late" }); i < 0 ||
		servers[i].State != "failed" || !strings.Contains(servers[i].Detail, "is missing") {
		t.Errorf("servers: %+v", servers)
	}

	// toolmux call, on its own, says the same.
	r := toolmux(t, dir, "", "call", "late", "echo")
	if r.code != 1 || !strings.Contains(r.stderr, "server_unavailable") || !strings.Contains(r.stderr, "is missing") {
		t.Errorf("toolmux call: exit %d, %s", r.code, r.stderr)
	}

	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ok := testservers.Eventually(60*time.Second, func() bool {
		var servers []struct{ Server, State string }
		p.getJSON(t, "/api/servers", &servers)
		return slices.ContainsFunc(servers, func(s struct{ Server, State string }) bool { return s.Server == "late" && s.State == "ready" })
	})
	if !ok {
		t.Fatalf("late did not come back: %s", p.stderr.String())
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "late__echo", Arguments: map[string]any{"message": "on time"}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "Echo: on time" {
		t.Errorf("late__echo after it came back: %v %+v", err, res)
	}
}

// A server whose process dies while serve runs is restarted, and serve
// says so on stderr without --verbose: how it ended and how many restarts
// it has had.
func TestServeSaysAServerRestarted(t *testing.T) {
	t.Parallel()
	fx := testservers.Fixture(t)
	dir := workspace(t, fmt.Sprintf(`servers:
  mem:
    command: %s
    trust: true
    health_check: {min_backoff: 50ms, max_backoff: 200ms}
`, fx))
	p := startServeProc(t, dir, "")
	// The fixture's process under serve, once serve has started it.
	fixture := func() int {
		for _, c := range testservers.Children(p.cmd.Process.Pid) {
			if len(c.Args) > 0 && c.Args[0] == fx && c.State != 'Z' {
				return c.PID
			}
		}
		return 0
	}
	var pid int
	if !testservers.Eventually(time.Minute, func() bool { pid = fixture(); return pid != 0 }) {
		t.Fatalf("serve did not start the server\n%s", p.stderr.String())
	}
	for n := 1; n <= 2; n++ {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("restarted (%s so far)", map[int]string{1: "1 restart", 2: "2 restarts"}[n])
		if !testservers.Eventually(time.Minute, func() bool { return strings.Contains(p.stderr.String(), want) }) {
			t.Fatalf("serve did not say the server restarted (%q)\n%s", want, p.stderr.String())
		}
		line := ""
		for l := range strings.SplitSeq(p.stderr.String(), "\n") {
			if strings.Contains(l, want) {
				line = l
			}
		}
		t.Log(line)
		if !strings.HasPrefix(line, "toolmux: server mem killed by signal 9 (killed)") {
			t.Errorf("restart line: %q", line)
		}
		old := pid
		if !testservers.Eventually(time.Minute, func() bool { pid = fixture(); return pid != 0 && pid != old }) {
			t.Fatalf("no new process of the server\n%s", p.stderr.String())
		}
	}
}
