package identity_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"go.uber.org/goleak"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/testservers"
)

func TestMain(m *testing.M) {
	// The test binary is also the writer processes of
	// TestKeyStoreWritersInProcesses: a writer writes and exits, and
	// runs no test.
	if spec := os.Getenv(keyStoreWriterEnv); spec != "" {
		if err := keyStoreWriter(spec); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// The verifiers are held to a real identity provider, ORY Hydra: its
// tokens, its keys and their rotation, its introspection and revocation.

const gwAudience = "https://gw.test"

// tokenClock is a verifier's clock that a test moves: time passes without a
// test waiting for it.
type tokenClock struct{ off atomic.Int64 }

func (c *tokenClock) now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *tokenClock) advance(d time.Duration) { c.off.Add(int64(d)) }
func (c *tokenClock) set(d time.Duration)     { c.off.Store(int64(d)) }

// counter is a transport to the issuers that counts the requests by path
// and can be cut off.
type counter struct {
	base *http.Transport
	mu   sync.Mutex
	n    map[string]int
	down atomic.Bool
}

func newCounter(t *testing.T) *counter {
	c := &counter{base: http.DefaultTransport.(*http.Transport).Clone(), n: map[string]int{}}
	t.Cleanup(c.base.CloseIdleConnections)
	return c
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.down.Load() {
		return nil, errors.New("connection refused (cut off by the test)")
	}
	c.mu.Lock()
	c.n[r.URL.Path]++
	c.mu.Unlock()
	return c.base.RoundTrip(r)
}

func (c *counter) count(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[path]
}

func kindIs(t *testing.T, what string, err error, want identity.Kind, token string) {
	t.Helper()
	if identity.KindOf(err) != want {
		t.Errorf("%s: got %v (kind %q), want kind %q", what, err, identity.KindOf(err), want)
		return
	}
	if token != "" && err != nil && strings.Contains(err.Error(), token) {
		t.Errorf("%s: the error holds the token: %v", what, err)
	}
}

// A JWT of Hydra verifies as its caller (subject, name and groups from
// the claims named, nested under Hydra's ext; scopes; audience); one
// tampered with, unsigned, signed with HMAC keyed by the public key, past
// its lifetime or before it, of another issuer, is refused with its kind;
// a token that is no JWT is left to the next verifier; a key rotated in at
// Hydra is fetched when a token names it, at most once per interval.
func TestJWTOfHydra(t *testing.T) {
	ctx := context.Background()
	h := testservers.StartHydra(t)
	const secret = "agent-secret-0123456789"
	h.CreateClient(t, testservers.HydraClient{ID: "agent", Secret: secret, Audience: []string{gwAudience, "https://other.test"}, Scope: "mcp read",
		Claims: map[string]any{"groups": []string{"eng", "approvers"}, "name": "Build Agent"}})
	ct, clk := newCounter(t), &tokenClock{}
	tokens := identity.NewTokens(identity.TokenOptions{Issuers: []identity.Issuer{{URL: h.Issuer}},
		Claims: identity.Claims{Name: "ext.name", Groups: "ext.groups"}, Transport: ct, Now: clk.now, JWKSRefetchInterval: 30 * time.Minute})
	if errs := tokens.Check(ctx); len(errs) > 0 {
		t.Fatalf("check: %v", errs)
	}
	const jwks = "/.well-known/jwks.json"
	if ct.count(jwks) != 1 || ct.count("/.well-known/openid-configuration") != 1 {
		t.Fatalf("check fetched %v", ct.n)
	}
	tok := h.Token(t, "agent", secret, gwAudience, "mcp read")
	c, err := tokens.JWT.Verify(ctx, tok)
	if err != nil {
		t.Fatal(err)
	}
	if c.Subject != "agent" || c.Name != "Build Agent" || !slices.Equal(c.Groups, []string{"eng", "approvers"}) || c.Method != identity.MethodJWT ||
		c.Issuer != h.Issuer || !slices.Equal(c.Scopes, []string{"mcp", "read"}) || !slices.Equal(c.Audience, []string{gwAudience}) || c.Expires.IsZero() {
		t.Fatalf("caller %+v", c)
	}
	if ct.count(jwks) != 1 {
		t.Errorf("a token signed by a key held made a fetch: %d", ct.count(jwks))
	}

	t.Run("tampered", func(t *testing.T) {
		parts := strings.Split(tok, ".")
		var claims map[string]any
		b, _ := base64.RawURLEncoding.DecodeString(parts[1])
		_ = json.Unmarshal(b, &claims)
		claims["sub"] = "someone-else"
		b, _ = json.Marshal(claims)
		forged := parts[0] + "." + base64.RawURLEncoding.EncodeToString(b) + "." + parts[2]
		_, err := tokens.JWT.Verify(ctx, forged)
		kindIs(t, "a payload changed", err, identity.KindInvalid, forged)
		sig := []byte(parts[2])
		sig[len(sig)/2] ^= 1
		forged = parts[0] + "." + parts[1] + "." + string(sig)
		_, err = tokens.JWT.Verify(ctx, forged)
		kindIs(t, "a signature changed", err, identity.KindInvalid, forged)
		// alg none: no signature at all.
		none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + "."
		_, err = tokens.JWT.Verify(ctx, none)
		kindIs(t, "alg none", err, identity.KindInvalid, none)
		// HS256 keyed by the issuer's public key, which everybody has.
		pub := publicKeyBytes(t, h.Issuer+jwks)
		signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: pub}, nil)
		if err != nil {
			t.Fatal(err)
		}
		jws, err := signer.Sign(b)
		if err != nil {
			t.Fatal(err)
		}
		hs, _ := jws.CompactSerialize()
		_, err = tokens.JWT.Verify(ctx, hs)
		kindIs(t, "HS256 with the public key", err, identity.KindInvalid, hs)
		// Not a JWT: an opaque token, an API key, garbage with dots.
		for _, other := range []string{"ory_at_abc.def", identity.NewKeySecret(), "a.b.c", "", "eyJub3QiOiJhbGcifQ.e30.AA"} {
			if _, err := tokens.JWT.Verify(ctx, other); !errors.Is(err, identity.ErrNotMine) {
				t.Errorf("%q: %v, want ErrNotMine", other, err)
			}
		}
	})

	t.Run("lifetime", func(t *testing.T) {
		defer clk.set(0)
		fresh := h.Token(t, "agent", secret, gwAudience, "mcp")
		// Hydra's tokens live an hour: two hours on, it has expired;
		// an hour earlier, it is not valid yet. A skew of 60s either
		// way is allowed.
		clk.set(2 * time.Hour)
		_, err := tokens.JWT.Verify(ctx, fresh)
		kindIs(t, "two hours on", err, identity.KindExpired, fresh)
		clk.set(-time.Hour)
		_, err = tokens.JWT.Verify(ctx, fresh)
		kindIs(t, "an hour before", err, identity.KindExpired, fresh)
		clk.set(-30 * time.Second)
		if _, err := tokens.JWT.Verify(ctx, fresh); err != nil {
			t.Errorf("within the skew: %v", err)
		}
		// A token verified and cached is not good past its expiry.
		clk.set(0)
		if _, err := tokens.JWT.Verify(ctx, fresh); err != nil {
			t.Fatal(err)
		}
		clk.set(time.Hour + 2*time.Minute)
		_, err = tokens.JWT.Verify(ctx, fresh)
		kindIs(t, "cached, past its expiry", err, identity.KindExpired, fresh)
	})

	t.Run("rotation", func(t *testing.T) {
		defer clk.set(0)
		before := ct.count(jwks)
		kid := h.RotateKeys(t)
		rotated := h.Token(t, "agent", secret, gwAudience, "mcp")
		if header(t, rotated)["kid"] != kid {
			t.Fatalf("hydra did not sign with the new key %s: %v", kid, header(t, rotated))
		}
		// Within the interval of the last fetch, a key not held is not
		// fetched: the token is refused, however many such come.
		for range 5 {
			_, err := tokens.JWT.Verify(ctx, rotated)
			kindIs(t, "a new key within the interval", err, identity.KindInvalid, rotated)
		}
		if ct.count(jwks) != before {
			t.Fatalf("fetched the keys %d times within the interval", ct.count(jwks)-before)
		}
		// Past it, a token naming the new key fetches them, once. (The
		// very first may still be answered by the last fetch within the
		// interval, which go-oidc hands to a request that comes as it
		// ends: the next is not.)
		clk.advance(30 * time.Minute)
		if !testservers.Eventually(5*time.Second, func() bool {
			_, err := tokens.JWT.Verify(ctx, rotated)
			return err == nil
		}) {
			t.Fatal("the rotated key was not fetched")
		}
		for range 5 {
			if _, err := tokens.JWT.Verify(ctx, rotated); err != nil {
				t.Fatalf("the rotated key: %v", err)
			}
		}
		if ct.count(jwks) != before+1 {
			t.Fatalf("fetched the keys %d times for one rotation", ct.count(jwks)-before)
		}
		// Tokens of the old key still verify: Hydra publishes both.
		if _, err := tokens.JWT.Verify(ctx, tok); err != nil {
			t.Errorf("the first key: %v", err)
		}
	})

	t.Run("issuer", func(t *testing.T) {
		other := testservers.StartHydra(t)
		other.CreateClient(t, testservers.HydraClient{ID: "agent", Secret: secret, Audience: []string{gwAudience}, Scope: "mcp"})
		foreign := other.Token(t, "agent", secret, gwAudience, "mcp")
		_, err := tokens.JWT.Verify(ctx, foreign)
		kindIs(t, "another Hydra's token", err, identity.KindIssuer, foreign)
		// The same with an issuer whose iss the first claims: its keys
		// do not verify it.
		parts := strings.Split(foreign, ".")
		var claims map[string]any
		b, _ := base64.RawURLEncoding.DecodeString(parts[1])
		_ = json.Unmarshal(b, &claims)
		claims["iss"] = h.Issuer
		b, _ = json.Marshal(claims)
		posing := parts[0] + "." + base64.RawURLEncoding.EncodeToString(b) + "." + parts[2]
		_, err = tokens.JWT.Verify(ctx, posing)
		kindIs(t, "another Hydra's token claiming this one's iss", err, identity.KindInvalid, posing)
	})

	t.Run("unavailable", func(t *testing.T) {
		gone := httptest.NewServer(http.NotFoundHandler())
		gone.Close()
		down := identity.NewTokens(identity.TokenOptions{Issuers: []identity.Issuer{{URL: gone.URL}}, Transport: ct})
		if errs := down.Check(ctx); len(errs) != 1 {
			t.Errorf("check of an issuer that is down: %v", errs)
		}
		// A token of it: signed by nobody, but which cannot be known
		// before its keys are had.
		payload, _ := json.Marshal(map[string]any{"iss": gone.URL, "sub": "x", "exp": time.Now().Add(time.Hour).Unix()})
		bogus := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256","kid":"k"}`)) + "." + base64.RawURLEncoding.EncodeToString(payload) + ".AAAA"
		_, err := down.JWT.Verify(ctx, bogus)
		kindIs(t, "the issuer down", err, identity.KindUnavailable, bogus)
		// Hydra's keys out of reach: its token cannot be checked now
		// (503), it is not refused as invalid.
		cut := newCounter(t)
		cut.down.Store(true)
		v := identity.NewTokens(identity.TokenOptions{Issuers: []identity.Issuer{{URL: h.Issuer, JWKSURL: h.Issuer + jwks}}, Transport: cut}).JWT
		_, err = v.Verify(ctx, tok)
		kindIs(t, "the keys out of reach", err, identity.KindUnavailable, tok)
	})
}

// publicKeyBytes returns the first key of a JWKS as the bytes an HMAC
// attack keys by.
func publicKeyBytes(t *testing.T, jwksURL string) []byte {
	t.Helper()
	resp, err := http.Get(jwksURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var set jose.JSONWebKeySet
	if err := json.NewDecoder(resp.Body).Decode(&set); err != nil || len(set.Keys) == 0 {
		t.Fatalf("jwks: %v", err)
	}
	b, _ := set.Keys[0].Public().MarshalJSON()
	return b
}

func header(t *testing.T, token string) map[string]any {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(strings.Split(token, ".")[0])
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]any
	_ = json.Unmarshal(b, &h)
	return h
}

// introspectionProxy is Hydra's introspection endpoint behind the client
// authentication a deployment puts in front of its admin API (Hydra's has
// none): client_secret_basic, both parts form-encoded (RFC 6749 section
// 2.3.1). It counts the questions that got through.
type introspectionProxy struct {
	*httptest.Server
	asked atomic.Int32
}

const (
	gwClientID     = "toolmux gateway"
	gwClientSecret = "s3cret: with spaces & symbols=+"
)

func newIntrospectionProxy(t *testing.T, h *testservers.HydraServer) *introspectionProxy {
	p := &introspectionProxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, secret, ok := r.BasicAuth()
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
		if !ok || id != gwClientID || secret != gwClientSecret {
			http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
			return
		}
		p.asked.Add(1)
		resp, err := http.Post(h.Admin+"/admin/oauth2/introspect", r.Header.Get("Content-Type"), r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(p.Close)
	return p
}

// An opaque token of Hydra verifies by introspection as its caller, the
// answer kept: a token revoked is refused once the kept answer is older
// than the cache's max age; the cache holds max_entries (one more pushes
// the oldest out); an endpoint that refuses the gateway's client
// credentials, or cannot be reached, makes a token unavailable, never
// invalid, and is asked again next time.
func TestIntrospectionOfHydra(t *testing.T) {
	ctx := context.Background()
	h := testservers.StartHydra(t)
	const secret = "robot-secret-0123456789"
	h.CreateClient(t, testservers.HydraClient{ID: "robot", Secret: secret, Audience: []string{gwAudience}, Scope: "mcp", Opaque: true,
		Claims: map[string]any{"groups": "eng, ops", "name": "Robot"}})
	proxy := newIntrospectionProxy(t, h)
	ct, clk := newCounter(t), &tokenClock{}
	opts := identity.TokenOptions{Issuers: []identity.Issuer{{URL: h.Issuer,
		Introspection: &identity.IntrospectionClient{URL: proxy.URL, ClientID: gwClientID, ClientSecret: gwClientSecret}}},
		Claims: identity.Claims{Name: "ext.name", Groups: "ext.groups"}, CacheMaxAge: time.Minute, Transport: ct, Now: clk.now}
	tokens := identity.NewTokens(opts)
	tok := h.Token(t, "robot", secret, gwAudience, "mcp")
	if _, err := tokens.JWT.Verify(ctx, tok); !errors.Is(err, identity.ErrNotMine) {
		t.Fatalf("an opaque token to the JWT verifier: %v", err)
	}
	c, err := tokens.Verifiers().Verify(ctx, tok)
	if err != nil {
		t.Fatal(err)
	}
	if c.Subject != "robot" || c.Name != "Robot" || !slices.Equal(c.Groups, []string{"eng", "ops"}) || c.Method != identity.MethodIntrospection ||
		c.Issuer != h.Issuer || !slices.Equal(c.Scopes, []string{"mcp"}) || !slices.Equal(c.Audience, []string{gwAudience}) || c.Expires.IsZero() {
		t.Fatalf("caller %+v", c)
	}
	for range 3 {
		if _, err := tokens.Verifiers().Verify(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	if n := proxy.asked.Load(); n != 1 {
		t.Fatalf("asked %d times about one token", n)
	}

	t.Run("revoked", func(t *testing.T) {
		h.Revoke(t, "robot", secret, tok)
		// Within the cache's age, the kept answer stands.
		if _, err := tokens.Verifiers().Verify(ctx, tok); err != nil {
			t.Fatalf("within the cache's age: %v", err)
		}
		clk.advance(time.Minute)
		_, err := tokens.Verifiers().Verify(ctx, tok)
		kindIs(t, "revoked, past the cache's age", err, identity.KindInvalid, tok)
		// The refusal is kept too: no question per request.
		asked := proxy.asked.Load()
		_, err = tokens.Verifiers().Verify(ctx, tok)
		kindIs(t, "revoked, again", err, identity.KindInvalid, tok)
		if proxy.asked.Load() != asked {
			t.Errorf("asked again about a token found inactive")
		}
		_, err = tokens.Verifiers().Verify(ctx, "not-a-token-of-anybody")
		kindIs(t, "a token nobody issued", err, identity.KindInvalid, "")
	})

	t.Run("expired", func(t *testing.T) {
		defer clk.set(0)
		fresh := h.Token(t, "robot", secret, gwAudience, "mcp")
		// Hydra's clock says it is active; the gateway's, two hours on,
		// that it expired.
		clk.set(2 * time.Hour)
		_, err := tokens.Introspection.Verify(ctx, fresh)
		kindIs(t, "two hours on", err, identity.KindExpired, fresh)
	})

	t.Run("bound", func(t *testing.T) {
		small := opts
		small.CacheMaxEntries = 2
		v := identity.NewTokens(small).Introspection
		a, b, c := h.Token(t, "robot", secret, gwAudience, "mcp"), h.Token(t, "robot", secret, gwAudience, "mcp"), h.Token(t, "robot", secret, gwAudience, "mcp")
		verify := func(tok string) int32 {
			t.Helper()
			before := proxy.asked.Load()
			if _, err := v.Verify(ctx, tok); err != nil {
				t.Fatal(err)
			}
			return proxy.asked.Load() - before
		}
		if verify(a)+verify(b) != 2 || verify(a)+verify(b) != 0 {
			t.Fatal("two tokens in a cache of two were not kept")
		}
		// One more than it holds: the oldest (a) goes.
		if verify(c) != 1 || verify(b) != 0 || verify(a) != 1 {
			t.Fatal("the third token did not push the oldest out")
		}
	})

	t.Run("unavailable", func(t *testing.T) {
		fresh := h.Token(t, "robot", secret, gwAudience, "mcp")
		wrong := opts
		wrong.Issuers = []identity.Issuer{{URL: h.Issuer, Introspection: &identity.IntrospectionClient{URL: proxy.URL, ClientID: gwClientID, ClientSecret: "wrong"}}}
		v := identity.NewTokens(wrong).Introspection
		_, err := v.Verify(ctx, fresh)
		kindIs(t, "the gateway's credentials refused", err, identity.KindUnavailable, fresh)
		if err != nil && strings.Contains(err.Error(), "wrong") {
			t.Errorf("the error holds the client secret: %v", err)
		}
		cut := opts
		cut.Transport = ct
		v = identity.NewTokens(cut).Introspection
		ct.down.Store(true)
		_, err = v.Verify(ctx, fresh)
		kindIs(t, "the endpoint cut off", err, identity.KindUnavailable, fresh)
		// Not kept: once it answers, the token is good.
		ct.down.Store(false)
		if _, err := v.Verify(ctx, fresh); err != nil {
			t.Errorf("the endpoint back: %v", err)
		}
	})
}

// FromConfig reads the auth section's issuers, the client secret from the
// environment variable it names; one unset is an error naming it.
func TestFromConfig(t *testing.T) {
	cfg, err := config.ParseWith("toolmux.yaml", []byte(`auth:
  issuers:
    - issuer: https://idp.example.com
      introspection:
        url: https://idp.example.com/introspect
        client_id: gw
        client_secret_env: IDP_SECRET
  claims: {groups: realm_access.roles}
  admin_group: ops
`), config.Options{Dir: "/work", LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	st, err := identity.FromConfig(cfg.Auth, func(name string) string { return map[string]string{"IDP_SECRET": "s"}[name] })
	if err != nil {
		t.Fatal(err)
	}
	is := st.Tokens.Issuers[0]
	if is.URL != "https://idp.example.com" || is.Introspection.ClientSecret != "s" || is.Introspection.ClientID != "gw" ||
		st.Tokens.Claims.Groups != "realm_access.roles" || st.AdminGroup != "ops" || st.ApproversGroup != identity.DefaultApproversGroup {
		t.Fatalf("%+v", st)
	}
	if _, err := identity.FromConfig(cfg.Auth, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "IDP_SECRET") {
		t.Fatalf("unset secret: %v", err)
	}
}
