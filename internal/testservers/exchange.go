package testservers

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Token exchange (RFC 8693) end to end: an identity provider that
// exchanges tokens (ExchangeIdP, the exchangeidp command, built on
// zitadel/oidc), and an MCP server that trusts it (WhoAmI: the go-sdk's
// bearer-token middleware, verifying the provider's JWTs for its own
// audience, and a tool answering whose token it was sent).

// exchangeIdPBin is the exchangeidp command, built once per test binary.
var exchangeIdPBin built

// ExchangeIdPBinary builds the exchangeidp command once per test binary
// and returns its path. It is a module of its own (its go.mod requires
// zitadel/oidc, which toolmux's module does not), built in its directory
// with its own go.sum; the Go build cache keeps its packages, so that a
// build after the first costs a link. A failure to build skips the test,
// or fails it when TOOLMUX_REQUIRE_PEERS is set (Missing).
func ExchangeIdPBinary(tb testing.TB) string {
	tb.Helper()
	b := &exchangeIdPBin
	b.once.Do(func() {
		_, file, _, ok := runtime.Caller(0)
		if !ok {
			b.err = errors.New("the source of testservers is not known")
			return
		}
		dir, err := os.MkdirTemp("", "toolmux-exchangeidp-")
		if err != nil {
			b.err = err
			return
		}
		b.bin = filepath.Join(dir, "exchangeidp")
		cmd := exec.Command("go", "build", "-o", b.bin, ".")
		cmd.Dir = filepath.Join(filepath.Dir(file), "exchangeidp")
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
		b.out, b.err = cmd.CombinedOutput()
	})
	if b.err != nil {
		Missing(tb, "exchangeidp could not be built: %v\n%s", b.err, b.out)
	}
	return b.bin
}

// ExchangeIdPOptions configure an ExchangeIdP.
type ExchangeIdPOptions struct {
	// Audience is the aud of the callers' tokens: the gateway's resource.
	Audience string
	// Callers get tokens by client credentials (Token), by name, each
	// with its secret; a caller's subject is its name.
	Callers map[string]string
	// Exchangers are the clients allowed to exchange tokens (toolmux), by
	// id, each with its secret.
	Exchangers map[string]string
	// Targets are the audiences and resources tokens may be exchanged
	// for; any other is refused (invalid_target).
	Targets []string
	// Lifetime and ExchangeLifetime are how long a caller's token and an
	// exchanged one last (default: 5 minutes each).
	Lifetime, ExchangeLifetime time.Duration
}

// ExchangeIdP is the exchangeidp command running for a test.
type ExchangeIdP struct {
	// Issuer is its issuer identifier and URL (http://127.0.0.1:PORT):
	// discovery at /.well-known/openid-configuration, keys, tokens at
	// /oauth/token.
	Issuer string
	// TokenURL is its token endpoint.
	TokenURL string

	opts ExchangeIdPOptions
	out  *SyncBuffer
	stop func()
}

// StartExchangeIdP runs exchangeidp on a free port of 127.0.0.1 and waits
// until it serves. It is killed when the test ends (or by Stop).
func StartExchangeIdP(tb testing.TB, o ExchangeIdPOptions) *ExchangeIdP {
	tb.Helper()
	bin := ExchangeIdPBinary(tb)
	args := []string{"-audience", o.Audience}
	for name, secret := range o.Callers {
		args = append(args, "-caller", name+":"+secret)
	}
	for id, secret := range o.Exchangers {
		args = append(args, "-exchanger", id+":"+secret)
	}
	for _, t := range o.Targets {
		args = append(args, "-target", t)
	}
	if o.Lifetime > 0 {
		args = append(args, "-lifetime", o.Lifetime.String())
	}
	if o.ExchangeLifetime > 0 {
		args = append(args, "-exchange-lifetime", o.ExchangeLifetime.String())
	}
	idp := &ExchangeIdP{opts: o, out: &SyncBuffer{}}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = idp.out
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	// Its first line says where it serves; whatever follows is kept
	// with its stderr. Wait is called once stdout is read to its end.
	first := make(chan string, 1)
	exited := make(chan struct{})
	go func() {
		r := bufio.NewReader(stdout)
		line, _ := r.ReadString('\n')
		first <- line
		_, _ = io.Copy(idp.out, r)
		_ = cmd.Wait()
		close(exited)
	}()
	var once sync.Once
	idp.stop = func() {
		once.Do(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		})
	}
	tb.Cleanup(idp.stop)
	select {
	case line := <-first:
		issuer, ok := strings.CutPrefix(strings.TrimSpace(line), "issuer ")
		if !ok {
			idp.stop()
			tb.Fatalf("exchangeidp did not start: %q\n%s", line, idp.out.String())
		}
		idp.Issuer = issuer
		idp.TokenURL = issuer + "/oauth/token"
	case <-time.After(30 * time.Second):
		idp.stop()
		tb.Fatalf("exchangeidp did not start within 30s:\n%s", idp.out.String())
	}
	return idp
}

// Stop kills the provider now (its port then refuses connections).
func (idp *ExchangeIdP) Stop() { idp.stop() }

// Output returns what the provider wrote so far.
func (idp *ExchangeIdP) Output() string { return idp.out.String() }

// Token returns a new access token of caller (client credentials): a JWT
// whose subject is caller and whose audience is Options.Audience.
func (idp *ExchangeIdP) Token(tb testing.TB, caller string) string {
	tb.Helper()
	req, _ := http.NewRequest(http.MethodPost, idp.TokenURL, strings.NewReader(url.Values{"grant_type": {"client_credentials"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(caller), url.QueryEscape(idp.opts.Callers[caller]))
	req.Close = true // no idle connection left behind (goleak)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil || resp.StatusCode != http.StatusOK || tok.AccessToken == "" {
		tb.Fatalf("a token of %s: %d %v", caller, resp.StatusCode, err)
	}
	return tok.AccessToken
}

// ExchangeIdPStats is how many token requests of each grant the provider
// has answered or refused.
type ExchangeIdPStats struct {
	ClientCredentials int `json:"client_credentials"`
	TokenExchange     int `json:"token_exchange"`
}

// Stats returns how many token requests of each grant it has had.
func (idp *ExchangeIdP) Stats(tb testing.TB) ExchangeIdPStats {
	tb.Helper()
	req, _ := http.NewRequest(http.MethodGet, idp.Issuer+"/stats", nil)
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var s ExchangeIdPStats
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		tb.Fatal(err)
	}
	return s
}

// WhoAmI is an upstream MCP server over streamable HTTP that takes only
// access tokens of one issuer for its own audience: the go-sdk's
// auth.RequireBearerToken, with a verifier checking the token's
// signature by the issuer's keys (JWKS, by discovery), its issuer, its
// expiry and that its aud names Audience. Its tool "whoami" answers the
// token's subject and audience ({"sub": ..., "aud": [...]}).
type WhoAmI struct {
	// URL is its MCP endpoint (URL of the server + "/mcp"), and the
	// audience its tokens must name.
	URL string
	// Audience is what a token's aud must name: URL.
	Audience string

	srv *httptest.Server
	mu  sync.Mutex
	// refused counts the requests refused for their token.
	refused int
	// tokens are the bearer tokens it was sent, each once.
	tokens map[string]bool
}

// NewWhoAmI listens on 127.0.0.1 (URL is known) without serving yet:
// the issuer it trusts may need its URL first. Start serves.
func NewWhoAmI(tb testing.TB) *WhoAmI {
	tb.Helper()
	w := &WhoAmI{srv: httptest.NewUnstartedServer(nil)}
	w.URL = "http://" + w.srv.Listener.Addr().String() + "/mcp"
	w.Audience = w.URL
	tb.Cleanup(w.srv.Close)
	return w
}

// Refused is how many requests it refused for their token.
func (w *WhoAmI) Refused() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.refused
}

// Tokens returns every bearer token it was sent (the exchanged tokens,
// when it is reached by token exchange), each once: for a test to look
// for them where they must not be.
func (w *WhoAmI) Tokens() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.tokens))
	for t := range w.tokens {
		out = append(out, t)
	}
	return out
}

// Start serves, trusting the tokens of issuer.
func (w *WhoAmI) Start(tb testing.TB, issuer string) {
	tb.Helper()
	ctx := context.Background()
	keys := oidc.NewRemoteKeySet(ctx, issuer+"/keys")
	verifier := oidc.NewVerifier(issuer, keys, &oidc.Config{ClientID: w.Audience})
	verify := func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		w.mu.Lock()
		if w.tokens == nil {
			w.tokens = map[string]bool{}
		}
		w.tokens[token] = true
		w.mu.Unlock()
		t, err := verifier.Verify(ctx, token)
		if err != nil {
			w.mu.Lock()
			w.refused++
			w.mu.Unlock()
			return nil, fmt.Errorf("%w: %v", auth.ErrInvalidToken, err)
		}
		return &auth.TokenInfo{UserID: t.Subject, Expiration: t.Expiry, Extra: map[string]any{"aud": t.Audience}}, nil
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "whoami", Version: "1"}, nil)
	type who struct {
		Sub string   `json:"sub"`
		Aud []string `json:"aud"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "whoami", Description: "whose token this server was sent"},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, who, error) {
			ti := req.Extra.TokenInfo
			if ti == nil {
				return nil, who{}, errors.New("no token")
			}
			aud, _ := ti.Extra["aud"].([]string)
			return nil, who{Sub: ti.UserID, Aud: aud}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	mux := http.NewServeMux()
	mux.Handle("/mcp", auth.RequireBearerToken(verify, nil)(h))
	w.srv.Config.Handler = mux
	w.srv.Start()
}
