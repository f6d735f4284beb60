package gateway

import (
	"bytes"
	"fmt"
	"net/http"

	"github.com/toolmux/toolmux/internal/jsonscan"
	"github.com/toolmux/toolmux/internal/mcpwire"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/tool"
)

// The bounds of what the gateway decodes (docs/gateway.md, "Memory").
//
// A body is bounded by --max-request-bytes (Protect), but what decoding
// makes of it is not: a string is held again as a Go string, every key
// and number of an object as a map entry and an interface (an object of
// short keys weighs thirty times its JSON), and the go-sdk decodes a
// 2026-07-28 request several times over. So before anything decodes a
// POST's message (the window of re-issued requests, the tasks extension,
// the choice of era, the gateway's own tools/call, the go-sdk), one scan
// that allocates nothing weighs its parts, and a message over a bound is
// refused without being decoded:
//
//   - a tools/call's arguments against the pipeline's bound on them
//     (validate.max_argument_bytes, MaxArgumentBytes), as the JSON the
//     validator would weigh once they are decoded: refused with the
//     validator's own invalid_tool_params result, which the pipeline
//     would have answered after decoding them;
//   - everything else a message carries (the rest of a tools/call: its
//     _meta, its inputResponses, its requestState; any other request or
//     response whole) against the same bound again: refused with a
//     JSON-RPC error, invalid params.
//
// What is decoded is then bounded by configuration, never by the input:
// twice the bound on arguments, in a body of at most --max-request-bytes.

// argumentLimiter is what the gateway asks of its Caller (or of the
// catalog of Scheduled): the bound on a call's arguments in use, which a
// reload may change. pipeline.Pipeline has it.
type argumentLimiter interface {
	MaxArgumentBytes() int64
}

// MaxArgumentBytes is the bound on a call's arguments of the catalog, when
// it has one (pipeline.Pipeline); 0 otherwise.
func (s Scheduled) MaxArgumentBytes() int64 {
	if l, ok := s.Catalog.(argumentLimiter); ok {
		return l.MaxArgumentBytes()
	}
	return 0
}

// maxArgumentBytes is the bound on a call's arguments, and on the rest of
// a message: the Caller's, else Options.MaxArgumentBytes, else
// pipeline.DefaultMaxArgumentBytes.
func (g *Gateway) maxArgumentBytes() int64 {
	if l, ok := g.caller.(argumentLimiter); ok {
		if n := l.MaxArgumentBytes(); n > 0 {
			return n
		}
	}
	if g.maxArgs > 0 {
		return g.maxArgs
	}
	return pipeline.DefaultMaxArgumentBytes
}

// LargeBodyBytes is the size of a message from which the gateway tells
// Options.LargeBody that it was answered.
const LargeBodyBytes = 1 << 20

// answered tells Options.LargeBody of a large message answered.
func (g *Gateway) answered(body []byte) {
	if g.large != nil && len(body) >= LargeBodyBytes {
		g.large()
	}
}

// toolNamer says which tool a route's tools/call of name calls, for the
// message refusing it: its server and name ("" and name when the route
// does not know it).
type toolNamer func(name string) (server, tool string)

// admitBody checks a POST's message (body, scanned as msg) before
// anything decodes it (weigh), answering one over a bound; it reports
// whether the message may go on.
func (g *Gateway) admitBody(w http.ResponseWriter, r *http.Request, body []byte, msg jsonscan.Message, names toolNamer) bool {
	status, refusal := g.weigh(body, msg, r.Header.Get("Mcp-Protocol-Version") >= multiRoundTrip, names)
	if refusal == nil {
		return true
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(refusal)
	return false
}

// weigh checks a message (body, scanned as msg) before anything decodes
// it: its nesting (past the go-sdk's bound, which it would refuse with a
// bare 400) and the weight of its parts. For a message over a bound it
// returns the answer refusing it, and the HTTP status that answer has;
// nil when the message may go on. modern says the transport names
// protocol 2026-07-28 (an HTTP request's header).
func (g *Gateway) weigh(body []byte, msg jsonscan.Message, modern bool, names toolNamer) (status int, refusal []byte) {
	if msg.Depth > sdkMaxDepth {
		return http.StatusBadRequest, rpcError(rpcID(msg.ID), codeInvalidParams, fmt.Sprintf(
			"invalid_tool_params: the request nests deeper than %d levels, the most an MCP message may; "+
				"tool arguments may nest at most %d (limits.max_depth)", sdkMaxDepth, g.maxDepth()))
	}
	limit := g.maxArgumentBytes()
	if int64(len(body)) <= limit {
		return 0, nil // nothing in it can be over
	}
	rest := int64(len(body))
	if string(msg.Method) == `"`+mcpwire.MethodToolsCall+`"` && msg.Params != nil {
		call := readCallParts(msg.Params)
		// Arguments that are not well formed count as the rest: the
		// decoder refuses them, but they are weighed all the same.
		if n, ok := jsonscan.Size(call.args); call.args != nil && ok {
			rest -= int64(len(call.args))
			if id := rpcID(msg.ID); n > limit && id != nil {
				modern = modern || bytes.Contains(call.meta, []byte(metaProtocolVersion))
				return http.StatusOK, g.refuseArguments(id, call, names, n, limit, modern)
			}
		}
	}
	if rest > limit {
		var id []byte
		if msg.Method != nil {
			id = rpcID(msg.ID) // a request's; a response is not answered by id
		}
		return http.StatusRequestEntityTooLarge, rpcError(id, codeInvalidParams, fmt.Sprintf(
			"toolmux: the message is %d bytes apart from a tool call's arguments, over the limit of %d bytes "+
				"(validate.max_argument_bytes bounds a call's arguments, and the rest of a message again)", rest, limit))
	}
	return 0, nil
}

// callParts are the raw parts of a tools/call's params the edge looks at.
type callParts struct {
	name, args, meta []byte
}

// readCallParts finds the parts of a tools/call's params (the last of a
// repeated key, as decoders take it), without decoding them.
func readCallParts(params []byte) callParts {
	var c callParts
	jsonscan.Members(params, func(key, value []byte) bool {
		switch string(key) {
		case "name":
			c.name = value
		case "arguments":
			c.args = value
		case "_meta":
			c.meta = value
		}
		return true
	})
	return c
}

// refuseArguments answers a tools/call whose arguments weigh n bytes, over
// limit: the result the pipeline's validator would have answered, an
// error of kind invalid_tool_params the model reads, in the request's era
// (modern: 2026-07-28).
func (g *Gateway) refuseArguments(id []byte, call callParts, names toolNamer, n, limit int64, modern bool) []byte {
	name, _ := unquote(call.name)
	server, tl := "", name
	if names != nil {
		server, tl = names(name)
	}
	res := errorResult(&tool.Error{Kind: tool.KindInvalidParams, Server: server, Tool: tl, Message: pipeline.ArgumentsTooLarge(n, limit)})
	b, err := mcpwire.Marshal(res)
	if err != nil {
		return rpcError(id, codeInternalError, "toolmux: encoding a refusal: "+err.Error())
	}
	if modern {
		// A 2026-07-28 result says it is complete.
		b = append([]byte(`{"resultType":"complete",`), b[1:]...)
	}
	return mcpwire.AppendResponse(nil, id, b)
}
