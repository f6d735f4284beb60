package percaller_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/percaller"
	"github.com/toolmux/toolmux/tool"
	"github.com/toolmux/toolmux/vault"
	"github.com/toolmux/toolmux/vault/vaulttest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newVault is a vault in a temporary directory, with a key.
func newVault(t *testing.T) *vault.Vault {
	t.Helper()
	return vault.New(vault.NewFileStore(t.TempDir()), vaulttest.Ring(t, vaulttest.NewKey(t)), vault.Options{})
}

// newSource is a per-caller source of the fixture (with whoami) whose
// callers' secret TOKEN goes in $FIXTURE_TOKEN.
func newSource(t *testing.T, v *vault.Vault, o percaller.Options) *percaller.Source {
	t.Helper()
	base := mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio, Command: testservers.Fixture(t), Args: []string{"-whoami"},
		Env: map[string]string{"FIXTURE_OTHER": "shared"}, ConnectTimeout: 10 * time.Second, StopGrace: time.Second}
	cred := &percaller.Secrets{Server: "fx", Vault: v, Secrets: []percaller.Secret{{Name: "TOKEN", Env: "FIXTURE_TOKEN"}}}
	s := percaller.New(base, cred, o)
	t.Cleanup(func() { s.Close() })
	return s
}

func as(name string) context.Context {
	return identity.With(context.Background(), &identity.Caller{Subject: identity.KeySubject(name), Name: name, Method: identity.MethodKey})
}

func setSecret(t *testing.T, v *vault.Vault, caller, value string) {
	t.Helper()
	if err := v.PutSecret(context.Background(), identity.KeySubject(caller), "fx", "TOKEN", []byte(value)); err != nil {
		t.Fatal(err)
	}
}

func whoami(t *testing.T, s *percaller.Source, ctx context.Context) testservers.Whoami {
	t.Helper()
	res, err := s.Call(ctx, "whoami", map[string]any{"env": "FIXTURE_TOKEN"})
	if err != nil {
		t.Fatal(err)
	}
	var w testservers.Whoami
	if err := json.Unmarshal([]byte(res.Text()), &w); err != nil {
		t.Fatalf("whoami answered %q: %v", res.Text(), err)
	}
	return w
}

// Two callers of one server each reach it in a process of their own,
// with their own secret in its environment.
func TestEachCallerOwnProcess(t *testing.T) {
	v := newVault(t)
	setSecret(t, v, "ann", "ann-secret")
	setSecret(t, v, "bob", "bob-secret")
	s := newSource(t, v, percaller.Options{})
	a, b := whoami(t, s, as("ann")), whoami(t, s, as("bob"))
	if a.Env != testservers.WhoamiSum("ann-secret") || b.Env != testservers.WhoamiSum("bob-secret") {
		t.Errorf("ann saw %q, bob saw %q", a.Env, b.Env)
	}
	if a.PID == b.PID {
		t.Errorf("one process (%d) for both callers", a.PID)
	}
	if again := whoami(t, s, as("ann")); again.PID != a.PID {
		t.Errorf("ann's second call in another process: %d, then %d", a.PID, again.PID)
	}
	if n := s.Connections(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
	if s.Credential() != tool.CredentialUserSecret {
		t.Errorf("credential %q", s.Credential())
	}
	// Close stops both processes.
	s.Close()
	for _, pid := range []int{a.PID, b.PID} {
		if !testservers.Eventually(5*time.Second, func() bool { return syscall.Kill(pid, 0) != nil }) {
			t.Errorf("process %d still runs after Close", pid)
		}
	}
}

// A caller without the secret, and a call with no caller, get
// auth_required saying what to do, and start nothing.
func TestAuthRequired(t *testing.T) {
	v := newVault(t)
	s := newSource(t, v, percaller.Options{})
	_, err := s.Call(as("carol"), "whoami", nil)
	if tool.KindOf(err) != tool.KindAuthRequired {
		t.Fatalf("kind %q: %v", tool.KindOf(err), err)
	}
	var ae *percaller.AuthRequiredError
	if !errors.As(err, &ae) || ae.Server != "fx" || len(ae.Missing) != 1 || ae.Missing[0] != "TOKEN" {
		t.Errorf("not the caller's missing secret: %#v", ae)
	}
	if !strings.Contains(err.Error(), "toolmux secrets set fx TOKEN") || !errors.Is(err, tool.ErrNotSent) {
		t.Errorf("error does not say what to do: %v", err)
	}
	if _, err := s.Call(context.Background(), "whoami", nil); tool.KindOf(err) != tool.KindAuthRequired {
		t.Errorf("no caller: %v", err)
	}
	if n := s.Connections(); n != 0 {
		t.Errorf("%d connections opened for callers without the secret", n)
	}
	// No caller has given a secret: nothing can list the tools.
	if _, err := s.Tools(context.Background()); tool.KindOf(err) != tool.KindAuthRequired {
		t.Errorf("listing with no holder: %v", err)
	}
}

// One connection more than max_connections closes the one unused
// longest; when every one is in use, it is refused.
func TestMaxConnections(t *testing.T) {
	v := newVault(t)
	for _, c := range []string{"ann", "bob", "carol"} {
		setSecret(t, v, c, c+"-secret")
	}
	s := newSource(t, v, percaller.Options{MaxConnections: 2})
	ann := whoami(t, s, as("ann"))
	whoami(t, s, as("bob"))
	whoami(t, s, as("carol")) // one more than allowed: ann's, unused longest, is closed
	if n := s.Connections(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
	if syscall.Kill(ann.PID, 0) == nil {
		t.Errorf("ann's process %d still runs", ann.PID)
	}

	// Bob and carol both in a call: ann's comes back refused.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	for _, c := range []string{"bob", "carol"} {
		go func() {
			_, err := s.Call(identity.With(ctx, identity.From(as(c))), "hang", nil)
			done <- err
		}()
	}
	if !testservers.Eventually(10*time.Second, func() bool {
		return s.Busy(identity.KeySubject("bob")) == 1 && s.Busy(identity.KeySubject("carol")) == 1
	}) {
		t.Fatal("the hanging calls did not start")
	}
	_, err := s.Call(as("ann"), "whoami", nil)
	var tm *percaller.TooManyError
	if !errors.As(err, &tm) || tm.Max != 2 || !strings.Contains(err.Error(), "servers.fx.auth.max_connections") {
		t.Errorf("a third caller while two calls run: %v", err)
	}
	cancel()
	for range 2 {
		<-done
	}
}

// A connection unused for idle_timeout is closed, its process with it.
func TestIdleConnectionsClosed(t *testing.T) {
	v := newVault(t)
	setSecret(t, v, "ann", "ann-secret")
	s := newSource(t, v, percaller.Options{IdleTimeout: 50 * time.Millisecond})
	w := whoami(t, s, as("ann"))
	if !testservers.Eventually(10*time.Second, func() bool { return s.Connections() == 0 }) {
		t.Fatal("the idle connection was not closed")
	}
	if !testservers.Eventually(5*time.Second, func() bool { return syscall.Kill(w.PID, 0) != nil }) {
		t.Errorf("process %d still runs", w.PID)
	}
	// The next call opens it again.
	if again := whoami(t, s, as("ann")); again.PID == w.PID || again.Env != testservers.WhoamiSum("ann-secret") {
		t.Errorf("after reaping: %+v", again)
	}
}

// With no caller (at start), the tools are listed over a holder's
// connection, and kept in ToolsFile for a source that has none.
func TestToolsListedAndKept(t *testing.T) {
	v := newVault(t)
	file := filepath.Join(t.TempDir(), "fx.json")
	s := newSource(t, v, percaller.Options{ToolsFile: file})
	setSecret(t, v, "ann", "ann-secret")
	ts, err := s.Tools(context.Background())
	if err != nil || !hasTool(ts, "whoami") {
		t.Fatalf("listing over ann's connection: %v %v", ts, err)
	}
	if n := s.Connections(); n != 1 {
		t.Errorf("%d connections after listing, want ann's", n)
	}
	// Another source, no secret in its vault: the kept list.
	s2 := newSource(t, newVault(t), percaller.Options{ToolsFile: file})
	ts, err = s2.Tools(as("bob"))
	if err != nil || !hasTool(ts, "whoami") || ts[0].Server != "fx" {
		t.Fatalf("kept list: %v %v", ts, err)
	}
	if n := s2.Connections(); n != 0 {
		t.Errorf("%d connections opened to read the kept list", n)
	}
}

func hasTool(ts []tool.Tool, name string) bool {
	for _, t := range ts {
		if t.Name == name {
			return true
		}
	}
	return false
}

// A caller's secret set again reaches the server once Disconnect closed
// the connection opened with the old one.
func TestDisconnect(t *testing.T) {
	v := newVault(t)
	setSecret(t, v, "ann", "old")
	s := newSource(t, v, percaller.Options{})
	first := whoami(t, s, as("ann"))
	setSecret(t, v, "ann", "new")
	if w := whoami(t, s, as("ann")); w.Env != testservers.WhoamiSum("old") {
		t.Errorf("an open connection keeps its secret: %+v", w)
	}
	s.Disconnect(identity.KeySubject("ann"))
	s.Disconnect(identity.KeySubject("nobody"))
	if w := whoami(t, s, as("ann")); w.Env != testservers.WhoamiSum("new") || w.PID == first.PID {
		t.Errorf("after Disconnect: %+v (first %+v)", w, first)
	}
}

// gated is a credential whose Connect for one owner waits until let is
// closed, after saying so on entered.
type gated struct {
	percaller.Credential
	owner   string
	entered chan struct{}
	let     chan struct{}
	calls   atomic.Int32
}

func (g *gated) Connect(ctx context.Context, owner string, base mcpsource.Config) (mcpsource.Config, error) {
	if owner == g.owner {
		if g.calls.Add(1) == 1 {
			close(g.entered)
			<-g.let
		}
	}
	return g.Credential.Connect(ctx, owner, base)
}

// A credential slow to read holds up its caller only; one that changes
// while it is read (Disconnect) is read again.
func TestConnectOutsideTheLock(t *testing.T) {
	v := newVault(t)
	setSecret(t, v, "ann", "ann-secret")
	setSecret(t, v, "bob", "bob-old")
	base := mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio, Command: testservers.Fixture(t), Args: []string{"-whoami"},
		ConnectTimeout: 10 * time.Second, StopGrace: time.Second}
	g := &gated{Credential: &percaller.Secrets{Server: "fx", Vault: v, Secrets: []percaller.Secret{{Name: "TOKEN", Env: "FIXTURE_TOKEN"}}},
		owner: identity.KeySubject("bob"), entered: make(chan struct{}), let: make(chan struct{})}
	s := percaller.New(base, g, percaller.Options{})
	defer s.Close()
	bob := make(chan testservers.Whoami, 1)
	go func() {
		res, err := s.Call(as("bob"), "whoami", map[string]any{"env": "FIXTURE_TOKEN"})
		var w testservers.Whoami
		if err == nil {
			_ = json.Unmarshal([]byte(res.Text()), &w)
		}
		bob <- w
	}()
	<-g.entered
	// Bob's credential is being read: ann's call goes on meanwhile.
	if w := whoami(t, s, as("ann")); w.Env != testservers.WhoamiSum("ann-secret") {
		t.Errorf("ann: %+v", w)
	}
	// Bob sets a new secret while his old one is being read.
	setSecret(t, v, "bob", "bob-new")
	s.Disconnect(identity.KeySubject("bob"))
	close(g.let)
	if w := <-bob; w.Env != testservers.WhoamiSum("bob-new") {
		t.Errorf("bob's connection opened with %s, not his new secret", w.Env)
	}
	if n := g.calls.Load(); n != 2 {
		t.Errorf("bob's credential read %d times, want 2", n)
	}
}

// Without a vault, a caller's call is refused saying where one comes
// from, and nothing can list the tools.
func TestNoVault(t *testing.T) {
	base := mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio, Command: testservers.Fixture(t)}
	s := percaller.New(base, &percaller.Secrets{Server: "fx", Secrets: []percaller.Secret{{Name: "TOKEN", Env: "T"}}}, percaller.Options{})
	defer s.Close()
	_, err := s.Call(as("ann"), "whoami", nil)
	if tool.KindOf(err) != tool.KindExecutionFailed || !strings.Contains(err.Error(), "toolmux serve opens its data directory's") {
		t.Errorf("without a vault: %v", err)
	}
	if _, err := s.Tools(context.Background()); tool.KindOf(err) != tool.KindAuthRequired {
		t.Errorf("listing without a vault: %v", err)
	}
}

// A caller without the credential lists once (ListFor) until it changes;
// the callers remembered are bounded: one more than the bound forgets
// them, and each may try once more.
func TestListFor(t *testing.T) {
	v := newVault(t)
	s := newSource(t, v, percaller.Options{})
	if s.ListFor(context.Background()) {
		t.Error("a request with no caller would list")
	}
	if !s.ListFor(as("carol")) {
		t.Fatal("carol has not tried")
	}
	if _, err := s.Tools(as("carol")); tool.KindOf(err) != tool.KindAuthRequired {
		t.Fatalf("carol's listing: %v", err)
	}
	if s.ListFor(as("carol")) {
		t.Error("carol would list again with the same credential")
	}
	s.Disconnect(identity.From(as("carol")).Key())
	if !s.ListFor(as("carol")) {
		t.Error("carol's credential changed, and she would not list")
	}
	_, _ = s.Tools(as("carol"))
	for i := range percaller.MaxTried - 1 {
		_, _ = s.Tools(as(fmt.Sprintf("u%d", i)))
	}
	if s.ListFor(as("carol")) || s.ListFor(as("u0")) {
		t.Fatal("a caller at the bound was forgotten")
	}
	_, _ = s.Tools(as("one-more"))
	if !s.ListFor(as("carol")) || s.ListFor(as("one-more")) {
		t.Error("one more than the bound did not start again from it")
	}
	// A listing that works (ann has the secret) forgets every one.
	setSecret(t, v, "ann", "ann-secret")
	if _, err := s.Tools(as("ann")); err != nil {
		t.Fatal(err)
	}
	if !s.ListFor(as("one-more")) {
		t.Error("tried callers kept after a listing")
	}
}

// A caller without the secret is sent where secrets are set, when the
// source knows (Secrets.URL): the error's URL, never its text.
func TestAuthRequiredURL(t *testing.T) {
	const page = "http://127.0.0.1:8931/#secrets"
	cred := &percaller.Secrets{Server: "fx", Vault: newVault(t), URL: page, Secrets: []percaller.Secret{{Name: "TOKEN", Env: "FIXTURE_TOKEN"}}}
	_, err := cred.Connect(as("carol"), identity.KeySubject("carol"), mcpsource.Config{Name: "fx"})
	te, ok := errors.AsType[*tool.Error](err)
	if !ok || te.Kind != tool.KindAuthRequired || te.URL != page {
		t.Fatalf("%#v", err)
	}
	if strings.Contains(te.Error(), page) {
		t.Errorf("the URL is in the error's text: %v", te)
	}
}
