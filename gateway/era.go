package gateway

import "net/http"

// protocolModern is the first protocol version without sessions: no
// initialize, the client's version, identity and capabilities in every
// request's _meta, multi round-trip requests (input_required) instead of
// the server's requests to the client.
const protocolModern = "2026-07-28"

// protocolLegacyLatest is the newest protocol version with sessions (the
// initialize handshake).
const protocolLegacyLatest = "2025-11-25"

// modernRequest reports whether an HTTP request is of the sessionless
// protocol: its MCP-Protocol-Version header names 2026-07-28 or later,
// which such a client sends with every request (server/discover
// included). Requests of the older protocols carry an older version, or
// none before initialize.
func modernRequest(req *http.Request) bool {
	return req.Header.Get("Mcp-Protocol-Version") >= protocolModern
}
