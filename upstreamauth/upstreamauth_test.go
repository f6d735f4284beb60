package upstreamauth_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/upstreamauth"
	"github.com/toolmux/toolmux/vault"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rig is a real ORY Hydra, a real MCP server requiring its tokens, a
// vault in a directory, and the gateway's callback route on a socket.
type rig struct {
	h      *testservers.HydraServer
	fx     *testservers.OAuthMCP
	vault  *vault.Vault
	logs   *testservers.SyncBuffer
	counts *counter
	// callback is the redirect URL; the handler behind it is set by client.
	callback string
	mu       sync.Mutex
	handler  http.Handler
}

func newRig(t *testing.T) *rig {
	t.Helper()
	h := testservers.StartHydra(t)
	r := &rig{h: h, fx: testservers.StartOAuthMCP(t, h), logs: &testservers.SyncBuffer{}, counts: &counter{}}
	r.vault = newVault(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		hd := r.handler
		r.mu.Unlock()
		hd.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.callback = srv.URL + "/oauth/callback"
	return r
}

// newVault returns a vault in a new directory, with a new key.
func newVault(t *testing.T) *vault.Vault {
	t.Helper()
	k, err := vault.ParseKey(vault.GenerateKey())
	if err != nil {
		t.Fatal(err)
	}
	ring, err := vault.NewKeyring(k)
	if err != nil {
		t.Fatal(err)
	}
	return vault.New(vault.NewFileStore(t.TempDir()), ring, vault.Options{})
}

// client returns a Client of the rig's vault with o (its redirect URL,
// HTTP client and logger filled in), knowing ups, serving the callback
// route (session: who the callback's request comes from).
func (r *rig) client(t *testing.T, o upstreamauth.Options, session func(*http.Request) string, ups ...upstreamauth.Upstream) *upstreamauth.Client {
	t.Helper()
	o.RedirectURL = r.callback
	o.HTTPClient = &http.Client{Transport: r.counts, Timeout: 30 * time.Second}
	o.Logger = slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := upstreamauth.New(r.vault, upstreamauth.VaultRegistrations(r.vault), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range ups {
		if err := c.Add(u); err != nil {
			t.Fatal(err)
		}
	}
	r.mu.Lock()
	r.handler = c.Callback(session)
	r.mu.Unlock()
	return c
}

// counter is a RoundTripper counting the registrations and refreshes it
// carries to the authorization server.
type counter struct {
	mu                      sync.Mutex
	registrations, refreshs int
	// beforeRefresh, when set, runs (once) before a refresh is sent.
	beforeRefresh func()
}

func (c *counter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/oauth2/register") {
		c.mu.Lock()
		c.registrations++
		c.mu.Unlock()
	}
	if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/oauth2/token") && req.Body != nil {
		b, _ := io.ReadAll(req.Body)
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(b))
		if form, _ := url.ParseQuery(string(b)); form.Get("grant_type") == "refresh_token" {
			c.mu.Lock()
			c.refreshs++
			hook := c.beforeRefresh
			c.beforeRefresh = nil
			c.mu.Unlock()
			if hook != nil {
				hook()
			}
		}
	}
	return http.DefaultTransport.RoundTrip(req)
}

func (c *counter) get() (registrations, refreshs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.registrations, c.refreshs
}

// authURL returns the authorization URL of err, failing the test when err
// is not an authorization-required error.
func authURL(t *testing.T, err error) string {
	t.Helper()
	u, ok := upstreamauth.AuthorizationURL(err)
	if !ok {
		t.Fatalf("want an authorization-required error, got %v", err)
	}
	return u
}

// logIn logs user in at Hydra from the authorization URL start, without a
// browser, and returns the callback's query (code and state), not sent.
func (r *rig) logIn(t *testing.T, start, user string) url.Values {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	return r.h.LogIn(t, jar, start, user, r.callback).Query()
}

// whoami calls the fixture's whoami over MCP with owner's token.
func whoami(ctx context.Context, c *upstreamauth.Client, owner, server, endpoint string) (string, error) {
	cl := mcp.NewClient(&mcp.Implementation{Name: "upstreamauth-test", Version: "1.0.0"}, nil)
	sess, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint,
		HTTPClient: &http.Client{Transport: c.Transport(owner, server, nil)}, DisableStandaloneSSE: true}, nil)
	if err != nil {
		return "", err
	}
	defer sess.Close()
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "whoami"})
	if err != nil {
		return "", err
	}
	if res.IsError || len(res.Content) != 1 {
		return "", errors.New("whoami failed")
	}
	return res.Content[0].(*mcp.TextContent).Text, nil
}
