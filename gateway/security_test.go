package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/builtin"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/manager"
)

// serveGateway serves a gateway over the built-in tools with sec, on a
// real HTTP server, and returns its URL.
func serveGateway(t *testing.T, token string, sec gateway.Security) string {
	t.Helper()
	g := builtinGateway(t, t.TempDir(), gateway.Options{})
	srv := httptest.NewServer(g.Mux(token, sec))
	t.Cleanup(srv.Close)
	return srv.URL
}

// builtinGateway is a gateway of o over the built-in tools of dir, closed
// (with its manager) when the test ends.
func builtinGateway(t *testing.T, dir string, o gateway.Options) *gateway.Gateway {
	t.Helper()
	src, err := builtin.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(m, o)
	t.Cleanup(func() {
		g.Close()
		m.Close()
	})
	return g
}

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

// post sends body to the gateway's /mcp with the given Host and Origin
// headers (empty: left as the client sets them) and header, and returns
// the status and body.
func post(t *testing.T, url, host, origin, body string, header map[string]string) (int, string) {
	t.Helper()
	h := map[string]string{}
	for k, v := range header {
		h[k] = v
	}
	if host != "" {
		h["Host"] = host
	}
	if origin != "" {
		h["Origin"] = origin
	}
	resp, b := postRaw(t, url+"/mcp", body, h)
	return resp.StatusCode, string(b)
}

// postRaw posts body to url as an MCP client does (JSON, accepting JSON
// and event streams), with header set over that ("Host" sets the
// request's host), and returns the answer, its body read whole.
func postRaw(t *testing.T, url, body string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	return sendRaw(t, http.MethodPost, url, body, header)
}

// sendRaw is postRaw with another method (no body: "").
func sendRaw(t *testing.T, method, url, body string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// On loopback, only requests addressed to a loopback name get through
// (DNS rebinding); browser requests from other origins are refused.
func TestHostAndOriginChecks(t *testing.T) {
	url := serveGateway(t, "", gateway.Security{Loopback: true, AllowedHosts: []string{"toolmux.internal"},
		AllowedOrigins: []string{"https://app.example.com"}})
	port := url[strings.LastIndex(url, ":")+1:]
	for _, tc := range []struct {
		name, host, origin string
		want               int
	}{
		{"loopback ip", "", "", http.StatusOK},
		{"localhost", "localhost:" + port, "", http.StatusOK},
		{"allowed host", "toolmux.internal:" + port, "", http.StatusOK},
		{"rebinding name", "attacker.example:" + port, "", http.StatusMisdirectedRequest},
		{"same origin page", "localhost:" + port, "http://localhost:" + port, http.StatusOK},
		{"allowed origin", "", "https://app.example.com", http.StatusOK},
		{"foreign origin", "", "https://evil.example", http.StatusForbidden},
		{"null origin", "", "null", http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := post(t, url, tc.host, tc.origin, initialize, nil)
			if code != tc.want {
				t.Fatalf("status %d, want %d: %s", code, tc.want, body)
			}
			if code == http.StatusOK && !strings.Contains(body, `"serverInfo"`) {
				t.Fatalf("no initialize result: %s", body)
			}
		})
	}
}

// A wrong or missing token is 401, with a Bearer challenge (RFC 6750:
// invalid_token for a wrong one) and, on an MCP route, a JSON-RPC error
// saying why; the right one passes. A real MCP client is refused without
// it and served with it.
func TestTokenChecked(t *testing.T) {
	url := serveGateway(t, "s3cret", gateway.Security{})
	for name, c := range map[string]struct {
		header    map[string]string
		challenge string
	}{
		"no token":    {nil, `Bearer realm="toolmux"`},
		"wrong token": {map[string]string{"Authorization": "Bearer wrong"}, `Bearer realm="toolmux", error="invalid_token", error_description="wrong bearer token"`},
	} {
		req, _ := http.NewRequest(http.MethodPost, url+"/mcp", strings.NewReader(initialize))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range c.header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			JSONRPC string
			Error   struct {
				Code    int
				Message string
			}
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || err != nil || body.JSONRPC != "2.0" || body.Error.Code != -32000 || !strings.Contains(body.Error.Message, "bearer") ||
			resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("WWW-Authenticate") != c.challenge {
			t.Errorf("%s: %d %v %+v %v", name, resp.StatusCode, err, body, resp.Header)
		}
	}
	if code, body := post(t, url, "", "", initialize, map[string]string{"Authorization": "Bearer s3cret"}); code != http.StatusOK {
		t.Fatalf("right token: %d %s", code, body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "t"}, nil)
	if cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + "/mcp"}, nil); err == nil {
		cs.Close()
		t.Error("a client without the token connected")
	}
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport("s3cret")}}, nil)
	if err != nil {
		t.Fatalf("a client with the token: %v", err)
	}
	defer cs.Close()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Errorf("tools/list with the token: %v", err)
	}
}

// The scheme of the Authorization header is matched in any case (RFC
// 7235), with one or more spaces before the token; the token itself is
// matched exactly, and any other scheme is refused.
func TestTokenScheme(t *testing.T) {
	url := serveGateway(t, "s3cret", gateway.Security{})
	for header, want := range map[string]int{
		"Bearer s3cret":     http.StatusOK,
		"bearer s3cret":     http.StatusOK,
		"BEARER s3cret":     http.StatusOK,
		"bEaReR s3cret":     http.StatusOK,
		"Bearer   s3cret  ": http.StatusOK,
		"bearer S3CRET":     http.StatusUnauthorized,
		"bearer s3cret2":    http.StatusUnauthorized,
		"Basic s3cret":      http.StatusUnauthorized,
		"Bearers3cret":      http.StatusUnauthorized,
		"Bearer":            http.StatusUnauthorized,
		"s3cret":            http.StatusUnauthorized,
		"Bearer\ts3cret":    http.StatusUnauthorized,
	} {
		if code, body := post(t, url, "", "", initialize, map[string]string{"Authorization": header}); code != want {
			t.Errorf("%q: %d, want %d: %s", header, code, want, body)
		}
	}
}

// bearerTransport sends the token with every request.
type bearerTransport string

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// A body over the limit is refused without being read whole; the gateway
// keeps serving.
func TestRequestSizeLimit(t *testing.T) {
	url := serveGateway(t, "", gateway.Security{Loopback: true, MaxRequestBytes: 4096})
	big := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"pad":"` + strings.Repeat("x", 10000) + `"}}`
	if code, _ := post(t, url, "", "", big, nil); code < 400 {
		t.Fatalf("a %d-byte body was accepted", len(big))
	}
	// Still serving: a real client connects and lists the tools.
	client := mcp.NewClient(&mcp.Implementation{Name: "t"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil || len(res.Tools) == 0 {
		t.Fatalf("list after a refused body: %v %v", res, err)
	}
}

// The limit in force is the configured one, not the go-sdk's own (4 MiB),
// so a tool call carrying a whole file to write gets through (with the
// bound on arguments raised to let it).
func TestRequestSizeLimitIsTheConfiguredOne(t *testing.T) {
	dir := t.TempDir()
	g := builtinGateway(t, dir, gateway.Options{MaxArgumentBytes: 8 << 20})
	srv := httptest.NewServer(g.Mux("", gateway.Security{Loopback: true}))
	t.Cleanup(srv.Close)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	content := strings.Repeat("x", 4<<20+100<<10)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "builtin__write_file", Arguments: map[string]any{"path": "big.txt", "content": content}})
	if err != nil || res.IsError {
		t.Fatalf("a %d-byte file under the 16 MiB limit: %v %+v", len(content), err, res)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "big.txt")); err != nil || len(b) != len(content) {
		t.Fatalf("the file holds %d bytes (%v), want %d", len(b), err, len(content))
	}
}

// An origin --allowed-origin lists gets its preflight answered (before
// the token, which browsers do not send with it) and CORS headers naming
// it on every answer; other origins get none, and are refused.
func TestCORSForAllowedOrigins(t *testing.T) {
	url := serveGateway(t, "s3cret", gateway.Security{Loopback: true, AllowedOrigins: []string{"https://app.example.com"}})
	preflight := func(origin string) *http.Response {
		req, _ := http.NewRequest(http.MethodOptions, url+"/mcp", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization, content-type, mcp-session-id")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp := preflight("https://app.example.com")
	h := resp.Header
	if resp.StatusCode != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		!strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") ||
		!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Authorization") ||
		!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Mcp-Session-Id") || !strings.Contains(strings.Join(h.Values("Vary"), ","), "Origin") {
		t.Fatalf("preflight of the allowed origin: %d %v", resp.StatusCode, h)
	}
	if resp := preflight("https://evil.example"); resp.StatusCode != http.StatusForbidden || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight of another origin: %d %v", resp.StatusCode, resp.Header)
	}
	// The request itself: token checked, the answer readable by the page.
	req, _ := http.NewRequest(http.MethodPost, url+"/mcp", strings.NewReader(initialize))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Origin", "https://app.example.com")
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		!strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "Mcp-Session-Id") {
		t.Fatalf("request of the allowed origin: %d %v", resp.StatusCode, resp.Header)
	}
	// Same-origin and origin-less requests need no CORS headers.
	req, _ = http.NewRequest(http.MethodPost, url+"/mcp", strings.NewReader(initialize))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer s3cret")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("CORS headers without an Origin: %v", resp.Header)
	}
}
