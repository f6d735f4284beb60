package jsvault_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/vault"
	"github.com/toolmux/toolmux/vault/jsvault"
	"github.com/toolmux/toolmux/vault/vaulttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var bg = context.Background()

// startServer starts the embedded JetStream server a fleet's gateway
// starts (serve --nats-listen), its data in a directory of the test's,
// shut down at the end of the test.
func startServer(t testing.TB) *fleet.Server {
	t.Helper()
	s, err := fleet.StartServer(fleet.ServerOptions{Listen: "127.0.0.1:0", StoreDir: t.TempDir(), Name: "vault-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// connect joins the fleet of s as a member of its own (a connection of
// its own), left at the end of the test, and returns its JetStream.
func connect(t testing.TB, s *fleet.Server) jetstream.JetStream {
	t.Helper()
	f, err := fleet.Connect(bg, s.ClientURL(), "vault-test", fleet.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f.JetStream()
}

func open(t testing.TB, js jetstream.JetStream, cfg jsvault.Config) *jsvault.Store {
	t.Helper()
	s, err := jsvault.Open(bg, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The behaviours every store has, on a JetStream bucket: one server, a
// bucket for each behaviour.
func TestStore(t *testing.T) {
	srv := startServer(t)
	js := connect(t, srv)
	n := 0
	vaulttest.Run(t, func(t *testing.T) vault.Store {
		n++
		return open(t, js, jsvault.Config{Bucket: fmt.Sprint("VAULT_", n)})
	})
}

// Two members of a fleet, each with its own connection and the key on
// its own machine: what one puts the other opens; the bucket holds only
// sealed values (no value, in the clear or in base64), and one
// revision of each entry.
func TestStoreSharedByMembers(t *testing.T) {
	srv := startServer(t)
	key := vaulttest.NewKey(t)
	a := vault.New(open(t, connect(t, srv), jsvault.Config{}), vaulttest.Ring(t, key), vault.Options{})
	bs := open(t, connect(t, srv), jsvault.Config{})
	b := vault.New(bs, vaulttest.Ring(t, key), vault.Options{})
	if bs.Bucket() != "TOOLMUX_VAULT" {
		t.Errorf("the default bucket: %s", bs.Bucket())
	}
	names := []string{"server/fx/token", "server/fx/secret/API_KEY"}
	vaulttest.Fill(t, a, names...)
	vaulttest.CheckAll(t, b, names...)
	// Written again: one revision kept.
	vaulttest.Fill(t, b, names...)

	js := connect(t, srv)
	st, err := js.Stream(bg, "KV_TOOLMUX_VAULT")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(bg)
	if err != nil || info.State.Msgs != uint64(len(vaulttest.Owners)*len(names)) {
		t.Fatalf("the bucket's stream holds %d messages, want %d: %v", info.State.Msgs, len(vaulttest.Owners)*len(names), err)
	}
	if err := a.Delete(bg, vaulttest.Owners[0], names[0]); err != nil {
		t.Fatal(err)
	}
	// Every message the stream holds, read as they are.
	var all []byte
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq+1; seq++ {
		m, err := st.GetMsg(bg, seq)
		if err != nil {
			continue // replaced or purged
		}
		all = append(all, m.Subject...)
		all = append(all, m.Data...)
	}
	if len(all) == 0 {
		t.Fatal("nothing read from the stream")
	}
	for _, o := range vaulttest.Owners {
		for _, n := range names {
			v := vaulttest.Value(o, n)
			for _, form := range [][]byte{v, []byte("secret-value-of"), fmt.Appendf(nil, "%x", v)} {
				if bytes.Contains(all, form) {
					t.Fatalf("the bucket holds %q", form)
				}
			}
		}
	}
	if _, err := b.Get(bg, vaulttest.Owners[0], names[0]); !vault.IsNotFound(err) {
		t.Fatalf("deleted by a, got by b: %v", err)
	}
}

// racing is a store whose first update of an entry sees another member
// write the entry between its read and its write.
type racing struct {
	*jsvault.Store
	other *vault.Vault
	raced atomic.Bool
}

func (r *racing) Update(ctx context.Context, owner, name string, max int, change func(*vault.Entry) ([]byte, error)) error {
	return r.Store.Update(ctx, owner, name, max, func(cur *vault.Entry) ([]byte, error) {
		if r.raced.CompareAndSwap(false, true) {
			if err := r.other.Put(ctx, owner, name, []byte("written meanwhile")); err != nil {
				return nil, err
			}
		}
		return change(cur)
	})
}

// A rotation that meets an entry written meanwhile by another member
// (a gateway refreshing a token) re-seals what was written, never the
// value it read before: the write is compare-and-set, tried again.
func TestRotateKeepsWriteMeanwhile(t *testing.T) {
	srv := startServer(t)
	old, cur := vaulttest.NewKey(t), vaulttest.NewKey(t)
	s := open(t, connect(t, srv), jsvault.Config{})
	owner, name := vaulttest.Owners[0], "server/fx/token"
	if err := vault.New(s, vaulttest.Ring(t, old), vault.Options{}).Put(bg, owner, name, []byte("the old value")); err != nil {
		t.Fatal(err)
	}
	other := vault.New(open(t, connect(t, srv), jsvault.Config{}), vaulttest.Ring(t, cur, old), vault.Options{})
	r := &racing{Store: s, other: other}
	v := vault.New(r, vaulttest.Ring(t, cur, old), vault.Options{})
	rep, err := v.Rotate(bg, nil)
	if err != nil || !r.raced.Load() {
		t.Fatalf("rotate: %+v %v", rep, err)
	}
	got, err := vault.New(s, vaulttest.Ring(t, cur), vault.Options{}).Get(bg, owner, name)
	if err != nil || string(got) != "written meanwhile" {
		t.Fatalf("after the rotation: %q %v", got, err)
	}
	// A new entry written meanwhile by another member: Put's create
	// meets it, and writes over it as a replacement.
	r.raced.Store(false)
	if err := v.Put(bg, owner, "server/gx/token", []byte("mine")); err != nil {
		t.Fatal(err)
	}
	if got, err := v.Get(bg, owner, "server/gx/token"); err != nil || string(got) != "mine" {
		t.Fatalf("put over a creation meanwhile: %q %v", got, err)
	}
}

// Members creating entries of one owner at once never leave the owner
// with more than the bound: whatever goes past it is taken back.
func TestEntriesBoundAcrossMembers(t *testing.T) {
	srv := startServer(t)
	key := vaulttest.NewKey(t)
	const max, members, each = 5, 4, 3
	vs := make([]*vault.Vault, members)
	for i := range vs {
		vs[i] = vault.New(open(t, connect(t, srv), jsvault.Config{}), vaulttest.Ring(t, key), vault.Options{MaxEntriesPerOwner: max})
	}
	errs := make(chan error, members*each)
	done := make(chan struct{})
	for i, v := range vs {
		go func() {
			defer func() { done <- struct{}{} }()
			for j := range each {
				errs <- v.Put(bg, "key:ann", fmt.Sprintf("m%d/n%d", i, j), []byte("x"))
			}
		}()
	}
	for range members {
		<-done
	}
	close(errs)
	ok := 0
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case vault.KindOf(err) != vault.KindTooMany:
			t.Fatal(err)
		}
	}
	infos, err := vs[0].List(bg, "key:ann")
	if err != nil || len(infos) > max || len(infos) != ok || ok == 0 {
		t.Fatalf("%d entries kept, %d puts succeeded, bound %d: %v", len(infos), ok, max, err)
	}
}

// The bucket is made with the bound on values, and keys the base32 of the
// owner and the name: any owner, any name.
func TestBucket(t *testing.T) {
	srv := startServer(t)
	js := connect(t, srv)
	s := open(t, js, jsvault.Config{Bucket: "V", MaxValueBytes: 1000})
	kv, err := js.KeyValue(bg, "V")
	if err != nil {
		t.Fatal(err)
	}
	status, err := kv.Status(bg)
	if err != nil || status.History() != 1 {
		t.Fatalf("the bucket: %+v %v", status, err)
	}
	v := vault.New(s, vaulttest.Ring(t, vaulttest.NewKey(t)), vault.Options{})
	owner := "https://idp.example.com/a b.c*>"
	if err := v.Put(bg, owner, "server/a.b */secret/X>", []byte("x")); err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(bg)
	if err != nil || len(keys) != 1 || strings.ContainsAny(keys[0], " */>") {
		t.Fatalf("keys: %q %v", keys, err)
	}
	if owners, err := s.Owners(bg); err != nil || len(owners) != 1 || owners[0] != owner {
		t.Fatalf("owners: %q %v", owners, err)
	}
	// A value larger than the bucket allows is refused by the server.
	big := vault.New(s, vaulttest.Ring(t, vaulttest.NewKey(t)), vault.Options{MaxValueBytes: 5000})
	if err := big.Put(bg, owner, "x", bytes.Repeat([]byte("v"), 1001)); vault.KindOf(err) != vault.KindStore {
		t.Fatalf("a value over the bucket's bound: %v", err)
	}
	// Opened again by another member with other settings: the bucket is
	// left as it is.
	open(t, connect(t, srv), jsvault.Config{Bucket: "V", MaxValueBytes: 9000})
	if st, err := js.Stream(bg, "KV_V"); err != nil || st.CachedInfo().Config.MaxMsgSize > 2000 {
		t.Fatalf("the bucket was changed: %v", err)
	}
}
