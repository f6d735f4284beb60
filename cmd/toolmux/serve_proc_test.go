package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
)

// serveProc is a `toolmux serve` process of a test.
type serveProc struct {
	addr   string
	dir    string
	cmd    *exec.Cmd
	stderr *testservers.SyncBuffer
	exited chan struct{} // closed when the process has exited
	err    error         // how it exited, once exited is closed
}

// startServeProc starts `toolmux serve` on a free port in dir, with its
// data under dataHome ("" for a directory of the test's own), and waits
// until it serves. Unless the test ended it itself, it is stopped with
// SIGTERM when the test ends and must exit cleanly within 30 seconds; a
// test registers what holds a stream open (a browser) after starting it,
// so that it is gone first.
func startServeProc(t *testing.T, dir, dataHome string, args ...string) *serveProc {
	t.Helper()
	return startServeBinary(t, binary, dir, dataHome, args...)
}

// startServeBinary is startServeProc with another build of toolmux.
func startServeBinary(t *testing.T, bin, dir, dataHome string, args ...string) *serveProc {
	t.Helper()
	return startServeEnv(t, bin, dir, dataHome, nil, args...)
}

// startServeEnv is startServeBinary with further environment variables.
func startServeEnv(t *testing.T, bin, dir, dataHome string, env []string, args ...string) *serveProc {
	t.Helper()
	if dataHome == "" {
		dataHome = t.TempDir()
	}
	p := &serveProc{addr: fmt.Sprintf("127.0.0.1:%d", testservers.FreePort(t)), dir: dir,
		stderr: &testservers.SyncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"serve", "--addr", p.addr}, args...)...)
	p.cmd.Dir = dir
	p.cmd.Env = append(append(os.Environ(), "XDG_DATA_HOME="+dataHome), env...)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
			return
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
			if p.err != nil {
				t.Errorf("serve did not exit cleanly: %v\n%s", p.err, p.stderr.String())
			}
		case <-time.After(30 * time.Second):
			// SIGQUIT makes the Go runtime write every goroutine's stack
			// to stderr before it exits: what held the shutdown up.
			_ = p.cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-p.exited:
			case <-time.After(10 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.exited
			}
			t.Errorf("serve did not stop within 30s of SIGTERM\n%s", p.stderr.String())
		}
	})
	if !testservers.Eventually(30*time.Second, func() bool { return strings.Contains(p.stderr.String(), "serving") }) {
		t.Fatalf("serve did not start: %s", p.stderr.String())
	}
	return p
}

// url is the address of path on the process.
func (p *serveProc) url(path string) string { return "http://" + p.addr + path }

// signal sends sig to the process.
func (p *serveProc) signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// wait waits for the process to exit and says how it did.
func (p *serveProc) wait() error {
	<-p.exited
	return p.err
}

// connect opens a session of protocol 2025-11-25 on /mcp (the go-sdk's
// client would ask for 2026-07-28, which has none: era_test.go).
func (p *serveProc) connect(t *testing.T, ctx context.Context) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.url("/mcp")}, &mcp.ClientSessionOptions{ProtocolVersion: legacyProtocol})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// attach opens the API's event stream as an approver (as the web page
// does), until the end of the test: serve then puts approval questions
// to the API's queue instead of refusing them.
func (p *serveProc) attach(t *testing.T) {
	t.Helper()
	testservers.AttachApprover(t, "http://"+p.addr)
	if !testservers.Eventually(10*time.Second, func() bool {
		var in struct{ Approvers int }
		p.getJSON(t, "/api/info", &in)
		return in.Approvers > 0
	}) {
		t.Fatal("the approver never counted")
	}
}

// decide answers the call waiting for approval under id through the
// process's API, as the page does ("once", "deny", ...).
func (p *serveProc) decide(t *testing.T, id, decision string) {
	t.Helper()
	resp, err := http.Post(p.url("/api/approvals/"+id), "application/json", strings.NewReader(`{"decision": "`+decision+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("answering %s: %s", id, resp.Status)
	}
}

// stdioServe is the command of `toolmux serve --stdio` in dir, with a
// data directory of the test's own, and the buffer its stderr goes to:
// for an MCP client's CommandTransport to start.
func stdioServe(t *testing.T, dir string) (*exec.Cmd, *testservers.SyncBuffer) {
	cmd := exec.Command(binary, "serve", "--stdio")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+t.TempDir())
	stderr := &testservers.SyncBuffer{}
	cmd.Stderr = stderr
	return cmd, stderr
}

// getJSON decodes the answer of a GET to the process's API.
func (p *serveProc) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	p.getAs(t, "", path, v)
}

// getAs is getJSON with a bearer token ("": none).
func (p *serveProc) getAs(t *testing.T, token, path string, v any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, p.url(path), nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// recordedCalls returns every call record in the task log, through the
// API: its tasks, then each task's calls.
func (p *serveProc) recordedCalls(t *testing.T) []callRecord {
	t.Helper()
	var tasks []struct{ ID string }
	p.getJSON(t, "/api/tasks?limit=1000", &tasks)
	var out []callRecord
	for _, task := range tasks {
		var d struct{ Calls []callRecord }
		p.getJSON(t, "/api/tasks/"+task.ID, &d)
		out = append(out, d.Calls...)
	}
	return out
}

type callRecord struct {
	ID        string         `json:"id"`
	Tool      string         `json:"tool"`
	Arguments map[string]any `json:"arguments"`
	Error     *struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
	} `json:"error"`
}
