package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/internal/taskclient"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

// authMarker is in the URL where the credential is given: a single-use
// state meant for one user, which no record or event may hold.
const authMarker = "state-7f3c-MARKER"

const authURL = "http://127.0.0.1:1/#secrets?" + authMarker

// credSource is a server that takes its caller's own credential: its
// call fails auth_required, with the URL where to give it, until the
// credential is given.
type credSource struct {
	given atomic.Bool
	calls atomic.Int32 // calls that reached the server
}

func (s *credSource) Name() string { return "acct" }
func (s *credSource) Tools(context.Context) ([]tool.Tool, error) {
	return []tool.Tool{{Name: "profile", InputSchema: map[string]any{"type": "object"}}}, nil
}
func (s *credSource) Close() error { return nil }
func (s *credSource) Call(context.Context, string, map[string]any) (*tool.Result, error) {
	if !s.given.Load() {
		return nil, &tool.Error{Kind: tool.KindAuthRequired, Server: "acct", URL: authURL, Err: tool.ErrNotSent,
			Message: "server acct needs your secret token, which you have not set"}
	}
	s.calls.Add(1)
	return &tool.Result{Content: []tool.Content{{Type: tool.ContentText, Text: "profile of you"}}}, nil
}

// kept is everything toolmux would keep of the calls: their records and
// the scheduler's events, as JSON.
type kept struct {
	mu  sync.Mutex
	all []string
}

func (k *kept) add(v any) {
	b, _ := json.Marshal(v)
	k.mu.Lock()
	k.all = append(k.all, string(b))
	k.mu.Unlock()
}

func (k *kept) Event(e schedule.Event) { k.add(e) }

func (k *kept) check(t *testing.T) {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.all) == 0 {
		t.Fatal("nothing was kept")
	}
	for _, s := range k.all {
		if strings.Contains(s, authMarker) {
			t.Fatalf("the credential's URL was kept: %s", s)
		}
	}
}

// keptCaller keeps the record of every call.
type keptCaller struct {
	governed
	k *kept
}

func (c keptCaller) Call(ctx context.Context, call tool.Call) *tool.Record {
	rec := c.governed.Call(ctx, call)
	c.k.add(rec)
	return rec
}

type credGateway struct {
	url  string
	src  *credSource
	g    *gateway.Gateway
	kept *kept
}

// newCredGateway serves acct, in default approval mode (its tool is asked
// about), over HTTP.
func newCredGateway(t *testing.T, await bool) *credGateway {
	t.Helper()
	return credGatewayWith(t, policy.ModeDefault, gateway.Options{AuthTimeout: 20 * time.Second, AwaitCredentials: await,
		Virtual: []gateway.Virtual{{Name: "v", Tools: []string{"acct/*"}}}})
}

// credGatewayWith serves acct in mode, with the gateway's options o.
func credGatewayWith(t *testing.T, mode policy.Mode, o gateway.Options) *credGateway {
	t.Helper()
	src := &credSource{}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	engine, err := policy.New(mode, nil)
	if err != nil {
		t.Fatal(err)
	}
	k := &kept{}
	s := schedule.New(m, schedule.WithGate(policy.NewGate(engine, policy.WithApprover(gateway.ElicitApprover{}))), schedule.WithSink(k))
	g := gateway.New(keptCaller{governed{m, s}, k}, o)
	srv := httptest.NewServer(g.Mux("", gateway.Security{Loopback: true}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		g.Close()
		m.Close()
	})
	return &credGateway{url: srv.URL, src: src, g: g, kept: k}
}

// asker is a client's user: it approves calls once, and answers a URL
// elicitation with what give does.
type asker struct {
	mu        sync.Mutex
	approvals int
	urls      []string
	completed []string
	give      func() string // the action, after doing what the user does at the URL
}

func (a *asker) options(url bool) *mcp.ClientOptions {
	caps := &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}}
	if url {
		caps.URL = &mcp.URLElicitationCapabilities{}
	}
	return &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: caps},
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			a.mu.Lock()
			defer a.mu.Unlock()
			if r.Params.Mode == "url" {
				a.urls = append(a.urls, r.Params.URL)
				if r.Params.ElicitationID == "" || !strings.Contains(r.Params.Message, "acct") {
					a.urls = append(a.urls, "malformed: "+r.Params.Message)
					return &mcp.ElicitResult{Action: "cancel"}, nil
				}
				return &mcp.ElicitResult{Action: a.give()}, nil
			}
			a.approvals++
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "once"}}, nil
		},
		ElicitationCompleteHandler: func(_ context.Context, r *mcp.ElicitationCompleteNotificationRequest) {
			a.mu.Lock()
			a.completed = append(a.completed, r.Params.ElicitationID)
			a.mu.Unlock()
		},
	}
}

func (a *asker) counts() (approvals int, urls []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.approvals, append([]string(nil), a.urls...)
}

// connect connects a client of protocol to route: an HTTP route, or
// "stdio", the gateway's MCP server over a stdin and stdout of its own,
// as serve --stdio serves it.
func (c *credGateway) connect(t *testing.T, route, protocol string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	var transport mcp.Transport = &mcp.StreamableClientTransport{Endpoint: c.url + route}
	if route == "stdio" {
		in, out := serveStdio(t, c.g, 0)
		transport = &mcp.IOTransport{Reader: out, Writer: in}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "creds", Version: "1"}, opts).Connect(context.Background(),
		transport, &mcp.ClientSessionOptions{ProtocolVersion: protocol})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	if v := cs.InitializeResult().ProtocolVersion; v != protocol {
		t.Fatalf("the client speaks %s, want %s", v, protocol)
	}
	return cs
}

func profile(t *testing.T, cs *mcp.ClientSession) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "acct__profile", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// credRoutes are the routes the channel is tested on (the virtual server
// keeps the tool's exposed name).
var credRoutes = []string{"/mcp", "/virtual/v/mcp", "stdio"}

// A client of either era that declared URL-mode elicitation is sent to
// the URL (2025-11-25: elicitation/create on the call's stream;
// 2026-07-28: input_required), on every route; once its user gave the
// credential the call is made, approved once only; the URL is in no
// record or event.
func TestCredentialAskedByURLElicitation(t *testing.T) {
	for _, r := range credRoutes {
		for _, tc := range []struct {
			protocol string
			await    bool
		}{{legacyProtocol, false}, {legacyProtocol, true}, {"2026-07-28", false}} {
			t.Run(fmt.Sprintf("%s/%s/await=%v", r, tc.protocol, tc.await), func(t *testing.T) {
				c := newCredGateway(t, tc.await)
				a := &asker{give: func() string {
					// The user sets the credential at the URL (the
					// secrets API tells the gateway, as serve wires it).
					c.src.given.Store(true)
					c.g.CredentialGiven("", "acct")
					return "accept"
				}}
				cs := c.connect(t, r, tc.protocol, a.options(true))
				res := profile(t, cs)
				if res.IsError || testservers.ResultText(res) != "profile of you" || c.src.calls.Load() != 1 {
					t.Fatalf("after the credential was given: %s %+v", testservers.ResultText(res), res)
				}
				approvals, urls := a.counts()
				if approvals != 1 || len(urls) != 1 || urls[0] != authURL {
					t.Fatalf("approvals %d (want 1), URLs %q", approvals, urls)
				}
				if tc.await && !testservers.Eventually(10*time.Second, func() bool {
					a.mu.Lock()
					defer a.mu.Unlock()
					return len(a.completed) == 1
				}) {
					t.Fatal("no notifications/elicitation/complete")
				}
				c.kept.check(t)
			})
		}
	}
}

// A session's call whose user accepted waits for the credential given
// after the answer, and is made with it.
func TestCredentialGivenAfterTheAnswer(t *testing.T) {
	c := newCredGateway(t, true)
	a := &asker{give: func() string {
		go func() {
			c.src.given.Store(true)
			c.g.CredentialGiven("", "acct")
		}()
		return "accept"
	}}
	res := profile(t, c.connect(t, "/mcp", legacyProtocol, a.options(true)))
	if res.IsError || testservers.ResultText(res) != "profile of you" {
		t.Fatalf("%s", testservers.ResultText(res))
	}
}

// A user who accepts without giving the credential, or declines, gets
// the error with the URL in its text, asked once: the call is not made.
func TestCredentialNotGiven(t *testing.T) {
	for _, protocol := range []string{legacyProtocol, "2026-07-28"} {
		for _, action := range []string{"accept", "decline"} {
			t.Run(protocol+"/"+action, func(t *testing.T) {
				c := newCredGateway(t, false)
				a := &asker{give: func() string { return action }}
				cs := c.connect(t, "/mcp", protocol, a.options(true))
				res := profile(t, cs)
				if !res.IsError || res.Meta["toolmux/error_kind"] != "auth_required" || !strings.Contains(testservers.ResultText(res), authURL) {
					t.Fatalf("%s: %+v %s", action, res, testservers.ResultText(res))
				}
				if _, urls := a.counts(); len(urls) != 1 || c.src.calls.Load() != 0 {
					t.Fatalf("asked %d times, %d calls made", len(urls), c.src.calls.Load())
				}
				c.kept.check(t)
			})
		}
	}
}

// A client without URL-mode elicitation (form only, or none) gets the
// error as a tool result whose text names the URL; nothing keeps it.
func TestCredentialURLInTheErrorText(t *testing.T) {
	for _, protocol := range []string{legacyProtocol, "2026-07-28"} {
		t.Run(protocol, func(t *testing.T) {
			c := newCredGateway(t, false)
			a := &asker{give: func() string { t.Error("asked for a URL"); return "accept" }}
			cs := c.connect(t, "/mcp", protocol, a.options(false))
			res := profile(t, cs)
			text := testservers.ResultText(res)
			if !res.IsError || res.Meta["toolmux/error_kind"] != "auth_required" || !strings.Contains(text, "open "+authURL) ||
				!strings.Contains(text, "needs your secret token") {
				t.Fatalf("%+v %s", res, text)
			}
			if approvals, _ := a.counts(); approvals != 1 {
				t.Fatalf("approvals %d", approvals)
			}
			c.kept.check(t)
		})
	}
}

// A call run as an MCP task that lacks its credential completes with
// the error, whose text says what to do; the task log, which keeps the
// result, does not hold the URL.
func TestCredentialInATask(t *testing.T) {
	dir := t.TempDir()
	log, err := tasklog.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	c := credGatewayWith(t, policy.ModeYolo, gateway.Options{Tasks: gateway.Tasks{Store: log, Long: []string{"acct/*"}}})
	tc := &taskclient.Client{URL: c.url + "/mcp", Elicitation: true}
	ctx := pollCtx(t)
	task, err := tc.CallTool(ctx, "acct__profile", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	if task.ResultType != "task" {
		t.Fatalf("not a task: %s", task.Raw)
	}
	task, err = tc.Poll(ctx, task.TaskID, (*taskclient.Task).Final)
	if err != nil {
		t.Fatal(err)
	}
	res, err := task.ToolResult()
	if err != nil || task.Status != "completed" || !res.IsError || !strings.Contains(res.Text(), "needs your secret token") ||
		strings.Contains(string(task.Raw), authMarker) {
		t.Fatalf("%v %s", err, task.Raw)
	}
	c.g.Close()
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	c.kept.check(t)
	noMarker(t, dir)
}

// noMarker fails when a file under dir holds authMarker.
func noMarker(t *testing.T, dir string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		if strings.Contains(string(b), authMarker) {
			t.Errorf("%s holds the credential's URL", path)
		}
		return nil
	})
	if err != nil || n == 0 {
		t.Fatalf("%d files: %v", n, err)
	}
}
