package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/bound"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

// reissueRig is a gateway in front of the fixture server (its append tool
// is the judge of repeated side effects) on a real HTTP server: its own
// routes, /mcp serving both eras as every client reaches it (a 2026-07-28
// call by the gateway's own path, modern.go; a session's by lean.go).
type reissueRig struct {
	url   string
	dir   string
	g     *Gateway
	calls *countingCaller
	steps *reissueRecorder
}

// newReissueRig serves the gateway's routes, behind auth if given.
func newReissueRig(t *testing.T, o Reissue, auth ...Auth) *reissueRig {
	t.Helper()
	src, err := mcpsource.New(mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio, Command: testservers.Fixture(t)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	rig := &reissueRig{dir: t.TempDir(), calls: &countingCaller{Caller: m}, steps: &reissueRecorder{}}
	rig.g = New(rig.calls, Options{Reissue: o, Sessions: rig.steps})
	var a Auth
	if len(auth) > 0 {
		a = auth[0]
	}
	srv := httptest.NewServer(rig.g.MuxAuth(a, Security{Loopback: true}))
	rig.url = srv.URL
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		rig.g.Close()
		m.Close()
	})
	return rig
}

// countingCaller counts the calls that reach the manager, by tool, and
// keeps their records.
type countingCaller struct {
	Caller
	mu      sync.Mutex
	n       map[string]int
	records []*tool.Record
	// held names a tool whose calls are held before the manager until
	// their context ends, as a wait before the server (the scheduler's
	// admission) holds a call: they end cancelled, never sent.
	held string
}

func (c *countingCaller) Call(ctx context.Context, call tool.Call) *tool.Record {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[call.Tool]++
	held := call.Tool == c.held
	c.mu.Unlock()
	var rec *tool.Record
	if held {
		<-ctx.Done()
		rec = tool.NewRecord(&call, "")
		rec.Error = &tool.Error{Kind: tool.KindCancelled, Server: call.Server, Tool: call.Tool, Message: context.Cause(ctx).Error(), Err: context.Cause(ctx)}
	} else {
		rec = c.Caller.Call(ctx, call)
	}
	c.mu.Lock()
	c.records = append(c.records, rec)
	c.mu.Unlock()
	return rec
}

func (c *countingCaller) count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

func (c *countingCaller) recorded(name string) []*tool.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*tool.Record
	for _, r := range c.records {
		if r.Tool == name {
			out = append(out, r)
		}
	}
	return out
}

// reissueRecorder is a SessionLog and ReissueLog keeping the re-issues
// it is told of.
type reissueRecorder struct {
	mu  sync.Mutex
	got []Reissued
}

func (r *reissueRecorder) SessionStarted(context.Context, Session)           {}
func (r *reissueRecorder) SessionEnded(context.Context, Session, SessionEnd) {}
func (r *reissueRecorder) Reissued(_ context.Context, re Reissued) {
	r.mu.Lock()
	r.got = append(r.got, re)
	r.mu.Unlock()
}

func (r *reissueRecorder) all() []Reissued {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Reissued(nil), r.got...)
}

// client26 is a raw HTTP client of protocol 2026-07-28: no session, the
// version and the client in every request's _meta and headers.
type client26 struct {
	url, name string
}

func (c client26) body(id, tool string, args map[string]any) string {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "method": "tools/call", "params": map[string]any{
		"name": tool, "arguments": args,
		"_meta": map[string]any{
			"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
			"io.modelcontextprotocol/clientCapabilities": map[string]any{},
			"io.modelcontextprotocol/clientInfo":         map[string]any{"name": c.name, "version": "1.0"},
		}}})
	return string(b)
}

func (c client26) request(ctx context.Context, id, tool string, args map[string]any) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader(c.body(id, tool, args)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", tool)
	return req
}

// rpcAnswer reads the JSON-RPC response of an answer (a JSON body or an
// event stream).
func rpcAnswer(t *testing.T, resp *http.Response) map[string]any {
	t.Helper()
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(data), &m); err != nil {
				t.Fatalf("event %q: %v", data, err)
			}
			if _, ok := m["method"]; !ok {
				return m
			}
		}
		t.Fatalf("%s: the stream ended without an answer", resp.Status)
	}
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s %q: %v", resp.Status, b, err)
	}
	return m
}

// resultText is the text of an answer's result, and its isError.
func resultText(t *testing.T, m map[string]any) (string, bool) {
	t.Helper()
	res, ok := m["result"].(map[string]any)
	if !ok {
		t.Fatalf("not a result: %v", m)
	}
	var b strings.Builder
	parts, _ := res["content"].([]any)
	for _, p := range parts {
		if p, ok := p.(map[string]any); ok {
			s, _ := p["text"].(string)
			b.WriteString(s)
		}
	}
	isErr, _ := res["isError"].(bool)
	return b.String(), isErr
}

func errorKind(m map[string]any) string {
	res, _ := m["result"].(map[string]any)
	meta, _ := res["_meta"].(map[string]any)
	k, _ := meta["toolmux/error_kind"].(string)
	return k
}

// do sends req on a connection of its own and returns its answer.
func do(t *testing.T, req *http.Request) map[string]any {
	t.Helper()
	resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("%s: %s", resp.Status, b)
	}
	return rpcAnswer(t, resp)
}

// cut sends req on a connection of its own and closes that connection
// once ready holds, before the answer: the client's stream broke.
func cut(t *testing.T, req *http.Request, cancel context.CancelFunc, ready func() bool) {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := (&http.Client{Transport: tr}).Do(req); err == nil {
			// Headers may come before the answer: the body is cut too.
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	if !testservers.Eventually(20*time.Second, ready) {
		cancel()
		<-done
		t.Fatal("the call never started")
	}
	cancel()
	<-done
}

func lines(t *testing.T, path string) []string {
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

func appendArgs(path, line string, ms int) map[string]any {
	return map[string]any{"path": path, "line": line, "ms": ms}
}

// A 2026-07-28 client whose stream breaks while its non-idempotent call
// runs re-issues the request: the call, kept running, answers the
// re-issue, and its side effect happened once. The task log is told of
// the re-issue, with no second call.
func TestReissueAttachesToTheRunningCall(t *testing.T) {
	rig := newReissueRig(t, Reissue{})
	c := client26{url: rig.url + "/mcp", name: "agent"}
	path := filepath.Join(rig.dir, "out.txt")
	args := appendArgs(path, "first", 1500)

	ctx, cancel := context.WithCancel(context.Background())
	cut(t, c.request(ctx, "7", "fx__append", args), cancel, func() bool { return len(lines(t, path)) > 0 })

	got := do(t, c.request(context.Background(), "7", "fx__append", args))
	text, isErr := resultText(t, got)
	if isErr || text != "appended first" {
		t.Fatalf("the re-issue got %q (isError %v), want the first execution's result", text, isErr)
	}
	if l := lines(t, path); len(l) != 1 {
		t.Fatalf("the file holds %q: the call ran %d times", l, len(l))
	}
	if n := rig.calls.count("append"); n != 1 {
		t.Errorf("%d calls reached the server's tool, want 1", n)
	}
	steps := rig.steps.all()
	if len(steps) != 1 || steps[0].RequestID != "7" || steps[0].Tool != "append" || steps[0].Route != "/mcp" {
		t.Errorf("re-issues told: %+v", steps)
	}
	if s := rig.g.ReissueStats(); s.Answered != 1 || s.NotKept != 0 {
		t.Errorf("stats %+v", s)
	}

	// Made again once that answer went out whole: a new request (a
	// client that restarted numbers its requests from 1 again), which
	// runs.
	rig.waitForgotten(t)
	got = do(t, c.request(context.Background(), "7", "fx__append", args))
	if text, _ := resultText(t, got); text != "appended first" || len(lines(t, path)) != 2 {
		t.Fatalf("the request made again got %q; file %q", text, lines(t, path))
	}
	if steps := rig.steps.all(); len(steps) != 1 {
		t.Errorf("re-issues told: %+v", steps)
	}
}

// A re-issue that comes after the call ended, within the window, gets
// the kept result without running; once that answer went out, the same
// request made again runs. The same, in a row, for a client that
// restarted: each answer delivered, each request runs.
func TestReissueAfterTheCallEnded(t *testing.T) {
	rig := newReissueRig(t, Reissue{})
	c := client26{url: rig.url + "/mcp", name: "agent"}
	path := filepath.Join(rig.dir, "out.txt")
	args := appendArgs(path, "a", 300)
	rig.cutEnded(t, c, "3", args, path)

	got := do(t, c.request(context.Background(), "3", "fx__append", args))
	if text, isErr := resultText(t, got); isErr || text != "appended a" || len(lines(t, path)) != 1 {
		t.Fatalf("the re-issue got %q; file %q", text, lines(t, path))
	}
	if steps := rig.steps.all(); len(steps) != 1 || steps[0].Running || !steps[0].Kept {
		t.Errorf("re-issues told: %+v", steps)
	}
	for range 2 {
		rig.waitForgotten(t)
		do(t, c.request(context.Background(), "3", "fx__append", args))
	}
	if l := lines(t, path); len(l) != 3 {
		t.Fatalf("the file holds %q: a request made again after its answer was delivered must run", l)
	}
}

// cutEnded makes a call of c (id, args) whose stream breaks once it has
// appended to path (args' ms keep it running after that), and waits
// until the window holds it as ended.
func (rig *reissueRig) cutEnded(t *testing.T, c client26, id string, args map[string]any, path string) {
	t.Helper()
	before := len(lines(t, path))
	ctx, cancel := context.WithCancel(context.Background())
	cut(t, c.request(ctx, id, "fx__append", args), cancel, func() bool { return len(lines(t, path)) > before })
	rig.waitEnded(t)
}

// waitForgotten waits until the window holds no execution: the answer
// just read was delivered. The gateway learns that only once it has
// written it, so a client that reads it and at once makes the same
// request again may still find it kept.
func (rig *reissueRig) waitForgotten(t *testing.T) {
	t.Helper()
	w := rig.g.reissue
	if !testservers.Eventually(20*time.Second, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.byKey) == 0
	}) {
		t.Fatal("the delivered answer's execution is still kept")
	}
}

// waitEnded waits until no execution of the window runs.
func (rig *reissueRig) waitEnded(t *testing.T) {
	t.Helper()
	w := rig.g.reissue
	if !testservers.Eventually(20*time.Second, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.byRequest) == 0
	}) {
		t.Fatal("the call never ended")
	}
}

// What is not the same request is not answered from the window: the same
// id with other arguments, the same id from another client, and a
// read-only tool (which simply runs again).
func TestOnlyTheSameRequestIsAnsweredFromTheWindow(t *testing.T) {
	rig := newReissueRig(t, Reissue{})
	c := client26{url: rig.url + "/mcp", name: "agent"}
	path := filepath.Join(rig.dir, "out.txt")

	do(t, c.request(context.Background(), "1", "fx__append", appendArgs(path, "a", 0)))
	got := do(t, c.request(context.Background(), "1", "fx__append", appendArgs(path, "b", 0)))
	if text, _ := resultText(t, got); text != "appended b" {
		t.Fatalf("the same id with other arguments got %q", text)
	}
	other := client26{url: c.url, name: "another-agent"}
	got = do(t, other.request(context.Background(), "1", "fx__append", appendArgs(path, "a", 0)))
	if text, _ := resultText(t, got); text != "appended a" {
		t.Fatalf("another client's request got %q", text)
	}
	if l := lines(t, path); strings.Join(l, " ") != "a b a" {
		t.Fatalf("the file holds %q", l)
	}

	for range 2 {
		got := do(t, c.request(context.Background(), "2", "fx__echo", map[string]any{"message": "hi"}))
		if text, _ := resultText(t, got); text != "Echo: hi" {
			t.Fatalf("echo: %q", text)
		}
	}
	if n := rig.calls.count("echo"); n != 2 {
		t.Errorf("the read-only tool ran %d times, want 2 (it is not kept)", n)
	}
	if s := rig.g.ReissueStats(); s.Answered != 0 {
		t.Errorf("stats %+v", s)
	}
}

// A re-issue after the window runs the call again.
func TestReissueAfterTheWindowRunsAgain(t *testing.T) {
	rig := newReissueRig(t, Reissue{Window: time.Nanosecond})
	c := client26{url: rig.url + "/mcp", name: "agent"}
	path := filepath.Join(rig.dir, "out.txt")
	rig.cutEnded(t, c, "1", appendArgs(path, "a", 300), path)
	do(t, c.request(context.Background(), "1", "fx__append", appendArgs(path, "a", 300)))
	if l := lines(t, path); len(l) != 2 {
		t.Fatalf("the file holds %q, want the call run twice", l)
	}
}

// A call whose client left and never re-issued it is cancelled after the
// grace. It had reached the server, which acted (append wrote its line,
// then was cancelled in its sleep): a late re-issue gets an
// outcome_unknown error, neither a second execution nor a plain
// "cancelled", and the task log's step says why.
func TestCallWithoutReissueEndsAfterTheGrace(t *testing.T) {
	rig := newReissueRig(t, Reissue{Grace: time.Nanosecond})
	c := client26{url: rig.url + "/mcp", name: "agent"}
	path := filepath.Join(rig.dir, "out.txt")
	args := appendArgs(path, "a", 60_000)
	ctx, cancel := context.WithCancel(context.Background())
	cut(t, c.request(ctx, "1", "fx__append", args), cancel, func() bool { return len(lines(t, path)) > 0 })
	var recs []*tool.Record
	if !testservers.Eventually(20*time.Second, func() bool { recs = rig.calls.recorded("append"); return len(recs) == 1 }) {
		t.Fatal("the call was not cancelled")
	}
	if e := recs[0].Error; e == nil || e.Kind != tool.KindCancelled || !strings.Contains(e.Message, "no re-issue") {
		t.Fatalf("the call ended with %+v", recs[0].Error)
	}
	rig.waitEnded(t)
	got := do(t, c.request(context.Background(), "1", "fx__append", args))
	if text, isErr := resultText(t, got); !isErr || errorKind(got) != string(tool.KindOutcomeUnknown) ||
		!strings.Contains(text, "was sent to the server") || !strings.Contains(text, "reissue.grace") {
		t.Fatalf("the late re-issue got %q (kind %q)", text, errorKind(got))
	}
	if l := lines(t, path); len(l) != 1 {
		t.Fatalf("the file holds %q", l)
	}
	if s := rig.g.ReissueStats(); s.Answered != 1 || s.AfterGrace != 1 || s.NotKept != 0 {
		t.Errorf("stats %+v", s)
	}
	if st := rig.steps.all(); len(st) != 1 || !st[0].AfterGrace || st[0].Kept || st[0].Running {
		t.Errorf("the re-issue was noted as %+v", st)
	}
}

// A call the grace cuts short before it reached its server (held before
// the manager, as a wait for admission holds it) did nothing the gateway
// is unsure of: a late re-issue gets its cancellation as it was, not
// outcome_unknown, and the server never saw it.
func TestCallCutBeforeTheServerEndsCancelled(t *testing.T) {
	rig := newReissueRig(t, Reissue{Grace: time.Nanosecond})
	rig.calls.mu.Lock()
	rig.calls.held = "append"
	rig.calls.mu.Unlock()
	c := client26{url: rig.url + "/mcp", name: "agent"}
	path := filepath.Join(rig.dir, "out.txt")
	args := appendArgs(path, "a", 0)
	ctx, cancel := context.WithCancel(context.Background())
	cut(t, c.request(ctx, "1", "fx__append", args), cancel, func() bool { return rig.calls.count("append") == 1 })
	if !testservers.Eventually(20*time.Second, func() bool { return len(rig.calls.recorded("append")) == 1 }) {
		t.Fatal("the call was not cancelled")
	}
	rig.waitEnded(t)
	got := do(t, c.request(context.Background(), "1", "fx__append", args))
	if text, isErr := resultText(t, got); !isErr || errorKind(got) != string(tool.KindCancelled) || !strings.Contains(text, "no re-issue") {
		t.Fatalf("the late re-issue got %q (kind %q)", text, errorKind(got))
	}
	if l := lines(t, path); len(l) != 0 || rig.calls.count("append") != 1 {
		t.Fatalf("the file holds %q, the caller saw %d calls", l, rig.calls.count("append"))
	}
	if s := rig.g.ReissueStats(); s.Answered != 1 || s.AfterGrace != 0 {
		t.Errorf("stats %+v", s)
	}
}

// The bounds: a result larger than max_result_bytes is not kept (the
// re-issue gets an outcome_unknown error, never a second execution); past
// max_entries the oldest ended execution is forgotten.
func TestReissueBounds(t *testing.T) {
	t.Run("result size", func(t *testing.T) {
		rig := newReissueRig(t, Reissue{MaxResultBytes: 5})
		c := client26{url: rig.url + "/mcp", name: "agent"}
		path := filepath.Join(rig.dir, "out.txt")
		rig.cutEnded(t, c, "1", appendArgs(path, "a", 300), path)
		got := do(t, c.request(context.Background(), "1", "fx__append", appendArgs(path, "a", 300)))
		if text, isErr := resultText(t, got); !isErr || errorKind(got) != string(tool.KindOutcomeUnknown) || !strings.Contains(text, "max_result_bytes") {
			t.Fatalf("the re-issue got %q (kind %q)", text, errorKind(got))
		}
		if l := lines(t, path); len(l) != 1 {
			t.Fatalf("the file holds %q", l)
		}
		if s := rig.g.ReissueStats(); s.Answered != 1 || s.NotKept != 1 {
			t.Errorf("stats %+v", s)
		}
	})
	t.Run("entries", func(t *testing.T) {
		rig := newReissueRig(t, Reissue{MaxEntries: 1})
		c := client26{url: rig.url + "/mcp", name: "agent"}
		path := filepath.Join(rig.dir, "out.txt")
		for _, id := range []string{"1", "2"} {
			rig.cutEnded(t, c, id, appendArgs(path, "l"+id, 300), path)
		}
		do(t, c.request(context.Background(), "1", "fx__append", appendArgs(path, "l1", 300)))
		if l := lines(t, path); strings.Join(l, " ") != "l1 l2 l1" {
			t.Fatalf("the file holds %q, want the first call forgotten", l)
		}
	})
}

// A client of a session (2025-11-25) that re-sends a request with the
// same id after its stream broke is answered the same way, from the call
// kept running.
func TestSessionClientResendIsAnsweredFromTheFirstExecution(t *testing.T) {
	rig := newReissueRig(t, Reissue{})
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "old", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: rig.url + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	path := filepath.Join(rig.dir, "out.txt")
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":"r-1","method":"tools/call","params":{"name":"fx__append","arguments":{"path":%q,"line":"x","ms":1500}}}`, path)
	request := func(ctx context.Context) *http.Request {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, rig.url+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", cs.ID())
		req.Header.Set("Mcp-Protocol-Version", cs.InitializeResult().ProtocolVersion)
		return req
	}
	ctx, cancel := context.WithCancel(context.Background())
	cut(t, request(ctx), cancel, func() bool { return len(lines(t, path)) > 0 })
	// The gateway may not have seen the connection end yet: the id is
	// then still in flight, and the client sends again.
	var got map[string]any
	if !testservers.Eventually(20*time.Second, func() bool {
		resp, err := http.DefaultClient.Do(request(context.Background()))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusBadRequest {
			resp.Body.Close()
			return false
		}
		got = rpcAnswer(t, resp)
		return true
	}) {
		t.Fatal("the re-sent request stayed a duplicate in flight")
	}
	if text, isErr := resultText(t, got); isErr || text != "appended x" {
		t.Fatalf("the re-send got %q (isError %v)", text, isErr)
	}
	if l := lines(t, path); len(l) != 1 {
		t.Fatalf("the file holds %q", l)
	}
	if steps := rig.steps.all(); len(steps) != 1 || steps[0].Task != cs.ID() {
		t.Errorf("re-issues told: %+v (session %s)", steps, cs.ID())
	}
}

// A client that cancels its request (notifications/cancelled) cancels
// the call at once: only a request that ended without a word keeps it.
// The go-sdk's client of 2026-07-28 sends its cancellation without
// _meta, and without a session to tell it by.
func TestCancelledRequestIsNotKept(t *testing.T) {
	for _, era := range []string{"2025-11-25", multiRoundTrip} {
		t.Run(era, func(t *testing.T) {
			rig := newReissueRig(t, Reissue{Grace: time.Hour})
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "old", Version: "1"}, nil).Connect(context.Background(),
				&mcp.StreamableClientTransport{Endpoint: rig.url + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: era})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if got := cs.InitializeResult().ProtocolVersion; got != era {
				t.Fatalf("protocol %s", got)
			}
			cancelledCall(t, rig, cs)
		})
	}
}

// cancelledCall makes a long call of cs, cancels it once it has started
// and checks that it ended at once, cancelled.
func cancelledCall(t *testing.T, rig *reissueRig, cs *mcp.ClientSession) {
	t.Helper()
	path := filepath.Join(rig.dir, "out.txt")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__append", Arguments: appendArgs(path, "a", 60_000)})
		done <- err
	}()
	if !testservers.Eventually(20*time.Second, func() bool { return len(lines(t, path)) > 0 }) {
		t.Fatal("the call never started")
	}
	cancel() // the go-sdk client sends notifications/cancelled
	<-done
	var recs []*tool.Record
	if !testservers.Eventually(20*time.Second, func() bool { recs = rig.calls.recorded("append"); return len(recs) == 1 }) {
		t.Fatal("the cancelled call went on (kept for the grace)")
	}
	if e := recs[0].Error; e == nil || e.Kind != tool.KindCancelled {
		t.Fatalf("the call ended with %+v", recs[0].Error)
	}
}

// A session's call kept running for its grace after its stream broke is
// cancelled when the session ends: no re-issue can come without it.
func TestSessionEndEndsTheCallInItsGrace(t *testing.T) {
	rig := newReissueRig(t, Reissue{Grace: time.Hour})
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "old", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: rig.url + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(rig.dir, "out.txt")
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":"g-1","method":"tools/call","params":{"name":"fx__append","arguments":{"path":%q,"line":"x","ms":60000}}}`, path)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, rig.url+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", cs.ID())
	req.Header.Set("Mcp-Protocol-Version", cs.InitializeResult().ProtocolVersion)
	cut(t, req, cancel, func() bool { return len(lines(t, path)) > 0 })
	// In its grace once the gateway saw the request end.
	w := rig.g.reissue
	if !testservers.Eventually(20*time.Second, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		for el := w.order.Front(); el != nil; el = el.Next() {
			if el.Value.(*execution).left {
				return true
			}
		}
		return false
	}) {
		t.Fatal("the call never went into its grace")
	}
	cs.Close() // DELETE: the session ends
	var recs []*tool.Record
	if !testservers.Eventually(20*time.Second, func() bool { recs = rig.calls.recorded("append"); return len(recs) == 1 }) {
		t.Fatal("the call went on after its session ended")
	}
	if e := recs[0].Error; e == nil || e.Kind != tool.KindCancelled || !strings.Contains(e.Message, "session ended") {
		t.Fatalf("the call ended with %+v", recs[0].Error)
	}
}

// Several re-issues of a running call at once each get the result, each
// their own copy: the go-sdk sets a 2026-07-28 answer's resultType and
// _meta on the result it is given (the race detector judges).
func TestConcurrentReissuesShareNoResult(t *testing.T) {
	rig := newReissueRig(t, Reissue{})
	c := client26{url: rig.url + "/mcp", name: "agent"}
	path := filepath.Join(rig.dir, "out.txt")
	args := appendArgs(path, "once", 1000)
	first := make(chan map[string]any, 1)
	go func() { first <- do(t, c.request(context.Background(), "7", "fx__append", args)) }()
	if !testservers.Eventually(20*time.Second, func() bool { return len(lines(t, path)) > 0 }) {
		t.Fatal("the call never started")
	}
	var wg sync.WaitGroup
	answers := make(chan map[string]any, 8)
	for range 8 {
		wg.Go(func() { answers <- do(t, c.request(context.Background(), "7", "fx__append", args)) })
	}
	wg.Wait()
	close(answers)
	answers2 := append([]map[string]any{<-first}, func() (a []map[string]any) {
		for m := range answers {
			a = append(a, m)
		}
		return a
	}()...)
	for _, m := range answers2 {
		if text, isErr := resultText(t, m); isErr || text != "appended once" {
			t.Errorf("an answer: %q (isError %v)", text, isErr)
		}
	}
	if l := lines(t, path); len(l) != 1 {
		t.Fatalf("the file holds %q", l)
	}
}

// resultSize counts a result's text and data, and what its structured
// content and _meta hold (bound.Size); past the bound it stops early.
func TestResultSize(t *testing.T) {
	structured := map[string]any{"a": 1.0, "list": []any{"xyz", true, nil}}
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello"}, &mcp.ImageContent{Data: []byte("png"), MIMEType: "image/png"}},
		StructuredContent: structured, Meta: mcp.Meta{"k": struct{ V int }{7}}}
	if n := resultSize(res, 1<<20); n != len("hello")+len("png")+bound.Size(structured, 1<<20)+bound.Size(map[string]any{"k": struct{ V int }{7}}, 1<<20) {
		t.Errorf("size %d", n)
	}
	big := &mcp.CallToolResult{StructuredContent: map[string]any{"rows": []any{strings.Repeat("x", 3000), strings.Repeat("y", 3000)}}}
	if n := resultSize(big, 1000); n <= 1000 {
		t.Errorf("size %d of a result holding 6 KB, within a bound of 1000", n)
	}
	if n := resultSize(res, 4); n <= 4 {
		t.Errorf("size %d within a bound of 4", n)
	}
	if n := resultSize(&mcp.CallToolResult{}, 4); n != 0 {
		t.Errorf("an empty result: %d", n)
	}
}

// With the window off, a call ends with its request and a re-issue runs
// again, as before it existed.
func TestReissueDisabled(t *testing.T) {
	rig := newReissueRig(t, Reissue{Disabled: true})
	c := client26{url: rig.url + "/mcp", name: "agent"}
	path := filepath.Join(rig.dir, "out.txt")
	args := appendArgs(path, "a", 60_000)
	ctx, cancel := context.WithCancel(context.Background())
	cut(t, c.request(ctx, "1", "fx__append", args), cancel, func() bool { return len(lines(t, path)) > 0 })
	var recs []*tool.Record
	if !testservers.Eventually(20*time.Second, func() bool { recs = rig.calls.recorded("append"); return len(recs) == 1 }) {
		t.Fatal("the call went on after its request ended")
	}
	if e := recs[0].Error; e == nil || e.Kind != tool.KindCancelled {
		t.Fatalf("the call ended with %+v", recs[0].Error)
	}
	args["ms"] = 0
	do(t, c.request(context.Background(), "1", "fx__append", args))
	do(t, c.request(context.Background(), "1", "fx__append", args))
	if l := lines(t, path); len(l) != 3 {
		t.Fatalf("the file holds %q, want every request run", l)
	}
	if rig.g.reissue != nil || rig.g.ReissueStats() != (ReissueStats{}) {
		t.Error("the window exists")
	}
}

// While every entry of the window holds a running call, a new call goes
// without the window: it runs, bound to its request.
func TestFullWindowRunsCallsWithoutIt(t *testing.T) {
	rig := newReissueRig(t, Reissue{MaxEntries: 1})
	c := client26{url: rig.url + "/mcp", name: "agent"}
	path := filepath.Join(rig.dir, "out.txt")
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan struct{})
	go func() {
		defer close(first)
		req := c.request(ctx, "1", "fx__append", appendArgs(path, "a", 60_000))
		if resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	defer func() {
		cancel()
		<-first
	}()
	if !testservers.Eventually(20*time.Second, func() bool { return len(lines(t, path)) > 0 }) {
		t.Fatal("the first call never started")
	}
	got := do(t, c.request(context.Background(), "2", "fx__append", appendArgs(path, "b", 0)))
	if text, _ := resultText(t, got); text != "appended b" {
		t.Fatalf("the second call got %q", text)
	}
	select {
	case <-first:
		t.Fatal("the second call was answered only after the first ended")
	default:
	}
}

// A call whose client left before it reached its approval is withdrawn
// when it does, without asking anyone, and forgotten: a re-issue would be
// asked again.
func TestCallReachingApprovalAfterItsClientLeftIsWithdrawn(t *testing.T) {
	w := newReissue(Reissue{Grace: time.Hour}, nil)
	defer w.close()
	engine, err := policy.New(policy.ModeDefault, nil)
	if err != nil {
		t.Fatal(err)
	}
	asked := make(chan struct{}, 1)
	gate := policy.NewGate(engine, policy.WithApprover(policy.ApproverFunc(func(context.Context, policy.Request) (policy.Answer, error) {
		asked <- struct{}{}
		return policy.ProceedOnce, nil
	})))
	shell := tool.Tool{Server: "builtin", Name: "shell"}
	admit := make(chan struct{})
	gateErr := make(chan error, 1)
	run := func(ctx context.Context) (*mcp.CallToolResult, error) {
		<-admit // still validating when the client leaves
		err := gate.Check(ctx, shell, tool.Call{Server: "builtin", Tool: "shell", Arguments: map[string]any{"command": "ls"}})
		gateErr <- err
		return &mcp.CallToolResult{IsError: err != nil}, nil
	}
	var key reissueKey
	ctx, cancel := context.WithCancelCause(context.Background())
	answered := make(chan *mcp.CallToolResult, 1)
	go func() { res, _ := w.call(ctx, key, key, nil, Reissued{}, run); answered <- res }()
	cancel(errClientGone)
	<-answered
	close(admit)
	if err := <-gateErr; tool.KindOf(err) != tool.KindCancelled {
		t.Fatalf("the gate answered %v", err)
	}
	select {
	case <-asked:
		t.Fatal("the approver was asked for a client that had left")
	default:
	}
	w.wg.Wait() // the execution has ended
	w.mu.Lock()
	n := len(w.byKey)
	w.mu.Unlock()
	if n != 0 {
		t.Errorf("the withdrawn call is still in the window (%d entries)", n)
	}
}
