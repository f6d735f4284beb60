package testservers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ORY Hydra, a real OAuth 2 and OpenID Connect provider, for the identity
// tests: its access tokens (JWTs and opaque ones) are what toolmux serve
// is held to. It is built from its module on the Go module proxy (a
// program, not a dependency of toolmux), once into the user's cache
// directory; the Go build cache keeps the build's packages, so that a
// lost binary costs a link.

// HydraVersion is the version of ORY Hydra the tests run.
const HydraVersion = "v2.3.0"

const hydraModule = "github.com/ory/hydra/v2"

// hydraReplace is the one replace directive of Hydra's go.mod that points
// into a directory its module zip does not hold; without it the module
// it names comes from the proxy, at the version go.mod requires.
var hydraReplace = regexp.MustCompile(`(?m)^replace github\.com/ory/hydra-client-go/v2 => \./internal/httpclient\s*$`)

// BuildHydra builds ORY Hydra (HydraVersion) into the user's cache
// directory unless it is there already, and returns the binary's path.
// Builds of several test binaries at once take turns on a lock; the
// binary is put in place by rename, whole or not at all.
func BuildHydra() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "toolmux", "hydra-"+HydraVersion)
	bin := filepath.Join(dir, "hydra")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil // built while we waited
	}
	// The module's source, as the proxy serves it.
	out, err := exec.Command("go", "mod", "download", "-json", hydraModule+"@"+HydraVersion).Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %v", hydraModule, HydraVersion, errText(err))
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return "", fmt.Errorf("go mod download %s@%s: %s %v", hydraModule, HydraVersion, mod.Error, err)
	}
	src, err := os.MkdirTemp(dir, "src-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	// The module cache is read-only; CopyFS makes the copy writable.
	if err := os.CopyFS(src, os.DirFS(mod.Dir)); err != nil {
		return "", err
	}
	gomod := filepath.Join(src, "go.mod")
	b, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	if !hydraReplace.Match(b) {
		return "", fmt.Errorf("%s@%s's go.mod has no replace of hydra-client-go to drop: update BuildHydra", hydraModule, HydraVersion)
	}
	if err := os.WriteFile(gomod, hydraReplace.ReplaceAll(b, nil), 0o644); err != nil {
		return "", err
	}
	// -trimpath: the packages built do not depend on the temporary
	// directory's name, so the Go build cache serves the next build.
	// sqlite: DSN=memory is an in-memory SQLite database.
	tmp := bin + ".tmp"
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "sqlite,sqlite_omit_load_extension", "-o", tmp, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s@%s: %v\n%s", hydraModule, HydraVersion, err, out)
	}
	return bin, os.Rename(tmp, bin)
}

func errText(err error) string {
	if ee, ok := errors.AsType[*exec.ExitError](err); ok && len(ee.Stderr) > 0 {
		return strings.TrimSpace(string(ee.Stderr))
	}
	return err.Error()
}

var hydraBin struct {
	once sync.Once
	bin  string
	err  error
}

// Hydra returns the path of the hydra binary, built once per test binary
// (BuildHydra). A failure to build skips the test, or fails it when
// TOOLMUX_REQUIRE_PEERS is set.
func Hydra(tb testing.TB) string {
	tb.Helper()
	hydraBin.once.Do(func() { hydraBin.bin, hydraBin.err = BuildHydra() })
	if hydraBin.err != nil {
		if os.Getenv("TOOLMUX_REQUIRE_PEERS") != "" {
			tb.Fatalf("ORY Hydra could not be built (make idp): %v", hydraBin.err)
		}
		tb.Skipf("ORY Hydra could not be built (make idp, or make test, builds it): %v", hydraBin.err)
	}
	return hydraBin.bin
}

// HydraServer is a Hydra running for a test, its database in memory.
type HydraServer struct {
	// Issuer is its issuer identifier and public URL
	// (http://127.0.0.1:PORT): discovery, keys, tokens, revocation.
	Issuer string
	// Admin is its admin API's URL: clients, keys, introspection
	// (Admin + "/admin/oauth2/introspect").
	Admin string

	out *SyncBuffer
	// claims are added to the tokens of each client (by client id) by
	// Hydra's token hook; Hydra puts them under the token's "ext" claim.
	mu     sync.Mutex
	claims map[string]map[string]any
}

// StartHydra runs `hydra serve all --dev` on free ports of 127.0.0.1,
// issuing JWT access tokens unless a client asks for opaque ones, and
// waits until it is ready. It is killed when the test ends.
func StartHydra(tb testing.TB) *HydraServer {
	tb.Helper()
	bin := Hydra(tb)
	h := &HydraServer{out: &SyncBuffer{}, claims: map[string]map[string]any{}}
	// The token hook: Hydra asks it for the claims of each token it
	// issues (oauth2.token_hook).
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Request struct {
				ClientID string `json:"client_id"`
			} `json:"request"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		h.mu.Lock()
		claims := h.claims[req.Request.ClientID]
		h.mu.Unlock()
		if claims == nil {
			w.WriteHeader(http.StatusNoContent) // the token as it is
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"session": map[string]any{"access_token": claims}})
	}))
	tb.Cleanup(hook.Close)
	public, admin := FreePort(tb), FreePort(tb)
	h.Issuer = fmt.Sprintf("http://127.0.0.1:%d", public)
	h.Admin = fmt.Sprintf("http://127.0.0.1:%d", admin)
	conf := fmt.Sprintf(`dsn: memory
urls:
  self:
    issuer: %s
serve:
  public: {host: 127.0.0.1, port: %d}
  admin: {host: 127.0.0.1, port: %d}
strategies:
  access_token: jwt
secrets:
  system: [toolmux-test-secret-of-32-characters]
log:
  level: warn
oauth2:
  token_hook: %s
`, h.Issuer, public, admin, hook.URL)
	cf := filepath.Join(tb.TempDir(), "hydra.yaml")
	if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "all", "--dev", "--sqa-opt-out", "-c", cf)
	cmd.Stdout, cmd.Stderr = h.out, h.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	tb.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	deadline := time.Now().Add(60 * time.Second)
	for !h.ready() {
		select {
		case <-exited:
			tb.Fatalf("hydra exited before it was ready:\n%s", h.out.String())
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("hydra was not ready within 60s:\n%s", h.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return h
}

// ready reports whether both of Hydra's APIs answer as ready.
func (h *HydraServer) ready() bool {
	for _, u := range []string{h.Issuer + "/health/ready", h.Admin + "/health/ready"} {
		resp, err := http.Get(u)
		if err != nil {
			return false
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false
		}
	}
	return true
}

// Output returns what Hydra wrote so far.
func (h *HydraServer) Output() string { return h.out.String() }

// HydraClient is an OAuth client of a HydraServer, of the
// client_credentials grant.
type HydraClient struct {
	ID, Secret string
	// Audience are the audiences its tokens may be issued for.
	Audience []string
	// Scope are the scopes it may ask for, separated by spaces.
	Scope string
	// Opaque makes its access tokens opaque, for introspection; else
	// they are JWTs.
	Opaque bool
	// Lifespan, when set, is its access tokens' lifetime.
	Lifespan time.Duration
	// Claims are added to its tokens, under their ext claim (Hydra's
	// token hook).
	Claims map[string]any
}

// CreateClient registers c with the admin API.
func (h *HydraServer) CreateClient(tb testing.TB, c HydraClient) {
	tb.Helper()
	strategy := "jwt"
	if c.Opaque {
		strategy = "opaque"
	}
	body := map[string]any{"client_id": c.ID, "client_secret": c.Secret, "grant_types": []string{"client_credentials"},
		"audience": c.Audience, "scope": c.Scope, "token_endpoint_auth_method": "client_secret_basic", "access_token_strategy": strategy}
	h.adminJSON(tb, http.MethodPost, "/admin/clients", body, http.StatusCreated)
	if c.Lifespan > 0 {
		h.adminJSON(tb, http.MethodPut, "/admin/clients/"+url.PathEscape(c.ID)+"/lifespans",
			map[string]any{"client_credentials_grant_access_token_lifespan": c.Lifespan.String()}, http.StatusOK)
	}
	if c.Claims != nil {
		h.mu.Lock()
		h.claims[c.ID] = c.Claims
		h.mu.Unlock()
	}
}

// Token gets an access token of client id by the client_credentials
// grant, for audience (none: the token names none) and scope.
func (h *HydraServer) Token(tb testing.TB, id, secret, audience, scope string) string {
	tb.Helper()
	form := url.Values{"scope": {scope}}
	if audience != "" {
		form.Set("audience", audience)
	}
	return h.TokenForm(tb, id, secret, form)
}

// TokenForm gets an access token of client id by the client_credentials
// grant, with the further parameters of form (resource, say).
func (h *HydraServer) TokenForm(tb testing.TB, id, secret string, form url.Values) string {
	tb.Helper()
	form = maps.Clone(form)
	form.Set("grant_type", "client_credentials")
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	h.publicForm(tb, "/oauth2/token", id, secret, form, &tok)
	if tok.AccessToken == "" {
		tb.Fatal("hydra issued no access token")
	}
	return tok.AccessToken
}

// Revoke revokes token, of client id (RFC 7009).
func (h *HydraServer) Revoke(tb testing.TB, id, secret, token string) {
	tb.Helper()
	h.publicForm(tb, "/oauth2/revoke", id, secret, url.Values{"token": {token}}, nil)
}

// RotateKeys adds a new key to the set Hydra signs access tokens with;
// the next tokens are signed by it.
func (h *HydraServer) RotateKeys(tb testing.TB) (kid string) {
	tb.Helper()
	var set struct {
		Keys []struct {
			Kid string `json:"kid"`
		} `json:"keys"`
	}
	b := h.adminJSON(tb, http.MethodPost, "/admin/keys/hydra.jwt.access-token", map[string]any{"alg": "RS256", "use": "sig"}, http.StatusCreated)
	if err := json.Unmarshal(b, &set); err != nil || len(set.Keys) == 0 {
		tb.Fatalf("hydra's new key: %v %s", err, b)
	}
	return set.Keys[0].Kid
}

func (h *HydraServer) adminJSON(tb testing.TB, method, path string, body any, want int) []byte {
	tb.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(context.Background(), method, h.Admin+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		tb.Fatalf("hydra %s %s: %s %s", method, path, resp.Status, out)
	}
	return out
}

func (h *HydraServer) publicForm(tb testing.TB, path, id, secret string, form url.Values, into any) {
	tb.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, h.Issuer+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(secret))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("hydra %s: %s %s", path, resp.Status, out)
	}
	if into != nil {
		if err := json.Unmarshal(out, into); err != nil {
			tb.Fatalf("hydra %s: %v %s", path, err, out)
		}
	}
}
