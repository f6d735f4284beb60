package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
)

// FuzzNewEra feeds the era choice any body and header: it never panics, a
// header of 2026-07-28 or later always chooses the new protocol, and a
// body without escapes that decodes as a request chooses it exactly when
// its params' _meta carries a protocol version, or it is server/discover
// without an older version's header.
func FuzzNewEra(f *testing.F) {
	f.Add("", []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	f.Add("2025-11-25", []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`))
	f.Add("2026-07-28", []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	f.Add("", []byte(`{"jsonrpc":"2.0","id":1,"method":"server/discover"}`))
	f.Add("", []byte(`[{"jsonrpc":"2.0","id":1,"method":"server/discover"}]`))
	f.Add("", []byte(`{"method":"x","params":{"_meta":"server/discover io.modelcontextprotocol/protocolVersion"}}`))
	f.Fuzz(func(t *testing.T, version string, body []byte) {
		h := http.Header{}
		if version != "" {
			h.Set("Mcp-Protocol-Version", version)
		}
		got := newEra(h, body)
		if h.Get("Mcp-Protocol-Version") >= multiRoundTrip && !got {
			t.Fatalf("header %q: not the new protocol", version)
		}
		if h.Get("Mcp-Protocol-Version") >= multiRoundTrip {
			return
		}
		var m struct {
			Method string `json:"method"`
			Params struct {
				Meta map[string]json.RawMessage `json:"_meta"`
			} `json:"params"`
		}
		if bytes.IndexByte(body, '\\') >= 0 {
			return // escapes are not looked through (newEra)
		}
		if json.Unmarshal(body, &m) != nil {
			if got {
				t.Fatalf("%q is not a request, yet the new protocol", body)
			}
			return
		}
		_, meta := m.Params.Meta[metaProtocolVersion]
		discover := m.Method == methodDiscover && h.Get("Mcp-Protocol-Version") == ""
		if want := discover || meta; got != want {
			t.Fatalf("%q: new protocol %v, want %v", body, got, want)
		}
	})
}
