package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/vault"
	"github.com/toolmux/toolmux/vault/jsvault"
	"github.com/toolmux/toolmux/vault/vaulttest"
)

// In a fleet of members, the vault's bucket (made by the gateway) is the
// workers': a worker reads a submitter's secret and writes an entry (a
// token it refreshed), and lists the owners; a submitter reads nothing of
// it, its own entries included (it sets them through the gateway).
func TestMemberVault(t *testing.T) {
	dir := t.TempDir()
	alice := newMember(t, dir, "alice", fleet.RoleSubmitter, "dev")
	w1 := newMember(t, dir, "w1", fleet.RoleWorker)
	o := fleet.Options{Lease: 2 * time.Second}
	s, gw := memberFleet(t, o, "the-admins-token", alice, w1)
	ring := vaulttest.Ring(t, vaulttest.NewKey(t))
	open := func(ctx context.Context, f *fleet.Fleet) (*vault.Vault, error) {
		st, err := jsvault.Open(ctx, f.JetStream(), jsvault.Config{Bucket: f.VaultBucket()})
		if err != nil {
			return nil, err
		}
		return vault.New(st, ring, vault.Options{}), nil
	}
	gv, err := open(long(t), gw)
	if err != nil {
		t.Fatal(err)
	}
	if err := gv.PutSecret(long(t), "key:alice", "fx", "TOKEN", []byte("alice-s3cret")); err != nil {
		t.Fatal(err)
	}

	fw, err := connectAs(t, s, w1)
	if err != nil {
		t.Fatal(err)
	}
	wv, err := open(long(t), fw)
	if err != nil {
		t.Fatalf("the worker binds the vault: %v", err)
	}
	if b, err := wv.Secret(long(t), "key:alice", "fx", "TOKEN"); err != nil || string(b) != "alice-s3cret" {
		t.Fatalf("the worker reads alice's secret: %q %v", b, err)
	}
	if err := wv.PutToken(long(t), "key:alice", "remote", vault.OAuthToken{AccessToken: "refreshed", TokenType: "Bearer"}); err != nil {
		t.Fatalf("the worker keeps a refreshed token: %v", err)
	}
	if st, err := wv.Status(long(t)); err != nil || st.Owners != 1 || st.Entries != 2 {
		t.Fatalf("the worker lists the vault: %+v %v", st, err)
	}
	if tk, err := gv.Token(long(t), "key:alice", "remote"); err != nil || tk.AccessToken != "refreshed" {
		t.Fatalf("the gateway reads the worker's token: %+v %v", tk, err)
	}

	fa, err := connectAs(t, s, alice)
	if err != nil {
		t.Fatal(err)
	}
	// Refused its binding (STREAM.INFO), or what it would read.
	if av, err := open(short(t), fa); err == nil {
		if _, err := av.Get(short(t), "key:alice", vault.SecretName("fx", "TOKEN")); err == nil {
			t.Fatal("a submitter read the vault")
		}
		if _, err := av.Status(short(t)); err == nil {
			t.Fatal("a submitter listed the vault")
		}
	}
}
