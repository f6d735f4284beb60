package gateway

import (
	"net/http"

	"github.com/toolmux/toolmux/internal/jsonscan"
)

// What a request of the protocols with sessions (2025-11-25 and before)
// made before its session was opened is told. The go-sdk would answer it
// with an error of code 0 ("is invalid during session initialization") on
// a stream: a client, or a person with curl, learns neither what was wrong
// nor what to do.
const (
	msgNoSession = `toolmux: no session: send "initialize" first, then "notifications/initialized", ` +
		`then each request with the Mcp-Session-Id header of initialize's answer ` +
		`(the 2026-07-28 protocol needs no session: each request names its version in params._meta)`
	msgNotInitialized = `toolmux: not initialized: send "initialize" first, then "notifications/initialized" ` +
		`(or, in the 2026-07-28 protocol, name the version in each request's params._meta)`
)

// needsSession reports whether a scanned message of the 2025-11-25
// protocol is a request that needs an initialized session: any but
// initialize and ping (notifications and responses are the go-sdk's to
// judge).
func needsSession(msg jsonscan.Message) bool {
	if rpcID(msg.ID) == nil || msg.Method == nil {
		return false
	}
	return !isMethod(msg.Method, "initialize") && !isMethod(msg.Method, "ping")
}

// refuseSessionless answers a request of the 2025-11-25 protocol that
// needs a session but came without one (no Mcp-Session-Id) with 400 and
// a JSON-RPC invalid-request error saying to initialize first, as the
// streamable HTTP transport asks of a server that requires sessions; ok
// is false when it has answered. A request the go-sdk's transport
// refuses first (its Content-Type, its Accept) is left to it: what is
// wrong with it is said first.
func refuseSessionless(w http.ResponseWriter, r *http.Request, msg jsonscan.Message) (ok bool) {
	if !needsSession(msg) || !jsonBody(r.Header) || !acceptsBoth(r.Header.Values("Accept")) {
		return true
	}
	writeRPCError(w, http.StatusBadRequest, rpcID(msg.ID), codeInvalidRequest, msgNoSession)
	return false
}
