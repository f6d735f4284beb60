// Package mcpwire is toolmux's lean layer of MCP's wire format, for the
// one message that is hot: tools/call. The go-sdk decodes every message
// several times on its way in (the body, the envelope, the request's
// _meta, the params; on the client side the envelope, the result and
// each content part), each decode through a reader that allocates a
// 32 KiB buffer, and hands each message between three goroutines; for a
// trivial call that is most of what a gateway spends. This package reads
// a tools/call request, and writes the messages of its answer, in one
// pass each, so that the gateway's HTTP routes and its stdio client
// sessions can carry tool calls themselves and leave every other message
// to the go-sdk.
//
// It holds no state of a session: the gateway (server side) and the MCP
// source (client side) own that.
package mcpwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
)

// Method names this package reads and writes.
const (
	MethodToolsCall = "tools/call"
	MethodCancelled = "notifications/cancelled"
	MethodProgress  = "notifications/progress"
)

// The JSON-RPC codes the go-sdk gives failures of its own side of a
// session (its internal jsonrpc2 package does not export them). An error
// with one of them did not come from the peer: the gateway must not pass
// it on as the server's answer, and the MCP source must not take it for
// one.
const (
	// CodeClientClosing: the request was made while the client closed.
	CodeClientClosing int64 = -32003
	// CodeServerClosing: the request arrived while the server closed.
	CodeServerClosing int64 = -32004
	// CodeRejected: the transport refused the request before it was
	// sent; it never reached the peer.
	CodeRejected int64 = -32005
)

// LocalCode reports whether code is one of the go-sdk's codes for a
// failure of its own side, not an answer from the peer.
func LocalCode(code int64) bool {
	return code == CodeClientClosing || code == CodeServerClosing || code == CodeRejected
}

// CallParams are the params of a tools/call request as the wire carries
// them: the arguments stay raw, for the caller to decode as it needs.
type CallParams struct {
	Meta      map[string]any  `json:"_meta,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// InputResponses and RequestState belong to multi round-trip requests
	// (protocol 2026-07-28): a server that finds them set leaves the
	// request to the go-sdk.
	InputResponses json.RawMessage `json:"inputResponses,omitempty"`
	RequestState   json.RawMessage `json:"requestState,omitempty"`
}

// Request is a JSON-RPC request read by ReadRequest.
type Request struct {
	// ID is the raw id: a JSON string or number.
	ID     json.RawMessage
	Method string
	Params json.RawMessage
}

// envelope is a JSON-RPC message as decoded by ReadRequest.
type envelope struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  *string         `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
}

// ErrNotARequest is returned by ReadRequest for a message that is not one
// JSON-RPC 2.0 request with an id (a notification, a response, a batch,
// anything malformed): the go-sdk's to judge.
var ErrNotARequest = errors.New("mcpwire: not a JSON-RPC request")

// ReadRequest decodes one JSON-RPC 2.0 request with a string or number id.
func ReadRequest(b []byte) (*Request, error) {
	var e envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, err
	}
	if e.JSONRPC != "2.0" || e.Method == nil || e.Result != nil || e.Error != nil || !ValidID(e.ID) {
		return nil, ErrNotARequest
	}
	return &Request{ID: e.ID, Method: *e.Method, Params: e.Params}, nil
}

// ReadCallParams decodes the params of a tools/call request.
func ReadCallParams(raw json.RawMessage) (*CallParams, error) {
	var p CallParams
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errors.New("mcpwire: tools/call without params")
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&p); err != nil {
		return nil, err
	}
	// Numbers in _meta read as float64, as the go-sdk reads them (a
	// progress token is echoed back as the client sent it).
	for k, v := range p.Meta {
		p.Meta[k] = unNumber(v)
	}
	return &p, nil
}

// unNumber turns the json.Numbers of v into float64s.
func unNumber(v any) any {
	switch x := v.(type) {
	case json.Number:
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = unNumber(e)
		}
	case []any:
		for i, e := range x {
			x[i] = unNumber(e)
		}
	}
	return v
}

// ValidID reports whether raw is an id a request may carry: a JSON
// string or an integer.
func ValidID(raw []byte) bool {
	if len(raw) == 0 {
		return false
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		return json.Unmarshal(raw, &s) == nil
	case c == '-' || c >= '0' && c <= '9':
		_, err := strconv.ParseInt(string(raw), 10, 64)
		return err == nil
	}
	return false
}

// AppendResponse appends a JSON-RPC response with a result (raw JSON).
func AppendResponse(dst []byte, id json.RawMessage, result []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"result":`...)
	dst = append(dst, result...)
	return append(dst, '}')
}

// Error is a JSON-RPC error object.
type Error struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// Error implements error.
func (e *Error) Error() string { return e.Message }

// AppendError appends a JSON-RPC response with an error; a nil id is
// written as null.
func AppendError(dst []byte, id json.RawMessage, e *Error) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"error":`...)
	b, err := Marshal(e)
	if err != nil {
		b = []byte(`{"code":-32603,"message":"internal error"}`)
	}
	dst = append(dst, b...)
	return append(dst, '}')
}

// AppendRequest appends a JSON-RPC request (params raw JSON, or none).
func AppendRequest(dst []byte, id json.RawMessage, method string, params []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"method":`...)
	dst = appendString(dst, method)
	if len(params) > 0 {
		dst = append(dst, `,"params":`...)
		dst = append(dst, params...)
	}
	return append(dst, '}')
}

// appendString appends s as a JSON string.
func appendString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s)
	return append(dst, b...)
}

// AppendNotification appends a JSON-RPC notification.
func AppendNotification(dst []byte, method string, params []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","method":`...)
	dst = appendString(dst, method)
	if len(params) > 0 {
		dst = append(dst, `,"params":`...)
		dst = append(dst, params...)
	}
	return append(dst, '}')
}

// Marshal encodes v as the go-sdk does: without escaping HTML.
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}
