package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"mime"
	"net/http"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/jsonscan"
	"github.com/toolmux/toolmux/internal/mcpwire"
)

// A 2026-07-28 tools/call has no session: the client's version,
// capabilities and name come with the request, in its _meta and its
// headers. The go-sdk serves such a request only from its stateless
// handler, which makes a temporary session for each one and decodes the
// body four times on the way (BENCHMARKS.md §29). So the gateway reads a
// tools/call of the new protocol itself, as it reads a session's
// (lean.go): this file is the edge where the two eras differ, how the
// client is known (the request's _meta, not a session) and how the
// answer says it is complete (resultType, serverInfo); from there the
// call takes the same path as a session's (view.dispatch). A tools/list
// (without a cursor) and a server/discover, the other requests every
// such client makes, are read here the same way and answered by the
// route (view.modernList, route.modernList, ...).
//
// It takes only what the go-sdk would accept and serve the same way: a
// single tools/call whose Mcp-Protocol-Version header and _meta version
// agree on a version the go-sdk supports, whose Mcp-Method and Mcp-Name
// headers match the body, which declares its capabilities (and, if it
// names itself, validly), with no answers to earlier questions
// (inputResponses, requestState: the go-sdk's path keeps them) and no
// Mcp-Param-* headers, of a tool whose schema binds none
// (x-mcp-header). Anything else goes to the go-sdk, whose answer
// (refusals included) stays the reference.

// Keys of a 2026-07-28 request's and result's _meta.
const (
	metaClientInfo = "io.modelcontextprotocol/clientInfo"
	metaServerInfo = "io.modelcontextprotocol/serverInfo"
)

// modernCall is a tools/call of the new protocol read by readModernCall.
type modernCall struct {
	req    *mcpwire.Request
	params *mcp.CallToolParamsRaw
	// declared is what the client declared in _meta, as a session's
	// initialize would have.
	declared *mcp.InitializeParams
}

// readModernCall reads a tools/call of the new protocol the gateway can
// answer itself; ok is false for anything to leave to the go-sdk.
func readModernCall(r *http.Request, body []byte, msg jsonscan.Message) (_ *modernCall, ok bool) {
	req, p, ok := readModern(r, body, msg, mcpwire.MethodToolsCall)
	if !ok || p.Name == "" || len(p.InputResponses) > 0 || len(p.RequestState) > 0 || r.Header.Get("Mcp-Name") != p.Name {
		return nil, false
	}
	declared, ok := declaredClient(p.RawMeta, r.Header.Get("Mcp-Protocol-Version"))
	if !ok {
		return nil, false
	}
	return &modernCall{req: req, params: &mcp.CallToolParamsRaw{Meta: p.Meta, Name: p.Name, Arguments: p.Arguments},
		declared: declared}, true
}

// readModern reads a request of the new protocol of method with what
// every such request the gateway answers itself has: an
// Mcp-Protocol-Version header and a _meta version that agree on a
// version the go-sdk supports, an Mcp-Method header naming method, no
// session, a JSON body, an Accept of both answers, no Mcp-Param-*
// header. Its params are read as a tools/call's (the members other
// methods have are _meta's).
func readModern(r *http.Request, body []byte, msg jsonscan.Message, method string) (*mcpwire.Request, *mcpwire.CallParams, bool) {
	if string(msg.Method) != `"`+method+`"` {
		return nil, nil, false
	}
	h := r.Header
	v := h.Get("Mcp-Protocol-Version")
	if v < multiRoundTrip || !slices.Contains(mcp.SupportedProtocolVersions(), v) ||
		h.Get("Mcp-Method") != method || h.Get(sessionHeader) != "" ||
		!jsonBody(h) || !acceptsBoth(h.Values("Accept")) {
		return nil, nil, false
	}
	for k := range h {
		if strings.HasPrefix(k, "Mcp-Param-") {
			return nil, nil, false
		}
	}
	req, err := mcpwire.ReadRequest(body)
	if err != nil || req.Method != method {
		return nil, nil, false
	}
	p, err := req.CallParams()
	if err != nil {
		return nil, nil, false
	}
	if mv, _ := p.Meta[metaProtocolVersion].(string); mv != v {
		return nil, nil, false
	}
	return req, p, true
}

// readModernMeta reads a request of the new protocol of method whose
// params are its _meta alone (a tools/list without a cursor,
// server/discover), and what its client declares.
func readModernMeta(r *http.Request, body []byte, msg jsonscan.Message, method string) (*mcpwire.Request, *mcpwire.CallParams, *mcp.InitializeParams, bool) {
	req, p, ok := readModern(r, body, msg, method)
	if !ok {
		return nil, nil, nil, false
	}
	jsonscan.Members(req.Params, func(key, _ []byte) bool {
		ok = string(key) == "_meta"
		return ok
	})
	if !ok {
		return nil, nil, nil, false // a cursor, or what the go-sdk judges
	}
	declared, ok := declaredClient(p.RawMeta, r.Header.Get("Mcp-Protocol-Version"))
	return req, p, declared, ok
}

// jsonBody reports whether a request's Content-Type is JSON as the
// go-sdk reads it (mime.ParseMediaType: malformed parameters make it
// none).
func jsonBody(h http.Header) bool {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	return err == nil && mt == "application/json"
}

// declaredClient is what a request's _meta (valid JSON) declares of its
// client, as the go-sdk reads it: the capabilities are required, the
// name optional but, when there, an implementation. The two are decoded
// from the request's own bytes, typed.
func declaredClient(meta json.RawMessage, version string) (_ *mcp.InitializeParams, ok bool) {
	var caps, info json.RawMessage
	jsonscan.Members(meta, func(key, value []byte) bool {
		switch string(key) {
		case metaClientCapabilities:
			caps = value
		case metaClientInfo:
			info = value
		}
		return true
	})
	p := &mcp.InitializeParams{ProtocolVersion: version, Capabilities: new(mcp.ClientCapabilities)}
	if len(caps) == 0 || caps[0] != '{' || string(caps) != "{}" && json.Unmarshal(caps, p.Capabilities) != nil {
		return nil, false // missing, null, not an object, or not capabilities
	}
	if info != nil {
		p.ClientInfo = new(mcp.Implementation)
		if info[0] != '{' || json.Unmarshal(info, p.ClientInfo) != nil {
			return nil, false
		}
	}
	return p, true
}

// hasMember reports whether the JSON object b has a member named key.
func hasMember(b []byte, key string) (found bool) {
	jsonscan.Members(b, func(k, _ []byte) bool {
		found = string(k) == key
		return !found
	})
	return found
}

// bindsHeaders reports whether a tool's input schema binds an argument
// to a header (SEP-2243's x-mcp-header, on a property at any depth, as
// the go-sdk looks for it), which the go-sdk checks against the
// request's Mcp-Param-* headers.
func bindsHeaders(schema map[string]any) bool {
	props, _ := schema["properties"].(map[string]any)
	for _, p := range props {
		if p, ok := p.(map[string]any); ok {
			if _, ok := p["x-mcp-header"]; ok || bindsHeaders(p) {
				return true
			}
		}
	}
	return false
}

// serveModern answers a tools/call of the new protocol: run makes it,
// with a context that ends when the client's HTTP request does (on
// 2026-07-28 the POST is the whole life of a request, and an answer
// nobody can receive is not worth computing) and the stream to send
// progress on. The result is complete, unless run asks for input, and
// names the server (impl), as the go-sdk's are; whether it reached the
// client is told to the re-issue window.
func (g *Gateway) serveModern(w http.ResponseWriter, r *http.Request, id json.RawMessage, impl *mcp.Implementation,
	run func(ctx context.Context, st *leanStream) (*mcp.CallToolResult, error)) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
	defer cancel(nil)
	stop := context.AfterFunc(r.Context(), func() { cancel(errClientGone) })
	defer stop()
	st := &leanStream{resp: mcpwire.NewResponder(w)}
	res, err := run(ctx, st)
	var b []byte
	if err == nil {
		b, err = mcpwire.Marshal(withServerInfo(res, impl))
	}
	out, status := modernAnswer(id, b, err == nil && !res.NeedsInput(), err)
	werr := st.resp.ReplyStatus(status, out)
	if g.reissue != nil {
		g.reissue.served(r, werr != nil)
	}
}

// replyModern answers a request of the new protocol other than a call
// with res (complete; it names the server itself) or err.
func replyModern(w http.ResponseWriter, id json.RawMessage, res mcp.Result, err error) {
	var b []byte
	if err == nil {
		b, err = mcpwire.Marshal(res)
	}
	out, status := modernAnswer(id, b, true, err)
	_ = mcpwire.NewResponder(w).ReplyStatus(status, out) // a client gone has nothing to be told
}

// modernAnswer is the message answering request id with the result b
// (marked complete if it is) or, if err is set, an error, and its HTTP
// status.
func modernAnswer(id json.RawMessage, b []byte, complete bool, err error) ([]byte, int) {
	if err != nil {
		e := wireError(err)
		return mcpwire.AppendError(nil, id, e), errorStatus(e.Code)
	}
	if complete {
		b = withResultType(b, `"complete"`)
	}
	return mcpwire.AppendResponse(nil, id, b), http.StatusOK
}

// errorStatus is the HTTP status of a 2026-07-28 answer carrying a
// JSON-RPC error of code (SEP-2575, as the go-sdk sets it): 404 for a
// method not found; 400 for invalid params, an unsupported protocol
// version and a missing client capability; else 200.
func errorStatus(code int64) int {
	switch code {
	case codeMethodNotFound:
		return http.StatusNotFound
	case codeInvalidParams, mcp.CodeUnsupportedProtocolVersion, mcp.CodeMissingRequiredClientCapabilities:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// withServerInfo is res naming the server in its _meta, as a 2026-07-28
// result does (a copy: res may be kept by the re-issue window).
func withServerInfo(res *mcp.CallToolResult, impl *mcp.Implementation) *mcp.CallToolResult {
	if _, ok := res.Meta[metaServerInfo]; ok {
		return res
	}
	out := *res
	out.Meta = make(mcp.Meta, len(res.Meta)+1)
	maps.Copy(out.Meta, res.Meta)
	out.Meta[metaServerInfo] = impl
	return &out
}

// withResultType puts a resultType first in a result object b that has
// none (the go-sdk's types set it only through their decoding).
func withResultType(b []byte, rt string) []byte {
	if len(b) < 2 || b[0] != '{' || bytes.Contains(b, []byte(`"resultType"`)) && hasMember(b, "resultType") {
		return b
	}
	out := make([]byte, 0, len(b)+len(`"resultType":,`)+len(rt))
	out = append(out, `{"resultType":`...)
	out = append(out, rt...)
	if rest := bytes.TrimSpace(b[1:]); len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, b[1:]...)
}
