package main_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolmux/toolmux/internal/testservers"
)

// toolmux serve answers the HTTP API: the tools with their approval, and
// a shell call that waits for approval until it is approved through
// /api/approvals; the call is then in the task log.
func TestServeAPIApproval(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "")
	p := startServeProc(t, dir, "")
	p.attach(t)
	base := p.url("/api")
	getJSON := func(path string, v any) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	var tools []struct{ Name, Approval string }
	getJSON("/tools", &tools)
	found := false
	for _, x := range tools {
		found = found || (x.Name == "builtin__shell" && x.Approval == "ask")
	}
	if !found {
		t.Fatalf("tools: %+v", tools)
	}

	type result struct {
		code int
		body string
	}
	done := make(chan result, 1)
	go func() {
		resp, err := http.Post(base+"/tools/builtin/shell/call", "application/json",
			strings.NewReader(`{"arguments": {"command": "echo approved > out.txt"}, "task": "api-task"}`))
		if err != nil {
			done <- result{0, err.Error()}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- result{resp.StatusCode, string(b)}
	}()
	var pending []struct{ ID, Tool string }
	if !testservers.Eventually(30*time.Second, func() bool {
		pending = nil
		getJSON("/approvals", &pending)
		return len(pending) == 1
	}) {
		t.Fatalf("no pending approval; stderr: %s", p.stderr.String())
	}
	if !testservers.Eventually(10*time.Second, func() bool { return strings.Contains(p.stderr.String(), "/api/approvals/"+pending[0].ID) }) {
		t.Errorf("the console does not say where to answer: %s", p.stderr.String())
	}
	resp, err := http.Post(base+"/approvals/"+pending[0].ID, "application/json", strings.NewReader(`{"decision": "once"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("approve: %d", resp.StatusCode)
	}
	r := <-done
	if r.code != 200 {
		t.Fatalf("call: %d %s", r.code, r.body)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "out.txt")); err != nil || string(b) != "approved\n" {
		t.Fatalf("the approved command did not run: %q %v", b, err)
	}
	var tasks []struct {
		ID    string
		Calls int
	}
	getJSON("/tasks", &tasks)
	ok := false
	for _, tk := range tasks {
		ok = ok || (tk.ID == "api-task" && tk.Calls == 1)
	}
	if !ok {
		t.Errorf("the call is not in the task log: %+v", tasks)
	}
	if err := p.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(); err != nil {
		t.Errorf("serve did not exit cleanly: %v\n%s", err, p.stderr.String())
	}
}
