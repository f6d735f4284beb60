package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
)

// A raw MCP client over HTTP whose connection can be cut mid-call: the
// client of these tests of re-issued requests (docs/gateway.md,
// "Re-issued requests"). header holds what each request carries
// (the session, or the 2026-07-28 headers).
type rawClient struct {
	url    string
	header map[string]string
	meta   map[string]any // params._meta of each call (2026-07-28)
}

func (c rawClient) request(ctx context.Context, id, tool string, args map[string]any) *http.Request {
	params := map[string]any{"name": tool, "arguments": args}
	if c.meta != nil {
		params["_meta"] = c.meta
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "method": "tools/call", "params": params})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	if c.meta != nil {
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", tool)
	}
	return req
}

// send sends a request on a connection of its own; until the gateway has
// seen the connection of an earlier request with the same id end, a
// session's id is still in flight (400): it is sent again.
func (c rawClient) send(t *testing.T, id, tool string, args map[string]any) (text string, isError bool, kind string) {
	t.Helper()
	var resp *http.Response
	if !testservers.Eventually(30*time.Second, func() bool {
		var err error
		resp, err = (&http.Client{Transport: &http.Transport{}}).Do(c.request(context.Background(), id, tool, args))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusBadRequest {
			resp.Body.Close()
			return false
		}
		return true
	}) {
		t.Fatalf("request %s stayed a duplicate in flight", id)
	}
	defer resp.Body.Close()
	var msg struct {
		Result struct {
			Content []struct{ Text string }
			IsError bool
			Meta    map[string]any `json:"_meta"`
		}
		Error *struct{ Message string }
	}
	var raw []byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && !strings.Contains(data, `"method"`) {
				raw = []byte(data)
			}
		}
	} else {
		raw, _ = io.ReadAll(resp.Body)
	}
	if err := json.Unmarshal(raw, &msg); err != nil || msg.Error != nil {
		t.Fatalf("%s: %q %v", resp.Status, raw, err)
	}
	for _, c := range msg.Result.Content {
		text += c.Text
	}
	kind, _ = msg.Result.Meta["toolmux/error_kind"].(string)
	return text, msg.Result.IsError, kind
}

// cut sends a request and closes its connection once started holds,
// before the answer: the client's stream broke.
func (c rawClient) cut(t *testing.T, id, tool string, args map[string]any, started func() bool) {
	t.Helper()
	c.drop(t, id, tool, args, started, false)
}

// drop sends a request on a connection of its own and closes that
// connection once started holds, before the answer: with a FIN, or with
// reset a RST (SO_LINGER 0), as a client killed or cut off by the network
// leaves.
func (c rawClient) drop(t *testing.T, id, tool string, args map[string]any, started func() bool, reset bool) {
	t.Helper()
	conns := make(chan net.Conn, 1)
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			conns <- conn
		}
		return conn, err
	}}
	defer tr.CloseIdleConnections()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := (&http.Client{Transport: tr}).Do(c.request(context.Background(), id, tool, args)); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	var conn net.Conn
	select {
	case conn = <-conns:
	case <-done:
		t.Fatal("the request never connected")
	}
	ok := testservers.Eventually(30*time.Second, started)
	if reset {
		if err := conn.(*net.TCPConn).SetLinger(0); err != nil {
			t.Error(err)
		}
	}
	conn.Close()
	<-done
	if !ok {
		t.Fatal("the call never started")
	}
}

func fileLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// taskSteps returns the steps of a task, through the API.
func (p *serveProc) taskSteps(t *testing.T, task string) []struct {
	Name, Message string
	Metadata      map[string]any
} {
	t.Helper()
	var d struct {
		Steps []struct {
			Name, Message string
			Metadata      map[string]any
		}
	}
	p.getJSON(t, "/api/tasks/"+task, &d)
	return d.Steps
}

// A client of a session on /mcp whose stream breaks while a
// non-idempotent call runs sends the request again, same id: the call,
// kept running by serve, answers it, and the append happened once. The
// task log holds one call and a step saying the re-issue was answered
// from it; the metric counts it. A different call reusing the id runs; a
// read-only tool re-issued simply runs again.
func TestServeReissuedRequestRunsOnce(t *testing.T) {
	t.Parallel()
	p := startServeProc(t, workspace(t, fixtureConfig(t)), t.TempDir(), "--metrics")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := p.connect(t, ctx)
	defer cs.Close()
	c := rawClient{url: p.url("/mcp"), header: map[string]string{"Mcp-Session-Id": cs.ID(), "Mcp-Protocol-Version": cs.InitializeResult().ProtocolVersion}}
	path := filepath.Join(t.TempDir(), "out.txt")
	args := map[string]any{"path": path, "line": "once", "ms": 1500}

	c.cut(t, `"r-1"`, "fx__append", args, func() bool { return len(fileLines(t, path)) > 0 })
	text, isErr, _ := c.send(t, `"r-1"`, "fx__append", args)
	if isErr || text != "appended once" {
		t.Fatalf("the re-sent request got %q (isError %v), want the first execution's result", text, isErr)
	}
	if l := fileLines(t, path); len(l) != 1 {
		t.Fatalf("the file holds %q: the call ran %d times", l, len(l))
	}

	// The same id with other arguments is another call.
	if text, _, _ := c.send(t, `"r-1"`, "fx__append", map[string]any{"path": path, "line": "other"}); text != "appended other" {
		t.Fatalf("another call with the same id got %q", text)
	}
	// A read-only tool re-issued runs again.
	for range 2 {
		if text, _, _ := c.send(t, `"r-2"`, "fx__echo", map[string]any{"message": "hi"}); text != "Echo: hi" {
			t.Fatalf("echo: %q", text)
		}
	}

	var appends, echoes int
	if !testservers.Eventually(30*time.Second, func() bool {
		appends, echoes = 0, 0
		for _, r := range p.recordedCalls(t) {
			switch r.Tool {
			case "append":
				appends++
			case "echo":
				echoes++
			}
		}
		return appends == 2 && echoes == 2
	}) {
		t.Fatalf("the task log holds %d append and %d echo calls, want 2 and 2", appends, echoes)
	}
	var found bool
	if !testservers.Eventually(30*time.Second, func() bool {
		for _, s := range p.taskSteps(t, cs.ID()) {
			if s.Name == "re-issued request" && s.Metadata["tool"] == "append" && s.Metadata["request_id"] == `"r-1"` &&
				strings.Contains(s.Message, "answered from the first execution") {
				found = true
			}
		}
		return found
	}) {
		t.Fatalf("no step of the re-issue in the session's task: %+v", p.taskSteps(t, cs.ID()))
	}
	wantSample(t, scrape(t, p, ""), "toolmux_reissued_requests_total", nil, 1)
}

// With the window shorter than the time between the two requests, the
// re-issue runs again; with a result larger than max_result_bytes, it
// gets outcome_unknown and the call does not run again.
func TestServeReissueBounds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, config string
		want         int // lines after the re-issue
	}{
		{"window", "reissue: {window: 1ns}\n", 2},
		{"result size", "reissue: {max_result_bytes: 8}\n", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := startServeProc(t, workspace(t, fixtureConfig(t)+c.config), t.TempDir())
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cs := p.connect(t, ctx)
			defer cs.Close()
			rc := rawClient{url: p.url("/mcp"), header: map[string]string{"Mcp-Session-Id": cs.ID(), "Mcp-Protocol-Version": cs.InitializeResult().ProtocolVersion}}
			path := filepath.Join(t.TempDir(), "out.txt")
			args := map[string]any{"path": path, "line": "a"}
			rc.send(t, "1", "fx__append", args)
			text, isErr, kind := rc.send(t, "1", "fx__append", args)
			if l := fileLines(t, path); len(l) != c.want {
				t.Fatalf("the file holds %q, want %d lines", l, c.want)
			}
			if c.want == 1 && (!isErr || kind != "outcome_unknown") {
				t.Fatalf("the re-issue got %q (kind %q), want outcome_unknown", text, kind)
			}
		})
	}
}

// The same as TestServeReissuedRequestRunsOnce for a client of protocol
// 2026-07-28, which has no session: skipped while /mcp refuses such
// requests (until the era dispatch is merged).
func TestServeReissued2026Request(t *testing.T) {
	t.Parallel()
	p := startServeProc(t, workspace(t, fixtureConfig(t)), t.TempDir())
	c := rawClient{url: p.url("/mcp"), header: map[string]string{"Mcp-Protocol-Version": "2026-07-28"},
		meta: map[string]any{
			"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
			"io.modelcontextprotocol/clientCapabilities": map[string]any{},
			"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "agent", "version": "1.0"},
		}}
	probe, err := http.DefaultClient.Do(c.request(context.Background(), "0", "fx__echo", map[string]any{"message": "probe"}))
	if err != nil {
		t.Fatal(err)
	}
	probe.Body.Close()
	if probe.StatusCode != http.StatusOK {
		t.Fatalf("/mcp refused a 2026-07-28 request: %s", probe.Status)
	}
	path := filepath.Join(t.TempDir(), "out.txt")
	args := map[string]any{"path": path, "line": "once", "ms": 1500}
	c.cut(t, "7", "fx__append", args, func() bool { return len(fileLines(t, path)) > 0 })
	text, isErr, _ := c.send(t, "7", "fx__append", args)
	if isErr || text != "appended once" {
		t.Fatalf("the re-issue got %q (isError %v), want the first execution's result", text, isErr)
	}
	if l := fileLines(t, path); len(l) != 1 {
		t.Fatalf("the file holds %q: the call ran %d times", l, len(l))
	}
	other := c
	other.meta = map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{},
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "another", "version": "1.0"}}
	if text, _, _ := other.send(t, "7", "fx__append", args); text != "appended once" || len(fileLines(t, path)) != 2 {
		t.Fatalf("another client's call with the same id: %q, file %q", text, fileLines(t, path))
	}
}

// The passthrough route /servers/fx/mcp keeps the same window, for a
// 2026-07-28 client (no session): its stream breaks while the fixture's
// non-idempotent append runs upstream, it re-issues the request, and the
// re-issue gets the first execution's result; the file holds one line.
// A non-idempotent call made again after its answer was delivered runs
// again (span_write, whose answer is the time it ran: a client that
// restarted numbers its requests from 1 again), as does a read-only one
// (span).
func TestServeReissuedPassthrough2026(t *testing.T) {
	t.Parallel()
	p := startServeProc(t, workspace(t, fixtureConfig(t)), t.TempDir(), "--metrics")
	c := rawClient{url: p.url("/servers/fx/mcp"), header: map[string]string{"Mcp-Protocol-Version": "2026-07-28"},
		meta: map[string]any{
			"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
			"io.modelcontextprotocol/clientCapabilities": map[string]any{},
			"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "agent", "version": "1.0"},
		}}
	if text, isErr, _ := c.send(t, "1", "echo", map[string]any{"message": "probe"}); isErr || text != "Echo: probe" {
		t.Fatalf("the route answered the probe with %q (isError %v)", text, isErr)
	}
	path := filepath.Join(t.TempDir(), "out.txt")
	args := map[string]any{"path": path, "line": "once", "ms": 1500}
	c.cut(t, "7", "append", args, func() bool { return len(fileLines(t, path)) > 0 })
	text, isErr, _ := c.send(t, "7", "append", args)
	if isErr || text != "appended once" {
		t.Fatalf("the re-issue got %q (isError %v), want the first execution's result", text, isErr)
	}
	if l := fileLines(t, path); len(l) != 1 {
		t.Fatalf("the file holds %q: the call ran %d times", l, len(l))
	}
	// The same id with other arguments is another call, which runs.
	if text, _, _ := c.send(t, "7", "append", map[string]any{"path": path, "line": "other"}); text != "appended other" || len(fileLines(t, path)) != 2 {
		t.Fatalf("another call with the same id: %q, file %q", text, fileLines(t, path))
	}

	first, _, _ := c.send(t, "8", "span_write", map[string]any{"ms": 1})
	if again, _, _ := c.send(t, "8", "span_write", map[string]any{"ms": 1}); again == first || again == "" {
		t.Fatalf("span_write made again after its answer was delivered answered %q twice: want it run again", first)
	}
	first, _, _ = c.send(t, "9", "span", map[string]any{"ms": 1})
	if again, _, _ := c.send(t, "9", "span", map[string]any{"ms": 1}); again == first || again == "" {
		t.Fatalf("span (read-only) re-issued answered %q twice: want it run again", first)
	}
	wantSample(t, scrape(t, p, ""), "toolmux_reissued_requests_total", nil, 1)
}

// A client of a session on the passthrough route whose stream breaks
// while append runs sends the request again in its session, same id: it
// gets the first execution's result, and the append happened once.
func TestServeReissuedPassthroughSession(t *testing.T) {
	t.Parallel()
	p := startServeProc(t, workspace(t, fixtureConfig(t)), t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: p.url("/servers/fx/mcp")}, &mcp.ClientSessionOptions{ProtocolVersion: legacyProtocol})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	c := rawClient{url: p.url("/servers/fx/mcp"), header: map[string]string{"Mcp-Session-Id": cs.ID(), "Mcp-Protocol-Version": cs.InitializeResult().ProtocolVersion}}
	path := filepath.Join(t.TempDir(), "out.txt")
	args := map[string]any{"path": path, "line": "once", "ms": 1500}
	c.cut(t, `"r-1"`, "append", args, func() bool { return len(fileLines(t, path)) > 0 })
	text, isErr, _ := c.send(t, `"r-1"`, "append", args)
	if isErr || text != "appended once" {
		t.Fatalf("the re-sent request got %q (isError %v), want the first execution's result", text, isErr)
	}
	if l := fileLines(t, path); len(l) != 1 {
		t.Fatalf("the file holds %q: the call ran %d times", l, len(l))
	}
	first, _, _ := c.send(t, `"r-2"`, "span", map[string]any{"ms": 1})
	if again, _, _ := c.send(t, `"r-2"`, "span", map[string]any{"ms": 1}); again == first || again == "" {
		t.Fatalf("span (read-only) re-sent answered %q twice: want it run again", first)
	}
}

// callsEnded returns how many calls of the fixture's tool have ended, of
// any outcome, by the metrics (toolmux_calls_total, counted when the
// scheduler ends a call).
func callsEnded(t *testing.T, p *serveProc, tool string) float64 {
	t.Helper()
	var n float64
	if f := scrape(t, p, "")["toolmux_calls_total"]; f != nil {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["server"] == "fx" && labels["tool"] == tool {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// A client whose connection broke (closed with a FIN, or reset) re-issues
// its request once the first execution has ended, on every HTTP route and
// in both eras: it gets the first execution's result, and the append
// happened once. A result handed to a request whose client had left is
// not a result delivered. With a short grace, the call is cancelled when
// it ends, after append wrote its line (the server acted): the re-issue
// gets outcome_unknown, never a second execution nor a plain
// "cancelled".
func TestServeReissueAfterTheFirstEnded(t *testing.T) {
	t.Parallel()
	const virtual = "virtual_servers:\n  - name: vx\n    tools: [\"fx/append\"]\n"
	for _, g := range []struct {
		name, config string
		ms           int    // how long append runs on after writing its line
		kind         string // the re-issue's error kind; "" for the first execution's result
	}{
		{"ended", "", 1000, ""},
		{"after the grace", "reissue: {grace: 100ms}\n", 5000, "outcome_unknown"},
	} {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			p := startServeProc(t, workspace(t, fixtureConfig(t)+virtual+g.config), t.TempDir(), "--metrics")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			onMCP := p.connect(t, ctx)
			defer onMCP.Close()
			onRoute, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx,
				&mcp.StreamableClientTransport{Endpoint: p.url("/servers/fx/mcp")}, &mcp.ClientSessionOptions{ProtocolVersion: legacyProtocol})
			if err != nil {
				t.Fatal(err)
			}
			defer onRoute.Close()
			modern := func(path string) rawClient {
				return rawClient{url: p.url(path), header: map[string]string{"Mcp-Protocol-Version": "2026-07-28"},
					meta: map[string]any{
						"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
						"io.modelcontextprotocol/clientCapabilities": map[string]any{},
						"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "agent", "version": "1.0"},
					}}
			}
			session := func(path string, cs *mcp.ClientSession) rawClient {
				return rawClient{url: p.url(path), header: map[string]string{"Mcp-Session-Id": cs.ID(),
					"Mcp-Protocol-Version": cs.InitializeResult().ProtocolVersion}}
			}
			for i, c := range []struct {
				name string
				c    rawClient
				tool string
			}{
				{"mcp 2026", modern("/mcp"), "fx__append"},
				{"virtual 2026", modern("/virtual/vx/mcp"), "fx__append"},
				{"passthrough 2026", modern("/servers/fx/mcp"), "append"},
				{"mcp session", session("/mcp", onMCP), "fx__append"},
				{"passthrough session", session("/servers/fx/mcp", onRoute), "append"},
			} {
				for j, closing := range []string{"FIN", "RST"} {
					t.Run(c.name+" "+closing, func(t *testing.T) {
						path := filepath.Join(t.TempDir(), "out.txt")
						args := map[string]any{"path": path, "line": "once", "ms": g.ms}
						id := fmt.Sprint(100 + 2*i + j)
						before := callsEnded(t, p, "append")
						c.c.drop(t, id, c.tool, args, func() bool { return len(fileLines(t, path)) > 0 }, closing == "RST")
						if !testservers.Eventually(30*time.Second, func() bool { return callsEnded(t, p, "append") > before }) {
							t.Fatal("the first execution never ended")
						}
						text, isErr, kind := c.c.send(t, id, c.tool, args)
						if l := fileLines(t, path); len(l) != 1 {
							t.Fatalf("the file holds %q: the call ran %d times (the re-issue got %q)", l, len(l), text)
						}
						switch {
						case g.kind == "" && (isErr || text != "appended once"):
							t.Fatalf("the re-issue got %q (isError %v), want the first execution's result", text, isErr)
						case g.kind != "" && (!isErr || kind != g.kind):
							t.Fatalf("the re-issue got %q (kind %q), want %s", text, kind, g.kind)
						}
					})
				}
			}
			fams := scrape(t, p, "")
			wantSample(t, fams, "toolmux_reissued_requests_total", nil, 10)
			// A re-issue that came as the grace ended waited for the call
			// (counted as answered, not after the grace): at least one came
			// after.
			if n, _ := sample(fams, "toolmux_reissued_requests_after_grace_total", nil); (g.kind == "") != (n == 0) {
				t.Errorf("toolmux_reissued_requests_after_grace_total = %v", n)
			}
		})
	}
}
