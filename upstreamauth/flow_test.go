package upstreamauth_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/upstreamauth"
	"github.com/toolmux/toolmux/vault"
)

// preregistered registers the gateway at the rig's Hydra as an operator
// would, its tokens issued for the fixture: access tokens of a minute by
// the code, of an hour by a refresh.
func (r *rig) preregistered(t *testing.T) upstreamauth.Upstream {
	t.Helper()
	r.h.CreateClient(t, testservers.HydraClient{ID: "gateway", Secret: "gateway-secret-0123456789",
		GrantTypes: []string{"authorization_code", "refresh_token"}, RedirectURIs: []string{r.callback},
		Audience: []string{r.fx.URL}, Scope: "offline_access"})
	r.h.SetLifespans(t, "gateway", time.Minute, time.Hour)
	return upstreamauth.Upstream{Name: "fx", URL: r.fx.URL, ClientID: "gateway", ClientSecret: "gateway-secret-0123456789"}
}

// authorize takes owner (Hydra's user name after "key:") through the
// authorization, without a browser, and returns the callback's query.
func (r *rig) authorize(t *testing.T, c *upstreamauth.Client, owner string) {
	t.Helper()
	ctx := t.Context()
	_, err := c.Token(ctx, owner, "fx")
	q := r.logIn(t, authURL(t, err), strings.TrimPrefix(owner, "key:"))
	got, server, err := c.Complete(ctx, q, "")
	if err != nil || got != owner || server != "fx" {
		t.Fatalf("Complete: %q %q %v", got, server, err)
	}
}

func TestRefreshAndRevoke(t *testing.T) {
	r := newRig(t)
	up := r.preregistered(t)
	// Every token of the code grant (a minute) is within the leeway: the
	// first use refreshes it; a refreshed one (an hour) is not.
	var authorized []string // told at each completed authorization
	c := r.client(t, upstreamauth.Options{Leeway: 5 * time.Minute, Authorized: func(owner, server string) {
		authorized = append(authorized, owner+" "+server)
	}}, nil, up)
	ctx := t.Context()
	r.authorize(t, c, "key:ann")
	if len(authorized) != 1 || authorized[0] != "key:ann fx" {
		t.Fatalf("told of authorizations: %v", authorized)
	}
	first, err := r.vault.Token(ctx, "key:ann", "fx")
	if err != nil || first.RefreshToken == "" {
		t.Fatalf("the token kept: %v %v", first, err)
	}
	if _, refreshs := r.counts.get(); refreshs != 0 {
		t.Fatalf("%d refreshes before any use", refreshs)
	}

	t.Run("concurrent callers refresh once", func(t *testing.T) {
		const n = 8
		var wg sync.WaitGroup
		toks := make([]string, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				tok, err := c.Token(ctx, "key:ann", "fx")
				if err == nil {
					toks[i] = tok.AccessToken
				}
				errs[i] = err
			})
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("caller %d: %v", i, errs[i])
			}
			if toks[i] == first.AccessToken || toks[i] != toks[0] {
				t.Fatalf("caller %d got another token than the refreshed one", i)
			}
		}
		if _, refreshs := r.counts.get(); refreshs != 1 {
			t.Fatalf("%d refreshes, want 1", refreshs)
		}
		now, err := r.vault.Token(ctx, "key:ann", "fx")
		if err != nil || now.AccessToken != toks[0] {
			t.Fatalf("the vault does not hold the refreshed token: %v", err)
		}
		who, err := whoami(ctx, c, "key:ann", "fx", r.fx.URL)
		if err != nil || who != "ann" {
			t.Fatalf("whoami with the refreshed token: %q %v", who, err)
		}
	})

	t.Run("a revoked token asks again", func(t *testing.T) {
		tok, err := r.vault.Token(ctx, "key:ann", "fx")
		if err != nil {
			t.Fatal(err)
		}
		r.h.Revoke(t, "gateway", "gateway-secret-0123456789", tok.RefreshToken)
		r.h.Revoke(t, "gateway", "gateway-secret-0123456789", tok.AccessToken)
		refused := r.fx.Refused.Load()
		_, err = whoami(ctx, c, "key:ann", "fx", r.fx.URL)
		if r.fx.Refused.Load() == refused {
			t.Fatalf("the upstream did not refuse the revoked token (%v)", err)
		}
		u := authURL(t, err)
		if !strings.HasPrefix(u, r.h.Issuer+"/oauth2/auth?") {
			t.Fatalf("the authorization URL is not Hydra's: %s", u)
		}
		if _, err := r.vault.Token(ctx, "key:ann", "fx"); !vault.IsNotFound(err) {
			t.Fatalf("the refused token is still kept: %v", err)
		}
		// And again the same way: the authorization URL given again.
		_, err = c.Token(ctx, "key:ann", "fx")
		if again := authURL(t, err); again != u {
			t.Fatalf("a second authorization URL while the first is usable: %s", again)
		}
		r.authorize(t, c, "key:ann")
		if who, err := whoami(ctx, c, "key:ann", "fx", r.fx.URL); err != nil || who != "ann" {
			t.Fatalf("whoami after authorizing again: %q %v", who, err)
		}
	})

	t.Run("a user disconnects", func(t *testing.T) {
		tok, err := r.vault.Token(ctx, "key:ann", "fx")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Revoke(ctx, "key:ann", "fx"); err != nil {
			t.Fatal(err)
		}
		if _, err := r.vault.Token(ctx, "key:ann", "fx"); !vault.IsNotFound(err) {
			t.Fatalf("the token is still kept: %v", err)
		}
		// Revoked at Hydra: the upstream refuses its access token, Hydra
		// its refresh token.
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.fx.URL, strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("the upstream took a revoked token: %s", resp.Status)
		}
		cfg := oauth2.Config{ClientID: up.ClientID, ClientSecret: up.ClientSecret, Endpoint: oauth2.Endpoint{TokenURL: r.h.Issuer + "/oauth2/token"}}
		if _, err := cfg.TokenSource(ctx, &oauth2.Token{RefreshToken: tok.RefreshToken}).Token(); err == nil {
			t.Fatal("Hydra refreshed a revoked refresh token")
		}
		_, err = c.Token(ctx, "key:ann", "fx")
		authURL(t, err)
	})
	noCredentialInLogs(t, r)
}

// noCredentialInLogs fails the test when the client's log holds a token
// the vault holds now, or the client's secret.
func noCredentialInLogs(t *testing.T, r *rig) {
	t.Helper()
	logs := r.logs.String()
	if logs == "" {
		t.Fatal("the client logged nothing")
	}
	secrets := []string{"gateway-secret-0123456789"}
	if reg, found, err := upstreamauth.VaultRegistrations(r.vault).Registration(t.Context(), "fx"); err == nil && found {
		secrets = append(secrets, reg.ClientSecret)
		// Formatted, as a log line or an error would.
		for _, s := range []string{fmt.Sprint(reg), fmt.Sprintf("%v %+v %#v", reg, reg, reg)} {
			if strings.Contains(s, reg.ClientSecret) {
				t.Fatalf("a registration formatted shows its secret: %s", s)
			}
		}
	}
	owners, err := r.vault.Store().Owners(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range owners {
		if o == upstreamauth.RegistrationsOwner {
			continue
		}
		if tok, err := r.vault.Token(t.Context(), o, "fx"); err == nil {
			secrets = append(secrets, tok.AccessToken, tok.RefreshToken)
		}
	}
	for _, s := range secrets {
		if s != "" && strings.Contains(logs, s) {
			t.Fatalf("a credential is in the log:\n%s", logs)
		}
	}
}

func TestStates(t *testing.T) {
	r := newRig(t)
	up := r.preregistered(t)
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	c := r.client(t, upstreamauth.Options{MaxPending: 1, StateTTL: 10 * time.Minute, Now: now}, nil, up)
	ctx := t.Context()

	_, err := c.Token(ctx, "key:ann", "fx")
	annURL := authURL(t, err)
	if _, err := c.Token(ctx, "key:ann", "fx"); authURL(t, err) != annURL {
		t.Fatal("a second authorization for the same caller and server")
	}
	// One more than MaxPending.
	if _, err := c.Token(ctx, "key:bob", "fx"); upstreamauth.KindOf(err) != upstreamauth.KindTooManyPending {
		t.Fatalf("a second authorization beyond max pending 1: %v", err)
	}

	q := r.logIn(t, annURL, "ann")
	if _, _, err := c.Complete(ctx, q, "key:bob"); upstreamauth.KindOf(err) != upstreamauth.KindWrongCaller {
		t.Fatalf("a callback in another caller's session: %v", err)
	}
	// The state was spent by that attempt.
	if _, _, err := c.Complete(ctx, q, "key:ann"); upstreamauth.KindOf(err) != upstreamauth.KindState {
		t.Fatalf("a state used already: %v", err)
	}
	if _, err := r.vault.Token(ctx, "key:ann", "fx"); !vault.IsNotFound(err) {
		t.Fatalf("a token kept from a refused callback: %v", err)
	}

	// The slot is free again: bob's authorization, completed through the
	// callback route, then its URL replayed.
	_, err = c.Token(ctx, "key:bob", "fx")
	q = r.logIn(t, authURL(t, err), "bob")
	cb := r.callback + "?" + q.Encode()
	for i, want := range []int{http.StatusOK, http.StatusBadRequest} {
		resp, err := http.Get(cb)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("callback %d: %s, want %d", i+1, resp.Status, want)
		}
	}
	if who, err := whoami(ctx, c, "key:bob", "fx", r.fx.URL); err != nil || who != "bob" {
		t.Fatalf("whoami as bob: %q %v", who, err)
	}

	// An authorization past its time.
	_, err = c.Token(ctx, "key:ann", "fx")
	q = r.logIn(t, authURL(t, err), "ann")
	clock.Add(int64(11 * time.Minute))
	if _, _, err := c.Complete(ctx, q, ""); upstreamauth.KindOf(err) != upstreamauth.KindState {
		t.Fatalf("an expired authorization: %v", err)
	}
	// The authorization server's refusal, and a response of another
	// issuer (RFC 9207), each spending the state.
	for _, bad := range []url.Values{{"error": {"access_denied"}}, {"code": {"x"}, "iss": {"https://other.example"}}} {
		_, err = c.Token(ctx, "key:ann", "fx")
		pu, _ := url.Parse(authURL(t, err))
		bad.Set("state", pu.Query().Get("state"))
		if _, _, err := c.Complete(ctx, bad, ""); upstreamauth.KindOf(err) != upstreamauth.KindDenied {
			t.Fatalf("%v: %v", bad, err)
		}
		if _, _, err := c.Complete(ctx, bad, ""); upstreamauth.KindOf(err) != upstreamauth.KindState {
			t.Fatalf("%v again: %v", bad, err)
		}
	}
	var e *upstreamauth.Error
	if _, err := c.Token(ctx, "key:nobody", "nope"); !errors.As(err, &e) || e.Kind != upstreamauth.KindUnknownServer {
		t.Fatalf("an unknown server: %v", err)
	}
}

// TestRefreshAfterExpiry: a token past its expiry, which the upstream
// refuses, is refreshed before the call goes.
func TestRefreshAfterExpiry(t *testing.T) {
	r := newRig(t)
	up := r.preregistered(t)
	r.h.SetLifespans(t, "gateway", 2*time.Second, time.Hour)
	c := r.client(t, upstreamauth.Options{Leeway: time.Nanosecond}, nil, up)
	ctx := t.Context()
	r.authorize(t, c, "key:ann")
	old, err := r.vault.Token(ctx, "key:ann", "fx")
	if err != nil || old.Expiry.IsZero() {
		t.Fatalf("the token kept: %v %v", old, err)
	}
	if !testservers.Eventually(30*time.Second, func() bool { return time.Now().After(old.Expiry.Add(time.Second)) }) {
		t.Fatal("the token did not expire")
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.fx.URL, strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+old.AccessToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the upstream took an expired token: %s", resp.Status)
	}
	if who, err := whoami(ctx, c, "key:ann", "fx", r.fx.URL); err != nil || who != "ann" {
		t.Fatalf("whoami after expiry: %q %v", who, err)
	}
	if _, refreshs := r.counts.get(); refreshs != 1 {
		t.Fatalf("%d refreshes, want 1", refreshs)
	}
	noCredentialInLogs(t, r)
}

// TestRefreshedElsewhere: two gateways on one vault (a fleet's), the
// second refreshing with a refresh token the first has just used: the
// second takes the first's token, and does not delete it.
func TestRefreshedElsewhere(t *testing.T) {
	r := newRig(t)
	up := r.preregistered(t)
	first := r.client(t, upstreamauth.Options{Leeway: 5 * time.Minute}, nil, up)
	ctx := t.Context()
	r.authorize(t, first, "key:ann")
	// The second gateway, with its own HTTP client: its refresh waits for
	// the first's to be done and kept.
	second, err := upstreamauth.New(r.vault, upstreamauth.VaultRegistrations(r.vault), upstreamauth.Options{
		RedirectURL: r.callback, Leeway: 5 * time.Minute, HTTPClient: &http.Client{Transport: r.counts}})
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Add(up); err != nil {
		t.Fatal(err)
	}
	var kept string
	r.counts.mu.Lock()
	r.counts.beforeRefresh = func() {
		tok, err := first.Token(ctx, "key:ann", "fx")
		if err != nil {
			t.Errorf("the first gateway's refresh: %v", err)
			return
		}
		kept = tok.AccessToken
	}
	r.counts.mu.Unlock()
	tok, err := second.Token(ctx, "key:ann", "fx")
	if err != nil {
		t.Fatalf("the second gateway: %v", err)
	}
	if kept == "" || tok.AccessToken != kept {
		t.Fatal("the second gateway did not take the first's token")
	}
	now, err := r.vault.Token(ctx, "key:ann", "fx")
	if err != nil || now.AccessToken != kept {
		t.Fatalf("the vault no longer holds the first's token: %v", err)
	}
	if _, refreshs := r.counts.get(); refreshs != 2 {
		t.Fatalf("%d refreshes, want the two raced", refreshs)
	}
}

// TestUpstreamRefusesToken: a token the upstream refuses before it
// expires (revoked there, say) is refreshed and the request sent again
// once; refused again, the token is given up and the user asked again.
func TestUpstreamRefusesToken(t *testing.T) {
	r := newRig(t)
	up := r.preregistered(t)
	c := r.client(t, upstreamauth.Options{Leeway: time.Nanosecond}, nil, up)
	ctx := t.Context()
	r.authorize(t, c, "key:ann")
	// A proxy in front of the upstream refusing the tokens in refuse.
	target, _ := url.Parse(r.fx.URL)
	var mu sync.Mutex
	refuse := map[string]bool{}
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		no := refuse[strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer ")]
		mu.Unlock()
		if no {
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
			http.Error(w, "refused", http.StatusUnauthorized)
			return
		}
		httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host}).ServeHTTP(w, req)
	}))
	t.Cleanup(proxy.Close)
	endpoint := proxy.URL + target.Path

	old, _ := r.vault.Token(ctx, "key:ann", "fx")
	mu.Lock()
	refuse[old.AccessToken] = true
	mu.Unlock()
	if who, err := whoami(ctx, c, "key:ann", "fx", endpoint); err != nil || who != "ann" {
		t.Fatalf("whoami with a refused token: %q %v", who, err)
	}
	now, _ := r.vault.Token(ctx, "key:ann", "fx")
	if _, refreshs := r.counts.get(); refreshs != 1 || now.AccessToken == old.AccessToken {
		t.Fatalf("%d refreshes, want 1 and a new token", refreshs)
	}

	// Whatever token: refused (each marked so before it is sent).
	refuseAll := roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		mu.Lock()
		refuse[strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer ")] = true
		mu.Unlock()
		return http.DefaultTransport.RoundTrip(req)
	})
	cl := &http.Client{Transport: c.Transport("key:ann", "fx", refuseAll)}
	resp, err := cl.Post(endpoint, "application/json", strings.NewReader(`{}`))
	if err == nil {
		resp.Body.Close()
		t.Fatalf("a request with tokens the upstream refuses: %s", resp.Status)
	}
	authURL(t, err)
	if _, err := r.vault.Token(ctx, "key:ann", "fx"); !vault.IsNotFound(err) {
		t.Fatalf("a token the upstream refuses is still kept: %v", err)
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestElsewhere: a client beside the gateway's on its vault (a fleet's
// worker, Options.Elsewhere) never starts an authorization: a user without
// a token is told where to authorize instead, without a URL; it uses and
// refreshes the token the gateway got, keeping the refreshed one in the
// vault; and it registers no client of its own where the gateway has none.
func TestElsewhere(t *testing.T) {
	r := newRig(t)
	up := r.preregistered(t)
	gw := r.client(t, upstreamauth.Options{}, nil, up)
	const where = "connect on the gateway's web page"
	worker, err := upstreamauth.New(r.vault, upstreamauth.VaultRegistrations(r.vault), upstreamauth.Options{
		Elsewhere: where, Leeway: 5 * time.Minute, HTTPClient: &http.Client{Transport: r.counts}})
	if err != nil {
		t.Fatal(err)
	}
	if err := worker.Add(up); err != nil {
		t.Fatal(err)
	}
	if _, err := upstreamauth.New(r.vault, upstreamauth.VaultRegistrations(r.vault), upstreamauth.Options{}); err == nil {
		t.Fatal("a client with neither a redirect URL nor Elsewhere was made")
	}
	ctx := t.Context()

	_, err = worker.Token(ctx, "key:bob", "fx")
	if u, ok := upstreamauth.AuthorizationURL(err); !ok || u != "" || !strings.HasSuffix(err.Error(), where) {
		t.Fatalf("bob on the worker: %q %v", u, err)
	}

	r.authorize(t, gw, "key:ann")
	first, err := r.vault.Token(ctx, "key:ann", "fx")
	if err != nil {
		t.Fatal(err)
	}
	// The code grant's token (a minute) is within the worker's leeway.
	if who, err := whoami(ctx, worker, "key:ann", "fx", r.fx.URL); err != nil || who != "ann" {
		t.Fatalf("ann on the worker: %q %v", who, err)
	}
	if _, refreshs := r.counts.get(); refreshs != 1 {
		t.Fatalf("%d refreshes, want the worker's one", refreshs)
	}
	now, err := r.vault.Token(ctx, "key:ann", "fx")
	if err != nil || now.AccessToken == first.AccessToken {
		t.Fatalf("the vault does not hold the worker's refreshed token: %v", err)
	}
	if who, err := whoami(ctx, gw, "key:ann", "fx", r.fx.URL); err != nil || who != "ann" {
		t.Fatalf("ann on the gateway after the worker's refresh: %q %v", who, err)
	}

	// An upstream whose client the gateway would register: the worker,
	// refreshing a token, does not register one of its own.
	other := upstreamauth.Upstream{Name: "up", URL: cimdUpstream(t, r)}
	if err := worker.Add(other); err != nil {
		t.Fatal(err)
	}
	if err := r.vault.PutToken(ctx, "key:ann", "up", vault.OAuthToken{AccessToken: "stale", RefreshToken: "r", TokenType: "Bearer",
		Expiry: time.Now().Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	_, err = worker.Token(ctx, "key:ann", "up")
	if upstreamauth.KindOf(err) != upstreamauth.KindRegistration || !strings.Contains(err.Error(), where) {
		t.Fatalf("a refresh without the gateway's registration: %v", err)
	}
	if regs, _ := r.counts.get(); regs != 0 {
		t.Fatalf("the worker registered %d clients", regs)
	}
	if _, err := r.vault.Token(ctx, "key:ann", "up"); err != nil {
		t.Fatalf("the token was given up: %v", err)
	}
}
