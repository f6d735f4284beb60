// Command echoserver is the fastest MCP server a benchmark can have: a
// hand-written JSON-RPC loop over stdio, no SDK, that answers initialize,
// ping, tools/list (one tool, echo) and tools/call of echo, and ignores
// notifications. It measures what a client and a gateway cost, not what a
// server does.
package main

import (
	"bufio"
	"encoding/json"
	"os"
)

type request struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		ProtocolVersion string `json:"protocolVersion"`
		Name            string `json:"name"`
		Arguments       struct {
			Message string `json:"message"`
		} `json:"arguments"`
	} `json:"params"`
}

const tools = `{"tools":[{"name":"echo","description":"Echoes the message.","inputSchema":{"type":"object","properties":{"message":{"type":"string"}},"required":["message"]},"annotations":{"readOnlyHint":true}}]}`

func main() {
	in := bufio.NewReaderSize(os.Stdin, 64<<10)
	out := bufio.NewWriterSize(os.Stdout, 64<<10)
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			return
		}
		var req request
		if json.Unmarshal(line, &req) != nil || len(req.ID) == 0 {
			continue // a notification, or not JSON-RPC
		}
		var result []byte
		switch req.Method {
		case "initialize":
			v := req.Params.ProtocolVersion
			if v == "" {
				v = "2025-06-18"
			}
			result, _ = json.Marshal(map[string]any{"protocolVersion": v, "capabilities": map[string]any{"tools": map[string]any{}},
				"serverInfo": map[string]any{"name": "echoserver", "version": "1"}})
		case "ping":
			result = []byte(`{}`)
		case "tools/list":
			result = []byte(tools)
		case "tools/call":
			text, _ := json.Marshal("Echo: " + req.Params.Arguments.Message)
			result = append(append([]byte(`{"content":[{"type":"text","text":`), text...), `}]}`...)
		default:
			out.WriteString(`{"jsonrpc":"2.0","id":`)
			out.Write(req.ID)
			out.WriteString(`,"error":{"code":-32601,"message":"method not found"}}` + "\n")
			out.Flush()
			continue
		}
		out.WriteString(`{"jsonrpc":"2.0","id":`)
		out.Write(req.ID)
		out.WriteString(`,"result":`)
		out.Write(result)
		out.WriteString("}\n")
		out.Flush()
	}
}
