package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
)

// callerTokens verifies fixed tokens, each the caller it stands for.
type callerTokens map[string]*identity.Caller

func (ts callerTokens) Verify(_ context.Context, token string) (*identity.Caller, error) {
	if c, ok := ts[token]; ok {
		return c, nil
	}
	return nil, identity.ErrNotMine
}

// A re-issued request is answered from the execution of the same
// caller's request only: another caller sending the same request (the
// same client, id, tool and arguments) does not attach to it, its call
// runs; the same caller re-issuing with a refreshed token (another
// credential) attaches.
func TestReissueOfCallers(t *testing.T) {
	src, err := mcpsource.New(mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio, Command: testservers.Fixture(t)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	calls := &countingCaller{Caller: m}
	g := New(calls, Options{Reissue: Reissue{}})
	ann := func() *identity.Caller {
		return &identity.Caller{Subject: "u-ann", Name: "ann", Issuer: "https://idp.example", Method: identity.MethodJWT, Audience: []string{"gw"}}
	}
	auth := Auth{Audiences: []string{"gw"}, Verifier: callerTokens{"ann-1": ann(), "ann-2": ann(),
		"bob": {Subject: "u-bob", Name: "bob", Issuer: "https://idp.example", Method: identity.MethodJWT, Audience: []string{"gw"}}}}
	srv := httptest.NewServer(g.MuxAuth(auth, Security{Loopback: true}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		g.Close()
		m.Close()
	})
	c := client26{url: srv.URL + "/mcp", name: "agent"}
	as := func(req *http.Request, token string) *http.Request {
		req.Header.Set("Authorization", "Bearer "+token)
		return req
	}
	path := filepath.Join(t.TempDir(), "out.txt")
	args := appendArgs(path, "first", 1500)

	ctx, cancel := context.WithCancel(context.Background())
	cut(t, as(c.request(ctx, "7", "fx__append", args), "ann-1"), cancel, func() bool { return len(lines(t, path)) > 0 })

	// Bob's request, the same but for its caller: a call of his own.
	got := do(t, as(c.request(context.Background(), "7", "fx__append", args), "bob"))
	if text, isErr := resultText(t, got); isErr || text != "appended first" {
		t.Fatalf("bob's request got %q (isError %v)", text, isErr)
	}
	if l := lines(t, path); len(l) != 2 {
		t.Fatalf("the file holds %q: bob's request must run, not attach to ann's", l)
	}
	if s := g.ReissueStats(); s.Answered != 0 {
		t.Fatalf("bob's request was answered from ann's execution: %+v", s)
	}
	// Ann's re-issue with her refreshed token: her execution answers it.
	got = do(t, as(c.request(context.Background(), "7", "fx__append", args), "ann-2"))
	if text, isErr := resultText(t, got); isErr || text != "appended first" {
		t.Fatalf("ann's re-issue got %q (isError %v)", text, isErr)
	}
	if l := lines(t, path); len(l) != 2 {
		t.Fatalf("the file holds %q: ann's re-issue ran again", l)
	}
	if s := g.ReissueStats(); s.Answered != 1 {
		t.Errorf("stats %+v: ann's re-issue was not answered from her execution", s)
	}
	if n := calls.count("append"); n != 2 {
		t.Errorf("%d calls reached the tool, want 2 (ann's, bob's)", n)
	}
}
