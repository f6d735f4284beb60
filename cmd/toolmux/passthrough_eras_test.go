package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
)

// passClient is a go-sdk client at protocol version, answering elicitation
// (username/name "alice"), sampling ("Paris") and roots, and counting what
// it was asked and the progress it received.
type passClient struct {
	cs                          *mcp.ClientSession
	elicited, sampled, progress atomic.Int32
}

func dialEra(t *testing.T, url, version string) *passClient {
	t.Helper()
	ec := &passClient{}
	c := mcp.NewClient(&mcp.Implementation{Name: "era-test-" + version, Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			ec.elicited.Add(1)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"username": "alice", "name": "alice"}}, nil
		},
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			ec.sampled.Add(1)
			return &mcp.CreateMessageResult{Role: "assistant", Model: "test", Content: &mcp.TextContent{Text: "Paris"}}, nil
		},
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			ec.progress.Add(1)
		},
	})
	c.AddRoots(&mcp.Root{URI: "file:///work", Name: "work"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connecting at %s to %s: %v", version, url, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	if got := cs.InitializeResult().ProtocolVersion; got != version {
		t.Fatalf("the route speaks %s to a client asking for %s", got, version)
	}
	ec.cs = cs
	return ec
}

func (ec *passClient) call(t *testing.T, name string, args map[string]any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	params := &mcp.CallToolParams{Name: name, Arguments: args}
	params.SetProgressToken("p-" + name)
	res, err := ec.cs.CallTool(ctx, params)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	text := testservers.ResultText(res)
	if res.IsError {
		t.Fatalf("%s: error result: %s", name, text)
	}
	return text
}

// A 2025-11-25 client and a 2026-07-28 client use the passthrough routes of
// one toolmux serve at once, each route in front of the go-sdk's
// conformance server of one era (with sessions: 2025-11-25; stateless:
// 2026-07-28), and every pair works: the server's elicitation and
// sampling reach the client (asked on the client's session, or put to it
// as input_required and answered by its retry), and progress comes back.
func TestPassthroughEras(t *testing.T) {
	t.Parallel()
	old := startConformanceServerMode(t, false)
	modern := startConformanceServerMode(t, true)
	dir := workspace(t, fmt.Sprintf("servers:\n  old:\n    url: %s\n    trust: true\n  new:\n    url: %s\n    trust: true\n", old, modern))
	addr := serveGateway(t, dir)
	route := func(name string) string { return "http://" + addr + "/servers/" + name + "/mcp" }

	// A 2025 client, a 2026 server: the server's input_required questions
	// are asked of the client on its session, and the call made again.
	t.Run("2025 client, 2026 server", func(t *testing.T) {
		t.Parallel()
		ec := dialEra(t, route("new"), "2025-11-25")
		if got := ec.call(t, "test_input_required_result_elicitation", nil); got != "Hello, alice!" {
			t.Errorf("elicitation: %q", got)
		}
		if got := ec.call(t, "test_input_required_result_sampling", nil); got != "Sampling response: Paris" {
			t.Errorf("sampling: %q", got)
		}
		if got := ec.call(t, "test_input_required_result_list_roots", nil); !strings.Contains(got, "file:///work") {
			t.Errorf("roots: %q", got)
		}
		if e, s := ec.elicited.Load(), ec.sampled.Load(); e != 1 || s != 1 {
			t.Errorf("the client was asked %d elicitations and %d samplings, want 1 and 1", e, s)
		}
		ec.call(t, "test_tool_with_progress", nil)
		if !testservers.Eventually(5*time.Second, func() bool { return ec.progress.Load() > 0 }) {
			t.Error("no progress reached the client")
		}
	})

	// A 2026 client, a 2025 server: the server's elicitation/create and
	// sampling/createMessage during the call reach the client as
	// input_required (its go-sdk client answers and retries by itself),
	// while the call waits upstream.
	t.Run("2026 client, 2025 server", func(t *testing.T) {
		t.Parallel()
		ec := dialEra(t, route("old"), "2026-07-28")
		if got := ec.call(t, "test_elicitation", map[string]any{"message": "who?"}); !strings.Contains(got, "action=accept") || !strings.Contains(got, "alice") {
			t.Errorf("elicitation: %q", got)
		}
		if got := ec.call(t, "test_sampling", map[string]any{"prompt": "capital of France?"}); got != "LLM response: Paris" {
			t.Errorf("sampling: %q", got)
		}
		if e, s := ec.elicited.Load(), ec.sampled.Load(); e != 1 || s != 1 {
			t.Errorf("the client was asked %d elicitations and %d samplings, want 1 and 1", e, s)
		}
		ec.call(t, "test_tool_with_progress", nil)
		if !testservers.Eventually(5*time.Second, func() bool { return ec.progress.Load() > 0 }) {
			t.Error("no progress reached the client")
		}
	})

	// Same era: questions and answers cross as they are.
	t.Run("2026 client, 2026 server", func(t *testing.T) {
		t.Parallel()
		ec := dialEra(t, route("new"), "2026-07-28")
		if got := ec.call(t, "test_input_required_result_elicitation", nil); got != "Hello, alice!" {
			t.Errorf("elicitation: %q", got)
		}
		if got := ec.call(t, "test_input_required_result_sampling", nil); got != "Sampling response: Paris" {
			t.Errorf("sampling: %q", got)
		}
	})
	t.Run("2025 client, 2025 server", func(t *testing.T) {
		t.Parallel()
		ec := dialEra(t, route("old"), "2025-11-25")
		if got := ec.call(t, "test_elicitation", map[string]any{"message": "who?"}); !strings.Contains(got, "alice") {
			t.Errorf("elicitation: %q", got)
		}
		if got := ec.call(t, "test_sampling", map[string]any{"prompt": "capital of France?"}); got != "LLM response: Paris" {
			t.Errorf("sampling: %q", got)
		}
	})

	// A requestState the gateway did not issue is refused; one naming a
	// parked call is good for that call only, once.
	t.Run("parked calls", func(t *testing.T) {
		t.Parallel()
		first := postModern(t, route("old"), `{"name":"test_elicitation","arguments":{"message":"who?"}}`)
		state, _ := first["requestState"].(string)
		if first["resultType"] != "input_required" || state == "" {
			t.Fatalf("the call was not parked: %v", first)
		}
		var key string
		for k := range first["inputRequests"].(map[string]any) {
			key = k
		}
		tampered := postModernRaw(t, route("old"), fmt.Sprintf(`{"name":"test_elicitation","arguments":{"message":"who?"},"requestState":%q}`, state[:len(state)-2]+"xx"))
		if !strings.Contains(tampered, "not one the gateway issued") {
			t.Errorf("a tampered requestState: %s", tampered)
		}
		answer := fmt.Sprintf(`{"name":"test_elicitation","arguments":{"message":"who?"},"requestState":%q,"inputResponses":{%q:{"action":"accept","content":{"username":"bob"}}}}`, state, key)
		done := postModern(t, route("old"), answer)
		if done["resultType"] != "complete" || !strings.Contains(fmt.Sprint(done["content"]), "bob") {
			t.Errorf("the retry: %v", done)
		}
		again := postModernRaw(t, route("old"), answer)
		if !strings.Contains(again, "no longer waiting") {
			t.Errorf("a second retry with the same requestState: %s", again)
		}
	})
}

// postModernRaw sends a tools/call of a 2026-07-28 client (elicitation
// declared) as raw HTTP and returns the answer's JSON-RPC message.
func postModernRaw(t *testing.T, url, params string) string {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal([]byte(params), &p); err != nil {
		t.Fatal(err)
	}
	p["_meta"] = map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"elicitation": map[string]any{"form": map[string]any{}}},
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": p})
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", p["name"].(string))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	// An event stream's last data line, or the JSON body.
	out := string(b)
	for _, line := range strings.Split(out, "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(d, `"id":1`) {
			out = d
		}
	}
	return out
}

// postModern is postModernRaw, returning the result.
func postModern(t *testing.T, url, params string) map[string]any {
	t.Helper()
	raw := postModernRaw(t, url, params)
	var msg struct {
		Result map[string]any `json:"result"`
	}
	if err := json.Unmarshal([]byte(raw), &msg); err != nil || msg.Result == nil {
		t.Fatalf("not a result: %s (%v)", raw, err)
	}
	return msg.Result
}
