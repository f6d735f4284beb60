package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/toolmux/toolmux/internal/testservers"
)

// The web page logs in at a real identity provider, ORY Hydra, in a real
// Chromium, against a real toolmux serve: the page offers to log in, the
// browser goes through Hydra's login and consent (the test's login app),
// comes back logged in, shows who, lists the tools; the session's cookies
// are HttpOnly (the CSRF token's not), SameSite=Lax, on the whole path,
// bounded in time; what changes something needs the CSRF header; the MCP
// routes take no cookie; a forged cookie, or one logged out, is refused
// 401; a session past its age is refused too (docs/identity.md).

const pageSecretEnv = "TOOLMUX_TEST_PAGE_SECRET"

// hydraConfig is a configuration of the fixture server with h's access
// tokens accepted (their groups under Hydra's ext), the scope mcp
// required, and extra keys of auth.
func hydraConfig(t *testing.T, h *testservers.HydraServer, extra string) string {
	return fmt.Sprintf("servers:\n  fx:\n    command: %s\n    trust: true\nauth:\n  issuers:\n    - issuer: %s\n  claims: {groups: ext.groups}\n  scopes: [mcp]\n%s",
		testservers.Fixture(t), h.Issuer, extra)
}

// pageConfig is hydraConfig with h's login on the page (client
// toolmux-page, its secret in pageSecretEnv), and extra keys of auth.page.
func pageConfig(t *testing.T, h *testservers.HydraServer, extra string) string {
	return hydraConfig(t, h, fmt.Sprintf("  page:\n    issuer: %s\n    client_id: toolmux-page\n    client_secret_env: %s\n    claims: {groups: groups}\n%s",
		h.Issuer, pageSecretEnv, extra))
}

// startPageServe starts serve with pageConfig and registers its page's
// client at Hydra, redirected to the gateway's own /auth/callback.
func startPageServe(t *testing.T, h *testservers.HydraServer, extra string) *serveProc {
	t.Helper()
	p := startServeEnv(t, binary, workspace(t, pageConfig(t, h, extra)), "", []string{pageSecretEnv + "=" + hydraSecret})
	h.CreateClient(t, testservers.HydraClient{ID: "toolmux-page", Secret: hydraSecret, GrantTypes: []string{"authorization_code"},
		RedirectURIs: []string{p.url("/auth/callback")}, Scope: "openid profile email"})
	if !strings.Contains(p.stderr.String(), "the web page logs in at "+h.Issuer+" (client toolmux-page)") {
		t.Errorf("serve did not say where the page logs in:\n%s", p.stderr.String())
	}
	return p
}

// request makes a request of the gateway with a session's cookie and
// headers, and returns its status and body.
func request(t *testing.T, method, u string, cookie *http.Cookie, header map[string]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if cookie != nil {
		req.AddCookie(cookie)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestBrowserPageLogin(t *testing.T) {
	t.Parallel()
	h := testservers.StartHydra(t)
	h.AddUser(testservers.HydraUser{Subject: "alice", Name: "Alice Liddell", Groups: []string{"eng"}})
	p := startPageServe(t, h, "")
	b := newUIBrowser(t)

	b.do(chromedp.Navigate(p.url("/")))
	b.visible(`#login`)
	b.until("the stream's state", `document.getElementById('conn').textContent === 'log in needed'`)
	if !uiEval[bool](b, `document.getElementById('token-dialog').open === false && document.getElementById('who').hidden && document.getElementById('logout').hidden`) {
		t.Error("the page asks for a token, or shows someone, before logging in")
	}
	b.shot("log-in")
	b.do(chromedp.Click(chromedp.CSS(`#login`)))
	// Hydra sends the browser to the login app's form.
	b.visible(`#username`)
	b.do(chromedp.SendKeys(chromedp.CSS(`#username`), "alice"))
	b.do(chromedp.Click(chromedp.CSS(`#sign-in`)))
	// Back on the page, logged in.
	b.visible(`#who`)
	b.until("the caller's name", `document.getElementById('who').textContent === 'Alice Liddell'`)
	b.visible(`#logout`)
	b.visible(`#conn[data-state="live"]`)
	if !uiEval[bool](b, `document.getElementById('login').hidden && location.pathname === '/' && location.search === ''`) {
		t.Errorf("after the login the page is at %s", uiEval[string](b, `location.href`))
	}
	b.shot("logged-in")
	if h.Logins() != 1 {
		t.Errorf("%d logins at the provider", h.Logins())
	}

	b.do(chromedp.Navigate(p.url("/#catalog")))
	b.visible(`#tools tr[data-name="fx__echo"]`)
	b.shot("catalog")
	// The page's own call form: a POST, which the page sends with the
	// session's CSRF token; the call is alice's, live on the page.
	b.do(chromedp.Navigate(p.url("/#call")))
	b.do(chromedp.WaitReady(chromedp.CSS(`#call-tool option[value="fx__echo"]`)))
	b.fill(`#call-tool`, "fx__echo")
	b.do(chromedp.SetValue(chromedp.CSS(`#call-args`), `{"message": "from the page"}`), chromedp.Click(chromedp.CSS(`#call-submit`)))
	b.visible(`#call-result .record[data-outcome="success"]`)
	b.shot("call")

	// The API names the session's caller.
	info := uiEval[string](b, `fetch('/api/info').then(r => r.text())`)
	var in struct {
		Caller struct {
			Name, Method string
			Groups       []string
		}
	}
	if err := json.Unmarshal([]byte(info), &in); err != nil || in.Caller.Name != "Alice Liddell" ||
		in.Caller.Method != "session" || strings.Join(in.Caller.Groups, ",") != "eng" {
		t.Errorf("/api/info: %v %s", err, info)
	}

	// The cookies, as the browser keeps them.
	cookies := browserCookies(t, b, p.url("/"))
	session, csrf := cookies["toolmux_session"], cookies["toolmux_csrf"]
	if session == nil || csrf == nil {
		t.Fatalf("the browser's cookies: %v", cookies)
	}
	hours := (session.Expires - float64(time.Now().Unix())) / 3600
	if !session.HTTPOnly || session.Secure || session.SameSite != network.CookieSameSiteLax || session.Path != "/" || session.Session || hours < 7.9 || hours > 8.01 {
		t.Errorf("the session cookie: %+v (%.2fh)", session, hours)
	}
	if csrf.HTTPOnly || csrf.Secure || csrf.SameSite != network.CookieSameSiteLax || csrf.Path != "/" || csrf.Session {
		t.Errorf("the CSRF cookie: %+v", csrf)
	}
	if _, ok := cookies["toolmux_login"]; ok {
		t.Error("the login cookie outlives the login")
	}

	// What changes something needs the CSRF header: from the page itself
	// (its cookie sent by the browser), and from outside with the cookie.
	call := `fetch('/api/tools/fx/echo/call', {method: 'POST', headers: {'Content-Type': 'application/json'%s}, body: JSON.stringify({arguments: {message: 'hi'}})}).then(r => r.status)`
	if got := uiEval[int](b, fmt.Sprintf(call, "")); got != http.StatusForbidden {
		t.Errorf("a POST of the page without the CSRF header: %d", got)
	}
	if got := uiEval[int](b, fmt.Sprintf(call, `, 'X-CSRF-Token': document.cookie.split('; ').find(c => c.startsWith('toolmux_csrf=')).slice(13)`)); got != http.StatusOK {
		t.Errorf("a POST of the page with the CSRF header: %d", got)
	}
	ck := &http.Cookie{Name: session.Name, Value: session.Value}
	if status, body := request(t, http.MethodPost, p.url("/api/tools/fx/echo/call"), ck, nil, `{"arguments": {"message": "hi"}}`); status != http.StatusForbidden || !strings.Contains(body, "X-CSRF-Token") {
		t.Errorf("a POST with the cookie, without the CSRF header: %d %s", status, body)
	}
	if status, body := request(t, http.MethodPost, p.url("/api/tools/fx/echo/call"), ck, map[string]string{"X-CSRF-Token": csrf.Value}, `{"arguments": {"message": "hi"}}`); status != http.StatusOK {
		t.Errorf("a POST with the cookie and the CSRF header: %d %s", status, body)
	}
	// The MCP routes take no cookie.
	if status, _ := request(t, http.MethodPost, p.url("/mcp"), ck, map[string]string{"X-CSRF-Token": csrf.Value}, `{"jsonrpc":"2.0","id":1,"method":"ping"}`); status != http.StatusUnauthorized {
		t.Errorf("/mcp with the session's cookie: %d", status)
	}
	// A forged cookie: 401, and where to log in.
	forged := &http.Cookie{Name: "toolmux_session", Value: strings.Repeat("A", len(session.Value))}
	if status, body := request(t, http.MethodGet, p.url("/api/tools"), forged, nil, ""); status != http.StatusUnauthorized || !strings.Contains(body, `"login":"/auth/login"`) {
		t.Errorf("a forged session cookie: %d %s", status, body)
	}

	// Log out: the page offers to log in again; the cookie is no more.
	b.do(chromedp.Click(chromedp.CSS(`#logout`)))
	b.visible(`#login`)
	b.until("no caller shown", `document.getElementById('who').hidden`)
	b.shot("logged-out")
	if status, _ := request(t, http.MethodGet, p.url("/api/tools"), ck, nil, ""); status != http.StatusUnauthorized {
		t.Errorf("the session's cookie after the logout: %d", status)
	}
	if c := browserCookies(t, b, p.url("/")); c["toolmux_session"] != nil || c["toolmux_csrf"] != nil {
		t.Errorf("the browser keeps the session's cookies after the logout: %v", c)
	}
	for _, secret := range []string{session.Value, csrf.Value, hydraSecret} {
		if strings.Contains(p.stderr.String(), secret) {
			t.Errorf("serve's output holds a secret: %s", p.stderr.String())
		}
	}
}

// browserCookies returns the cookies the browser would send to u, by name.
func browserCookies(t *testing.T, b *uiBrowser, u string) map[string]*network.Cookie {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	var got []*network.Cookie
	err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		res, err := cdp.Call(ctx, tg, network.GetCookies, network.GetCookiesParams{URLs: []string{u}})
		got = res.Cookies
		return err
	}))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*network.Cookie{}
	for _, c := range got {
		out[c.Name] = c
	}
	return out
}

// A session lasts auth.page.session_max_age: past it, its cookie is
// refused (401, where to log in). The login here is a browser's without
// one (testservers' LogIn), the cookies in a jar.
func TestPageSessionExpiresHydra(t *testing.T) {
	t.Parallel()
	h := testservers.StartHydra(t)
	p := startPageServe(t, h, "    session_max_age: 2s\n")
	jar, _ := cookiejar.New(nil)
	back := h.LogIn(t, jar, p.url("/auth/login"), "bob", p.url("/auth/callback"))
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(back.String())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the callback: %s", resp.Status)
	}
	u, _ := url.Parse(p.url("/"))
	var session *http.Cookie
	for _, ck := range jar.Cookies(u) {
		if ck.Name == "toolmux_session" {
			session = ck
		}
	}
	if session == nil {
		t.Fatal("no session cookie")
	}
	if status, body := request(t, http.MethodGet, p.url("/api/info"), session, nil, ""); status != http.StatusOK || !strings.Contains(body, `"name": "bob"`) {
		t.Fatalf("with the session: %d %s", status, body)
	}
	if !testservers.Eventually(20*time.Second, func() bool {
		status, _ := request(t, http.MethodGet, p.url("/api/info"), session, nil, "")
		return status == http.StatusUnauthorized
	}) {
		t.Fatal("a session of 2s is still good")
	}
	if status, body := request(t, http.MethodGet, p.url("/api/tools"), session, nil, ""); status != http.StatusUnauthorized || !strings.Contains(body, "log in again") {
		t.Errorf("an expired session: %d %s", status, body)
	}
}

// The page's walk-through of docs/identity.md works as written, against
// Hydra: its client registered as its curl says, its toolmux.yaml and the
// secret of its command line (the addresses made the test's), a login,
// and the session's caller.
func TestIdentityDocPageWalkthrough(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "identity.md"))
	if err != nil {
		t.Fatal(err)
	}
	yamlBlock := regexp.MustCompile("(?ms)^```yaml toolmux.yaml \\(the page\\)\n(.*?)^```$").FindSubmatch(doc)
	clientJSON := regexp.MustCompile(`(?s)/admin/clients -H 'Content-Type: application/json' -d '(\{\s*"client_id": "toolmux-page".*?\})'`).FindSubmatch(doc)
	secret := regexp.MustCompile(`(?m)^TOOLMUX_PAGE_SECRET=(\S+) toolmux serve$`).FindSubmatch(doc)
	if yamlBlock == nil || clientJSON == nil || secret == nil {
		t.Fatal("the page's walk-through: its toolmux.yaml, client or command line not found")
	}
	h := testservers.StartHydra(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testservers.FreePort(t))
	local := strings.NewReplacer("http://127.0.0.1:8931", "http://"+addr, "http://127.0.0.1:4444", h.Issuer)
	resp, err := http.Post(h.Admin+"/admin/clients", "application/json", strings.NewReader(local.Replace(string(clientJSON[1]))))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("the client of the walk-through: %s %s", resp.Status, b)
	}
	p := startServeEnv(t, binary, workspace(t, local.Replace(string(yamlBlock[1]))), "", []string{"TOOLMUX_PAGE_SECRET=" + string(secret[1])}, "--addr", addr)
	p.addr = addr
	if !strings.Contains(p.stderr.String(), "toolmux: the web page logs in at "+h.Issuer+" (client toolmux-page)") {
		t.Errorf("serve did not say what the walk-through says:\n%s", p.stderr.String())
	}
	jar, _ := cookiejar.New(nil)
	back := h.LogIn(t, jar, p.url("/auth/login"), "alice", p.url("/auth/callback"))
	c := &http.Client{Jar: jar}
	resp, err = c.Get(back.String())
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/" {
		t.Fatalf("back from the login: %s at %s: %s", resp.Status, resp.Request.URL, b)
	}
	resp, err = c.Get(p.url("/api/info"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"name": "alice"`) || !strings.Contains(string(b), `"method": "session"`) {
		t.Errorf("/api/info with the session: %s %s", resp.Status, b)
	}
}

// auth.page beyond loopback needs an https auth.resource: serve refuses
// to start without one, saying why.
func TestPageNeedsHTTPSBeyondLoopback(t *testing.T) {
	t.Parallel()
	cfg := "auth:\n  page:\n    issuer: http://127.0.0.1:1\n    client_id: page\n    client_secret_env: " + pageSecretEnv + "\n"
	dir := workspace(t, cfg)
	cmd := exec.Command(binary, "serve", "--addr", fmt.Sprintf("0.0.0.0:%d", testservers.FreePort(t)))
	cmd.Dir = dir
	cmd.Env = append(modelFreeEnv(), "XDG_DATA_HOME="+t.TempDir(), pageSecretEnv+"=s3cret-of-the-page")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "auth.page beyond loopback needs auth.resource, the gateway's https URL") {
		t.Errorf("exit %v: %s", err, out)
	}
	// With an https resource, it serves.
	if err := os.WriteFile(filepath.Join(dir, "toolmux.yaml"), []byte(cfg+"  resource: https://gw.example.com\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	port := testservers.FreePort(t)
	cmd = exec.Command(binary, "serve", "--addr", fmt.Sprintf("0.0.0.0:%d", port))
	cmd.Dir = dir
	cmd.Env = append(modelFreeEnv(), "XDG_DATA_HOME="+t.TempDir(), pageSecretEnv+"=s3cret-of-the-page")
	var errb testservers.SyncBuffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if !testservers.Eventually(30*time.Second, func() bool { return strings.Contains(errb.String(), "serving") }) {
		t.Fatalf("serve did not start: %s", errb.String())
	}
	// Every request needs a credential; the page's API says where to log in.
	a := ask(t, fmt.Sprintf("http://127.0.0.1:%d", port), "/api/tools", "")
	if a.status != http.StatusUnauthorized || !strings.Contains(a.body, `"login":"/auth/login"`) {
		t.Errorf("without a credential: %+v", a)
	}
	if !strings.Contains(errb.String(), "warning: the web page's login") {
		t.Errorf("serve did not say the provider cannot be reached: %s", errb.String())
	}
}
