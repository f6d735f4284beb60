package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/toolmux/toolmux/internal/jsonscan"
	"github.com/toolmux/toolmux/internal/mcpwire"
	"github.com/toolmux/toolmux/ratelimit"
)

// Limits per caller (docs/operations.md "Limits per caller",
// docs/gateway.md "Rate limits"). Every tools/call is admitted by the
// Limiter of Options.Limits before the gateway does anything else with
// it: at the HTTP layer (jsonRPCErrors, modernErrors), right after the
// body was weighed and before anything decodes it, on /mcp, the virtual
// servers and the passthrough routes, in both protocol eras, the MCP
// tasks' calls included; over stdio, in /mcp's session middleware; on
// the API, in its handler (api.Options.Limits). The caller is the one
// MuxAuth put in the request's context (none without authentication: the
// one anonymous caller).
//
// A call over a limit is refused at once, never queued: a JSON-RPC error
// of code CodeRateLimited whose data says {"kind": "rate_limited",
// "limit", "group", "retry_after"}, with an HTTP Retry-After header
// (seconds until the limit admits it; 1 for calls in flight). A
// 2026-07-28 request is answered 429, as that protocol maps errors to
// statuses; a session's request 200, the status of any JSON-RPC answer:
// from a 200 the clients of sessions hand their caller the JSON-RPC
// error, code and data, while the go-sdk's reports a 429 as a transient
// failure without reading its body, and the TypeScript SDK's any status
// but 2xx as a transport error.
//
// A call's place among the calls in flight is held for as long as its
// POST is served. A call that outlives its request (one that became an
// MCP task, one kept running for a re-issue after its client's stream
// broke, a passthrough call parked for a 2026-07-28 client's answer)
// gives its place back when the request ends: those are bounded by
// mcp_tasks.max_running, reissue.max_entries and the route's max_parked.

// CodeRateLimited is the JSON-RPC error code of a tools/call refused for
// a limit of its caller or of a group of its caller (rate_limits). It is
// in the range JSON-RPC leaves to implementations, next to
// CodeSessionLimit and CodeListenLimit.
const CodeRateLimited = -32032

// rateLimitedData is the data of the JSON-RPC error refusing a call for a
// limit.
type rateLimitedData struct {
	Kind  string `json:"kind"`
	Limit string `json:"limit"`
	// Group is the group whose budget refused the call; absent for the
	// caller's own limit.
	Group string `json:"group,omitempty"`
	// RetryAfter is in seconds, as the Retry-After header.
	RetryAfter int `json:"retry_after,omitempty"`
}

var callText = []byte("tools/call")

// isCall reports whether a scanned method is tools/call.
func isCall(raw []byte) bool { return isMethod(raw, "tools/call") }

// admitCall takes the places of the tools/calls a POST (body, scanned as
// msg) holds from its caller's limits, until the returned function is
// called; ok is false when it has answered the request, refused. Any
// other request passes for the cost of a comparison; without limits, for
// nothing. modern says the route serves 2026-07-28 requests only.
func (g *Gateway) admitCall(w http.ResponseWriter, r *http.Request, body []byte, msg jsonscan.Message, modern bool) (release func(), ok bool) {
	if g.limits == nil {
		return noRelease, true
	}
	n := 0
	switch {
	case msg.Array:
		n = batchCalls(body)
	case isCall(msg.Method):
		n = 1
	}
	if n == 0 {
		return noRelease, true
	}
	release, err := g.limits.Admit(r.Context(), n)
	if err == nil {
		return release, true
	}
	var id json.RawMessage
	status := http.StatusOK
	switch {
	case msg.Array:
		status = http.StatusTooManyRequests // no one request to answer
	case modern || newEra(r.Header, body):
		status, id = http.StatusTooManyRequests, rpcID(msg.ID)
	default:
		id = rpcID(msg.ID)
	}
	writeRateLimited(w, status, id, err)
	return nil, false
}

func noRelease() {}

// Limits returns the limiter of Options.Limits (nil: none), for a reload
// to set new limits and the metrics to read its counts.
func (g *Gateway) Limits() *ratelimit.Limiter { return g.limits }

// batchCalls counts the tools/calls of a batch (sessions of protocols
// before 2025-06-18 may send them); decoded only when its text may name
// the method.
func batchCalls(body []byte) int {
	if !bytes.Contains(body, callText) && bytes.IndexByte(body, '\\') < 0 {
		return 0
	}
	var batch []struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(body, &batch) != nil {
		return 0 // the go-sdk refuses what is not a batch of messages
	}
	n := 0
	for _, m := range batch {
		if m.Method == "tools/call" {
			n++
		}
	}
	return n
}

// rateLimitedError is the JSON-RPC error of a call refused for a limit
// (err, a *ratelimit.Error).
func rateLimitedError(err error) *jsonrpc.Error {
	e, ok := errors.AsType[*ratelimit.Error](err)
	if !ok {
		return &jsonrpc.Error{Code: CodeRateLimited, Message: "toolmux: " + err.Error()}
	}
	data, _ := json.Marshal(rateLimitedData{Kind: ratelimit.Kind, Limit: e.Limit, Group: e.Group, RetryAfter: e.RetryAfterSeconds()})
	return &jsonrpc.Error{Code: CodeRateLimited, Message: "toolmux: " + e.Error(), Data: data}
}

// writeRateLimited answers a request refused for a limit (err): status,
// Retry-After, and the JSON-RPC error.
func writeRateLimited(w http.ResponseWriter, status int, id json.RawMessage, err error) {
	if e, ok := errors.AsType[*ratelimit.Error](err); ok && e.RetryAfterSeconds() > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfterSeconds()))
	}
	re := rateLimitedError(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(mcpwire.AppendError(nil, id, &mcpwire.Error{Code: re.Code, Message: re.Message, Data: re.Data}))
}

// admitStdio admits a tools/call of the stdio session: the caller is
// none (stdio has no authentication), held to rate_limits.per_caller with
// every other call made without authentication. A refusal is the error
// the go-sdk answers the request with.
func (g *Gateway) admitStdio(ctx context.Context) (release func(), err error) {
	if g.limits == nil {
		return noRelease, nil
	}
	release, err = g.limits.Admit(ctx, 1)
	if err != nil {
		return nil, rateLimitedError(err)
	}
	return release, nil
}
