package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/mcpsource"
)

// postMCP posts one JSON-RPC message on the session of cs and returns the
// answer's content type and the JSON-RPC messages it carried (the body
// itself, or each data line of an event stream). extra headers are set
// too.
func postMCP(t *testing.T, url string, cs *mcp.ClientSession, body string, extra map[string]string) (string, []map[string]any) {
	t.Helper()
	header := map[string]string{"Mcp-Session-Id": cs.ID(), "Mcp-Protocol-Version": cs.InitializeResult().ProtocolVersion}
	maps.Copy(header, extra)
	resp, b := postRaw(t, url, body, header)
	ct := resp.Header.Get("Content-Type")
	var msgs []map[string]any
	if strings.HasPrefix(ct, "text/event-stream") {
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var m map[string]any
				if err := json.Unmarshal([]byte(data), &m); err != nil {
					t.Fatalf("event %q: %v", data, err)
				}
				msgs = append(msgs, m)
			}
		}
		return ct, msgs
	}
	if resp.StatusCode == http.StatusAccepted {
		return ct, nil
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s %q: %v", resp.Status, b, err)
	}
	return ct, append(msgs, m)
}

// A tools/call the gateway answers itself gets what the go-sdk would
// answer, as a single JSON message rather than an event stream: a result,
// and the error of an unknown tool. (A request with the standard header
// Mcp-Method goes the go-sdk's way, which answers with a stream.)
func TestOwnToolCallAnswersAreTheGoSDKs(t *testing.T) {
	a := newApprovalsGateway(t, time.Minute, 0)
	cs := a.connectHTTP(t, "plain", nil)
	for _, c := range []struct{ name, body string }{
		{"result", `{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":"builtin__list_directory","arguments":{"path":"."}}}`},
		{"unknown tool", `{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":"builtin__nope","arguments":{}}}`},
		{"error result", `{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":"builtin__read_file","arguments":{"path":"missing.txt"}}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			ownType, own := postMCP(t, a.url+"/mcp", cs, strings.Replace(c.body, "ID", `"own-1"`, 1), nil)
			sdkType, sdk := postMCP(t, a.url+"/mcp", cs, strings.Replace(c.body, "ID", `"own-1"`, 1),
				map[string]string{"Mcp-Method": "tools/call"})
			if ownType != "application/json" || !strings.HasPrefix(sdkType, "text/event-stream") {
				t.Fatalf("content types: own %q, go-sdk %q", ownType, sdkType)
			}
			if len(own) != 1 || len(sdk) != 1 {
				t.Fatalf("messages: own %v, go-sdk %v", own, sdk)
			}
			o, _ := json.Marshal(own[0])
			s, _ := json.Marshal(sdk[0])
			// Record ids and timings differ from call to call; the shape and
			// what the client reads must not.
			if c.name != "result" && string(o) != string(s) {
				t.Errorf("own answer\n%s\ngo-sdk's\n%s", o, s)
			}
			if own[0]["id"] != "own-1" || (own[0]["result"] == nil) != (sdk[0]["result"] == nil) {
				t.Errorf("own answer\n%s\ngo-sdk's\n%s", o, s)
			}
		})
	}
}

// The same request id twice at once on a session is refused, as the
// go-sdk refuses it.
func TestOwnToolCallDuplicateID(t *testing.T) {
	a := newApprovalsGateway(t, time.Minute, 0)
	a.attach(t)
	cs := a.connectHTTP(t, "plain", nil)
	body := `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"builtin__write_file","arguments":{"path":"a.txt","content":"x"}}}`
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.url+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", cs.ID())
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	a.waitPending(t, 1) // the first waits for approval
	_, msgs := postMCP(t, a.url+"/mcp", cs, body, nil)
	if len(msgs) != 1 || msgs[0]["error"] == nil {
		t.Fatalf("second request with id 5: %v", msgs)
	}
	cancel()
	a.waitPending(t, 0)
}

// An HTTP client that declared elicitation is asked for approval on the
// stream of its call, and the call runs on its answer.
func TestOwnToolCallAsksOnItsStream(t *testing.T) {
	a := newApprovalsGateway(t, time.Minute, 0)
	var asked int
	cs := a.connectHTTP(t, "asker", &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		asked++
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "once"}}, nil
	}})
	res, err := cs.CallTool(context.Background(), writeParams("a.txt"))
	if err != nil || res.IsError {
		t.Fatalf("%v %v", err, res)
	}
	if asked != 1 || !a.written("a.txt") {
		t.Fatalf("asked %d times; written %v", asked, a.written("a.txt"))
	}
	// A raw client sees the question on the call's own stream, before
	// the answer.
	body := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"builtin__write_file","arguments":{"path":"b.txt","content":"x"}}}`
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.url+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", cs.ID())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("content type %q", resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if err := json.Unmarshal([]byte(data), &m); err != nil || m.Method != "elicitation/create" {
			t.Fatalf("first event %q: %v", data, err)
		}
		// Answer it: the call goes on.
		_, msgs := postMCP(t, a.url+"/mcp", cs, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"action":"accept","content":{"decision":"once"}}}`, nil)
		if msgs != nil {
			t.Fatalf("the answer was answered: %v", msgs)
		}
		break
	}
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			if !strings.Contains(data, `"id":9`) || strings.Contains(data, `"isError":true`) {
				t.Fatalf("answer %s", data)
			}
			break
		}
	}
	if !a.written("b.txt") {
		t.Fatal("the approved call did not run")
	}
}

// post2026Raw posts one 2026-07-28 tools/call of tool name (its _meta,
// its standard headers, and extra) and returns the answer's HTTP status,
// content type
// and its JSON-RPC message (the last of an event stream); client names
// the client (clientInfo).
func post2026Raw(t *testing.T, url, client, name, args string, extra map[string]string) (int, string, map[string]any) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":"m-1","method":"tools/call","params":{"name":"` + name + `","arguments":` + args + `,"_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}},` +
		`"io.modelcontextprotocol/clientInfo":{"name":"` + client + `","version":"1"}}}}`
	header := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": name}
	maps.Copy(header, extra)
	resp, b := postRaw(t, url, body, header)
	ct := resp.Header.Get("Content-Type")
	b = lastMessage(ct, b)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s %q: %v", resp.Status, b, err)
	}
	return resp.StatusCode, ct, m
}

// A 2026-07-28 tools/call the gateway answers itself (modern.go) gets
// what the go-sdk's stateless handler would answer, as a single JSON
// message: a result (complete, naming the server), the error of an
// unknown tool, an error result, and an approval's question
// (input_required). A request with an Mcp-Param-* header goes the
// go-sdk's way, which answers with a stream: the reference.
func TestOwnModernToolCallAnswersAreTheGoSDKs(t *testing.T) {
	a := newApprovalsGateway(t, time.Minute, 0)
	for _, c := range []struct{ name, tool, args string }{
		{"result", "builtin__list_directory", `{"path":"."}`},
		{"unknown tool", "builtin__nope", `{}`},
		{"error result", "builtin__read_file", `{"path":"missing.txt"}`},
		{"approval", "builtin__write_file", `{"path":"a.txt","content":"x"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			ownStatus, ownType, own := post2026Raw(t, a.url+"/mcp", "raw", c.tool, c.args, nil)
			sdkStatus, sdkType, sdk := post2026Raw(t, a.url+"/mcp", "raw", c.tool, c.args, map[string]string{"Mcp-Param-Unbound": "1"})
			if ownStatus != sdkStatus {
				t.Errorf("HTTP status: own %d, go-sdk %d", ownStatus, sdkStatus)
			}
			// (The go-sdk answers a JSON-RPC error as JSON, a result as a
			// stream.)
			if ownType != "application/json" || c.name != "unknown tool" && !strings.HasPrefix(sdkType, "text/event-stream") {
				t.Fatalf("content types: own %q, go-sdk %q", ownType, sdkType)
			}
			o, _ := json.Marshal(own)
			s, _ := json.Marshal(sdk)
			if own["id"] != "m-1" || (own["result"] == nil) != (sdk["result"] == nil) {
				t.Fatalf("own answer\n%s\ngo-sdk's\n%s", o, s)
			}
			res, _ := own["result"].(map[string]any)
			if c.name == "result" {
				// Record ids and timings differ from call to call; the
				// envelope must not.
				meta, _ := res["_meta"].(map[string]any)
				sdkMeta := sdk["result"].(map[string]any)["_meta"].(map[string]any)
				if res["resultType"] != "complete" || meta == nil || !reflectEqual(meta["io.modelcontextprotocol/serverInfo"], sdkMeta["io.modelcontextprotocol/serverInfo"]) {
					t.Errorf("own answer\n%s\ngo-sdk's\n%s", o, s)
				}
				return
			}
			if string(o) != string(s) {
				t.Errorf("own answer\n%s\ngo-sdk's\n%s", o, s)
			}
		})
	}
	if a.written("a.txt") {
		t.Fatal("a call waiting for its approval ran")
	}
}

func reflectEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return a != nil && string(x) == string(y)
}

// On a passthrough route too, a 2026-07-28 tools/call the gateway answers
// itself gets the go-sdk's answer as a single JSON message: a result of
// every kind of content, an unknown tool's error. (A question of the
// server's, which parks the call, is TestPassthroughModernClient's: its
// client answers it, where a question left unanswered here would hold
// the server's handler past the test.)
func TestPassthroughOwnModernCallAnswersAreTheGoSDKs(t *testing.T) {
	up := startUpstream(t)
	pt := servePassthrough(t, mcpsource.Config{Name: "up", Transport: mcpsource.StreamableHTTP, URL: up.url})
	for _, tool := range []string{"parts", "nope"} {
		t.Run(tool, func(t *testing.T) {
			ownStatus, ownType, own := post2026Raw(t, pt.url, "own", tool, `{}`, nil)
			sdkStatus, sdkType, sdk := post2026Raw(t, pt.url, "sdk", tool, `{}`, map[string]string{"Mcp-Param-Unbound": "1"})
			if ownStatus != sdkStatus {
				t.Errorf("HTTP status: own %d, go-sdk %d", ownStatus, sdkStatus)
			}
			if ownType != "application/json" || tool != "nope" && !strings.HasPrefix(sdkType, "text/event-stream") {
				t.Fatalf("content types: own %q, go-sdk %q", ownType, sdkType)
			}
			o, _ := json.Marshal(own)
			s, _ := json.Marshal(sdk)
			if string(o) != string(s) {
				t.Errorf("own answer\n%s\ngo-sdk's\n%s", o, s)
			}
		})
	}
}

// post2026Meta posts one 2026-07-28 request of method whose params are
// its _meta (with the standard headers, and extra) and returns the
// answer's HTTP status, content type and JSON-RPC message.
func post2026Meta(t *testing.T, url, method string, extra map[string]string) (int, string, map[string]any) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":7,"method":"` + method + `","params":{"_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},` +
		`"io.modelcontextprotocol/clientInfo":{"name":"meta","version":"1"}}}}`
	header := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": method}
	maps.Copy(header, extra)
	resp, b := postRaw(t, url, body, header)
	ct := resp.Header.Get("Content-Type")
	var m map[string]any
	if err := json.Unmarshal(lastMessage(ct, b), &m); err != nil {
		t.Fatalf("%s %q: %v", resp.Status, b, err)
	}
	return resp.StatusCode, ct, m
}

// A 2026-07-28 tools/list and server/discover the gateway answers itself
// (modern.go) get what the go-sdk's stateless handler answers, as a
// single JSON message, on /mcp, virtual servers and passthrough routes
// (whose server answers over the client's link), to callers who see
// every tool, some, or none of a route, with tool search off and on (the
// meta-tools listed). A request with an Mcp-Param-* header goes the
// go-sdk's way: the reference.
func TestOwnModernListAndDiscoverAreTheGoSDKs(t *testing.T) {
	for _, search := range []bool{false, true} {
		url := teamGateway(t, gateway.ToolSearch{Enabled: search, Pinned: []string{"up/parts"}})
		for _, route := range []string{"/mcp", "/virtual/all/mcp", "/virtual/devs/mcp", "/servers/up/mcp", "/servers/up2/mcp"} {
			for _, token := range []string{"root-token", "alice-token", "bob-token"} {
				for _, method := range []string{"tools/list", "server/discover"} {
					name := fmt.Sprintf("search=%v%s/%s/%s", search, route, strings.TrimSuffix(token, "-token"), method)
					t.Run(name, func(t *testing.T) {
						auth := map[string]string{"Authorization": "Bearer " + token}
						ownStatus, ownType, own := post2026Meta(t, url+route, method, auth)
						auth["Mcp-Param-Unbound"] = "1"
						sdkStatus, sdkType, sdk := post2026Meta(t, url+route, method, auth)
						if ownStatus != sdkStatus || ownType != "application/json" {
							t.Errorf("own: %d %s; go-sdk: %d %s", ownStatus, ownType, sdkStatus, sdkType)
						}
						o, _ := json.Marshal(own)
						s, _ := json.Marshal(sdk)
						if string(o) != string(s) {
							t.Errorf("own answer\n%s\ngo-sdk's\n%s", o, s)
						}
						if ownStatus == http.StatusOK && own["result"] == nil {
							t.Errorf("no result: %s", o)
						}
					})
				}
			}
		}
	}
}

// A session's tools/list and ping the gateway answers itself (lean.go)
// get what the go-sdk answers, as a single JSON message, on /mcp, virtual
// servers and passthrough routes, to callers who see every tool, some,
// or none of a route, with tool search off and on. A request with the
// standard header Mcp-Method goes the go-sdk's way: the reference.
func TestOwnSessionListAndPingAreTheGoSDKs(t *testing.T) {
	for _, search := range []bool{false, true} {
		url := teamGateway(t, gateway.ToolSearch{Enabled: search, Pinned: []string{"up/parts"}})
		for _, route := range []string{"/mcp", "/virtual/all/mcp", "/virtual/devs/mcp", "/servers/up/mcp", "/servers/up2/mcp"} {
			for _, token := range []string{"root-token", "alice-token", "bob-token"} {
				name := fmt.Sprintf("search=%v%s/%s", search, route, strings.TrimSuffix(token, "-token"))
				t.Run(name, func(t *testing.T) {
					status, _ := asCaller(t, http.MethodPost, url+route, token,
						`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`)
					if status == http.StatusNotFound {
						return // not the caller's route (TestRoutesByGroup)
					}
					cs := connectAs(t, url+route, token, "2025-11-25")
					for _, c := range []struct{ method, body string }{
						{"tools/list", `{"jsonrpc":"2.0","id":"l-1","method":"tools/list"}`},
						{"tools/list", `{"jsonrpc":"2.0","id":"l-2","method":"tools/list","params":{}}`},
						{"tools/list", `{"jsonrpc":"2.0","id":"l-3","method":"tools/list","params":{"_meta":{"k":"v"}}}`},
						{"ping", `{"jsonrpc":"2.0","id":"p-1","method":"ping"}`},
					} {
						auth := map[string]string{"Authorization": "Bearer " + token}
						ownType, own := postMCP(t, url+route, cs, c.body, auth)
						auth["Mcp-Method"] = c.method
						sdkType, sdk := postMCP(t, url+route, cs, c.body, auth)
						if ownType != "application/json" || !strings.HasPrefix(sdkType, "text/event-stream") {
							t.Fatalf("%s: content types: own %q, go-sdk %q", c.body, ownType, sdkType)
						}
						o, _ := json.Marshal(own)
						s, _ := json.Marshal(sdk)
						if len(own) != 1 || own[0]["result"] == nil || string(o) != string(s) {
							t.Errorf("%s: own answer\n%s\ngo-sdk's\n%s", c.body, o, s)
						}
					}
				})
			}
		}
	}
}
