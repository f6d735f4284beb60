package gateway

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/toolmux/toolmux/internal/jsonscan"
)

// FuzzReadModernCall reads what a 2026-07-28 client sends: never a
// panic, and what the gateway takes as its own to answer is a tools/call
// the go-sdk decodes as one, of the id the gateway answers, whose name
// and version agree with the headers, with the client's capabilities.
func FuzzReadModernCall(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fx__echo","arguments":{"m":"x"},"_meta":{`+
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}},`+
		`"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"}}}}`), "fx__echo")
	f.Add([]byte(`{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"t","_meta":{`+
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":null}}}`), "t")
	f.Fuzz(func(t *testing.T, body []byte, name string) {
		r, _ := http.NewRequest(http.MethodPost, "http://gw/mcp", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		r.Header.Set("Mcp-Protocol-Version", multiRoundTrip)
		r.Header.Set("Mcp-Method", "tools/call")
		r.Header.Set("Mcp-Name", name)
		mc, ok := readModernCall(r, body, jsonscan.Scan(body))
		if !ok {
			return
		}
		msg, err := jsonrpc.DecodeMessage(body)
		req, isReq := msg.(*jsonrpc.Request)
		if err != nil || !isReq || req.Method != "tools/call" || !req.IsCall() {
			t.Fatalf("taken, but the go-sdk reads %T %v", msg, err)
		}
		if mc.params.Name != name || mc.declared == nil || mc.declared.Capabilities == nil || mc.declared.ProtocolVersion != multiRoundTrip {
			t.Fatalf("taken as %+v, declared %+v", mc.params, mc.declared)
		}
		if v, _ := mc.params.Meta[metaProtocolVersion].(string); v != multiRoundTrip {
			t.Fatalf("the _meta version is %v", mc.params.Meta[metaProtocolVersion])
		}
	})
}
