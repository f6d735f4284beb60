package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/toolmux/toolmux/tool"
)

// sdkMaxDepth is the go-sdk's bound on the nesting of a whole MCP message,
// which it enforces by answering a bare 400 its client shows as "Bad
// Request".
const sdkMaxDepth = 1000

// guardDepth answers a POST nested deeper than the go-sdk accepts with a
// JSON-RPC error saying so, which MCP clients show, instead of letting the
// go-sdk refuse it without a reason they can read. Arguments within that
// bound but deeper than the gateway's limit are refused by the tool
// handlers, as error results. The body is read once here, within the
// bound Protect puts on it.
func (g *Gateway) guardDepth(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			h.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			// Let the go-sdk answer what it answers for a body it cannot
			// read (too large, cut off).
			r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
			h.ServeHTTP(w, r)
			return
		}
		if depth, id := messageDepth(body); depth > sdkMaxDepth {
			limit := g.depth
			if limit <= 0 {
				limit = tool.DefaultMaxDepth
			}
			msg := fmt.Sprintf("invalid_tool_params: the request nests deeper than %d levels, the most an MCP message may; "+
				"tool arguments may nest at most %d (limits.max_depth)", sdkMaxDepth, limit)
			writeRPCError(w, id, msg)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
	})
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// writeRPCError answers 400 with a JSON-RPC error response to the request
// with the given id (the go-sdk's client reads such a body and shows its
// message).
func writeRPCError(w http.ResponseWriter, id json.RawMessage, msg string) {
	rid, err := jsonrpc.MakeID(nil)
	if len(id) > 0 {
		var v any
		if json.Unmarshal(id, &v) == nil {
			if x, e := jsonrpc.MakeID(v); e == nil {
				rid, err = x, nil
			}
		}
	}
	if err != nil || !rid.IsValid() {
		rid, _ = jsonrpc.MakeID(float64(0))
	}
	b, _ := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: rid, Error: &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(b)
}

// messageDepth returns how deeply a JSON message nests, and the raw value
// of its top-level "id" when it is a scalar, in one pass that holds
// nothing of the message.
func messageDepth(b []byte) (depth int, id json.RawMessage) {
	var (
		cur        int
		key        []byte // the last key at depth 1
		afterColon bool
	)
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			j := i + 1
			for j < len(b) && b[j] != '"' {
				if b[j] == '\\' {
					j++
				}
				j++
			}
			if cur == 1 && !afterColon {
				key = b[i+1 : min(j, len(b))]
			} else if cur == 1 && afterColon && string(key) == "id" {
				id = b[i:min(j+1, len(b))]
			}
			afterColon = false
			i = j
		case '{', '[':
			cur++
			depth = max(depth, cur)
			afterColon = false
		case '}', ']':
			cur--
		case ':':
			afterColon = true
		case ',':
			afterColon = false
		default:
			if cur == 1 && afterColon && string(key) == "id" && c != ' ' && c != '\t' && c != '\n' && c != '\r' {
				j := i
				for j < len(b) && b[j] != ',' && b[j] != '}' {
					j++
				}
				if _, err := strconv.ParseFloat(string(bytes.TrimSpace(b[i:j])), 64); err == nil {
					id = b[i:j]
				}
				afterColon = false
				i = j - 1
			}
		}
	}
	return depth, id
}
