package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/vault"
	"github.com/toolmux/toolmux/vault/jsvault"
)

// whoamiModel is a scripted model whose every task is one call of the
// whoami tool of server fx with args; it answers "whoami said: " and what
// the tool said.
func whoamiModel(t testing.TB, args string) *llmtest.Server {
	return llmtest.OpenAI(t, func(_ int, req llmtest.Request) llmtest.Reply {
		_, assistants, results := req.Dialogue()
		if assistants == 0 {
			return llmtest.Reply{Calls: []llmtest.Call{{Name: "fx__whoami", Args: args}}}
		}
		return llmtest.Reply{Content: "whoami said: " + oneLineOf(results[len(results)-1])}
	})
}

// runAnswer is what submit --wait writes of a run.
type runAnswer struct{ ID, Status, Answer, Error string }

// submitWhoami submits run id, the task "whoami", with the member's
// credentials creds, and returns its end; a run that is not done ends the
// test.
func submitWhoami(t *testing.T, dir, natsURL, creds, id string) runAnswer {
	t.Helper()
	runs := filepath.Join(t.TempDir(), "runs.jsonl")
	if err := os.WriteFile(runs, []byte(fmt.Sprintf(`{"id": %q, "task": "whoami"}`+"\n", id)), 0o644); err != nil {
		t.Fatal(err)
	}
	r := execToolmux(t, dir, "", append(modelFreeEnv(), "XDG_DATA_HOME="+t.TempDir()),
		"submit", "--nats", natsURL, "--nats-creds", creds, "--wait", runs)
	var a runAnswer
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &a); err != nil || a.Status != "done" {
		t.Fatalf("submit %s: exit %d (%v)\n%s\n%s", id, r.code, err, r.stdout, r.stderr)
	}
	return a
}

// fleetVaultOf opens the fleet's vault bucket with the token admin of the
// NATS server at natsAddr, and key.
func fleetVaultOf(t *testing.T, ctx context.Context, admin, natsAddr, key string) *vault.Vault {
	t.Helper()
	f := connectFleet(t, "nats://"+admin+"@"+natsAddr)
	st, err := jsvault.Open(ctx, f.JetStream(), jsvault.Config{Bucket: f.VaultBucket()})
	if err != nil {
		t.Fatal(err)
	}
	return vault.New(st, keyringOf(t, key), vault.Options{})
}

// keyringOf is the key ring of the one vault key text.
func keyringOf(t *testing.T, text string) *vault.Keyring {
	t.Helper()
	k, err := vault.ParseKey(text)
	if err != nil {
		t.Fatal(err)
	}
	return ring(t, k)
}

// In a fleet, users' secrets are in the fleet's vault, and a worker runs
// each run with its submitter's, end to end with the real commands: alice
// sets her secret through the gateway (toolmux secrets set), and her run's
// call, on a worker of another machine, reaches the server in a process
// with her secret; bob, who set none, is told to set his; the bucket holds
// the secret sealed, never in the clear; a worker without the vault's key
// says so at start, and its runs' calls fail naming what to configure.
func TestFleetVault(t *testing.T) {
	t.Parallel()
	m := whoamiModel(t, `{"env": "FIXTURE_TOKEN"}`)
	dir := workspace(t, fmt.Sprintf("model:\n  base_url: %s\n  model: scripted\n", m.BaseURL())+secretsConfig(t)+`groups:
  dev: {tools: ["*"]}
`)
	data, keys := t.TempDir(), t.TempDir()
	w1 := addMember(t, data, keys, "w1", "--role", "worker")
	w2 := addMember(t, data, keys, "w2", "--role", "worker")
	w3 := addMember(t, data, keys, "w3", "--role", "worker")
	alice := addMember(t, data, keys, "alice", "--role", "submitter", "--group", "dev")
	bob := addMember(t, data, keys, "bob", "--role", "submitter", "--group", "dev")
	aliceKey := addKey(t, data, "alice", "--group", "dev")
	const admin = "the-admins-token-0123456789"
	vaultKey := vault.GenerateKey()
	keyEnv := []string{"TOOLMUX_VAULT_KEY=" + vaultKey}
	// Carol set a secret before the gateway joined a fleet: left in the
	// data directory's vault, and said so.
	fileVault := vault.New(vault.NewFileStore(vault.Dir(filepath.Join(data, "toolmux"))), keyringOf(t, vaultKey), vault.Options{})
	if err := fileVault.PutSecret(context.Background(), "key:carol", "fx", "TOKEN", []byte("carol-s3cret-value")); err != nil {
		t.Fatal(err)
	}
	natsAddr := fmt.Sprintf("127.0.0.1:%d", testservers.FreePort(t))
	natsURL := "nats://" + natsAddr
	p := startFleetGatewayEnv(t, dir, data, natsAddr, keyEnv, "--token", admin, "--lease", "2s")

	const secret = "alice-s3cret-value"
	e := append(modelFreeEnv(), "XDG_DATA_HOME="+t.TempDir(), "TOOLMUX_URL=http://"+p.addr, "TOOLMUX_TOKEN="+aliceKey)
	if r := execToolmux(t, dir, secret+"\n", e, "secrets", "set", "fx", "TOKEN"); r.code != 0 {
		t.Fatalf("alice: secrets set: %d %s", r.code, r.stderr)
	}
	if want := "the data directory's vault (" + filepath.Join(data, "toolmux", "vault") + ": 1 entry of 1 owner) is not read"; !strings.Contains(p.stderr.String(), want) {
		t.Errorf("serve does not say what it leaves in the data directory's vault:\n%s", p.stderr.String())
	}
	// Not in the data directory's vault: in the fleet's.
	if st, err := fileVault.Status(context.Background()); err != nil || st.Owners != 1 || st.Entries != 1 {
		t.Errorf("the data directory's vault: %+v %v", st, err)
	}

	submit := func(creds, id string) runAnswer { return submitWhoami(t, dir, natsURL, creds, id) }

	// The worker, on another machine: its own data, the fleet's key.
	w := spawnWorkerEnv(t, binary, dir, natsURL, t.TempDir(), keyEnv, "--nats-creds", w1)
	w.waitJoined(t)
	a := submit(alice, "a1")
	var who testservers.Whoami
	if err := json.Unmarshal([]byte(strings.TrimPrefix(a.Answer, "whoami said: ")), &who); err != nil || who.Env != testservers.WhoamiSum(secret) {
		t.Fatalf("alice's run: %+v (%v)\nworker: %s", a, err, w.stderr.String())
	}
	b := submit(bob, "b1")
	if !strings.Contains(b.Answer, "auth_required") || !strings.Contains(b.Answer, "toolmux secrets set fx TOKEN") {
		t.Fatalf("bob's run: %+v", b)
	}

	// A worker without the key: said at its start, and in its runs.
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	<-w.exited
	nk := spawnWorkerEnv(t, binary, dir, natsURL, t.TempDir(), nil, "--nats-creds", w2)
	nk.waitJoined(t)
	if !strings.Contains(nk.stderr.String(), "the fleet's vault (JetStream bucket TOOLMUX_VAULT) is locked") {
		t.Errorf("the keyless worker does not say its vault is locked:\n%s", nk.stderr.String())
	}
	a2 := submit(alice, "a2")
	if !strings.Contains(a2.Answer, "execution_failed") || !strings.Contains(a2.Answer, "the vault is locked") ||
		!strings.Contains(a2.Answer, "vault.key_file") {
		t.Fatalf("alice's run on a worker without the key: %+v", a2)
	}

	// A worker whose key file is missing does not start, naming it.
	missing := filepath.Join(t.TempDir(), "vault.key")
	bad := spawnWorkerEnv(t, binary, workspace(t, fmt.Sprintf("model:\n  base_url: %s\n  model: scripted\n", m.BaseURL())+secretsConfig(t)+
		"vault: {key_file: "+missing+"}\n"), natsURL, t.TempDir(), nil, "--nats-creds", w3)
	<-bad.exited
	if code := exitCode(t, bad.err); code != 1 || !strings.Contains(bad.stderr.String(), missing) || strings.Contains(bad.stderr.String(), "joined the fleet") {
		t.Errorf("a worker with a missing key file: exit %d\n%s", code, bad.stderr.String())
	}

	// The bucket: alice's secret sealed, opened by the fleet's key only;
	// no stream holds it in the clear.
	f := connectFleet(t, "nats://"+admin+"@"+natsAddr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv, err := f.JetStream().KeyValue(ctx, f.VaultBucket())
	if err != nil {
		t.Fatal(err)
	}
	names, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for k := range names.Keys() {
		en, err := kv.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		n++
		if strings.Contains(string(en.Value()), secret) {
			t.Errorf("the bucket holds %s in the clear", k)
		}
	}
	if n != 1 {
		t.Errorf("the bucket holds %d entries, not alice's one", n)
	}
	found, _, err := testservers.StreamsHold(ctx, f.JetStream(), []string{secret, aliceKey, admin})
	if err != nil || found != "" {
		t.Fatalf("the streams: a credential in %q (%v)", found, err)
	}
	open := func(key string) ([]byte, error) {
		return fleetVaultOf(t, ctx, admin, natsAddr, key).Secret(ctx, "key:alice", "fx", "TOKEN")
	}
	if v, err := open(vaultKey); err != nil || string(v) != secret {
		t.Errorf("alice's secret with the fleet's key: %v", err)
	}
	if _, err := open(vault.GenerateKey()); vault.KindOf(err) != vault.KindWrongKey {
		t.Errorf("alice's secret with another key: %v", err)
	}
	for what, text := range map[string]string{"serve": p.stderr.String(), "the worker": w.stderr.String(), "the keyless worker": nk.stderr.String()} {
		if strings.Contains(text, secret) {
			t.Errorf("%s wrote the secret on stderr", what)
		}
	}
}

// In a fleet, users' OAuth tokens are in the fleet's vault: alice connects
// the OAuth-protected server on the gateway (the page's Connect, at a real
// Hydra), and her run, on a worker, reaches it as alice, the worker
// refreshing her token (within upstream_oauth.leeway) and keeping the new
// one in the bucket; bob, who has not connected it, is told in his run to
// connect it on the gateway's page, and no authorization is started for
// him.
func TestFleetVaultOAuth(t *testing.T) {
	t.Parallel()
	h := testservers.StartHydra(t)
	fx := testservers.StartOAuthMCP(t, h)
	m := whoamiModel(t, `{}`)
	dir := workspace(t, fmt.Sprintf("model:\n  base_url: %s\n  model: scripted\n", m.BaseURL())+registeredConfig(fx)+`groups:
  dev: {tools: ["*"]}
`)
	data, keys := t.TempDir(), t.TempDir()
	w1 := addMember(t, data, keys, "w1", "--role", "worker")
	alice := addMember(t, data, keys, "alice", "--role", "submitter", "--group", "dev")
	bob := addMember(t, data, keys, "bob", "--role", "submitter", "--group", "dev")
	aliceKey := addKey(t, data, "alice", "--group", "dev")
	const admin = "the-admins-token-0123456789"
	const secret = "gateway-s3cret-0123456789"
	vaultKey := vault.GenerateKey()
	env := []string{"TOOLMUX_VAULT_KEY=" + vaultKey, "FX_CLIENT_SECRET=" + secret}
	natsAddr := fmt.Sprintf("127.0.0.1:%d", testservers.FreePort(t))
	natsURL := "nats://" + natsAddr
	p := startFleetGatewayEnv(t, dir, data, natsAddr, env, "--token", admin, "--lease", "2s")
	// The code grant's token is refreshed at its first use: on the worker.
	connectOnAPI(t, h, p, aliceKey, "alice", registerGateway(t, h, fx, p, secret))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	v := fleetVaultOf(t, ctx, admin, natsAddr, vaultKey)
	// The gateway lists fx over alice's connection once she has
	// connected, refreshing her token then if it is due: wait for that,
	// then make the token in the bucket due, so that the worker is the one
	// to refresh it, at its first use.
	if !testservers.Eventually(30*time.Second, func() bool {
		req, _ := http.NewRequest(http.MethodGet, p.url("/api/tools"), nil)
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && strings.Contains(string(b), "fx__whoami")
	}) {
		t.Fatalf("the gateway never listed fx:\n%s", p.stderr.String())
	}
	first, err := v.Token(ctx, "key:alice", "fx")
	if err != nil || first.RefreshToken == "" {
		t.Fatalf("alice's token in the fleet's vault: %v", err)
	}
	first.Expiry = time.Now().Add(-time.Minute)
	if err := v.PutToken(ctx, "key:alice", "fx", first); err != nil {
		t.Fatal(err)
	}

	w := spawnWorkerEnv(t, binary, dir, natsURL, t.TempDir(), env, "--nats-creds", w1)
	w.waitJoined(t)
	if a := submitWhoami(t, dir, natsURL, alice, "a1"); a.Answer != "whoami said: alice" {
		t.Fatalf("alice's run: %+v\nworker: %s", a, w.stderr.String())
	}
	now, err := v.Token(ctx, "key:alice", "fx")
	if err != nil || now.AccessToken == first.AccessToken || now.RefreshToken == first.RefreshToken || !now.Expiry.After(time.Now()) {
		t.Fatalf("the worker did not keep the refreshed token: %v", err)
	}
	b := submitWhoami(t, dir, natsURL, bob, "b1")
	if !strings.Contains(b.Answer, "auth_required") || !strings.Contains(b.Answer, "Connections tab") ||
		!strings.Contains(b.Answer, "a fleet's worker cannot start an authorization") || strings.Contains(b.Answer, h.Issuer) {
		t.Fatalf("bob's run: %+v", b)
	}
	for what, text := range map[string]string{"serve": p.stderr.String(), "the worker": w.stderr.String()} {
		for _, s := range []string{secret, first.AccessToken, now.AccessToken, now.RefreshToken} {
			if strings.Contains(text, s) {
				t.Errorf("%s wrote a credential on stderr", what)
			}
		}
	}
}
