package testservers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
// TOOLMUX_REQUIRE_PEERS is set (Missing).
func Hydra(tb testing.TB) string {
	tb.Helper()
	hydraBin.once.Do(func() { hydraBin.bin, hydraBin.err = BuildHydra() })
	if hydraBin.err != nil {
		Missing(tb, "ORY Hydra could not be built (make idp, or make test, builds it): %v", hydraBin.err)
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

	// Login is the login and consent app Hydra sends a person to (its
	// urls.login and urls.consent): a form asking a user name, which it
	// accepts as the subject without a password, and a consent it gives
	// at once (HydraServer.AddUser, consentApp).
	Login string

	out *SyncBuffer
	// claims are added to the tokens of each client (by client id) by
	// Hydra's token hook; Hydra puts them under the token's "ext" claim.
	mu     sync.Mutex
	claims map[string]map[string]any
	users  map[string]HydraUser
	logins int // logins accepted by the app
}

// HydraUser is a person of the login app: the claims the consent gives
// the ID token (name, groups) and the access token (groups, which Hydra
// puts under ext) of a login as Subject.
type HydraUser struct {
	Subject, Name string
	Groups        []string
}

// AddUser makes the login app give u's claims to the tokens of a login as
// u.Subject (any other name logs in too, with no claims but its subject).
func (h *HydraServer) AddUser(u HydraUser) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.users[u.Subject] = u
}

// Logins is how many logins the login app accepted.
func (h *HydraServer) Logins() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.logins
}

// StartHydra runs `hydra serve all --dev` on free ports of 127.0.0.1,
// issuing JWT access tokens unless a client asks for opaque ones, with
// dynamic client registration (RFC 7591) open at /oauth2/register, and
// waits until it is ready. It is killed when the test ends.
func StartHydra(tb testing.TB) *HydraServer {
	tb.Helper()
	bin := Hydra(tb)
	h := &HydraServer{out: &SyncBuffer{}, claims: map[string]map[string]any{}, users: map[string]HydraUser{}}
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
	app := httptest.NewServer(h.consentApp())
	tb.Cleanup(app.Close)
	h.Login = app.URL
	// A free port may be taken by another process before Hydra binds it:
	// then Hydra starts again on others.
	for attempt := 1; ; attempt++ {
		err := h.start(tb, bin, hook.URL)
		if err == nil {
			return h
		}
		if !errors.Is(err, errPortTaken) || attempt == 5 {
			tb.Fatal(err)
		}
	}
}

// errPortTaken says a port Hydra was given was taken before it bound it.
var errPortTaken = errors.New("a port was taken before hydra bound it")

// start runs Hydra on two free ports, with its token hook at hook, and
// waits until it is ready; errPortTaken when one of them was taken.
func (h *HydraServer) start(tb testing.TB, bin, hook string) error {
	public, admin := FreePort(tb), FreePort(tb)
	h.Issuer = fmt.Sprintf("http://127.0.0.1:%d", public)
	h.Admin = fmt.Sprintf("http://127.0.0.1:%d", admin)
	conf := fmt.Sprintf(`dsn: memory
urls:
  self:
    issuer: %s
  login: %s/login
  consent: %s/consent
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
oidc:
  dynamic_client_registration:
    enabled: true
webfinger:
  oidc_discovery:
    client_registration_url: %s/oauth2/register
`, h.Issuer, h.Login, h.Login, public, admin, hook, h.Issuer)
	cf := filepath.Join(tb.TempDir(), "hydra.yaml")
	if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
		return err
	}
	out := &SyncBuffer{}
	cmd := exec.Command(bin, "serve", "all", "--dev", "--sqa-opt-out", "-c", cf)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
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
	h.out = out
	deadline := time.Now().Add(60 * time.Second)
	for !h.ready() {
		select {
		case <-exited:
			if strings.Contains(out.String(), "address already in use") {
				return errPortTaken
			}
			return fmt.Errorf("hydra exited before it was ready:\n%s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hydra was not ready within 60s:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond) // polling its readiness endpoints
	}
	return nil
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
// client_credentials grant unless GrantTypes says otherwise.
type HydraClient struct {
	ID, Secret string
	// GrantTypes are its grants; nil: client_credentials. With
	// authorization_code, it may be given codes (response type code) at
	// RedirectURIs.
	GrantTypes   []string
	RedirectURIs []string
	// TokenAuthMethod is how it authenticates at the token endpoint
	// (client_secret_basic, client_secret_post, none for a public client);
	// "": client_secret_basic.
	TokenAuthMethod string
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
	grants := c.GrantTypes
	if grants == nil {
		grants = []string{"client_credentials"}
	}
	method := c.TokenAuthMethod
	if method == "" {
		method = "client_secret_basic"
	}
	body := map[string]any{"client_id": c.ID, "grant_types": grants,
		"audience": c.Audience, "scope": c.Scope, "token_endpoint_auth_method": method, "access_token_strategy": strategy}
	if c.Secret != "" {
		body["client_secret"] = c.Secret
	}
	if len(c.RedirectURIs) > 0 {
		body["redirect_uris"], body["response_types"] = c.RedirectURIs, []string{"code"}
	}
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

// SetLifespans sets the lifetime of the access tokens client id gets by
// the authorization code grant (code) and by a refresh (refresh).
func (h *HydraServer) SetLifespans(tb testing.TB, id string, code, refresh time.Duration) {
	tb.Helper()
	h.adminJSON(tb, http.MethodPut, "/admin/clients/"+url.PathEscape(id)+"/lifespans",
		map[string]any{"authorization_code_grant_access_token_lifespan": code.String(),
			"refresh_token_grant_access_token_lifespan": refresh.String()}, http.StatusOK)
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

// consentApp is the login and consent app of a HydraServer (its
// urls.login and urls.consent), answering Hydra through its admin API:
//
//   - GET /login?login_challenge=…: a form asking a user name (a login
//     Hydra remembers is accepted at once);
//   - POST /login: the login accepted, its subject the name typed, not
//     remembered (every login asks again);
//   - GET /consent?consent_challenge=…: the consent given at once, to the
//     scopes asked, with the user's claims (AddUser) in the ID token and
//     the access token, and to the audience asked: the audience parameter,
//     and the resource parameter (RFC 8707), which Hydra 2.3.0 ignores
//     (it would issue a token with no audience): the consent grants it.
func (h *HydraServer) consentApp() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		challenge := r.URL.Query().Get("login_challenge")
		var lr struct {
			Skip    bool   `json:"skip"`
			Subject string `json:"subject"`
		}
		if err := h.admin(r.Context(), http.MethodGet, "/admin/oauth2/auth/requests/login?login_challenge="+url.QueryEscape(challenge), nil, &lr); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if lr.Skip {
			h.acceptLogin(w, r, challenge, lr.Subject)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>Sign in (test IdP)</title>
<form method="post" action="/login"><input type="hidden" name="challenge" value="%s">
<label>User name <input id="username" name="username" autocomplete="off"></label>
<button id="sign-in" type="submit">Sign in</button></form>`, html.EscapeString(challenge))
	})
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		user := strings.TrimSpace(r.PostFormValue("username"))
		if user == "" {
			http.Error(w, "a user name is needed", http.StatusBadRequest)
			return
		}
		h.acceptLogin(w, r, r.PostFormValue("challenge"), user)
	})
	mux.HandleFunc("GET /consent", func(w http.ResponseWriter, r *http.Request) {
		challenge := r.URL.Query().Get("consent_challenge")
		var cr struct {
			Subject    string   `json:"subject"`
			Scope      []string `json:"requested_scope"`
			Audience   []string `json:"requested_access_token_audience"`
			RequestURL string   `json:"request_url"`
		}
		if err := h.admin(r.Context(), http.MethodGet, "/admin/oauth2/auth/requests/consent?consent_challenge="+url.QueryEscape(challenge), nil, &cr); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		audience := cr.Audience
		if u, err := url.Parse(cr.RequestURL); err == nil {
			for _, res := range u.Query()["resource"] {
				if !slices.Contains(audience, res) {
					audience = append(audience, res)
				}
			}
		}
		h.mu.Lock()
		u := h.users[cr.Subject]
		h.mu.Unlock()
		idClaims, atClaims := map[string]any{}, map[string]any{}
		if u.Name != "" {
			idClaims["name"] = u.Name
		}
		if u.Groups != nil {
			idClaims["groups"], atClaims["groups"] = u.Groups, u.Groups
		}
		accept := map[string]any{"grant_scope": cr.Scope, "grant_access_token_audience": audience, "remember": false,
			"session": map[string]any{"id_token": idClaims, "access_token": atClaims}}
		var to struct {
			RedirectTo string `json:"redirect_to"`
		}
		if err := h.admin(r.Context(), http.MethodPut, "/admin/oauth2/auth/requests/consent/accept?consent_challenge="+url.QueryEscape(challenge), accept, &to); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		http.Redirect(w, r, to.RedirectTo, http.StatusFound)
	})
	return mux
}

// acceptLogin accepts the login of challenge as subject, and sends the
// browser back to Hydra.
func (h *HydraServer) acceptLogin(w http.ResponseWriter, r *http.Request, challenge, subject string) {
	var to struct {
		RedirectTo string `json:"redirect_to"`
	}
	if err := h.admin(r.Context(), http.MethodPut, "/admin/oauth2/auth/requests/login/accept?login_challenge="+url.QueryEscape(challenge),
		map[string]any{"subject": subject, "remember": false}, &to); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	h.mu.Lock()
	h.logins++
	h.mu.Unlock()
	http.Redirect(w, r, to.RedirectTo, http.StatusFound)
}

// admin makes a request of Hydra's admin API from the login app (not a
// test's goroutine: it returns what failed).
func (h *HydraServer) admin(ctx context.Context, method, path string, body, into any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.Admin+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("hydra %s %s: %s %s", method, path, resp.Status, out)
	}
	return json.Unmarshal(out, into)
}

// challengeRE finds the login challenge in the login app's form.
var challengeRE = regexp.MustCompile(`name="challenge" value="([^"]*)"`)

// LogIn goes through a login as a browser would, without one: from start
// (a client's authorization URL, or a page that redirects to it) to the
// login app's form, which it fills with user, then through the consent
// back towards the client, until a redirect to an address beginning with
// stopAt (the client's redirect URI), which it does not follow and
// returns (its query holds the code and the state). jar keeps the
// cookies, Hydra's and the client's.
func (h *HydraServer) LogIn(tb testing.TB, jar http.CookieJar, start, user, stopAt string) *url.URL {
	tb.Helper()
	var stopped *url.URL
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), stopAt) {
			stopped = req.URL
			return http.ErrUseLastResponse
		}
		if len(via) > 20 {
			return errors.New("more than 20 redirects")
		}
		return nil
	}}
	resp, err := c.Get(start)
	if err != nil {
		tb.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := challengeRE.FindSubmatch(body)
	if resp.StatusCode != http.StatusOK || m == nil {
		tb.Fatalf("the login did not reach the login form (%s): %s %s", resp.Request.URL, resp.Status, body)
	}
	resp, err = c.PostForm(h.Login+"/login", url.Values{"challenge": {html.UnescapeString(string(m[1]))}, "username": {user}})
	if err != nil {
		tb.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if stopped == nil {
		tb.Fatalf("the login did not come back to %s: %s %s (at %s)", stopAt, resp.Status, body, resp.Request.URL)
	}
	return stopped
}
