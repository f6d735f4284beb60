package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/auth/extauth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/toolmux/toolmux/internal/testservers"
)

// The Go MCP SDK's client speaking OAuth to toolmux serve behind ORY
// Hydra, end to end: it is refused (401), follows the challenge to the
// route's protected resource metadata, from there to Hydra, gets a token
// and calls a tool. By the authorization code grant with PKCE, a person
// logging in and consenting in a real Chromium (the test's login app at
// Hydra); by the client credentials grant, no person. (docs/identity.md,
// "The clients' OAuth flows".)
func TestGoSDKOAuthHydra(t *testing.T) {
	t.Parallel()
	h := testservers.StartHydra(t)
	h.AddUser(testservers.HydraUser{Subject: "bob", Name: "Bob", Groups: []string{"eng"}})
	// No resource: the gateway's is the address the client reaches, which
	// the go-sdk holds the metadata to (RFC 9728).
	const admin = "static-token-0123456789abcdef"
	p := startServeProc(t, workspace(t, hydraConfig(t, h, "")), "", "--token", admin)
	endpoint := p.url("/mcp")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// echo calls fx's echo through cs.
	echo := func(t *testing.T, cs *mcp.ClientSession) {
		t.Helper()
		out, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__echo", Arguments: map[string]any{"message": "hi"}})
		if err != nil || out.IsError {
			t.Fatalf("fx__echo: %v %+v", err, out)
		}
	}
	// called says whether the task log has a task of the caller of key
	// (issuer and subject), as the admin (--token) lists them.
	called := func(t *testing.T, key string) bool {
		t.Helper()
		a := ask(t, "http://"+p.addr, "/api/tasks", admin)
		if a.status != http.StatusOK {
			t.Fatalf("/api/tasks: %+v", a)
		}
		return strings.Contains(a.body, fmt.Sprintf(`"key": %q`, key))
	}

	t.Run("authorization code", func(t *testing.T) {
		// The client's redirect URI: where Hydra sends the browser back
		// with the code, which the test hands to the client.
		codes := make(chan *auth.AuthorizationResult, 1)
		cb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			q := r.URL.Query()
			select {
			case codes <- &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}:
			default:
			}
			_, _ = io.WriteString(w, "You may close this window.")
		}))
		defer cb.Close()
		redirect := cb.URL + "/callback"
		// A public client (a program on a laptop has no secret to keep),
		// allowed the gateway's /mcp as its tokens' audience.
		h.CreateClient(t, testservers.HydraClient{ID: "mcp-app", TokenAuthMethod: "none", GrantTypes: []string{"authorization_code", "refresh_token"},
			RedirectURIs: []string{redirect}, Scope: "mcp offline_access", Audience: []string{endpoint}})
		b := newUIBrowser(t)
		asked := 0
		handler, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
			PreregisteredClient: &oauthex.ClientCredentials{ClientID: "mcp-app", Issuer: h.Issuer},
			RedirectURL:         redirect,
			// The browser step: the person logs in and consents.
			AuthorizationCodeFetcher: func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
				asked++
				u, err := url.Parse(args.URL)
				if err != nil || u.Query().Get("code_challenge_method") != "S256" || u.Query().Get("resource") != endpoint {
					t.Errorf("the authorization URL: %s", args.URL)
				}
				b.do(chromedp.Navigate(args.URL))
				b.visible(`#username`)
				b.do(chromedp.SendKeys(chromedp.CSS(`#username`), "bob"), chromedp.Click(chromedp.CSS(`#sign-in`)))
				select {
				case res := <-codes:
					return res, nil
				case <-ctx.Done():
					b.shot("failure")
					return nil, ctx.Err()
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "oauth-app"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, OAuthHandler: handler}, nil)
		if err != nil {
			t.Fatalf("connect: %v\nhydra: %s", err, h.Output())
		}
		echo(t, cs)
		cs.Close()
		if asked != 1 || h.Logins() != 1 {
			t.Errorf("the browser was asked %d times, %d logins", asked, h.Logins())
		}
		token := func(ctx context.Context) (string, error) {
			ts, err := handler.TokenSource(ctx)
			if err != nil || ts == nil {
				return "", fmt.Errorf("no token source: %v", err)
			}
			tok, err := ts.Token()
			if err != nil {
				return "", err
			}
			return tok.AccessToken, nil
		}
		if !called(t, h.Issuer+" bob") {
			t.Error("no task of bob's")
		}
		// The token is bob's, for the route: the consent granted the
		// resource the client asked (RFC 8707), which Hydra ignores.
		tok, err := token(ctx)
		if err != nil {
			t.Fatal(err)
		}
		claims := jwtClaims(t, tok)
		if aud := asStrings(claims["aud"]); claims["sub"] != "bob" || !slices.Equal(aud, []string{endpoint}) {
			t.Errorf("the token's subject %v, audience %v; want bob, %s", claims["sub"], aud, endpoint)
		}
		// A token for /mcp is for /mcp only.
		if a := ask(t, "http://"+p.addr, "/api/tools", tok); a.status != http.StatusUnauthorized {
			t.Errorf("the token for /mcp on /api/tools: %+v", a)
		}
		// The same handler in the 2025-11-25 era: its token, no new login.
		cs, err = mcp.NewClient(&mcp.Implementation{Name: "oauth-app"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, OAuthHandler: handler},
			&mcp.ClientSessionOptions{ProtocolVersion: legacyProtocol})
		if err != nil {
			t.Fatal(err)
		}
		echo(t, cs)
		cs.Close()
		if asked != 1 {
			t.Errorf("the browser was asked again (%d)", asked)
		}
	})

	t.Run("client credentials", func(t *testing.T) {
		h.CreateClient(t, testservers.HydraClient{ID: "robot", Secret: hydraSecret, TokenAuthMethod: "client_secret_post", Scope: "mcp",
			Audience: []string{endpoint}, Claims: map[string]any{"groups": []string{"ci"}}})
		creds := &oauthex.ClientCredentials{ClientID: "robot", ClientSecretAuth: &oauthex.ClientSecretAuth{ClientSecret: hydraSecret}}
		// The handler asks Hydra for no audience (it sends no resource
		// either), and Hydra's token names none: the gateway refuses it.
		plain, err := extauth.NewClientCredentialsHandler(&extauth.ClientCredentialsHandlerConfig{Credentials: creds})
		if err != nil {
			t.Fatal(err)
		}
		_, err = mcp.NewClient(&mcp.Implementation{Name: "robot"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, OAuthHandler: plain}, nil)
		if err == nil {
			t.Error("a token of no audience was accepted")
		}
		if ts, _ := plain.TokenSource(ctx); ts != nil {
			if tok, err := ts.Token(); err == nil {
				if a := ask(t, "http://"+p.addr, "/mcp", tok.AccessToken); a.status != http.StatusUnauthorized || !strings.Contains(a.challenge, "no audience") {
					t.Errorf("a token of no audience: %+v", a)
				}
			}
		} else {
			t.Error("the handler got no token")
		}
		// Its HTTP client adding the audience to the token request, as
		// docs/identity.md says to with Hydra: served.
		handler, err := extauth.NewClientCredentialsHandler(&extauth.ClientCredentialsHandlerConfig{Credentials: creds,
			HTTPClient: audienceClient(h.Issuer+"/oauth2/token", endpoint)})
		if err != nil {
			t.Fatal(err)
		}
		for _, version := range []string{"", legacyProtocol} {
			var opts *mcp.ClientSessionOptions
			if version != "" {
				opts = &mcp.ClientSessionOptions{ProtocolVersion: version}
			}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "robot"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, OAuthHandler: handler}, opts)
			if err != nil {
				t.Fatalf("connect (%q): %v", version, err)
			}
			echo(t, cs)
			cs.Close()
		}
		if !called(t, h.Issuer+" robot") {
			t.Error("no task of robot's")
		}
	})
}

// audienceClient is an HTTP client that adds audience to the form of a
// POST to tokenURL: the go-sdk's client credentials handler asks for no
// audience, and Hydra names one only when asked.
func audienceClient(tokenURL, audience string) *http.Client {
	return &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method != http.MethodPost || r.URL.String() != tokenURL {
			return http.DefaultTransport.RoundTrip(r)
		}
		b, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return nil, err
		}
		form, err := url.ParseQuery(string(b))
		if err != nil {
			return nil, err
		}
		form.Set("audience", audience)
		body := form.Encode()
		r = r.Clone(r.Context())
		r.Body, r.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
		return http.DefaultTransport.RoundTrip(r)
	})}
}

// jwtClaims decodes a JWT's claims (not verified: the gateway did that).
func jwtClaims(t *testing.T, token string) map[string]any {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %d parts", len(parts))
	}
	var m map[string]any
	if err := json.Unmarshal(mustDecode(t, parts[1]), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// asStrings reads a claim that is a string or a list of strings.
func asStrings(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}
