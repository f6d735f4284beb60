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
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/toolmux/toolmux/internal/jsonscan"
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
	// RawMeta is _meta as the request wrote it, for a reader that
	// wants a value of it typed (a slice of the request, not a copy).
	RawMeta json.RawMessage `json:"-"`
}

// Request is a JSON-RPC request read by ReadRequest.
type Request struct {
	// ID is the raw id: a JSON string or number.
	ID     json.RawMessage
	Method string
	Params json.RawMessage
}

// ErrNotARequest is returned by ReadRequest for a message that is not one
// JSON-RPC 2.0 request with an id (a notification, a response, a batch,
// anything malformed): the go-sdk's to judge.
var ErrNotARequest = errors.New("mcpwire: not a JSON-RPC request")

// ReadRequest reads one JSON-RPC 2.0 request with a string or number id.
// Its id and params are slices of b, not copies: a body of megabytes is
// held once, whatever reads it after (keys are matched as written, as
// MCP names them).
func ReadRequest(b []byte) (*Request, error) {
	if !json.Valid(b) {
		return nil, ErrNotARequest
	}
	var version, id, method, params []byte
	var response bool
	jsonscan.Members(b, func(key, value []byte) bool {
		switch string(key) {
		case "jsonrpc":
			version = value
		case "id":
			id = value
		case "method":
			method = value
		case "params":
			params = value
		case "result", "error":
			response = true
		}
		return true
	})
	name, isString := unquote(method)
	if string(version) != `"2.0"` || !isString || response || !ValidID(id) {
		return nil, ErrNotARequest
	}
	if string(params) == "null" {
		params = nil
	}
	return &Request{ID: id, Method: name, Params: params}, nil
}

// ReadCallParams reads the params of a tools/call request: its name and
// _meta decoded, the rest slices of raw.
func ReadCallParams(raw json.RawMessage) (*CallParams, error) {
	if len(raw) > 0 && raw[0] == '{' && !json.Valid(raw) {
		return nil, errNotObject
	}
	return readCallParams(raw)
}

// CallParams reads the params of r, a tools/call, as ReadCallParams
// does, without validating them again: ReadRequest did.
func (r *Request) CallParams() (*CallParams, error) { return readCallParams(r.Params) }

var errNotObject = errors.New("mcpwire: the params of tools/call are not a JSON object")

// readCallParams is ReadCallParams of valid JSON.
func readCallParams(raw json.RawMessage) (*CallParams, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errors.New("mcpwire: tools/call without params")
	}
	if raw[0] != '{' {
		return nil, errNotObject
	}
	var p CallParams
	var err error
	jsonscan.Members(raw, func(key, value []byte) bool {
		switch string(key) {
		case "name":
			if string(value) != "null" {
				err = json.Unmarshal(value, &p.Name)
			}
		case "_meta":
			p.Meta, err = readMeta(value)
			p.RawMeta = value
		case "arguments":
			p.Arguments = value
		case "inputResponses":
			p.InputResponses = value
		case "requestState":
			p.RequestState = value
		}
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// readMeta decodes a _meta object of valid JSON, as json.Unmarshal
// would into a map[string]any (numbers as float64, as the go-sdk reads
// them), member by member: strings, numbers, literals and empty objects,
// which most of a request's _meta is, without reflection.
func readMeta(raw []byte) (map[string]any, error) {
	if string(raw) == "null" {
		return nil, nil
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, errors.New("mcpwire: _meta is not a JSON object")
	}
	m := map[string]any{}
	var err error
	jsonscan.Members(raw, func(key, value []byte) bool {
		k := string(key) // the key without its quotes
		if bytes.IndexByte(key, '\\') >= 0 || !utf8.Valid(key) {
			if json.Unmarshal(append(append([]byte{'"'}, key...), '"'), &k) != nil {
				err = errors.New("mcpwire: a key of _meta is not a valid string")
				return false
			}
		}
		var v any
		if v, err = readValue(value); err != nil {
			err = fmt.Errorf("mcpwire: _meta %q: %w", k, err)
			return false
		}
		m[k] = v
		return true
	})
	return m, err
}

// readValue decodes one valid JSON value as json.Unmarshal would into an
// any.
func readValue(raw []byte) (any, error) {
	switch {
	case raw[0] == '"':
		if s, ok := unquote(raw); ok {
			return s, nil
		}
	case raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9':
		return strconv.ParseFloat(string(raw), 64)
	case string(raw) == "true":
		return true, nil
	case string(raw) == "false":
		return false, nil
	case string(raw) == "null":
		return nil, nil
	case string(raw) == "{}":
		return map[string]any{}, nil
	}
	var v any
	err := json.Unmarshal(raw, &v)
	return v, err
}

// unquote reads a raw JSON string; isString is false for anything else.
func unquote(raw []byte) (s string, isString bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return string(raw[1 : len(raw)-1]), true
	}
	return s, json.Unmarshal(raw, &s) == nil
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
