package tokenexchange_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/tokenexchange"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gatewayAudience is the audience of the callers' own tokens: they were
// issued for the gateway, not for the upstream.
const gatewayAudience = "http://gateway.test"

// world is an identity provider that exchanges tokens, an upstream MCP
// server trusting it for its own audience, and a transport of the test's
// own (its idle connections closed at the end, for goleak).
type world struct {
	idp *testservers.ExchangeIdP
	up  *testservers.WhoAmI
	tr  *http.Transport
}

func newWorld(t *testing.T) *world {
	t.Helper()
	up := testservers.NewWhoAmI(t)
	idp := testservers.StartExchangeIdP(t, testservers.ExchangeIdPOptions{
		Audience:   gatewayAudience,
		Callers:    map[string]string{"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"},
		Exchangers: map[string]string{"toolmux": "toolmux-secret"},
		Targets:    []string{up.URL, "upstream-by-name"},
	})
	up.Start(t, idp.Issuer)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return &world{idp: idp, up: up, tr: tr}
}

// config is the exchange of the upstream, by discovery of the issuer.
func (w *world) config() tokenexchange.Config {
	return tokenexchange.Config{Server: "whoami", Issuer: w.idp.Issuer, ClientID: "toolmux", ClientSecret: "toolmux-secret", Resource: w.up.URL}
}

func (w *world) exchanger(t *testing.T, c tokenexchange.Config, o tokenexchange.Options) *tokenexchange.Exchanger {
	t.Helper()
	o.Transport = w.tr
	e, err := tokenexchange.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// callerCtx is the context of a request of name, authenticated with its
// token of the provider, as the gateway's authentication leaves it.
func callerCtx(name, token string) context.Context {
	ctx := identity.With(context.Background(), &identity.Caller{Subject: name, Name: name, Method: identity.MethodJWT})
	return identity.WithToken(ctx, token)
}

type who struct {
	Sub string   `json:"sub"`
	Aud []string `json:"aud"`
}

// whoami calls the upstream's whoami over a session whose HTTP client
// puts the exchanged token of the caller of ctx on each request.
func (w *world) whoami(t *testing.T, ctx context.Context, e *tokenexchange.Exchanger) who {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: w.up.URL, HTTPClient: &http.Client{Transport: e.Transport(w.tr)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "whoami"})
	if err != nil || res.IsError {
		t.Fatalf("whoami: %v %+v", err, res)
	}
	b, _ := json.Marshal(res.StructuredContent)
	var got who
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	return got
}

// Two callers reach the same upstream each as themselves: each one's
// token exchanged at the provider (found by discovery) for one whose
// audience is the upstream and whose subject is the caller's; a caller's
// own token, issued for the gateway, is refused by the upstream, so what
// reaches it is never that token as it is. Each caller's token is
// exchanged once, however many requests its session makes.
func TestTwoCallersEachThemselves(t *testing.T) {
	w := newWorld(t)
	e := w.exchanger(t, w.config(), tokenexchange.Options{})
	tokens := map[string]string{}
	for _, name := range []string{"alice", "bob"} {
		tokens[name] = w.idp.Token(t, name)
		got := w.whoami(t, callerCtx(name, tokens[name]), e)
		if got.Sub != name || !slices.Equal(got.Aud, []string{w.up.URL}) {
			t.Errorf("%s is seen upstream as %+v, want subject %s, audience %s", name, got, name, w.up.URL)
		}
	}
	if s := w.idp.Stats(t); s.TokenExchange != 2 {
		t.Errorf("%d exchanges for two callers' sessions, want one each", s.TokenExchange)
	}
	if n := e.Len(); n != 2 {
		t.Errorf("%d tokens kept, want 2", n)
	}
	// Another session of alice's: the token kept, no exchange.
	if got := w.whoami(t, callerCtx("alice", tokens["alice"]), e); got.Sub != "alice" {
		t.Errorf("alice again: %+v", got)
	}
	if s := w.idp.Stats(t); s.TokenExchange != 2 {
		t.Errorf("%d exchanges after alice's second session, want still 2", s.TokenExchange)
	}
	// The caller's own token, sent to the upstream as it is, is refused.
	refused := w.up.Refused()
	req, _ := http.NewRequest(http.MethodPost, w.up.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+tokens["alice"])
	resp, err := (&http.Client{Transport: w.tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || w.up.Refused() != refused+1 {
		t.Errorf("the caller's own token at the upstream: %d, want 401", resp.StatusCode)
	}
}

// An upstream named by a logical audience rather than its URL: the token
// exchanged names it (the provider's token endpoint configured, no
// discovery).
func TestAudienceByName(t *testing.T) {
	w := newWorld(t)
	c := w.config()
	c.Issuer, c.TokenURL, c.Resource, c.Audience = "", w.idp.TokenURL, "", "upstream-by-name"
	c.ClientAuth = tokenexchange.ClientSecretPost
	e := w.exchanger(t, c, tokenexchange.Options{})
	tok, err := e.Token(callerCtx("alice", w.idp.Token(t, "alice")))
	if err != nil {
		t.Fatal(err)
	}
	claims := jwtClaims(t, tok.AccessToken)
	if claims.Sub != "alice" || !slices.Equal(claims.Aud, []string{"upstream-by-name"}) {
		t.Errorf("the token exchanged: %+v", claims)
	}
}

// jwtClaims reads a JWT's subject and audience without verifying it (the
// upstream's verification is WhoAmI's).
func jwtClaims(t *testing.T, token string) who {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %d parts", len(parts))
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c who
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// A token kept is used until shortly before it expires (RefreshBefore),
// then exchanged anew.
func TestKeptUntilShortlyBeforeExpiry(t *testing.T) {
	w := newWorld(t)
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	e := w.exchanger(t, w.config(), tokenexchange.Options{RefreshBefore: 30 * time.Second, Now: now})
	ctx := callerCtx("alice", w.idp.Token(t, "alice"))
	first, err := e.Token(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The provider's tokens last 5 minutes.
	offset.Store(int64(4 * time.Minute))
	if t2, err := e.Token(ctx); err != nil || t2.AccessToken != first.AccessToken {
		t.Fatalf("a minute and more before expiry: %v, the same token: %v", err, t2 != nil && t2.AccessToken == first.AccessToken)
	}
	if s := w.idp.Stats(t); s.TokenExchange != 1 {
		t.Fatalf("%d exchanges, want 1", s.TokenExchange)
	}
	offset.Store(int64(4*time.Minute + 45*time.Second))
	again, err := e.Token(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again.AccessToken == first.AccessToken {
		t.Error("15s before its expiry, the token kept was still used")
	}
	if s := w.idp.Stats(t); s.TokenExchange != 2 {
		t.Errorf("%d exchanges, want 2", s.TokenExchange)
	}
}

// The tokens kept are bounded: one caller more than MaxEntries forgets
// the least recently used, which is exchanged again when it comes back.
func TestKeptBounded(t *testing.T) {
	w := newWorld(t)
	e := w.exchanger(t, w.config(), tokenexchange.Options{MaxEntries: 2})
	ctx := map[string]context.Context{}
	for _, name := range []string{"alice", "bob", "carol"} {
		ctx[name] = callerCtx(name, w.idp.Token(t, name))
	}
	exchanges := func() int { return w.idp.Stats(t).TokenExchange }
	for _, name := range []string{"alice", "bob", "alice", "carol"} { // alice used last: bob is the one forgotten
		if _, err := e.Token(ctx[name]); err != nil {
			t.Fatal(err)
		}
	}
	if n, x := e.Len(), exchanges(); n != 2 || x != 3 {
		t.Fatalf("%d kept after %d exchanges, want 2 after 3", n, x)
	}
	for _, name := range []string{"alice", "carol"} {
		if _, err := e.Token(ctx[name]); err != nil {
			t.Fatal(err)
		}
	}
	if x := exchanges(); x != 3 {
		t.Errorf("%d exchanges for callers kept, want still 3", x)
	}
	if _, err := e.Token(ctx["bob"]); err != nil {
		t.Fatal(err)
	}
	if n, x := e.Len(), exchanges(); n != 2 || x != 4 {
		t.Errorf("bob back: %d kept after %d exchanges, want 2 after 4", n, x)
	}
}

// Requests of one caller arriving together exchange once.
func TestConcurrentExchangeOnce(t *testing.T) {
	w := newWorld(t)
	e := w.exchanger(t, w.config(), tokenexchange.Options{})
	ctx := callerCtx("alice", w.idp.Token(t, "alice"))
	var wg sync.WaitGroup
	tokens := make([]string, 8)
	errs := make([]error, 8)
	start := make(chan struct{})
	for i := range tokens {
		wg.Go(func() {
			<-start
			tok, err := e.Token(ctx)
			errs[i] = err
			if tok != nil {
				tokens[i] = tok.AccessToken
			}
		})
	}
	close(start)
	wg.Wait()
	for i := range tokens {
		if errs[i] != nil || tokens[i] != tokens[0] {
			t.Fatalf("request %d: %v, the same token: %v", i, errs[i], tokens[i] == tokens[0])
		}
	}
	if s := w.idp.Stats(t); s.TokenExchange != 1 {
		t.Errorf("%d exchanges for 8 requests together, want 1", s.TokenExchange)
	}
}

// A caller without a token of the provider (an API key) gets an error
// saying token exchange needs one, and its request is not sent.
func TestNoCallerToken(t *testing.T) {
	w := newWorld(t)
	e := w.exchanger(t, w.config(), tokenexchange.Options{})
	keyCaller := identity.With(context.Background(), &identity.Caller{Subject: "key:ci", Name: "ci", Method: identity.MethodKey})
	_, err := e.Token(keyCaller)
	if tokenexchange.KindOf(err) != tokenexchange.KindNoToken || !strings.Contains(err.Error(), "API key") || !strings.Contains(err.Error(), "identity provider") {
		t.Errorf("a caller with an API key: %v", err)
	}
	if _, err := e.Token(context.Background()); tokenexchange.KindOf(err) != tokenexchange.KindNoToken {
		t.Errorf("no caller: %v", err)
	}
	// Through the transport: the upstream is not asked.
	refused := w.up.Refused()
	req, _ := http.NewRequestWithContext(keyCaller, http.MethodPost, w.up.URL, strings.NewReader(`{}`))
	_, err = (&http.Client{Transport: e.Transport(w.tr)}).Do(req)
	if tokenexchange.KindOf(err) != tokenexchange.KindNoToken {
		t.Errorf("the transport for a caller with an API key: %v", err)
	}
	if w.up.Refused() != refused || w.idp.Stats(t).TokenExchange != 0 {
		t.Error("a request without a caller's token reached the upstream or the provider")
	}
}

// The provider refusing says its error code, never the token; nothing is
// kept, and the next request asks again.
func TestRefused(t *testing.T) {
	w := newWorld(t)
	alice := w.idp.Token(t, "alice")
	for _, tc := range []struct {
		name  string
		token string
		edit  func(*tokenexchange.Config)
		code  string
	}{
		{"an audience the provider does not know", alice, func(c *tokenexchange.Config) { c.Resource = "http://elsewhere.test/mcp" }, "invalid_target"},
		{"toolmux's secret wrong", alice, func(c *tokenexchange.Config) { c.ClientSecret = "wrong" }, "invalid_client"},
		{"a caller's token not the provider's", "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJtYWxsb3J5In0.c2lnbmF0dXJl", func(*tokenexchange.Config) {}, "invalid_request"},
	} {
		c := w.config()
		tc.edit(&c)
		e := w.exchanger(t, c, tokenexchange.Options{})
		for range 2 {
			_, err := e.Token(callerCtx("alice", tc.token))
			var xe *tokenexchange.Error
			if !errors.As(err, &xe) || xe.Kind != tokenexchange.KindRefused || xe.Code != tc.code || !strings.Contains(err.Error(), tc.code) {
				t.Errorf("%s: %v, want refused with %s", tc.name, err, tc.code)
			}
			if err != nil && (strings.Contains(err.Error(), tc.token) || strings.Contains(err.Error(), c.ClientSecret)) {
				t.Errorf("%s: the error shows a credential: %v", tc.name, err)
			}
		}
		if e.Len() != 0 {
			t.Errorf("%s: a refusal kept", tc.name)
		}
	}
	if s := w.idp.Stats(t); s.TokenExchange != 6 {
		t.Errorf("%d exchanges asked, want each refusal asked again (6)", s.TokenExchange)
	}
}

// A provider that cannot be reached: unreachable, for its discovery and
// for its token endpoint.
func TestUnreachable(t *testing.T) {
	w := newWorld(t)
	token := w.idp.Token(t, "alice")
	w.idp.Stop()
	byDiscovery := w.exchanger(t, w.config(), tokenexchange.Options{})
	c := w.config()
	c.Issuer, c.TokenURL = "", w.idp.TokenURL
	direct := w.exchanger(t, c, tokenexchange.Options{})
	for name, e := range map[string]*tokenexchange.Exchanger{"discovery": byDiscovery, "token endpoint": direct} {
		_, err := e.Token(callerCtx("alice", token))
		if tokenexchange.KindOf(err) != tokenexchange.KindUnreachable || strings.Contains(err.Error(), token) {
			t.Errorf("%s: %v, want unreachable", name, err)
		}
	}
}

// An incomplete configuration is refused at New, naming what is missing.
func TestConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		c    tokenexchange.Config
		want string
	}{
		{tokenexchange.Config{ClientID: "x", Resource: "http://up"}, "issuer"},
		{tokenexchange.Config{Issuer: "http://idp", Resource: "http://up"}, "client_id"},
		{tokenexchange.Config{Issuer: "http://idp", ClientID: "x"}, "audience or resource"},
		{tokenexchange.Config{Issuer: "http://idp", ClientID: "x", Audience: "up", ClientAuth: "private_key_jwt"}, "client_auth"},
	} {
		_, err := tokenexchange.New(tc.c, tokenexchange.Options{})
		if tokenexchange.KindOf(err) != tokenexchange.KindConfig || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want a config error naming %s", tc.c, err, tc.want)
		}
	}
}

// A provider whose refusal quotes what it was sent (the caller's token,
// toolmux's client secret) in its error_description: the error says the
// code and the description without them, since it goes to the task log
// and the event stream.
func TestRefusalQuotingCredentials(t *testing.T) {
	const token, secret = "opaque-caller-token-5c2e", "toolmux-client-secret-9a1f"
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "invalid_grant",
			"error_description": "subject_token " + r.PostFormValue("subject_token") + " is expired; client secret " + secret + " accepted"})
	}))
	defer idp.Close()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	e, err := tokenexchange.New(tokenexchange.Config{Server: "whoami", TokenURL: idp.URL, ClientID: "toolmux", ClientSecret: secret, Audience: "up"},
		tokenexchange.Options{Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Token(callerCtx("alice", token))
	var xe *tokenexchange.Error
	if !errors.As(err, &xe) || xe.Kind != tokenexchange.KindRefused || xe.Code != "invalid_grant" || !strings.Contains(err.Error(), "is expired") {
		t.Fatalf("%v, want refused with invalid_grant and the provider's description", err)
	}
	if strings.Contains(err.Error(), token) || strings.Contains(err.Error(), secret) {
		t.Errorf("the error shows a credential: %v", err)
	}
}
