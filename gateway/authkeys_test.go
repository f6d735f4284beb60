package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/toolmux/toolmux/builtin"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/manager"
)

// While Auth.Required says no, requests pass without a caller (a serve
// started without keys or token); once it says yes, every route asks for
// a credential. TokenVerifier among other verifiers: the token is the
// caller default in group admin, whatever its form (the key prefix
// included), and any other credential is left to the next verifier.
func TestAuthRequiredAndTokenAmongKeys(t *testing.T) {
	src, err := builtin.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen []*identity.Caller
	)
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, identity.From(r.Context()))
		mu.Unlock()
	})
	g := gateway.New(m, gateway.Options{API: api})
	defer m.Close()
	defer g.Close()
	// A token of the keys' own form, which the keys do not know.
	token, key := identity.NewKeySecret(), identity.NewKeySecret()
	var required atomic.Bool
	auth := gateway.Auth{Required: required.Load, Verifier: identity.Verifiers{
		gateway.TokenVerifier(token), identity.NewKeys(identity.Key{Name: "ci", Groups: []string{"dev"}, Hash: identity.HashKey(key)})}}
	srv := httptest.NewServer(g.MuxAuth(auth, gateway.Security{Loopback: true}))
	defer srv.Close()
	get := func(cred string) int {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/info", nil)
		if cred != "" {
			req.Header.Set("Authorization", "Bearer "+cred)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	callers := func() []*identity.Caller {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
	if code, seen := get(""), callers(); code != 200 || len(seen) != 1 || seen[0] != nil {
		t.Fatalf("not required: %d %v", code, seen)
	}
	if code, _ := postAuth(t, srv.URL+"/mcp", "anything"); code != 200 {
		t.Fatalf("not required, /mcp: %d", code)
	}
	required.Store(true)
	if code := get(""); code != 401 {
		t.Fatalf("required, no credential: %d", code)
	}
	if code, _ := postAuth(t, srv.URL+"/mcp", "anything"); code != 401 {
		t.Fatalf("required, /mcp with an unknown credential: %d", code)
	}
	if code := get(identity.NewKeySecret()); code != 401 {
		t.Fatalf("required, an unknown key: %d", code)
	}
	if get(token) != 200 || get(key) != 200 || len(callers()) != 3 {
		t.Fatalf("the token and the key: %v", callers())
	}
	got := callers()[1:]
	if c := got[0]; c.Name != "default" || !c.In(gateway.AdminGroup) || c.Method != identity.MethodKey {
		t.Errorf("the token's caller: %+v", c)
	}
	if c := got[1]; c.Name != "ci" || !c.In("dev") || c.In(gateway.AdminGroup) {
		t.Errorf("the key's caller: %+v", c)
	}
}
