package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/gateway"
)

// rpcAnswer is a JSON-RPC answer as these tests read it.
type rpcAnswer struct {
	ID     any
	Result json.RawMessage
	Error  *struct {
		Code    int
		Message string
	}
}

// A request of the 2025-11-25 protocol other than initialize and ping,
// sent without a session (no Mcp-Session-Id), is refused on every HTTP
// route with 400 and a JSON-RPC invalid-request error saying to
// initialize first, not the go-sdk's error of code 0; initialize and
// ping still need no session, and a 2026-07-28 request none either.
func TestSessionlessRequestIsToldToInitialize(t *testing.T) {
	url := teamGateway(t, gateway.ToolSearch{})
	auth := map[string]string{"Authorization": "Bearer root-token"}
	withVersion := map[string]string{"Authorization": "Bearer root-token", "Mcp-Protocol-Version": "2025-11-25"}
	for _, route := range []string{"/mcp", "/virtual/all/mcp", "/servers/up/mcp"} {
		for _, header := range []map[string]string{auth, withVersion} {
			for _, body := range []string{
				`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
				`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__parts","arguments":{}}}`,
				`{"jsonrpc":"2.0","id":1,"method":"resources/list"}`,
			} {
				resp, b := postRaw(t, url+route, body, header)
				var a rpcAnswer
				if err := json.Unmarshal(b, &a); err != nil {
					t.Fatalf("%s %s: %s %q: %v", route, body, resp.Status, b, err)
				}
				if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/json" ||
					a.ID != float64(1) || a.Error == nil || a.Error.Code != -32600 ||
					!strings.Contains(a.Error.Message, `send "initialize" first`) || !strings.Contains(a.Error.Message, "Mcp-Session-Id") {
					t.Errorf("%s %v %s: %s %q", route, header, body, resp.Status, b)
				}
			}
			// ping needs no session.
			resp, b := postRaw(t, url+route, `{"jsonrpc":"2.0","id":2,"method":"ping"}`, header)
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"result":{}`) {
				t.Errorf("%s: ping: %s %q", route, resp.Status, b)
			}
		}
		// A session is still opened, and used.
		cs := connectAs(t, url+route, "root-token", legacyProtocol)
		if _, err := cs.ListTools(context.Background(), nil); err != nil {
			t.Errorf("%s: tools/list in a session: %v", route, err)
		}
		// A 2026-07-28 request has no session.
		if status, _, m := post2026Meta(t, url+route, "tools/list", auth); status != http.StatusOK || m["result"] == nil {
			t.Errorf("%s: a 2026-07-28 tools/list: %d %v", route, status, m)
		}
	}
}

// On serve --stdio, a request before initialize is told to initialize
// first; after it, the same request is answered.
func TestStdioRequestBeforeInitialize(t *testing.T) {
	a := newApprovalsGateway(t, time.Minute, 0)
	sendLine, write := stdioRaw(t, a.g, 0)
	send := func(line string) rpcAnswer {
		t.Helper()
		answer := sendLine(line)
		var a rpcAnswer
		if err := json.Unmarshal([]byte(answer), &a); err != nil {
			t.Fatalf("%q: %v", answer, err)
		}
		return a
	}
	if a := send(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`); a.Error == nil || a.Error.Code != -32600 ||
		!strings.Contains(a.Error.Message, `send "initialize" first`) {
		t.Fatalf("tools/list before initialize: %+v", a)
	}
	if a := send(`{"jsonrpc":"2.0","id":2,"method":"ping"}`); a.Error != nil {
		t.Fatalf("ping before initialize: %+v", a)
	}
	if a := send(`{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`); a.Error != nil {
		t.Fatalf("initialize: %+v", a)
	}
	write(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if a := send(`{"jsonrpc":"2.0","id":4,"method":"tools/list"}`); a.Error != nil || !strings.Contains(string(a.Result), "builtin__read_file") {
		t.Fatalf("tools/list after initialize: %+v", a)
	}
}
