package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/api"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/taskclient"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/tasklog"
)

// The callers of these tests, by their tokens: ann may answer
// approvals, root is an admin.
var teamTokens = tokens{
	"alice-token": {Subject: "key:alice", Name: "alice", Groups: []string{"dev"}, Method: identity.MethodKey},
	"bob-token":   {Subject: "key:bob", Name: "bob", Groups: []string{"ops"}, Method: identity.MethodKey},
	"ann-token":   {Subject: "key:ann", Name: "ann", Groups: []string{"dev", api.DefaultApproversGroup}, Method: identity.MethodKey},
	"root-token":  {Subject: "key:root", Name: "root", Groups: []string{gateway.AdminGroup}, Method: identity.MethodKey},
	"nobody":      {Subject: "key:guest", Name: "guest", Method: identity.MethodKey},
}

// teamGateway serves the upstream test server as two servers, up and up2,
// to the callers of teamTokens: dev sees parts and log, ops progress and
// roots (of either server); the virtual server devs is dev's alone, all
// everyone's; the passthrough route of up2 is ops'. It returns the
// gateway's URL.
func teamGateway(t *testing.T, search gateway.ToolSearch) string {
	t.Helper()
	return teamGatewayWith(t, search, gateway.CodeMode{})
}

// teamGatewayWith is teamGateway with code mode.
func teamGatewayWith(t *testing.T, search gateway.ToolSearch, code gateway.CodeMode) string {
	t.Helper()
	up := startUpstream(t)
	var opts []manager.Option
	var routes []gateway.Route
	for _, name := range []string{"up", "up2"} {
		cfg := mcpsource.Config{Name: name, Transport: mcpsource.StreamableHTTP, URL: up.url}
		src, err := mcpsource.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, manager.WithSource(src, manager.ServerOptions{}))
		rt := gateway.Route{Server: cfg}
		if name == "up2" {
			rt.Groups = []string{"ops"}
		}
		routes = append(routes, rt)
	}
	m, err := manager.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	vis, err := policy.NewVisibility(map[string][]string{"dev": {"*/parts", "*/log"}, "ops": {"*/progress", "*/roots"}}, gateway.AdminGroup)
	if err != nil {
		t.Fatal(err)
	}
	visible := func() *policy.Visibility { return vis }
	g := gateway.New(m, gateway.Options{
		Passthrough: routes,
		Virtual: []gateway.Virtual{
			{Name: "devs", Tools: []string{"up/*"}, Groups: []string{"dev"}},
			{Name: "all", Tools: []string{"up/*"}},
		},
		ToolSearch: search,
		CodeMode:   code,
		Visibility: visible,
		API:        api.New(api.Options{Catalog: m, Caller: m, Visibility: visible}),
	})
	hs := httptest.NewServer(g.MuxAuth(gateway.Auth{Verifier: teamTokens}, gateway.Security{Loopback: true}))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		g.Close()
		m.Close()
	})
	return hs.URL
}

// connectAs connects an MCP client with token to url, on protocol.
func connectAs(t *testing.T, url, token, protocol string) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "team", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerTransport(token)}},
		&mcp.ClientSessionOptions{ProtocolVersion: protocol})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	if v := cs.InitializeResult().ProtocolVersion; v != protocol {
		t.Fatalf("the client speaks %s, not %s", v, protocol)
	}
	return cs
}

// asCaller makes a request with token's credential (a JSON body, if
// any), and returns the status and the body of the answer.
func asCaller(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// rpcError is the JSON-RPC error of err, with name written as NAME, and
// the suggestion its data makes, if any.
func rpcError(t *testing.T, err error, name string) (string, string) {
	t.Helper()
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		t.Fatalf("not a JSON-RPC error: %v", err)
	}
	var data map[string]any
	_ = json.Unmarshal(we.Data, &data)
	sug, _ := data["suggestion"].(string)
	delete(data, "suggestion")
	// The message names the suggestion too.
	msg := we.Message
	if sug != "" {
		var ok bool
		if msg, ok = strings.CutSuffix(msg, fmt.Sprintf("; did you mean %q?", sug)); !ok {
			t.Errorf("the message %q does not name the suggestion %q", we.Message, sug)
		}
	}
	b, _ := json.Marshal(map[string]any{"code": we.Code, "message": strings.ReplaceAll(msg, name, "NAME"), "data": data})
	return string(b), sug
}

// Two callers in different groups see different tools on every MCP
// route, in both eras: tools/list shows each its own, a call of a tool
// it may not see is answered exactly as the call of a tool that does not
// exist, and its own tools are called. The admin group sees everything.
func TestCallersSeeTheirTools(t *testing.T) {
	base := teamGateway(t, gateway.ToolSearch{})
	everything := []string{"add_prompt", "ask", "ask_gated", "caps", "hold", "log", "parts", "progress", "progress_gated",
		"reject", "roots", "sample", "secret", "slow", "touch", "write"}
	for _, route := range []string{"/mcp", "/virtual/all/mcp", "/servers/up/mcp"} {
		prefix := "up__"
		if route == "/servers/up/mcp" {
			prefix = ""
		}
		for _, era := range []string{legacyProtocol, "2026-07-28"} {
			t.Run(route+" "+era, func(t *testing.T) {
				for _, tc := range []struct {
					token         string
					sees          []string
					hidden, owned string
				}{
					{"alice-token", []string{"log", "parts"}, "progress", "parts"},
					{"bob-token", []string{"progress", "roots"}, "parts", "roots"},
					{"nobody", nil, "parts", ""},
				} {
					cs := connectAs(t, base+route, tc.token, era)
					// A list of the caller's own is for its client alone
					// to cache.
					lr, err := cs.ListTools(context.Background(), nil)
					if err != nil {
						t.Fatal(err)
					}
					if lr.CacheScope != "private" {
						t.Errorf("%s's tools/list: cache scope %q", tc.token, lr.CacheScope)
					}
					var got []string
					for _, n := range listNames(t, cs) {
						if route == "/mcp" && !strings.HasPrefix(n, prefix) {
							continue // up2's, the same tools
						}
						got = append(got, strings.TrimPrefix(n, prefix))
					}
					if !slices.Equal(got, tc.sees) {
						t.Errorf("%s lists %v, want %v", tc.token, got, tc.sees)
					}
					// A hidden tool is answered as an unknown one; what
					// either suggests (the closest name, on /mcp) is a
					// tool the caller sees, never a hidden one: a name one
					// letter off a hidden tool's suggests nothing of it.
					_, hidden := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: prefix + tc.hidden})
					_, unknown := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: prefix + "no_such_tool"})
					_, near := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: prefix + tc.hidden + "s"})
					h, hsug := rpcError(t, hidden, prefix+tc.hidden)
					u, _ := rpcError(t, unknown, prefix+"no_such_tool")
					n, nsug := rpcError(t, near, prefix+tc.hidden+"s")
					if h != u || n != u {
						t.Errorf("%s: a hidden tool is answered\n%s\nan unknown one\n%s\none near a hidden one\n%s", tc.token, h, u, n)
					}
					for _, sug := range []string{hsug, nsug} {
						if sug != "" && !slices.Contains(tc.sees, strings.TrimPrefix(sug, prefix)) {
							t.Errorf("%s: the answer suggests %q, which it does not see", tc.token, sug)
						}
					}
					if tc.owned != "" {
						res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: prefix + tc.owned})
						if err != nil || res.IsError {
							t.Errorf("%s calls %s: %v %+v", tc.token, tc.owned, err, res)
						}
					}
				}
				root := connectAs(t, base+route, "root-token", era)
				lr, err := root.ListTools(context.Background(), nil)
				if err != nil {
					t.Fatal(err)
				}
				if route != "/servers/up/mcp" && lr.CacheScope != "public" {
					t.Errorf("admin's tools/list: cache scope %q", lr.CacheScope)
				}
				var all []string
				for _, n := range listNames(t, root) {
					if route != "/mcp" || strings.HasPrefix(n, prefix) {
						all = append(all, strings.TrimPrefix(n, prefix))
					}
				}
				if !slices.Equal(all, everything) {
					t.Errorf("admin lists %v", all)
				}
			})
		}
	}
}

// A virtual server or a passthrough route limited to groups is, to
// anyone else, one that does not exist: the same 404 as an unknown name,
// which lists only the routes the caller may use; the index does too.
func TestRoutesByGroup(t *testing.T) {
	base := teamGateway(t, gateway.ToolSearch{})
	ping := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	status := func(route, token string) (int, string) {
		return postBody(t, base+route, ping, map[string]string{"Authorization": "Bearer " + token})
	}
	for _, tc := range []struct {
		route, token string
		ok           bool
	}{
		{"/virtual/devs/mcp", "alice-token", true},
		{"/virtual/devs/mcp", "bob-token", false},
		{"/virtual/devs/mcp", "root-token", true},
		{"/virtual/all/mcp", "bob-token", true},
		{"/servers/up2/mcp", "bob-token", true},
		{"/servers/up2/mcp", "alice-token", false},
		{"/servers/up/mcp", "alice-token", true},
	} {
		code, body := status(tc.route, tc.token)
		if tc.ok != (code == http.StatusOK) {
			t.Errorf("%s as %s: %d %s", tc.route, tc.token, code, body)
		}
		if tc.ok {
			continue
		}
		kind, name, _ := strings.Cut(strings.TrimPrefix(tc.route, "/"), "/")
		name = strings.TrimSuffix(name, "/mcp")
		ucode, ubody := status("/"+kind+"/nosuch/mcp", tc.token)
		if code != http.StatusNotFound || ucode != code || strings.ReplaceAll(body, name, "X") != strings.ReplaceAll(ubody, "nosuch", "X") {
			t.Errorf("%s as %s: %d %s\nunknown: %d %s", tc.route, tc.token, code, body, ucode, ubody)
		}
	}
	// Both eras are refused alike (the route is refused before any).
	if code, _ := postBody(t, base+"/virtual/devs/mcp", ping, map[string]string{"Authorization": "Bearer bob-token", "Mcp-Protocol-Version": "2026-07-28"}); code != http.StatusNotFound {
		t.Errorf("2026-07-28 on a hidden virtual server: %d", code)
	}
	index := func(token string) string {
		_, body := asCaller(t, http.MethodGet, base+"/", token, "")
		return body
	}
	if a := index("alice-token"); !strings.Contains(a, "/virtual/devs/mcp") || strings.Contains(a, "/servers/up2/mcp") {
		t.Errorf("alice's index:\n%s", a)
	}
	if b := index("bob-token"); strings.Contains(b, "/virtual/devs/mcp") || !strings.Contains(b, "/servers/up2/mcp") {
		t.Errorf("bob's index:\n%s", b)
	}
}

// Tool search shows each caller its own tools: find_tools finds only
// them, call_tool calls only them, and answers for another as for a name
// that does not exist.
func TestToolSearchByCaller(t *testing.T) {
	base := teamGateway(t, gateway.ToolSearch{Enabled: true})
	for _, era := range []string{legacyProtocol, "2026-07-28"} {
		alice := connectAs(t, base+"/mcp", "alice-token", era)
		bob := connectAs(t, base+"/mcp", "bob-token", era)
		find := func(cs *mcp.ClientSession, q string) string {
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "find_tools", Arguments: map[string]any{"query": q, "limit": 50}})
			if err != nil || res.IsError {
				t.Fatalf("find_tools: %v %+v", err, res)
			}
			b, _ := json.Marshal(res.StructuredContent)
			return string(b)
		}
		if f := find(alice, "progress"); strings.Contains(f, "progress") {
			t.Errorf("%s: alice finds %s", era, f)
		}
		if f := find(alice, "up__progress"); strings.Contains(f, "progress") {
			t.Errorf("%s: alice finds by exact name %s", era, f)
		}
		if f := find(bob, "progress"); !strings.Contains(f, `"up__progress"`) {
			t.Errorf("%s: bob does not find progress: %s", era, f)
		}
		callTool := func(cs *mcp.ClientSession, name string) string {
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "call_tool", Arguments: map[string]any{"name": name}})
			if err != nil {
				t.Fatal(err)
			}
			return strings.ReplaceAll(testservers.ResultText(res), name, "NAME")
		}
		if h, u := callTool(alice, "up__progress"), callTool(alice, "up__no_such_tool"); h != u || !strings.Contains(h, "no tool is named") {
			t.Errorf("%s: call_tool of a hidden tool: %q; of an unknown one: %q", era, h, u)
		}
		if r := callTool(alice, "up__parts"); strings.Contains(r, "no tool is named") {
			t.Errorf("%s: alice's call_tool of parts: %s", era, r)
		}
	}
}

// The API shows each caller its tools; a call of another is answered as
// the call of a tool that does not exist (404, the same record).
func TestAPIToolsByCaller(t *testing.T) {
	base := teamGateway(t, gateway.ToolSearch{})
	do := func(method, path, token, body string) (int, string) {
		return asCaller(t, method, base+path, token, body)
	}
	var tools []struct {
		Server string
		Name   string `json:"tool"`
	}
	_, body := do(http.MethodGet, "/api/tools", "alice-token", "")
	if err := json.Unmarshal([]byte(body), &tools); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools {
		names = append(names, tl.Server+"/"+tl.Name)
	}
	if want := []string{"up/log", "up/parts", "up2/log", "up2/parts"}; !slices.Equal(names, want) {
		t.Errorf("alice's /api/tools: %v", names)
	}
	type record struct {
		Error struct{ Kind, Message, Suggestion string }
	}
	call := func(tl string) (int, record) {
		code, body := do(http.MethodPost, "/api/tools/"+tl+"/call", "alice-token", `{"arguments":{}}`)
		var r record
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("%s: %s", tl, body)
		}
		return code, r
	}
	hc, hidden := call("up/progress")
	uc, unknown := call("up/no_such_tool")
	hidden.Error.Message = strings.ReplaceAll(hidden.Error.Message, "progress", "X")
	unknown.Error.Message = strings.ReplaceAll(unknown.Error.Message, "no_such_tool", "X")
	if hc != http.StatusNotFound || hc != uc || hidden != unknown || hidden.Error.Kind != "tool_not_registered" {
		t.Errorf("a hidden tool: %d %+v; an unknown one: %d %+v", hc, hidden, uc, unknown)
	}
	// A server none of whose tools the caller sees is one that does not
	// exist to it.
	sc, server := call("up3/parts")
	hc, hidden = call("nobodys/parts")
	if sc != hc || server.Error.Kind != "server_not_found" || strings.ReplaceAll(server.Error.Message, "up3", "X") != strings.ReplaceAll(hidden.Error.Message, "nobodys", "X") {
		t.Errorf("unknown servers: %+v %+v", server, hidden)
	}
	if code, body := do(http.MethodPost, "/api/tools/up/parts/call", "alice-token", `{"arguments":{}}`); code != http.StatusOK {
		t.Errorf("alice calls parts: %d %s", code, body)
	}
	_, body = do(http.MethodGet, "/api/tools", "root-token", "")
	if !strings.Contains(body, `"progress"`) {
		t.Errorf("admin's /api/tools lacks progress")
	}
}

// An MCP task's call is its caller's: a tool the caller may not see is
// unknown as a task too, and the call a task runs detached from its
// request is still decided for its caller (a rule for its group denies
// it).
func TestTasksByCaller(t *testing.T) {
	dir := t.TempDir()
	src, err := mcpsource.New(mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio, Command: testservers.Fixture(t), Args: []string{"-task-jobs"}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	engine, err := policy.New(policy.ModeDefault, []policy.Rule{
		{Name: "not ops", Groups: []string{"ops"}, Tools: []string{"fx/slow_compute"}, Args: map[string]string{"label": "^deny"}, Action: policy.Deny},
		{Name: "rest", Tools: []string{"fx/*"}, Action: policy.Allow}})
	if err != nil {
		t.Fatal(err)
	}
	log, err := tasklog.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	vis, err := policy.NewVisibility(map[string][]string{"dev": {"fx/greet"}, "ops": {"fx/*"}}, gateway.AdminGroup)
	if err != nil {
		t.Fatal(err)
	}
	s := schedule.New(m, schedule.WithGate(policy.NewGate(engine)))
	g := gateway.New(governed{m, s}, gateway.Options{Tasks: gateway.Tasks{Store: log, Threshold: 100 * time.Millisecond, TTL: time.Hour},
		Visibility: func() *policy.Visibility { return vis }})
	srv := httptest.NewServer(g.MuxAuth(gateway.Auth{Verifier: teamTokens}, gateway.Security{Loopback: true}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		g.Close()
		m.Close()
		log.Close()
	})
	ctx := pollCtx(t)
	alice := &taskclient.Client{URL: srv.URL + "/mcp", Token: "alice-token"}
	_, hidden := alice.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 1, "label": "x"})
	_, unknown := alice.CallTool(ctx, "fx__no_such_tool", map[string]any{"seconds": 1, "label": "x"})
	if hidden == nil || strings.ReplaceAll(hidden.Error(), "slow_compute", "X") != strings.ReplaceAll(unknown.Error(), "no_such_tool", "X") {
		t.Errorf("alice's task of a hidden tool: %v; of an unknown one: %v", hidden, unknown)
	}
	// The task's call runs apart from its request (on the task runner's
	// context), answered at once when it ends before the threshold (a
	// refusal), else as a task.
	bob := &taskclient.Client{URL: srv.URL + "/mcp", Token: "bob-token"}
	for label, wantErr := range map[string]bool{"x": false, "deny": true} {
		done, err := bob.CallTool(ctx, "fx__slow_compute", map[string]any{"seconds": 1, "label": label})
		if err != nil {
			t.Fatalf("bob's call: %v", err)
		}
		if done.TaskID != "" {
			if done, err = bob.Poll(ctx, done.TaskID, nil); err != nil || done.Status != "completed" {
				t.Fatalf("bob's task: %+v %v", done, err)
			}
		} else if wantErr == false {
			t.Errorf("bob's slow call was no task: %s", done.Raw)
		}
		r, _ := done.ToolResult()
		if r.IsError != wantErr || wantErr && !strings.Contains(r.Text(), `"not ops"`) {
			t.Errorf("bob's task labelled %s: %s", label, done.Result)
		}
	}
}
