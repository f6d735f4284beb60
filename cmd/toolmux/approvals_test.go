package main_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/internal/testservers"
)

// serve's approval queue holds several calls at once; answering one of
// them "always this tool" lets the others run too.
func TestServeApprovalsWaitSideBySide(t *testing.T) {
	t.Parallel()
	p := startServeProc(t, workspace(t, ""), t.TempDir())
	p.attach(t)
	codes := make(chan int, 3)
	for i := range 3 {
		go func() {
			resp, err := http.Post("http://"+p.addr+"/api/tools/builtin/shell/call", "application/json",
				strings.NewReader(fmt.Sprintf(`{"arguments": {"command": "echo %d"}}`, i)))
			if err != nil {
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	var pending []struct{ ID string }
	if !testservers.Eventually(30*time.Second, func() bool {
		pending = nil
		p.getJSON(t, "/api/approvals", &pending)
		return len(pending) == 3
	}) {
		t.Fatalf("%d calls wait for approval, want 3 side by side", len(pending))
	}
	resp, err := http.Post("http://"+p.addr+"/api/approvals/"+pending[1].ID, "application/json",
		strings.NewReader(`{"decision": "always_tool"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("answer: %s", resp.Status)
	}
	for range 3 {
		if code := <-codes; code != http.StatusOK {
			t.Errorf("call ended %d", code)
		}
	}
	p.getJSON(t, "/api/approvals", &pending)
	if len(pending) != 0 {
		t.Errorf("still waiting: %+v", pending)
	}
}
