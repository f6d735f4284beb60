package gateway_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/funcsource"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/taskclient"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/tasklog"
)

// tokens is a verifier of fixed tokens, each with the caller it stands
// for: what an issuer's verifier answers, without the issuer (the JWT and
// introspection verifiers are tested against a real one).
type tokens map[string]*identity.Caller

func (ts tokens) Verify(_ context.Context, token string) (*identity.Caller, error) {
	if c, ok := ts[token]; ok {
		return c, nil
	}
	return nil, identity.ErrNotMine
}

// Every route refuses a request without a caller, with the challenge an
// MCP client follows (the protected resource metadata of the route), and
// serves one with; a token for another resource is refused (RFC 8707), one
// without a required scope gets 403 insufficient_scope; keys are not held
// to audiences or scopes; the metadata itself needs no credential.
func TestAuthOnEveryRoute(t *testing.T) {
	g := builtinGateway(t, t.TempDir(), gateway.Options{API: http.NotFoundHandler(), Metrics: http.NotFoundHandler(),
		Virtual: []gateway.Virtual{{Name: "v", Tools: []string{"builtin/*"}}}})
	key := identity.NewKeySecret()
	// The server's URL is the resource its tokens name: the handler is
	// made once it is known.
	var h http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	defer srv.Close()
	auth := gateway.Auth{AuthorizationServers: []string{"https://idp.example"}, Scopes: []string{"mcp"}}
	auth.Verifier = identity.Verifiers{
		identity.NewKeys(identity.Key{Name: "ci", Hash: identity.HashKey(key)}),
		tokens{
			"good":       {Subject: "u1", Name: "ann", Method: identity.MethodJWT, Audience: []string{srv.URL}, Scopes: []string{"mcp"}},
			"route":      {Subject: "u1", Name: "ann", Method: identity.MethodJWT, Audience: []string{srv.URL + "/mcp"}, Scopes: []string{"mcp"}},
			"elsewhere":  {Subject: "u1", Name: "ann", Method: identity.MethodJWT, Audience: []string{"https://other.example"}, Scopes: []string{"mcp"}},
			"few-scopes": {Subject: "u1", Name: "ann", Method: identity.MethodJWT, Audience: []string{srv.URL}},
		},
	}
	h = g.MuxAuth(auth, gateway.Security{Loopback: true})
	for _, route := range []string{"/mcp", "/virtual/v/mcp", "/api/tools", "/metrics", "/"} {
		get := func(token string) *http.Response {
			method, body := http.MethodGet, io.Reader(nil)
			if strings.HasSuffix(route, "/mcp") {
				method, body = http.MethodPost, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)
			}
			req, _ := http.NewRequest(method, srv.URL+route, body)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp
		}
		meta := `resource_metadata="` + srv.URL + "/.well-known/oauth-protected-resource" + route + `"`
		for token, want := range map[string]struct {
			status    int
			challenge string
		}{
			"":           {401, `Bearer realm="toolmux", ` + meta},
			"unknown":    {401, meta + `, error="invalid_token"`},
			"elsewhere":  {401, `error="invalid_token"`},
			"few-scopes": {403, `error="insufficient_scope"`},
		} {
			resp := get(token)
			if resp.StatusCode != want.status || !strings.Contains(resp.Header.Get("WWW-Authenticate"), want.challenge) {
				t.Errorf("%s with %q: %d %q", route, token, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
			}
			if token == "few-scopes" && !strings.Contains(resp.Header.Get("WWW-Authenticate"), `scope="mcp"`) {
				t.Errorf("%s: the challenge names no scope: %q", route, resp.Header.Get("WWW-Authenticate"))
			}
		}
		for _, token := range []string{"good", key} {
			if resp := get(token); resp.StatusCode >= 400 && resp.StatusCode != http.StatusNotFound {
				t.Errorf("%s with a good credential: %d", route, resp.StatusCode)
			}
		}
	}
	// A token for the route itself is good for the route, not for another.
	if code, _ := postAuth(t, srv.URL+"/mcp", "route"); code != 200 {
		t.Errorf("a token for /mcp on /mcp: %d", code)
	}
	if code, _ := postAuth(t, srv.URL+"/virtual/v/mcp", "route"); code != 401 {
		t.Errorf("a token for /mcp on /virtual/v/mcp: %d", code)
	}
	// The metadata: public, naming the route's resource and the issuer.
	resp, err := http.Get(srv.URL + "/.well-known/oauth-protected-resource/mcp")
	if err != nil {
		t.Fatal(err)
	}
	var md struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
		Scopes               []string `json:"scopes_supported"`
	}
	err = json.NewDecoder(resp.Body).Decode(&md)
	resp.Body.Close()
	if err != nil || md.Resource != srv.URL+"/mcp" || len(md.AuthorizationServers) != 1 || md.AuthorizationServers[0] != "https://idp.example" || len(md.Scopes) != 1 {
		t.Errorf("metadata: %v %+v", err, md)
	}
	// A real MCP client with a token of its own.
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t"}, nil).Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: srv.URL + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport(key)}}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}

func postAuth(t *testing.T, url, token string) (int, string) {
	t.Helper()
	return postBody(t, url, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, map[string]string{"Authorization": "Bearer " + token})
}

// A request's verified access token (a JWT, an introspected token) rides
// in its context for token exchange, and nothing else does: not an API
// key, not a token refused, not what a request without authentication
// sends.
func TestAuthCarriesVerifiedToken(t *testing.T) {
	type seen struct {
		caller string
		token  string
		ok     bool
	}
	got := make(chan seen, 1)
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := identity.TokenFrom(r.Context())
		got <- seen{identity.From(r.Context()).String(), tok.Raw(), ok}
	})
	g := builtinGateway(t, t.TempDir(), gateway.Options{API: api})
	key := identity.NewKeySecret()
	var h http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	defer srv.Close()
	auth := gateway.Auth{AuthorizationServers: []string{"https://idp.example"}}
	auth.Verifier = identity.Verifiers{
		identity.NewKeys(identity.Key{Name: "ci", Hash: identity.HashKey(key)}),
		tokens{
			"jwt-of-ann":   {Subject: "u1", Name: "ann", Method: identity.MethodJWT, Audience: []string{srv.URL}},
			"opaque-of-bo": {Subject: "u2", Name: "bo", Method: identity.MethodIntrospection, Audience: []string{srv.URL}},
			"elsewhere":    {Subject: "u1", Name: "ann", Method: identity.MethodJWT, Audience: []string{"https://other.example"}},
		},
	}
	h = g.MuxAuth(auth, gateway.Security{Loopback: true})
	get := func(token string) (int, seen) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/tools", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		select {
		case s := <-got:
			return resp.StatusCode, s
		default:
			return resp.StatusCode, seen{}
		}
	}
	for token, caller := range map[string]string{"jwt-of-ann": "ann (jwt)", "opaque-of-bo": "bo (introspection)"} {
		if code, s := get(token); code != 200 || !s.ok || s.token != token || s.caller != caller {
			t.Errorf("%s: %d, caller %s, token carried %v (its own: %v)", caller, code, s.caller, s.ok, s.token == token)
		}
	}
	if code, s := get(key); code != 200 || s.ok || s.caller != "ci (key)" {
		t.Errorf("an API key: %d, caller %s, a token carried: %v", code, s.caller, s.ok)
	}
	if code, s := get("elsewhere"); code != 401 || s.ok {
		t.Errorf("a token for another resource: %d, a token carried: %v", code, s.ok)
	}
}

// The tokens of seenGateway's callers: ann's session begins with one of
// her JWTs and may call with the next one she got (hers too).
const (
	annJWT       = "jwt-of-ann"
	annRefreshed = "jwt-of-ann-refreshed"
)

// seenGateway serves fx__seen, a tool that answers the SHA-256 of the
// caller's token its call carries ("token HEX"), or "no token", to ann
// (annJWT, annRefreshed) and to an API key, which it returns with the
// gateway's URL.
func seenGateway(t *testing.T, opts gateway.Options) (url, key string) {
	t.Helper()
	seen := funcsource.Func("seen", "Says which caller's token the call carries.", func(ctx context.Context, _ struct{}) (string, error) {
		tok, ok := identity.TokenFrom(ctx)
		if !ok {
			return "no token", nil
		}
		return seenAnswer(tok.Raw()), nil
	}, funcsource.ReadOnly())
	m, err := manager.New(manager.WithSource(funcsource.New("fx", seen), manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(m, opts)
	key = identity.NewKeySecret()
	var h http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		g.Close()
		m.Close()
	})
	ann := &identity.Caller{Subject: "u1", Name: "ann", Method: identity.MethodJWT, Audience: []string{srv.URL}}
	h = g.MuxAuth(gateway.Auth{Verifier: identity.Verifiers{
		identity.NewKeys(identity.Key{Name: "ci", Hash: identity.HashKey(key)}),
		tokens{annJWT: ann, annRefreshed: ann},
	}}, gateway.Security{Loopback: true})
	return srv.URL, key
}

func seenAnswer(token string) string { return fmt.Sprintf("token %x", sha256.Sum256([]byte(token))) }

// The caller's verified token reaches the context its call is made in,
// for token exchange to find: on a virtual server, and on /mcp through
// tool search's call_tool, in both eras; a call carries the token of its
// own request, not the session's first; a caller with an API key has
// none there.
func TestCallerTokenReachesTheCall(t *testing.T) {
	// /mcp with tool search: the tool is called through call_tool.
	base, key := seenGateway(t, gateway.Options{Virtual: []gateway.Virtual{{Name: "v", Tools: []string{"fx/seen"}}}, ToolSearch: gateway.ToolSearch{Enabled: true}})
	want := map[string]string{annJWT: seenAnswer(annRefreshed), key: "no token"}
	for _, route := range []string{"/mcp", "/virtual/v/mcp"} {
		for _, era := range []string{legacyProtocol, "2026-07-28"} {
			for token, answer := range want {
				tr := &switchTransport{}
				tr.token.Store(&token)
				cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(),
					&mcp.StreamableClientTransport{Endpoint: base + route, HTTPClient: &http.Client{Transport: tr}},
					&mcp.ClientSessionOptions{ProtocolVersion: era})
				if err != nil {
					t.Fatal(err)
				}
				if token == annJWT {
					next := annRefreshed
					tr.token.Store(&next)
				}
				call := &mcp.CallToolParams{Name: "fx__seen"}
				if route == "/mcp" {
					call = &mcp.CallToolParams{Name: "call_tool", Arguments: map[string]any{"name": "fx__seen"}}
				}
				res, err := cs.CallTool(context.Background(), call)
				if err != nil || res.IsError || len(res.Content) != 1 {
					t.Fatalf("%s %s: %v %+v", route, era, err, res)
				}
				if got := res.Content[0].(*mcp.TextContent).Text; got != answer {
					t.Errorf("%s %s, %s: the call sees %q, want %q", route, era, map[bool]string{true: "a JWT", false: "an API key"}[token == annJWT], got, answer)
				}
				cs.Close()
			}
		}
	}
}

// switchTransport sends the token it holds now with every request.
type switchTransport struct{ token atomic.Pointer[string] }

func (s *switchTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+*s.token.Load())
	return http.DefaultTransport.RoundTrip(r)
}

// A call made a task outlives its request, and still carries its
// caller's token, for token exchange to find; an API key's caller's
// task has none.
func TestCallerTokenReachesTheTask(t *testing.T) {
	log, err := tasklog.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	base, key := seenGateway(t, gateway.Options{Tasks: gateway.Tasks{Store: log, Long: []string{"fx/seen"}, TTL: time.Hour}})
	ctx := pollCtx(t)
	for token, answer := range map[string]string{annJWT: seenAnswer(annJWT), key: "no token"} {
		c := &taskclient.Client{URL: base + "/mcp", Token: token}
		task, err := c.CallTool(ctx, "fx__seen", map[string]any{})
		if err != nil || task.TaskID == "" {
			t.Fatalf("the call is no task: %v %+v", err, task)
		}
		if task, err = c.Poll(ctx, task.TaskID, nil); err != nil || task.Status != "completed" {
			t.Fatalf("the task: %+v %v", task, err)
		}
		r, _ := task.ToolResult()
		if r.Text() != answer {
			t.Errorf("%s's task sees %q, want %q", map[bool]string{true: "a JWT", false: "an API key"}[token == annJWT], r.Text(), answer)
		}
	}
}
