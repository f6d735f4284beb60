package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/gateway"
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
