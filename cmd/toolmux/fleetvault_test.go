package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/vault"
	"github.com/toolmux/toolmux/vault/jsvault"
)

// whoamiModel is a scripted model whose every task is one call of the
// fixture's whoami tool of server fx, asked for $FIXTURE_TOKEN; it
// answers "whoami said: " and what the tool said.
func whoamiModel(t testing.TB) *llmtest.Server {
	return llmtest.OpenAI(t, func(_ int, req llmtest.Request) llmtest.Reply {
		_, assistants, results := req.Dialogue()
		if assistants == 0 {
			return llmtest.Reply{Calls: []llmtest.Call{{Name: "fx__whoami", Args: `{"env": "FIXTURE_TOKEN"}`}}}
		}
		return llmtest.Reply{Content: "whoami said: " + oneLineOf(results[len(results)-1])}
	})
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
	m := whoamiModel(t)
	dir := workspace(t, fmt.Sprintf("model:\n  base_url: %s\n  model: scripted\n", m.BaseURL())+secretsConfig(t)+`groups:
  dev: {tools: ["*"]}
`)
	data, keys := t.TempDir(), t.TempDir()
	w1 := addMember(t, data, keys, "w1", "--role", "worker")
	w2 := addMember(t, data, keys, "w2", "--role", "worker")
	alice := addMember(t, data, keys, "alice", "--role", "submitter", "--group", "dev")
	bob := addMember(t, data, keys, "bob", "--role", "submitter", "--group", "dev")
	aliceKey := addKey(t, data, "alice", "--group", "dev")
	const admin = "the-admins-token-0123456789"
	vaultKey := vault.GenerateKey()
	keyEnv := []string{"TOOLMUX_VAULT_KEY=" + vaultKey}
	// Carol set a secret before the gateway joined a fleet: left in the
	// data directory's vault, and said so.
	k, err := vault.ParseKey(vaultKey)
	if err != nil {
		t.Fatal(err)
	}
	ring, err := vault.NewKeyring(k)
	if err != nil {
		t.Fatal(err)
	}
	fileVault := vault.New(vault.NewFileStore(vault.Dir(filepath.Join(data, "toolmux"))), ring, vault.Options{})
	if err := fileVault.PutSecret(context.Background(), "key:carol", "fx", "TOKEN", []byte("carol-s3cret-value")); err != nil {
		t.Fatal(err)
	}
	natsAddr := fmt.Sprintf("127.0.0.1:%d", testservers.FreePort(t))
	natsURL := "nats://" + natsAddr
	p := startServeEnv(t, binary, dir, data, keyEnv, "--nats-listen", natsAddr, "--token", admin, "--lease", "2s")
	if !testservers.Eventually(30*time.Second, func() bool { return strings.Contains(p.stderr.String(), "workers join with") }) {
		t.Fatalf("serve did not start its NATS server:\n%s", p.stderr.String())
	}

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

	type answer struct{ ID, Status, Answer, Error string }
	submit := func(creds, id string) answer {
		t.Helper()
		runs := filepath.Join(t.TempDir(), "runs.jsonl")
		if err := os.WriteFile(runs, []byte(fmt.Sprintf(`{"id": %q, "task": "whoami"}`+"\n", id)), 0o644); err != nil {
			t.Fatal(err)
		}
		r := execToolmux(t, dir, "", append(modelFreeEnv(), "XDG_DATA_HOME="+t.TempDir()),
			"submit", "--nats", natsURL, "--nats-creds", creds, "--wait", runs)
		var a answer
		if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &a); err != nil || a.Status != "done" {
			t.Fatalf("submit %s: exit %d (%v)\n%s\n%s", id, r.code, err, r.stdout, r.stderr)
		}
		return a
	}

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

	// The bucket: alice's secret sealed, opened by the fleet's key only;
	// no stream holds it in the clear.
	f, err := fleet.Connect(context.Background(), "nats://"+admin+"@"+natsAddr, "test", fleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
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
	st, err := jsvault.Open(ctx, f.JetStream(), jsvault.Config{Bucket: f.VaultBucket()})
	if err != nil {
		t.Fatal(err)
	}
	open := func(text string) ([]byte, error) {
		k, err := vault.ParseKey(text)
		if err != nil {
			t.Fatal(err)
		}
		ring, err := vault.NewKeyring(k)
		if err != nil {
			t.Fatal(err)
		}
		return vault.New(st, ring, vault.Options{}).Secret(ctx, "key:alice", "fx", "TOKEN")
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
