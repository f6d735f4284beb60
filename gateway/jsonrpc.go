package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/toolmux/toolmux/internal/jsonscan"
	"github.com/toolmux/toolmux/tool"
)

// JSON-RPC error codes the gateway answers with itself.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeMethodNotFound = -32601
	codeInvalidParams  = -32602
	codeInternalError  = -32603
	// codeServerError is JSON-RPC's generic server error.
	codeServerError = -32000
	// codeSessionNotFound is what MCP's TypeScript SDK answers for an
	// unknown Mcp-Session-Id; clients that know it start a new session.
	codeSessionNotFound = -32001
)

// knownMethods are the methods the go-sdk's server dispatches (its
// serverMethodInfos). Its HTTP transport answers any other request with a
// plain-text 400; the gateway answers a JSON-RPC "method not found"
// instead, which is what a JSON-RPC client can read.
var knownMethods = map[string]bool{
	"initialize": true, "ping": true, "server/discover": true,
	"tools/list": true, "tools/call": true,
	"prompts/list": true, "prompts/get": true,
	"resources/list": true, "resources/templates/list": true, "resources/read": true,
	"resources/subscribe": true, "resources/unsubscribe": true, "subscriptions/listen": true,
	"completion/complete": true, "logging/setLevel": true,
	"notifications/initialized": true, "notifications/cancelled": true,
	"notifications/progress": true, "notifications/roots/list_changed": true,
}

// jsonRPCErrors wraps an MCP HTTP handler so that every refusal reaches
// the client as a JSON-RPC error object, as MCP clients expect:
//
//   - a body that is not JSON: 400, -32700 (parse error);
//   - a message with an id but neither a method nor a result or error
//     (not a request, not a response): 400, -32600 (invalid request);
//   - a method that is not a string: 400, -32600;
//   - a request for a method MCP servers do not have: 200, -32601 (method
//     not found), a JSON-RPC answer like any other; an unknown
//     notification is accepted (202) and ignored, as JSON-RPC says;
//   - any plain-text error the go-sdk's handler answers (an unknown
//     session: 404, -32001) keeps its status, with the text as the
//     error's message and the request's id when it had one.
//
// A message nested deeper than the go-sdk accepts (sdkMaxDepth), which it
// would refuse with a bare 400, gets a JSON-RPC error saying so (400,
// -32602): arguments within that bound but past the gateway's own limit
// (limits.max_depth) are refused by the tool handlers, as error results.
// A message whose parts weigh more than the gateway decodes is refused
// before anything decodes it (admitBody, bounds.go).
// A tools/call over a limit of its caller (rate_limits) is refused next,
// before anything decodes it either (admitCall, limits.go).
//
// It is also where the gateway takes the messages it answers itself
// (lean.go) from the go-sdk's way: route names the route, and lean
// answers a tools/call when it can. While a POST of a session is served,
// the session does not idle out.
func (g *Gateway) jsonRPCErrors(h http.Handler, route string, lean leanFunc, names toolNamer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var id json.RawMessage
		var modern bool // a request of the sessionless protocol (era.go)
		if r.Method == http.MethodPost && r.Body != nil {
			body, ok := g.readBody(w, r)
			if !ok {
				return
			}
			defer g.answered(body)
			msg := jsonscan.Scan(body)
			if !g.admitBody(w, r, body, msg, names) { // bounds.go
				return
			}
			if g.refuseForeignSession(w, r, rpcID(msg.ID)) { // owners.go
				return
			}
			// A call takes a place of its caller's limits for the life
			// of this POST (limits.go).
			release, admitted := g.admitCall(w, r, body, msg, false)
			if !admitted {
				return
			}
			defer release()
			if g.reissue != nil {
				r = g.reissue.take(r, route, body, msg) // reissue.go
			}
			sid := r.Header.Get(sessionHeader)
			if sid != "" {
				// While a POST of a session is served, the session does
				// not idle out: tasks' requests of a session included.
				defer g.clients.busy(sid)()
			}
			// The tasks extension's requests, which the go-sdk does not
			// know (tasks.go).
			if g.serveTasks(w, r, route, body, msg) {
				return
			}
			modern = newEra(r.Header, body)
			if id, ok = checkMessage(w, body, msg, modern); !ok {
				return
			}
			if m, _ := unquote(msg.Method); modern && id != nil && unserved(route, m) {
				writeRPCError(w, http.StatusNotFound, id, codeMethodNotFound, "method not found: "+quoteHeader(m)+" (this route serves tools only)")
				return
			}
			if sid == "" && !modern && !refuseSessionless(w, r, msg) { // nosession.go
				return
			}
			// A listen stream takes a place of its bounds for as long
			// as it is open: the life of this POST (listens.go).
			releaseListen, admitted := g.admitListen(w, r, route, body, msg)
			if !admitted {
				return
			}
			defer releaseListen()
			switch {
			case sid != "" && !modern:
				if g.clients.intercept(w, sid, route, body, msg) || lean(w, r, sid, body, msg) {
					return
				}
			case sid == "" && modern && lean(w, r, "", body, msg):
				return
			}
		}
		if r.Method != http.MethodPost && g.refuseForeignSession(w, r, nil) { // owners.go
			return
		}
		cw := &rpcErrorWriter{ResponseWriter: w, id: id}
		pick(h, modern).ServeHTTP(cw, r)
		cw.finish()
		if g.reissue != nil {
			g.reissue.served(r, cw.failed)
		}
	})
}

// checkMessage answers the messages the go-sdk would answer in plain
// text, and returns the request's id; ok is false when it has answered.
// The message was scanned (msg), not decoded: the go-sdk decodes it.
//
// A request of the new protocol (modern) for a method MCP servers do not
// have is answered 404, as 2026-07-28 asks.
func checkMessage(w http.ResponseWriter, body []byte, msg jsonscan.Message, modern bool) (id json.RawMessage, ok bool) {
	switch {
	case len(bytes.TrimSpace(body)) == 0 || msg.Array:
		return nil, true // empty, or a batch: the go-sdk's to judge
	case !msg.Object || !msg.Closed:
		writeRPCError(w, http.StatusBadRequest, nil, codeParseError, "toolmux: the body is not a JSON-RPC message (a JSON object)")
		return nil, false
	}
	id = rpcID(msg.ID)
	if msg.Method == nil {
		if !msg.HasResult && !msg.HasError {
			writeRPCError(w, http.StatusBadRequest, id, codeInvalidRequest,
				`toolmux: invalid request: a message needs a "method" (a request or notification) or a "result" or "error" (a response)`)
			return nil, false
		}
		return id, true
	}
	method, isString := unquote(msg.Method)
	if !isString {
		writeRPCError(w, http.StatusBadRequest, id, codeInvalidRequest, `toolmux: invalid request: "method" must be a string`)
		return nil, false
	}
	if !knownMethods[method] {
		if id == nil {
			w.WriteHeader(http.StatusAccepted)
			return nil, false
		}
		status := http.StatusOK
		if modern {
			status = http.StatusNotFound
		}
		writeRPCError(w, status, id, codeMethodNotFound, "method not found: "+quoteHeader(method))
		return nil, false
	}
	return id, true
}

// rpcID is a request's id as an answer may echo it: a string or a number;
// nil for none, null, or anything else.
func rpcID(raw []byte) json.RawMessage {
	if len(raw) == 0 || raw[0] != '"' && raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return nil
	}
	if !json.Valid(raw) {
		return nil
	}
	return raw
}

// isMethod reports whether a scanned method (raw JSON) is name: one
// comparison for a method without escapes, as nearly all are, and no
// allocation.
func isMethod(raw []byte, name string) bool {
	if len(raw) == len(name)+2 && raw[0] == '"' && string(raw[1:len(raw)-1]) == name {
		return true
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return false
	}
	m, _ := unquote(raw)
	return m == name
}

// unquote reads a raw JSON string; isString is false for anything else.
func unquote(raw []byte) (s string, isString bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), true
	}
	return s, json.Unmarshal(raw, &s) == nil
}

// writeRPCError writes a JSON-RPC error response.
func writeRPCError(w http.ResponseWriter, status int, id json.RawMessage, code int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(rpcError(id, code, message))
}

// rpcError is a JSON-RPC error response.
func rpcError(id json.RawMessage, code int, message string) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{JSONRPC: "2.0", ID: id, Error: struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{code, message}})
	return b
}

// rpcErrorWriter turns a plain-text error answer into a JSON-RPC error
// with the same status; every other answer passes through untouched.
type rpcErrorWriter struct {
	http.ResponseWriter
	id      json.RawMessage
	status  int
	holding bool
	text    bytes.Buffer
	failed  bool // a write failed: the answer may not have reached the client
}

func (c *rpcErrorWriter) WriteHeader(status int) {
	if c.status != 0 {
		return
	}
	c.status = status
	if status >= 400 && strings.HasPrefix(c.Header().Get("Content-Type"), "text/plain") {
		c.holding = true
		return
	}
	c.ResponseWriter.WriteHeader(status)
}

func (c *rpcErrorWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	if c.holding {
		if c.text.Len() < 4096 {
			c.text.Write(b[:min(len(b), 4096-c.text.Len())])
		}
		return len(b), nil
	}
	n, err := c.ResponseWriter.Write(b)
	c.failed = c.failed || err != nil
	return n, err
}

// Flush lets streamed answers (SSE) through as they are written.
func (c *rpcErrorWriter) Flush() {
	if c.holding {
		return
	}
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the real writer.
func (c *rpcErrorWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// finish writes the held error, if any.
func (c *rpcErrorWriter) finish() {
	if !c.holding {
		return
	}
	code := codeServerError
	switch {
	case c.status == http.StatusNotFound:
		code = codeSessionNotFound
	case c.status >= 500:
		code = codeInternalError
	case c.status == http.StatusBadRequest:
		code = codeInvalidRequest
	}
	writeRPCError(c.ResponseWriter, c.status, c.id, code, strings.TrimSpace(c.text.String()))
}

// maxDepth is the nesting limit of a call's arguments.
func (g *Gateway) maxDepth() int {
	if g.depth > 0 {
		return g.depth
	}
	return tool.DefaultMaxDepth
}

// readBody reads a POST's whole body (bounded by Protect's limit) and
// puts it back for the handler after; ok is false when it could not, the
// client having been answered.
//
// A body is read into one buffer of its announced length, once it has
// shown more than a first chunk (so that a length announced and not sent
// costs nothing): reading into a growing buffer would hold up to twice
// the body while it grows, and leave the copies it outgrew to the
// collector.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request) (body []byte, ok bool) {
	body, err := readAll(r.Body, r.ContentLength, bodyLimit(r.Context()))
	if err != nil {
		g.answered(body) // what was read before the failure
		if _, tooBig := errors.AsType[*http.MaxBytesError](err); tooBig {
			writeRPCError(w, http.StatusRequestEntityTooLarge, nil, codeInvalidRequest, "toolmux: the request body is too large (see --max-request-bytes)")
			return nil, false
		}
		writeRPCError(w, http.StatusBadRequest, nil, codeParseError, "toolmux: could not read the request: "+err.Error())
		return nil, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, true
}

// firstChunk is what readAll reads before it trusts a body's announced
// length.
const firstChunk = 32 << 10

// readAll reads rd whole (on an error, what it read so far): the first chunk, then, when length (the
// announced length, -1 if unknown) is more and within limit (the bound
// on the body; 0 when none is known, and then no length is trusted),
// into one buffer of that length.
func readAll(rd io.Reader, length, limit int64) ([]byte, error) {
	size := firstChunk
	switch {
	case length >= 0 && length < firstChunk:
		size = int(length) + 1 // one more: EOF is read into nothing
	case length < 0:
		size = 512 // as io.ReadAll: a body of unknown length grows
	}
	buf := make([]byte, 0, size)
	for len(buf) < cap(buf) {
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	if length > int64(len(buf)) && limit > 0 && length <= limit {
		whole := make([]byte, len(buf), length+1) // one more: EOF is read into nothing
		copy(whole, buf)
		buf = whole
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}
