package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/funcsource"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/manager"
)

// boundsGateway is a gateway whose bound on arguments is limit, over one
// tool, fx__sink, which counts its calls.
func boundsGateway(t *testing.T, limit int64) (*gateway.Gateway, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	sink := funcsource.Func("sink", "Takes data.", func(_ context.Context, in struct {
		Data string `json:"data"`
	}) (string, error) {
		calls.Add(1)
		return fmt.Sprintf("%d bytes", len(in.Data)), nil
	})
	m, err := manager.New(manager.WithSource(funcsource.New("fx", sink), manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(m, gateway.Options{MaxArgumentBytes: limit, Virtual: []gateway.Virtual{{Name: "v", Tools: []string{"fx/sink"}}}})
	t.Cleanup(func() {
		g.Close()
		m.Close()
	})
	return g, &calls
}

var modernMeta = map[string]any{
	"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
	"io.modelcontextprotocol/clientCapabilities": map[string]any{},
	"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "bounds", "version": "1"},
}

// A call's arguments of the bound's size are made; one byte more is
// refused before they are decoded, with the invalid_tool_params result
// the validator would answer, and the tool does not run; the rest of a
// message over the bound is refused with a JSON-RPC error, a request's
// with its id, a response's without. On /mcp and a virtual server, in
// both eras.
func TestBoundsOfWhatIsDecoded(t *testing.T) {
	const limit = 1000
	g, calls := boundsGateway(t, limit)
	srv := httptest.NewServer(g.Mux("", gateway.Security{Loopback: true}))
	defer srv.Close()
	for _, route := range []string{"/mcp", "/virtual/v/mcp"} {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "t"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: srv.URL + route}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		for _, modern := range []bool{false, true} {
			name := route + " 2025-11-25"
			header := map[string]string{"Mcp-Session-Id": cs.ID(), "Mcp-Protocol-Version": "2025-11-25"}
			var meta map[string]any
			if modern {
				name = route + " 2026-07-28"
				header = map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "fx__sink"}
				meta = modernMeta
			}
			call := func(data string, meta map[string]any) (int, string) {
				b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "tools/call",
					"params": map[string]any{"name": "fx__sink", "arguments": map[string]any{"data": data}, "_meta": meta}})
				return postBody(t, srv.URL+route, string(b), header)
			}
			before := calls.Load()
			// {"data":"…"} is 11 bytes and the data.
			if code, body := call(strings.Repeat("a", limit-11), meta); code != 200 || !strings.Contains(body, fmt.Sprintf(`"%d bytes"`, limit-11)) {
				t.Errorf("%s: arguments of the bound's size: %d %.300s", name, code, body)
			}
			if code, body := call(strings.Repeat("a", limit-10), meta); code != 200 || !strings.Contains(body, `"isError":true`) ||
				!strings.Contains(body, "invalid_tool_params") || !strings.Contains(body, fmt.Sprintf("the arguments are %d bytes of JSON, over the limit of %d bytes", limit+1, limit)) ||
				!strings.Contains(body, `"id":7`) || modern != strings.Contains(body, `"resultType":"complete"`) {
				t.Errorf("%s: arguments one byte over the bound: %d %.400s", name, code, body)
			}
			// An escape weighs what it is written as once decoded: "<" as
			// \u003c (six bytes), "\u0041" as A (one).
			if code, body := call(strings.Repeat("<", (limit-11)/6+1), meta); !strings.Contains(body, "over the limit") {
				t.Errorf("%s: arguments over the bound once escaped: %d %.300s", name, code, body)
			}
			if got := calls.Load() - before; got != 1 {
				t.Errorf("%s: the tool ran %d times, want once (the call within the bound)", name, got)
			}
			big := map[string]any{"pad": strings.Repeat("m", limit)}
			for k, v := range meta {
				big[k] = v
			}
			if code, body := call("a", big); code != http.StatusRequestEntityTooLarge || !strings.Contains(body, `"code":-32602`) ||
				!strings.Contains(body, `"id":7`) || !strings.Contains(body, "validate.max_argument_bytes") {
				t.Errorf("%s: a _meta over the bound: %d %.300s", name, code, body)
			}
		}
		response := fmt.Sprintf(`{"jsonrpc":"2.0","id":"toolmux-1","result":{"pad":%q}}`, strings.Repeat("r", limit))
		if code, body := postBody(t, srv.URL+route, response, map[string]string{"Mcp-Session-Id": cs.ID(), "Mcp-Protocol-Version": "2025-11-25"}); code != http.StatusRequestEntityTooLarge ||
			!strings.Contains(body, `"id":null`) || !strings.Contains(body, `"code":-32602`) {
			t.Errorf("%s: a response over the bound: %d %.300s", route, code, body)
		}
		// The session goes on.
		if res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "fx__sink", Arguments: map[string]any{"data": "after"}}); err != nil || res.IsError {
			t.Errorf("%s: after the refusals: %v %+v", route, err, res)
		}
	}
}

// postBody POSTs body to url with the headers of an MCP client and h, and
// returns the status and the answer.
func postBody(t *testing.T, url, body string, h map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Over stdio the same bounds hold, and a line longer than the transport's
// bound is refused and skipped: the session goes on.
func TestStdioBounds(t *testing.T) {
	const limit = 1000
	g, calls := boundsGateway(t, limit)
	send := stdioClient(t, g, 4000)
	call := func(id int, data string) string {
		return send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"fx__sink","arguments":{"data":%q}}}`, id, data))
	}
	if a := call(2, strings.Repeat("a", limit-11)); !strings.Contains(a, fmt.Sprintf(`"%d bytes"`, limit-11)) {
		t.Errorf("arguments of the bound's size: %s", a)
	}
	if a := call(3, strings.Repeat("a", limit-10)); !strings.Contains(a, `"id":3`) || !strings.Contains(a, "invalid_tool_params") || !strings.Contains(a, "over the limit of 1000 bytes") {
		t.Errorf("arguments one byte over: %s", a)
	}
	if a := call(4, strings.Repeat("a", 5000)); !strings.Contains(a, `"id":null`) || !strings.Contains(a, "longer than 4000 bytes") {
		t.Errorf("a line over the transport's bound: %s", a)
	}
	if a := call(5, "after"); !strings.Contains(a, `"id":5`) || !strings.Contains(a, `"5 bytes"`) {
		t.Errorf("after the refusals: %s", a)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the tool ran %d times, want 2", n)
	}
}

// stdioClient serves g over stdio (lines of at most maxLine bytes) until
// the end of the test, initializes a session, and returns how to send a
// request and read its answer (the notifications before it skipped).
func stdioClient(t *testing.T, g *gateway.Gateway, maxLine int64) func(line string) string {
	t.Helper()
	send, write := stdioRaw(t, g, maxLine)
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	write(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return send
}

// serveStdio serves g over stdio (lines of at most maxLine bytes), as
// serve --stdio does, until the end of the test: what is written to in is
// the client's stdin, what is read from out its stdout.
func serveStdio(t *testing.T, g *gateway.Gateway, maxLine int64) (in *io.PipeWriter, out *io.PipeReader) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Server().Run(ctx, g.Stdio(inR, outW, maxLine)) }()
	t.Cleanup(func() {
		cancel()
		inW.Close()
		outR.Close()
		<-done
	})
	return inW, outR
}

// stdioRaw serves g over stdio as stdioClient does, without a session,
// and returns how to send a request and read its answer, and how to
// write a line alone.
func stdioRaw(t *testing.T, g *gateway.Gateway, maxLine int64) (send func(line string) string, write func(line string)) {
	t.Helper()
	inW, outR := serveStdio(t, g, maxLine)
	out := bufio.NewReader(outR)
	write = func(line string) {
		t.Helper()
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	send = func(line string) string {
		t.Helper()
		write(line)
		for {
			answer, err := out.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(answer, `"method"`) { // not a notification
				return answer
			}
		}
	}
	return send, write
}
