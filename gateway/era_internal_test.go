package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/toolmux/toolmux/tool"
)

// oneTool is a Caller with one tool, fx/echo, that answers "ok".
type oneTool struct{}

func (oneTool) Tools(context.Context) (*tool.Catalog, error) {
	return tool.NewCatalog([]tool.Tool{{Server: "fx", Name: "echo"}}, []tool.ServerHealth{{Name: "fx", State: tool.StateReady}}), nil
}

func (oneTool) Call(_ context.Context, c tool.Call) *tool.Record {
	return &tool.Record{Server: c.Server, Tool: c.Tool, Task: c.Task, Result: &tool.Result{Content: []tool.Content{{Type: tool.ContentText, Text: "ok"}}}}
}

type endLog struct {
	mu    sync.Mutex
	start []Session
	ends  map[string]SessionEnd
}

func (l *endLog) SessionStarted(_ context.Context, s Session) {
	l.mu.Lock()
	l.start = append(l.start, s)
	l.mu.Unlock()
}

func (l *endLog) SessionEnded(_ context.Context, s Session, e SessionEnd) {
	l.mu.Lock()
	l.ends[s.ClientName] = e
	l.mu.Unlock()
}

// The tasks of sessionless clients are bounded: beyond the bound, the
// least recently active one ends (idle) to make room.
func TestSessionlessClientsAreBounded(t *testing.T) {
	log := &endLog{ends: map[string]SessionEnd{}}
	g := New(oneTool{}, Options{Sessions: log})
	g.clients.maxClients = 2
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	defer g.Close()
	call := func(name string) {
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]any{
			"name": "fx__echo", "arguments": map[string]any{},
			"_meta": map[string]any{
				"io.modelcontextprotocol/protocolVersion":    multiRoundTrip,
				"io.modelcontextprotocol/clientCapabilities": map[string]any{},
				"io.modelcontextprotocol/clientInfo":         map[string]any{"name": name, "version": "1"},
			}}})
		req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", multiRoundTrip)
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", "fx__echo")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", name, resp.Status)
		}
	}
	call("a")
	call("b")
	call("a")
	call("c") // b, the least recently active, makes room
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.start) != 3 || len(log.ends) != 1 || log.ends["b"].How != EndIdle || log.ends["b"].Message == "" {
		t.Fatalf("started %+v, ended %+v", log.start, log.ends)
	}
}
