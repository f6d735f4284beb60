package mcpwire

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
)

func TestLocalCode(t *testing.T) {
	for _, c := range []int64{CodeClientClosing, CodeServerClosing, CodeRejected} {
		if !LocalCode(c) {
			t.Errorf("LocalCode(%d) = false", c)
		}
	}
	// Codes a peer answers with are not local.
	for _, c := range []int64{0, jsonrpc.CodeInvalidParams, jsonrpc.CodeInternalError, jsonrpc.CodeMethodNotFound, -32000, -32001, -32002, -32006} {
		if LocalCode(c) {
			t.Errorf("LocalCode(%d) = true", c)
		}
	}
}

// The go-sdk still reports a request its HTTP transport could not deliver
// (the server answered 503 in plain text) with CodeRejected: if a release
// renumbers its codes, this fails rather than the gateway passing the
// go-sdk's own failure on as a server's answer.
func TestLocalCodeFromGoSDK(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx := context.Background()
	srv := mcp.NewServer(&mcp.Implementation{Name: "s", Version: "1"}, nil)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"tools/call"`)) {
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
	}))
	defer hs.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "x"})
	var wire *jsonrpc.Error
	if !errors.As(err, &wire) || wire.Code != CodeRejected || !LocalCode(wire.Code) {
		t.Fatalf("a call the transport could not deliver: %v (%#v)", err, wire)
	}
}
