package main_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
)

// On SIGTERM, serve stops accepting connections at once, lets a call in
// flight go on for --shutdown-timeout, then cancels it: the client gets
// the cancellation, the upstream server sees it, the task log records it,
// and serve says what it cancelled and exits cleanly.
func TestServeGracefulShutdown(t *testing.T) {
	t.Parallel()
	marker := filepath.Join(t.TempDir(), "marker")
	dir := workspace(t, fmt.Sprintf("servers:\n  fx:\n    command: %s\n    args: [-marker, %s]\n    trust: true\n", testservers.Fixture(t), marker))
	data := t.TempDir()
	p := startServeProc(t, dir, data, "--shutdown-timeout", "3s")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Watch the events to know when the call runs.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+"/api/events?events=tool_state", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	executing := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if l := sc.Text(); strings.Contains(l, `"tool":"hang"`) && strings.Contains(l, `"state":"executing"`) {
				close(executing)
				break
			}
		}
		for sc.Scan() { // drain until the stream ends with the server
		}
	}()

	cs := p.connect(t, ctx)
	defer cs.Close()
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__hang"})
		done <- answer{res, err}
	}()
	select {
	case <-executing:
	case <-ctx.Done():
		t.Fatalf("the call never ran: %s", p.stderr.String())
	}
	if err := p.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// New connections are refused while the call is still in flight.
	if !testservers.Eventually(10*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", p.addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	}) {
		t.Error("serve still accepts connections after SIGTERM")
	}
	select {
	case a := <-done:
		t.Fatalf("the call ended before its grace was over: %+v %v", a.res, a.err)
	default:
	}

	a := <-done
	if a.err != nil {
		t.Fatalf("call: %v", a.err)
	}
	text := ""
	for _, c := range a.res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	if !a.res.IsError || !strings.Contains(text, "toolmux is shutting down") {
		t.Errorf("the client got %q (isError %v), want the shutdown's cancellation", text, a.res.IsError)
	}
	if err := p.wait(); err != nil {
		t.Errorf("serve did not exit cleanly: %v\n%s", err, p.stderr.String())
	}
	if s := p.stderr.String(); !strings.Contains(s, "cancelled fx__hang") || !strings.Contains(s, "1 call cancelled") {
		t.Errorf("serve did not say what it cancelled:\n%s", s)
	}
	if b, _ := os.ReadFile(marker); !strings.Contains(string(b), "cancelled hang") {
		t.Errorf("the upstream server never saw the call cancelled: %q", b)
	}

	// The task log, read by a new serve, holds the cancelled call.
	p2 := startServeProc(t, dir, data)
	var found bool
	for _, r := range p2.recordedCalls(t) {
		if r.Tool == "hang" {
			found = r.Error != nil && r.Error.Kind == "cancelled" && strings.Contains(r.Error.Message, "toolmux is shutting down")
			if !found {
				t.Errorf("recorded: %+v", r)
			}
		}
	}
	if !found {
		t.Error("the cancelled call is not in the task log")
	}
}

// kill -9 of serve while clients call tools loses no completed call: every
// call whose answer a client got is in the task log after a restart.
func TestServeKilledLosesNoCompletedCall(t *testing.T) {
	t.Parallel()
	dir := workspace(t, fmt.Sprintf("servers:\n  fx:\n    command: %s\n    trust: true\n", testservers.Fixture(t)))
	data := t.TempDir()
	p := startServeProc(t, dir, data)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const clients, enough = 8, 200
	var (
		mu        sync.Mutex
		completed []string
		wg        sync.WaitGroup
	)
	for c := range clients {
		cs := p.connect(t, ctx)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cs.Close()
			for i := 0; ; i++ {
				msg := fmt.Sprintf("c%d-%d", c, i)
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__echo", Arguments: map[string]any{"message": msg}})
				if err != nil || res.IsError {
					return // the server is gone
				}
				mu.Lock()
				completed = append(completed, msg)
				mu.Unlock()
			}
		}()
	}
	if !testservers.Eventually(time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(completed) >= enough
	}) {
		t.Fatalf("only %d calls completed", len(completed))
	}
	if err := p.signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	_ = p.wait()

	p2 := startServeProc(t, dir, data)
	recorded := map[string]bool{}
	for _, r := range p2.recordedCalls(t) {
		if m, ok := r.Arguments["message"].(string); ok && r.Error == nil {
			recorded[m] = true
		}
	}
	missing := 0
	for _, m := range completed {
		if !recorded[m] {
			missing++
			t.Errorf("call %s completed but is not in the task log", m)
		}
	}
	t.Logf("%d calls completed before the kill, %d recorded, %d missing", len(completed), len(recorded), missing)
}
