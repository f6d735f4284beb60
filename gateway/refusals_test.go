package gateway_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/identity"
)

// routeRefusal is what a refused request was answered, read in both error
// shapes: a JSON-RPC error (code) or the API's error object (kind).
type routeRefusal struct {
	status  int
	ctype   string
	body    string
	rpc     bool
	code    int
	kind    string
	message string
}

// doRefused sends a request to url with header ("Host" sets the
// request's host), a POST with an initialize, and reads the answer as a
// refusal.
func doRefused(t *testing.T, method, url string, header map[string]string) routeRefusal {
	t.Helper()
	body := ""
	if method == http.MethodPost {
		body = initialize
	}
	resp, b := sendRaw(t, method, url, body, header)
	r := routeRefusal{status: resp.StatusCode, ctype: resp.Header.Get("Content-Type"), body: string(b)}
	var m struct {
		JSONRPC string
		ID      json.RawMessage
		Error   json.RawMessage
	}
	if json.Unmarshal(b, &m) != nil || m.Error == nil {
		return r
	}
	var e struct {
		Code          *int
		Kind, Message string
	}
	if json.Unmarshal(m.Error, &e) != nil {
		return r
	}
	r.rpc = m.JSONRPC == "2.0" && string(m.ID) == "null" && e.Code != nil
	if e.Code != nil {
		r.code = *e.Code
	}
	r.kind, r.message = e.Kind, e.Message
	return r
}

// Every refusal is in the error shape of its route: a JSON-RPC error on
// the MCP routes, the API's error object on the API's and the page's
// (its files, the index, the login's routes) and on a path that is no
// route: a wrong Host (421), a foreign Origin (403), no such path, file
// or method (404, 405). None is plain text.
func TestRefusalsHaveTheirRoutesShape(t *testing.T) {
	srv := newApprovalsGateway(t, time.Minute, 0) // with the API and the page
	port := srv.url[strings.LastIndex(srv.url, ":")+1:]
	mcpRoutes := []string{"/mcp", "/servers/up/mcp", "/virtual/v/mcp"}
	otherRoutes := []string{"/api/tools", "/", "/ui/app.js", "/nothing", "/mcp/more", "/servers/up"}
	for _, c := range []struct {
		name   string
		header map[string]string
		status int
		kind   string
	}{
		{"wrong Host", map[string]string{"Host": "attacker.example:" + port}, http.StatusMisdirectedRequest, "misdirected"},
		{"foreign Origin", map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden, "forbidden"},
	} {
		for _, path := range mcpRoutes {
			r := doRefused(t, http.MethodPost, srv.url+path, c.header)
			if r.status != c.status || r.ctype != "application/json" || !r.rpc || r.code != -32000 || r.message == "" {
				t.Errorf("%s, POST %s: %d %s %q", c.name, path, r.status, r.ctype, r.body)
			}
		}
		for _, path := range otherRoutes {
			header := map[string]string{"Accept": "text/html"} // / is the page
			for k, v := range c.header {
				header[k] = v
			}
			r := doRefused(t, http.MethodGet, srv.url+path, header)
			if r.status != c.status || r.ctype != "application/json" || r.rpc || r.kind != c.kind || r.message == "" {
				t.Errorf("%s, GET %s: %d %s %q", c.name, path, r.status, r.ctype, r.body)
			}
		}
	}
	for _, c := range []struct {
		method, path string
		status       int
		kind         string
	}{
		{http.MethodGet, "/nothing", http.StatusNotFound, "not_found"},
		{http.MethodGet, "/mcp/more", http.StatusNotFound, "not_found"},
		{http.MethodPost, "/servers/up", http.StatusNotFound, "not_found"},
		{http.MethodGet, "/ui/nothing.js", http.StatusNotFound, "not_found"},
		{http.MethodPost, "/ui/app.js", http.StatusMethodNotAllowed, "method_not_allowed"},
		{http.MethodGet, "/api/nothing", http.StatusNotFound, "not_found"},
	} {
		r := doRefused(t, c.method, srv.url+c.path, nil)
		if r.status != c.status || r.ctype != "application/json" || r.rpc || r.kind != c.kind || r.message == "" {
			t.Errorf("%s %s: %d %s %q", c.method, c.path, r.status, r.ctype, r.body)
		}
	}

	// The protected resource metadata, which OAuth clients read.
	ms := httptest.NewServer(builtinGateway(t, t.TempDir(), gateway.Options{}).MuxAuth(
		gateway.Auth{AuthorizationServers: []string{"https://idp.example"}, Verifier: teamTokens}, gateway.Security{Loopback: true}))
	t.Cleanup(ms.Close)
	if r := doRefused(t, http.MethodGet, ms.URL+"/.well-known/oauth-protected-resource/mcp", nil); r.status != http.StatusOK {
		t.Errorf("GET of the metadata: %d %q", r.status, r.body)
	}
	if r := doRefused(t, http.MethodPost, ms.URL+"/.well-known/oauth-protected-resource/mcp", nil); r.status != http.StatusMethodNotAllowed ||
		r.ctype != "application/json" || r.rpc || r.kind != "method_not_allowed" || r.message == "" {
		t.Errorf("POST of the metadata: %d %s %q", r.status, r.ctype, r.body)
	}

	// The login's routes, where the page logs in.
	ps := startPageServer(t, &provider{}, identity.NewSessions(identity.SessionOptions{}), gateway.Security{Loopback: true}, "")
	for _, c := range []struct {
		method, path string
		status       int
		kind         string
	}{
		{http.MethodGet, "/auth/nothing", http.StatusNotFound, "not_found"},
		{http.MethodPost, gateway.LoginPath, http.StatusMethodNotAllowed, "method_not_allowed"},
		{http.MethodGet, gateway.LogoutPath, http.StatusMethodNotAllowed, "method_not_allowed"},
	} {
		r := doRefused(t, c.method, ps.URL+c.path, nil)
		if r.status != c.status || r.ctype != "application/json" || r.rpc || r.kind != c.kind || r.message == "" {
			t.Errorf("%s %s: %d %s %q", c.method, c.path, r.status, r.ctype, r.body)
		}
	}
}
