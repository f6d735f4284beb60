package gateway

// sdkMaxDepth is the go-sdk's bound on the nesting of a whole MCP message,
// which it enforces by answering a bare 400 its client shows as "Bad
// Request": jsonRPCErrors answers such a message itself, with a JSON-RPC
// error saying why.
const sdkMaxDepth = 1000
