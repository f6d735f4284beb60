package identity_test

import (
	"context"
	"net/http/cookiejar"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/testservers"
)

// The page's login against a real provider, ORY Hydra, and its login
// app: the authorization URL asks a code with PKCE and a nonce; the code
// exchanged by the confidential client gives the caller the ID token
// names (its claims read as auth.claims says); a code used twice, a code
// exchanged without its verifier, an ID token of another login's nonce,
// are refused as invalid; a provider that cannot be reached makes a login
// unavailable, and is tried again.
func TestLoginOfHydra(t *testing.T) {
	ctx := context.Background()
	h := testservers.StartHydra(t)
	const secret = "gateway-secret-0123456789"
	const redirect = "http://127.0.0.1:1/auth/callback" // never reached: the login stops before it
	h.CreateClient(t, testservers.HydraClient{ID: "gateway", Secret: secret, GrantTypes: []string{"authorization_code"},
		RedirectURIs: []string{redirect}, Scope: "openid profile email"})
	h.AddUser(testservers.HydraUser{Subject: "alice", Name: "Alice Liddell", Groups: []string{"eng", "approvers"}})
	ct := newCounter(t)
	login := identity.NewLogin(identity.LoginOptions{Issuer: h.Issuer, ClientID: "gateway", ClientSecret: secret, Transport: ct})
	if err := login.Check(ctx); err != nil {
		t.Fatal(err)
	}

	// beginAt starts a login of l as alice and returns its request and
	// code.
	beginAt := func(t *testing.T, l *identity.Login) (identity.LoginRequest, string) {
		t.Helper()
		req := identity.NewLoginRequest(redirect)
		where, err := l.AuthCodeURL(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		u, err := url.Parse(where)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("nonce") != req.Nonce || q.Get("state") != req.State ||
			q.Get("scope") != "openid profile email" || q.Get("redirect_uri") != redirect || q.Get("client_id") != "gateway" {
			t.Fatalf("authorization URL %s", where)
		}
		jar, _ := cookiejar.New(nil)
		back := h.LogIn(t, jar, where, "alice", redirect)
		if back.Query().Get("state") != req.State || back.Query().Get("code") == "" {
			t.Fatalf("the provider came back with %s", back)
		}
		return req, back.Query().Get("code")
	}
	begin := func(t *testing.T) (identity.LoginRequest, string) { t.Helper(); return beginAt(t, login) }

	req, code := begin(t)
	c, err := login.Finish(ctx, req, code)
	if err != nil {
		t.Fatal(err)
	}
	if c.Subject != "alice" || c.Name != "Alice Liddell" || !slices.Equal(c.Groups, []string{"eng", "approvers"}) ||
		c.Method != identity.MethodSession || c.Issuer != h.Issuer || c.Key() != h.Issuer+" alice" || len(c.Scopes) != 0 {
		t.Fatalf("caller %+v", c)
	}

	t.Run("code used twice", func(t *testing.T) {
		_, err := login.Finish(ctx, req, code)
		kindIs(t, "a code used again", err, identity.KindInvalid, code)
	})
	t.Run("another verifier", func(t *testing.T) {
		req, code := begin(t)
		req.Verifier = identity.NewLoginRequest(redirect).Verifier
		_, err := login.Finish(ctx, req, code)
		kindIs(t, "a code with a verifier not its own", err, identity.KindInvalid, code)
	})
	t.Run("another nonce", func(t *testing.T) {
		req, code := begin(t)
		req.Nonce = identity.RandomToken()
		_, err := login.Finish(ctx, req, code)
		kindIs(t, "an ID token of another nonce", err, identity.KindInvalid, code)
	})
	t.Run("claims of auth.page", func(t *testing.T) {
		// The page's claims override the access tokens' (Hydra puts the
		// access token's under ext, the ID token's at the top).
		st, err := identity.FromConfig(config.Auth{Claims: config.Claims{Groups: "ext.groups"},
			Page: &config.Page{Issuer: h.Issuer, ClientID: "gateway", ClientSecretEnv: "SECRET", Claims: config.Claims{Groups: "groups"}}},
			func(string) string { return secret })
		if err != nil {
			t.Fatal(err)
		}
		if st.Page.Login.Claims.Groups != "groups" || st.Tokens.Claims.Groups != "ext.groups" || st.Page.Login.ClientSecret != secret {
			t.Fatalf("settings %+v", st.Page.Login)
		}
		l := identity.NewLogin(st.Page.Login)
		req, code := beginAt(t, l)
		c, err := l.Finish(ctx, req, code)
		if err != nil || !slices.Equal(c.Groups, []string{"eng", "approvers"}) {
			t.Fatalf("%v %+v", err, c)
		}
		// A secret not set is said, naming its variable.
		_, err = identity.FromConfig(config.Auth{Page: &config.Page{Issuer: h.Issuer, ClientID: "gateway", ClientSecretEnv: "PAGE_SECRET"}},
			func(string) string { return "" })
		if err == nil || !strings.Contains(err.Error(), "PAGE_SECRET is not set") {
			t.Errorf("an unset secret: %v", err)
		}
	})
	t.Run("a wrong client secret", func(t *testing.T) {
		l := identity.NewLogin(identity.LoginOptions{Issuer: h.Issuer, ClientID: "gateway", ClientSecret: "wrong"})
		req, code := beginAt(t, l)
		_, err := l.Finish(ctx, req, code)
		kindIs(t, "the client's wrong secret", err, identity.KindInvalid, "")
	})
	t.Run("unreachable", func(t *testing.T) {
		down := newCounter(t)
		down.down.Store(true)
		clk := &tokenClock{}
		l := identity.NewLogin(identity.LoginOptions{Issuer: h.Issuer, ClientID: "gateway", ClientSecret: secret, Transport: down,
			RetryInterval: time.Minute, Now: clk.now})
		_, err := l.AuthCodeURL(ctx, identity.NewLoginRequest(redirect))
		kindIs(t, "a provider cut off", err, identity.KindUnavailable, "")
		if l.Check(ctx) == nil {
			t.Error("Check of a provider cut off said nothing")
		}
		// Back, it is asked again once the interval has passed.
		down.down.Store(false)
		if _, err := l.AuthCodeURL(ctx, identity.NewLoginRequest(redirect)); err == nil {
			t.Error("asked again within the interval")
		}
		clk.advance(time.Minute)
		if _, err := l.AuthCodeURL(ctx, identity.NewLoginRequest(redirect)); err != nil {
			t.Errorf("the provider back: %v", err)
		}
		// Cut off between the discovery and the exchange.
		down.down.Store(true)
		_, err = l.Finish(ctx, identity.NewLoginRequest(redirect), "a-code")
		kindIs(t, "the token endpoint cut off", err, identity.KindUnavailable, "")
	})
	if n := ct.count("/oauth2/token"); n == 0 {
		t.Errorf("no code was exchanged at the token endpoint")
	}
}
