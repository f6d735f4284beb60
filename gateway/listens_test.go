package gateway_test

import (
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

	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/internal/testservers"
)

// listenStream is a subscriptions/listen stream held open by a test.
type listenStream struct {
	resp   *http.Response
	cancel context.CancelFunc
}

// close ends the stream from the client's side, as a client that goes
// away does.
func (s *listenStream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// listenRefusal is a refused listen: the HTTP answer and its JSON-RPC
// error.
type listenRefusal struct {
	want       string // the request's id
	status     int
	retryAfter string
	id         json.RawMessage
	code       int
	message    string
	data       struct {
		Limit string `json:"limit"`
		Max   int    `json:"max"`
	}
}

// listenIDs numbers the listen requests.
var listenIDs atomic.Int64

// listen opens a subscriptions/listen stream on url (testservers.Listen)
// of a 2026-07-28 client named client sending the Authorization header
// auth (none if ""), or, with session set, within that session of an
// older protocol. It returns the open stream, or the refusal.
func listen(t *testing.T, url, client, auth, session string) (*listenStream, *listenRefusal) {
	t.Helper()
	header := map[string]string{}
	if auth != "" {
		header["Authorization"] = auth
	}
	if session != "" {
		header["Mcp-Session-Id"] = session
	}
	id := listenIDs.Add(1) // a session's requests need ids of their own
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	resp, err := testservers.Listen(ctx, url, id, client, header)
	if err != nil {
		cancel()
		t.Fatalf("listen on %s: %v", url, err)
	}
	if resp.StatusCode == http.StatusOK {
		return &listenStream{resp: resp, cancel: cancel}, nil
	}
	defer cancel()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	msg, ok := rpcErrorOf(b)
	if !ok || msg.JSONRPC != "2.0" {
		t.Fatalf("listen on %s: %d, not a JSON-RPC error: %q", url, resp.StatusCode, b)
	}
	ref := &listenRefusal{want: fmt.Sprint(id), status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), id: msg.ID,
		code: msg.Error.Code, message: msg.Error.Message}
	_ = json.Unmarshal(msg.Error.Data, &ref.data)
	return nil, ref
}

// mustListen is listen, which must open.
func mustListen(t *testing.T, url, client, auth string) *listenStream {
	t.Helper()
	s, ref := listen(t, url, client, auth, "")
	if ref != nil {
		t.Fatalf("listen of %s on %s refused: %+v", client, url, ref)
	}
	t.Cleanup(s.close)
	return s
}

// refused checks that a listen was refused at once for the bound of key,
// max, in a JSON-RPC error that names both.
func refused(t *testing.T, s *listenStream, ref *listenRefusal, key string, max int) {
	t.Helper()
	if s != nil {
		s.close()
		t.Fatalf("a listen past %s (%d) was opened", key, max)
	}
	if ref.status != http.StatusServiceUnavailable || ref.retryAfter == "" || string(ref.id) != ref.want || ref.code != gateway.CodeListenLimit ||
		!strings.Contains(ref.message, key) || !strings.Contains(ref.message, fmt.Sprint(max)) || ref.data.Limit != key || ref.data.Max != max {
		t.Fatalf("refusal for %s: %+v", key, ref)
	}
}

// waitOpen waits until the gateway counts n listen streams open.
func waitOpen(t *testing.T, g *gateway.Gateway, n int) {
	t.Helper()
	if !testservers.Eventually(10*time.Second, func() bool { return g.ListenStats().Open == n }) {
		t.Fatalf("%d listen streams open, want %d", g.ListenStats().Open, n)
	}
}

// Listen streams are bounded per client (route, credential, clientInfo)
// and for the gateway, on every route: one more than a bound allows is
// refused at once with a JSON-RPC error naming the key and the limit;
// once streams close, new ones are taken again. A session of an older
// protocol that sends subscriptions/listen is held to the same bounds,
// as its clientInfo, and a batch cannot carry one past them. A go-sdk
// client whose listen is refused still works.
func TestListenBounds(t *testing.T) {
	base, g := serveAllRoutes(t, gateway.Options{Listens: gateway.Listens{Max: 4, MaxPerClient: 2}})
	if st := g.ListenStats(); st.Max != 4 || st.MaxPerClient != 2 || st.Open != 0 {
		t.Fatalf("stats: %+v", st)
	}
	for _, route := range allRoutes {
		t.Run("per client "+route, func(t *testing.T) {
			url := base + route
			a1 := mustListen(t, url, "a", "")
			mustListen(t, url, "a", "")
			s, ref := listen(t, url, "a", "", "")
			refused(t, s, ref, "subscriptions.max_listens_per_client", 2)
			// Another credential, or another clientInfo, is another
			// client.
			mustListen(t, url, "a", "Bearer other")
			mustListen(t, url, "b", "")
			waitOpen(t, g, 4)
			a1.close()
			waitOpen(t, g, 3)
			mustListen(t, url, "a", "")
		})
		waitOpen(t, g, 0)
	}

	// Four clients on three routes fill the gateway: a fifth is refused,
	// then taken once one stream has closed.
	first := mustListen(t, base+"/mcp", "c1", "")
	mustListen(t, base+"/mcp", "c2", "")
	mustListen(t, base+"/virtual/v/mcp", "c3", "")
	mustListen(t, base+"/servers/up/mcp", "c4", "")
	s, ref := listen(t, base+"/servers/up/mcp", "c5", "", "")
	refused(t, s, ref, "subscriptions.max_listens", 4)

	// A go-sdk client connecting now: its listen is refused, the client
	// works.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "sdk", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {}}).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if res, err := cs.ListTools(ctx, nil); err != nil || len(res.Tools) == 0 {
		t.Fatalf("a client whose listen was refused: %v %v", res, err)
	}
	if !testservers.Eventually(10*time.Second, func() bool { return g.ListenStats().Refused == 2 }) {
		t.Errorf("stats: %+v, want 2 refused for the gateway's bound", g.ListenStats())
	}

	first.close()
	waitOpen(t, g, 3)
	mustListen(t, base+"/servers/up/mcp", "c5", "")
	if st := g.ListenStats(); st.Open != 4 || st.RefusedPerClient != 3 {
		t.Errorf("stats: %+v, want 4 open and 3 refused for a client's bound", st)
	}
}

// A session of protocol 2025-11-25 may send subscriptions/listen too
// (the go-sdk serves it): its streams count, by the clientInfo of its
// initialize; a batch holding one is refused.
func TestListenBoundsSession(t *testing.T) {
	base, g := serveAllRoutes(t, gateway.Options{Listens: gateway.Listens{MaxPerClient: 1}})
	url := base + "/mcp"
	resp, _ := postRaw(t, url, initialize, nil)
	sid := resp.Header.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatal("no session")
	}
	s, ref := listen(t, url, "", "", sid)
	if ref != nil {
		t.Fatalf("a session's listen: %+v", ref)
	}
	defer s.close()
	s2, ref := listen(t, url, "", "", sid)
	refused(t, s2, ref, "subscriptions.max_listens_per_client", 1)
	// The session's client is "t" (initialize): a 2026-07-28 client of
	// another name is another client.
	mustListen(t, url, "u", "")
	waitOpen(t, g, 2)

	batch := `[{"jsonrpc":"2.0","id":2,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true}}}]`
	code, body := post(t, base, "", "", batch, map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-03-26"})
	if code != http.StatusBadRequest || !strings.Contains(body, `"code":-32600`) || !strings.Contains(body, "batch") {
		t.Errorf("a batch with a listen: %d %s", code, body)
	}
}
