package gateway_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
)

// Whatever the gateway refuses on /mcp reaches the client as a JSON-RPC
// error object, with the request's id when there is one: a malformed body,
// a message that is neither request nor response, an unknown method, an
// unknown session. An unknown notification is accepted and ignored.
func TestRefusalsAreJSONRPCErrors(t *testing.T) {
	url := serveGateway(t, "", gateway.Security{Loopback: true})
	code, body := post(t, url, "", "", initialize, nil)
	if code != http.StatusOK {
		t.Fatalf("initialize: %d %s", code, body)
	}
	// The session id, from a second initialize read with its headers.
	req, _ := http.NewRequest(http.MethodPost, url+"/mcp", strings.NewReader(initialize))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	session := map[string]string{"Mcp-Session-Id": resp.Header.Get("Mcp-Session-Id"), "Mcp-Protocol-Version": "2025-06-18"}
	if session["Mcp-Session-Id"] == "" {
		t.Fatal("no session id")
	}
	for _, tc := range []struct {
		name, body string
		header     map[string]string
		status     int
		code       int
		id         string
	}{
		{"not JSON", `hello`, session, 400, -32700, "null"},
		{"not an object", `42`, session, 400, -32700, "null"},
		{"id without method", `{"jsonrpc":"2.0","id":3}`, session, 400, -32600, "3"},
		{"method not a string", `{"jsonrpc":"2.0","id":"x","method":5}`, session, 400, -32600, `"x"`},
		{"unknown method", `{"jsonrpc":"2.0","id":7,"method":"foo/bar"}`, session, 200, -32601, "7"},
		{"unknown session", `{"jsonrpc":"2.0","id":8,"method":"tools/list"}`, map[string]string{"Mcp-Session-Id": "nope", "Mcp-Protocol-Version": "2025-06-18"}, 404, -32001, "8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := post(t, url, "", "", tc.body, tc.header)
			msg, ok := rpcErrorOf([]byte(body))
			if !ok {
				t.Fatalf("%d: not a JSON-RPC error: %q", code, body)
			}
			if code != tc.status || msg.JSONRPC != "2.0" || msg.Error.Code != tc.code || string(msg.ID) != tc.id || msg.Error.Message == "" {
				t.Fatalf("got %d %s", code, body)
			}
		})
	}
	code, body = post(t, url, "", "", `{"jsonrpc":"2.0","method":"notifications/whatever"}`, session)
	if code != http.StatusAccepted || body != "" {
		t.Fatalf("unknown notification: %d %q", code, body)
	}
	// A known method still works in the session.
	code, body = post(t, url, "", "", `{"jsonrpc":"2.0","id":9,"method":"ping"}`, session)
	if code != http.StatusOK || !strings.Contains(body, `"result"`) {
		t.Fatalf("ping: %d %s", code, body)
	}
}

// serveAllRoutes serves a gateway with opts over the upstream test server
// (startUpstream) on each kind of MCP route: /mcp, the virtual server
// /virtual/v/mcp (its every tool) and the passthrough route
// /servers/up/mcp. It returns the gateway's URL.
func serveAllRoutes(t *testing.T, opts gateway.Options) (string, *gateway.Gateway) {
	t.Helper()
	up := startUpstream(t)
	cfg := mcpsource.Config{Name: "up", Transport: mcpsource.StreamableHTTP, URL: up.url}
	src, err := mcpsource.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	opts.Passthrough = []gateway.Route{{Server: cfg}}
	opts.Virtual = []gateway.Virtual{{Name: "v", Tools: []string{"up/*"}}}
	g := gateway.New(m, opts)
	hs := httptest.NewServer(g.Mux("", gateway.Security{Loopback: true}))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		g.Close()
		m.Close()
	})
	return hs.URL, g
}

// allRoutes are the MCP routes of serveAllRoutes.
var allRoutes = []string{"/mcp", "/virtual/v/mcp", "/servers/up/mcp"}

// What the go-sdk's handlers refuse in plain text is a JSON-RPC error on
// every route, in both eras: an id that is neither a string nor a number,
// a batch (which 2025-06-18 and later do not have), a Content-Type other
// than JSON, an Accept without both JSON and event streams. The id is
// the request's when it can be echoed, else null.
func TestRefusalsAreJSONRPCErrorsOnEveryRoute(t *testing.T) {
	base, _ := serveAllRoutes(t, gateway.Options{})
	list := `{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{}}`
	for _, route := range allRoutes {
		for _, era := range []string{legacyProtocol, "2026-07-28"} {
			for _, tc := range []struct {
				name, body string
				header     map[string]string
				status     int
				code       int
				id         string
			}{
				{"object id", `{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list","params":{}}`, nil, 400, -32600, "null"},
				{"batch", "[" + list + "]", nil, 400, -32600, "null"},
				{"text/plain", list, map[string]string{"Content-Type": "text/plain"}, 415, -32000, "5"},
				{"Accept", list, map[string]string{"Accept": "application/json"}, 400, -32600, "5"},
			} {
				t.Run(route+" "+era+" "+tc.name, func(t *testing.T) {
					header := map[string]string{"Mcp-Protocol-Version": era, "Mcp-Method": "tools/list"}
					for k, v := range tc.header {
						header[k] = v
					}
					resp, b := postRaw(t, base+route, tc.body, header)
					msg, ok := rpcErrorOf(b)
					if !ok {
						t.Fatalf("%d %s: not a JSON-RPC error: %q", resp.StatusCode, resp.Header.Get("Content-Type"), b)
					}
					if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/json" || msg.JSONRPC != "2.0" ||
						msg.Error.Code != tc.code || string(msg.ID) != tc.id || msg.Error.Message == "" {
						t.Fatalf("got %d %s", resp.StatusCode, b)
					}
				})
			}
		}
	}
}

// rpcErrorAnswer is a JSON-RPC error answer, as the tests read it.
type rpcErrorAnswer struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

// rpcErrorOf reads b as a JSON-RPC error answer; ok is false when it is
// not one.
func rpcErrorOf(b []byte) (msg rpcErrorAnswer, ok bool) {
	err := json.Unmarshal(b, &msg)
	return msg, err == nil && msg.Error != nil
}
