package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/api"
	"github.com/toolmux/toolmux/builtin"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tool"
)

// approvalsGateway is what serve runs, on a real HTTP server: the
// built-in tools of a workspace in default mode, approvals asked by
// elicitation or on the page (the API's queue), sessions recorded.
type approvalsGateway struct {
	url, dir string
	queue    *api.Approvals
	g        *gateway.Gateway
	sessions *sessionRecorder
	calls    *callTasks
}

// builtinGoverned is the runtime of serve over the built-in tools of
// dir, in default mode: the manager, and the scheduler whose gate asks
// elicit, else queue, with the calls' events on hub. They are closed when
// the test ends, after whatever serves them (cleaned up later).
func builtinGoverned(t *testing.T, dir string, elicit gateway.ElicitApprover, queue *api.Approvals) (*manager.Manager, *schedule.Scheduler, *stream.Hub) {
	t.Helper()
	src, err := builtin.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	engine, err := policy.New(policy.ModeDefault, nil)
	if err != nil {
		t.Fatal(err)
	}
	hub, err := stream.NewHub(context.Background(), stream.WithHeartbeat(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hub.Close(ctx)
		m.Close()
	})
	s := schedule.New(m, schedule.WithGate(policy.NewGate(engine, policy.WithApprover(policy.FirstOf(elicit, queue)), policy.WithConcurrentApprovals(true))),
		schedule.WithSink(stream.SchedulerSink(hub)))
	return m, s, hub
}

func newApprovalsGateway(t *testing.T, elicitTimeout, sessionTimeout time.Duration) *approvalsGateway {
	t.Helper()
	dir := t.TempDir()
	queue := api.NewApprovals(&api.ApprovalOptions{Timeout: time.Minute, ProgressInterval: 50 * time.Millisecond})
	m, s, hub := builtinGoverned(t, dir, gateway.ElicitApprover{Timeout: elicitTimeout}, queue)
	calls := &callTasks{}
	caller := governed{m, s}
	a := &approvalsGateway{dir: dir, queue: queue, sessions: &sessionRecorder{}, calls: calls}
	a.g = gateway.New(recordingCaller{caller, calls}, gateway.Options{Sessions: a.sessions, SessionTimeout: sessionTimeout,
		API: api.New(api.Options{Catalog: m, Caller: s, Approvals: queue, Events: hub})})
	srv := httptest.NewServer(a.g.Mux("", gateway.Security{Loopback: true}))
	a.url = srv.URL
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		a.g.Close()
	})
	return a
}

// recordingCaller notes the task of every call.
type recordingCaller struct {
	governed
	tasks *callTasks
}

func (r recordingCaller) Call(ctx context.Context, call tool.Call) *tool.Record {
	r.tasks.add(call.Task)
	return r.governed.Call(ctx, call)
}

type callTasks struct {
	mu    sync.Mutex
	tasks []string
}

func (c *callTasks) add(task string) {
	c.mu.Lock()
	c.tasks = append(c.tasks, task)
	c.mu.Unlock()
}

func (c *callTasks) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.tasks...)
}

// sessionRecorder is a SessionLog keeping what it is told.
type sessionRecorder struct {
	mu      sync.Mutex
	started []gateway.Session
	ended   map[string]gateway.SessionEnd
}

func (r *sessionRecorder) SessionStarted(_ context.Context, s gateway.Session) {
	r.mu.Lock()
	r.started = append(r.started, s)
	r.mu.Unlock()
}

func (r *sessionRecorder) SessionEnded(_ context.Context, s gateway.Session, end gateway.SessionEnd) {
	r.mu.Lock()
	if r.ended == nil {
		r.ended = map[string]gateway.SessionEnd{}
	}
	r.ended[s.Task] = end
	r.mu.Unlock()
}

func (r *sessionRecorder) session(client string) (gateway.Session, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.started {
		if s.ClientName == client {
			return s, true
		}
	}
	return gateway.Session{}, false
}

func (r *sessionRecorder) end(task string) (gateway.SessionEnd, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.ended[task]
	return e, ok
}

// connectHTTP connects an MCP client named name over streamable HTTP, in
// a session of protocol 2025-11-25 (connect2026 has the sessionless
// protocol's); opts may declare elicitation.
func (a *approvalsGateway) connectHTTP(t *testing.T, name string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	return a.connectIn(t, legacyProtocol, name, opts)
}

// connectIn connects an MCP client named name to /mcp in protocol era.
func (a *approvalsGateway) connectIn(t *testing.T, era, name string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	return dialEra(t, a.url+"/mcp", era, &mcp.Implementation{Name: name, Version: "1.2"}, opts)
}

// attach opens the page's event stream, as an approver.
func (a *approvalsGateway) attach(t *testing.T) {
	t.Helper()
	testservers.AttachApprover(t, a.url)
	if !testservers.Eventually(10*time.Second, func() bool { return a.queue.Approvers() == 1 }) {
		t.Fatal("the approver never attached")
	}
}

func (a *approvalsGateway) waitPending(t *testing.T, n int) []api.Pending {
	t.Helper()
	var p []api.Pending
	if !testservers.Eventually(20*time.Second, func() bool { p = a.queue.Pending(); return len(p) == n }) {
		t.Fatalf("%d calls wait, want %d: %+v", len(p), n, p)
	}
	return p
}

// postThenLeave posts body, a call that waits for approval, in session
// cs (with header pairs added), closes the connection once the call
// waits, and checks that the call was withdrawn: gone from the queue,
// and an answer afterwards is refused.
func (a *approvalsGateway) postThenLeave(t *testing.T, cs *mcp.ClientSession, body string, header ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.url+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", cs.ID())
	req.Header.Set("Mcp-Protocol-Version", cs.InitializeResult().ProtocolVersion)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	p := a.waitPending(t, 1)[0]
	cancel()
	<-done
	a.waitPending(t, 0)
	if err := a.queue.Decide(p.ID, policy.ProceedOnce); err == nil {
		t.Fatal("a withdrawn call took an answer")
	}
}

func (a *approvalsGateway) written(name string) bool {
	_, err := os.Stat(filepath.Join(a.dir, name))
	return err == nil
}

func writeParams(name string) *mcp.CallToolParams {
	return &mcp.CallToolParams{Name: "builtin__write_file", Arguments: map[string]any{"path": name, "content": "x"}}
}

// A client that cannot show a question (it declared no elicitation),
// with no page open, is refused at once with how to allow the call, and
// nothing runs, in both eras.
func TestHTTPClientWithoutElicitationIsRefusedAtOnce(t *testing.T) {
	inEachEra(t, func(t *testing.T, era string) {
		a := newApprovalsGateway(t, time.Minute, 0)
		cs := a.connectIn(t, era, "plain", nil)
		res, err := cs.CallTool(context.Background(), writeParams("a.txt"))
		if err != nil {
			t.Fatal(err)
		}
		msg := testservers.ResultText(res)
		if !res.IsError || res.Meta["toolmux/error_kind"] != "approval_unavailable" || !strings.Contains(msg, "--yes") ||
			!strings.Contains(msg, "the web page") {
			t.Fatalf("got %v %v %s", res.IsError, res.Meta, msg)
		}
		if len(a.queue.Pending()) != 0 || a.written("a.txt") {
			t.Fatal("the refused call waited or ran")
		}
	})
}

// With a page open, the call waits; its client hears, by progress, where
// to answer; when the client gives up (cancels), the question is
// withdrawn from the page and an answer given afterwards runs nothing.
func TestWaitingCallIsWithdrawnWhenTheClientCancels(t *testing.T) {
	a := newApprovalsGateway(t, time.Minute, 0)
	a.attach(t)
	var (
		mu       sync.Mutex
		progress []string
	)
	cs := a.connectHTTP(t, "plain", &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		progress = append(progress, r.Params.Message)
		mu.Unlock()
	}})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		p := writeParams("a.txt")
		p.SetProgressToken("tok")
		_, err := cs.CallTool(ctx, p)
		errc <- err
	}()
	p := a.waitPending(t, 1)[0]
	if !testservers.Eventually(10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(progress) >= 2
	}) {
		t.Fatal("the waiting client heard no progress")
	}
	mu.Lock()
	if !strings.Contains(progress[0], "waiting for approval of builtin/write_file") || !strings.Contains(progress[0], "refused in") {
		t.Errorf("progress: %q", progress[0])
	}
	mu.Unlock()
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the cancelled call returned no error")
	}
	a.waitPending(t, 0)
	if err := a.queue.Decide(p.ID, policy.ProceedOnce); err == nil {
		t.Fatal("a withdrawn call took an answer")
	}
	if a.written("a.txt") {
		t.Fatal("a withdrawn call ran")
	}
}

// A client that goes away without a word (its connection closes) has
// its waiting call withdrawn just the same.
func TestWaitingCallIsWithdrawnWhenTheConnectionEnds(t *testing.T) {
	a := newApprovalsGateway(t, time.Minute, 0)
	a.attach(t)
	cs := a.connectHTTP(t, "plain", nil)
	// A header of the gateway's own, sent by the client, is not believed.
	a.postThenLeave(t, cs, `{"jsonrpc":"2.0","id":77,"method":"tools/call","params":{"name":"builtin__write_file","arguments":{"path":"a.txt","content":"x"}}}`,
		"Toolmux-Request", "forged")
	if a.written("a.txt") {
		t.Fatal("a withdrawn call ran")
	}
	// The session itself lives on.
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "builtin__list_directory", Arguments: map[string]any{"path": "."}}); err != nil {
		t.Fatal(err)
	}
}

// A client that declared elicitation but whose user does not answer: the
// call is refused at the timeout. (The question's withdrawal is sent to
// the client as a cancellation, which the go-sdk's HTTP transport does not
// always deliver: not checked here.)
func TestElicitationIsBounded(t *testing.T) {
	a := newApprovalsGateway(t, 300*time.Millisecond, 0)
	testDone := make(chan struct{})
	cs := a.connectHTTP(t, "asker", &mcp.ClientOptions{ElicitationHandler: func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		select { // the user never answers
		case <-ctx.Done():
		case <-testDone:
		}
		return nil, errors.New("no answer")
	}})
	defer close(testDone)
	res, err := cs.CallTool(context.Background(), writeParams("a.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || res.Meta["toolmux/error_kind"] != "approval_denied" || !strings.Contains(testservers.ResultText(res), "did not answer within 300ms") {
		t.Fatalf("got %v %s", res.IsError, testservers.ResultText(res))
	}
	if a.written("a.txt") {
		t.Fatal("an unanswered call ran")
	}
}

// Every session is a task named after its client; its calls carry the
// task; it ends as closed (the client's DELETE), idle (timed out) or
// shutdown (the gateway closed).
func TestSessionsAreTasks(t *testing.T) {
	a := newApprovalsGateway(t, time.Minute, 400*time.Millisecond)
	closer := a.connectHTTP(t, "closer", nil)
	if _, err := closer.CallTool(context.Background(), &mcp.CallToolParams{Name: "builtin__list_directory", Arguments: map[string]any{"path": "."}}); err != nil {
		t.Fatal(err)
	}
	s, ok := a.sessions.session("closer")
	if !ok || s.Task != closer.ID() || s.Route != "/mcp" || s.ClientVersion != "1.2" || s.Protocol == "" {
		t.Fatalf("session: %+v %v", s, ok)
	}
	if got := a.calls.all(); len(got) != 1 || got[0] != s.Task {
		t.Fatalf("the call's task: %v, want %s", got, s.Task)
	}
	closer.Close()
	waitEnd(t, a.sessions, s.Task, gateway.EndClosed)

	idler := a.connectHTTP(t, "idler", nil)
	s, _ = a.sessions.session("idler")
	if s.Task != idler.ID() {
		t.Fatalf("session %+v", s)
	}
	waitEnd(t, a.sessions, s.Task, gateway.EndIdle)

	b := newApprovalsGateway(t, time.Minute, 0)
	b.connectHTTP(t, "stayer", nil)
	s, _ = b.sessions.session("stayer")
	b.g.Close()
	waitEnd(t, b.sessions, s.Task, gateway.EndShutdown)
}

func waitEnd(t *testing.T, r *sessionRecorder, task, how string) {
	t.Helper()
	var e gateway.SessionEnd
	if !testservers.Eventually(20*time.Second, func() bool {
		var ok bool
		e, ok = r.end(task)
		return ok
	}) {
		t.Fatalf("session %s never ended", task)
	}
	if e.How != how || e.Message == "" {
		b, _ := json.Marshal(e)
		t.Fatalf("session %s ended %s, want %s", task, b, how)
	}
}
