package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
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

// What the go-sdk would refuse, or judge by what the gateway does not
// look at, is left to it: readModernCall does not take it.
func TestReadModernCallLeavesToTheSDK(t *testing.T) {
	const good = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	read := func(body string, header map[string]string) bool {
		r, _ := http.NewRequest(http.MethodPost, "http://gw/mcp", bytes.NewReader([]byte(body)))
		for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
			"Mcp-Protocol-Version": multiRoundTrip, "Mcp-Method": "tools/call", "Mcp-Name": "t"} {
			r.Header.Set(k, v)
		}
		for k, v := range header {
			if v == "" {
				r.Header.Del(k)
			} else {
				r.Header.Set(k, v)
			}
		}
		_, ok := readModernCall(r, []byte(body), jsonscan.Scan([]byte(body)))
		return ok
	}
	if !read(good, nil) {
		t.Fatal("a plain 2026-07-28 tools/call was not taken")
	}
	for name, c := range map[string]struct {
		body   string
		header map[string]string
	}{
		"malformed content type": {good, map[string]string{"Content-Type": "application/json; =x"}},
		"no event stream":        {good, map[string]string{"Accept": "application/json"}},
		"no Mcp-Name":            {good, map[string]string{"Mcp-Name": ""}},
		"another Mcp-Name":       {good, map[string]string{"Mcp-Name": "u"}},
		"a session":              {good, map[string]string{"Mcp-Session-Id": "s"}},
		"a param header":         {good, map[string]string{"Mcp-Param-Region": "eu"}},
		"an older header":        {good, map[string]string{"Mcp-Protocol-Version": "2025-11-25"}},
		"no capabilities":        {strings.Replace(good, `,"io.modelcontextprotocol/clientCapabilities":{}`, "", 1), nil},
		"a requestState":         {strings.Replace(good, `"name":"t"`, `"name":"t","requestState":"s"`, 1), nil},
		"a clientInfo not one":   {strings.Replace(good, `clientCapabilities":{}`, `clientCapabilities":{},"io.modelcontextprotocol/clientInfo":"x"`, 1), nil},
	} {
		if read(c.body, c.header) {
			t.Errorf("%s: taken", name)
		}
	}
}

// A tools/list or server/discover readModernMeta takes is one the go-sdk
// reads as that request, whose params are its _meta alone, of the
// version the headers name, with the client's capabilities declared.
func FuzzReadModernMeta(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{`+
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},`+
		`"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"}}}}`), false)
	f.Add([]byte(`{"jsonrpc":"2.0","id":"d","method":"server/discover","params":{"_meta":{`+
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"sampling":{}}}}}`), true)
	f.Fuzz(func(t *testing.T, body []byte, discover bool) {
		method := "tools/list"
		if discover {
			method = methodDiscover
		}
		r, _ := http.NewRequest(http.MethodPost, "http://gw/mcp", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		r.Header.Set("Mcp-Protocol-Version", multiRoundTrip)
		r.Header.Set("Mcp-Method", method)
		req, p, declared, ok := readModernMeta(r, body, jsonscan.Scan(body), method)
		if !ok {
			return
		}
		msg, err := jsonrpc.DecodeMessage(body)
		sdk, isReq := msg.(*jsonrpc.Request)
		if err != nil || !isReq || sdk.Method != method || !sdk.IsCall() || req.Method != method {
			t.Fatalf("taken, but the go-sdk reads %T %v", msg, err)
		}
		var params map[string]json.RawMessage
		if err := json.Unmarshal(sdk.Params, &params); err != nil || len(params) != 1 || params["_meta"] == nil {
			t.Fatalf("taken with params %s (%v)", sdk.Params, err)
		}
		if v, _ := p.Meta[metaProtocolVersion].(string); v != multiRoundTrip || declared == nil || declared.Capabilities == nil {
			t.Fatalf("taken with _meta %v, declared %+v", p.Meta, declared)
		}
	})
}

// A tools/list with a cursor, or params beside _meta, is the go-sdk's.
func TestReadModernMetaLeavesToTheSDK(t *testing.T) {
	const good = `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	read := func(body, method string) bool {
		r, _ := http.NewRequest(http.MethodPost, "http://gw/mcp", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		r.Header.Set("Mcp-Protocol-Version", multiRoundTrip)
		r.Header.Set("Mcp-Method", method)
		_, _, _, ok := readModernMeta(r, []byte(body), jsonscan.Scan([]byte(body)), "tools/list")
		return ok
	}
	if !read(good, "tools/list") {
		t.Fatal("a plain 2026-07-28 tools/list was not taken")
	}
	for name, body := range map[string]string{
		"a cursor":        strings.Replace(good, `"params":{`, `"params":{"cursor":"abc",`, 1),
		"an empty cursor": strings.Replace(good, `"params":{`, `"params":{"cursor":"",`, 1),
		"no params":       `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
		"no _meta":        `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`,
		"another version": strings.Replace(good, `"2026-07-28"`, `"2025-11-25"`, 1),
	} {
		if read(body, "tools/list") {
			t.Errorf("%s: taken", name)
		}
	}
	if read(good, "tools/call") {
		t.Error("taken under another Mcp-Method")
	}
}

// A session's tools/list or ping leanBare takes is one the go-sdk reads
// as that request, whose params are at most a _meta object without the
// new protocol's version.
func FuzzLeanBare(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`), false)
	f.Add([]byte(`{"jsonrpc":"2.0","id":"p","method":"ping","params":{"_meta":{"k":1}}}`), true)
	f.Add([]byte(`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"cursor":"x"}}`), false)
	f.Fuzz(func(t *testing.T, body []byte, ping bool) {
		method := "tools/list"
		if ping {
			method = "ping"
		}
		r, _ := http.NewRequest(http.MethodPost, "http://gw/mcp", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		req, ok := leanBare(r, body, jsonscan.Scan(body), method)
		if !ok {
			return
		}
		msg, err := jsonrpc.DecodeMessage(body)
		sdk, isReq := msg.(*jsonrpc.Request)
		if err != nil || !isReq || sdk.Method != method || !sdk.IsCall() || req.Method != method {
			t.Fatalf("taken, but the go-sdk reads %T %v", msg, err)
		}
		if len(sdk.Params) == 0 || string(sdk.Params) == "null" {
			return
		}
		var params map[string]map[string]json.RawMessage
		if err := json.Unmarshal(sdk.Params, &params); err != nil || len(params) > 1 || len(params) == 1 && params["_meta"] == nil {
			t.Fatalf("taken with params %s (%v)", sdk.Params, err)
		}
		if _, ok := params["_meta"][metaProtocolVersion]; ok {
			t.Fatalf("taken with the new protocol's _meta: %s", sdk.Params)
		}
	})
}
