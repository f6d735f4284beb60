package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/internal/jsonscan"
	"github.com/toolmux/toolmux/tasklog"
)

// nopStore is a TaskStore that holds nothing: the benchmark never makes
// a task.
type nopStore struct{}

func (nopStore) PutMCPTask(context.Context, tasklog.MCPTask) error { return nil }
func (nopStore) MCPTask(_ context.Context, id string) (*tasklog.MCPTask, error) {
	return nil, &tasklog.NotFoundError{Task: id}
}

// BenchmarkTasksSkip is what tasks cost a tools/call of a client that
// does not use them (the gateway with tasks on; a session it does not
// know, as the lookup of one that did not declare the extension costs the
// same): the tasks hook's look at the request before the call goes its
// usual way.
func BenchmarkTasksSkip(b *testing.B) {
	g := gateway.New(nil, gateway.Options{Tasks: gateway.Tasks{Store: nopStore{}}})
	defer g.Close()
	body := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"fx__echo","arguments":{"message":"` +
		strings.Repeat("hello ", 40) + `"},"_meta":{"progressToken":"p-7"}}}`)
	msg := jsonscan.Scan(body)
	r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
	r.Header.Set("Mcp-Session-Id", "S1")
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		if gateway.ServeTasksForTest(g, w, r, body, msg) {
			b.Fatal("the hook took a plain call")
		}
	}
}
