// Package vaulttest holds the behaviours every vault.Store must have, run
// through a vault.Vault: the local FileStore's tests and vault/jsvault's
// run the same ones, so that the fleet's vault keeps every promise the
// local one does.
package vaulttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/toolmux/toolmux/vault"
)

// NewKey returns a new random key.
func NewKey(t testing.TB) *vault.Key {
	t.Helper()
	k, err := vault.ParseKey(vault.GenerateKey())
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Ring returns the ring of current and previous keys.
func Ring(t testing.TB, current *vault.Key, previous ...*vault.Key) *vault.Keyring {
	t.Helper()
	r, err := vault.NewKeyring(current, previous...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Owners are owners of the forms identity.Caller.Key gives.
var Owners = []string{"key:ann", "https://idp.example.com bob", "https://login.example.org/realms/team 6f1c-0042"}

// Value is the value of an entry in these tests: recognisable, so that a
// test can look for it where it must not be.
func Value(owner, name string) []byte {
	return fmt.Appendf(nil, "secret-value-of-%s-%s-0123456789", owner, name)
}

// Fill puts the entries names of every owner of Owners into v.
func Fill(t testing.TB, v *vault.Vault, names ...string) {
	t.Helper()
	for _, o := range Owners {
		for _, n := range names {
			if err := v.Put(context.Background(), o, n, Value(o, n)); err != nil {
				t.Fatalf("put %s of %s: %v", n, o, err)
			}
		}
	}
}

// CheckAll opens every entry Fill put with v.
func CheckAll(t testing.TB, v *vault.Vault, names ...string) {
	t.Helper()
	for _, o := range Owners {
		for _, n := range names {
			b, err := v.Get(context.Background(), o, n)
			if err != nil || !bytes.Equal(b, Value(o, n)) {
				t.Fatalf("get %s of %s: %q %v", n, o, b, err)
			}
		}
	}
}

// Kind fails t unless err is an *vault.Error of kind k.
func Kind(t testing.TB, what string, err error, k vault.Kind) *vault.Error {
	t.Helper()
	var e *vault.Error
	if !errors.As(err, &e) || e.Kind != k {
		t.Fatalf("%s: want an error of kind %s, got %v", what, k, err)
	}
	return e
}

// Run runs the behaviours on stores newStore makes, a new one for each.
func Run(t *testing.T, newStore func(t *testing.T) vault.Store) {
	for _, c := range []struct {
		name string
		run  func(*testing.T, vault.Store)
	}{
		{"RoundTrip", roundTrip},
		{"BoundToEntry", boundToEntry},
		{"WrongKey", wrongKey},
		{"Tampered", tampered},
		{"Locked", locked},
		{"ValueBound", valueBound},
		{"EntriesBound", entriesBound},
		{"Rotate", rotate},
		{"RotateInterrupted", rotateInterrupted},
		{"RotateCancelled", rotateCancelled},
		{"RotateReportsUnopened", rotateUnopened},
		{"ConcurrentPuts", concurrentPuts},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, newStore(t)) })
	}
}

var bg = context.Background()

// A value put is got back, replaced, listed without its value, deleted;
// the helpers for tokens and secrets name their entries; what is not
// there is KindNotFound.
func roundTrip(t *testing.T, s vault.Store) {
	v := vault.New(s, Ring(t, NewKey(t)), vault.Options{})
	ann, bob := Owners[0], Owners[1]
	if _, err := v.Get(bg, ann, "server/fx/token"); !vault.IsNotFound(err) {
		t.Fatalf("an empty vault: %v", err)
	}
	for _, val := range [][]byte{[]byte("k-1"), {}, {0, 1, 2, 255}} {
		if err := v.Put(bg, ann, "server/fx/secret/API_KEY", val); err != nil {
			t.Fatal(err)
		}
		if got, err := v.Get(bg, ann, "server/fx/secret/API_KEY"); err != nil || !bytes.Equal(got, val) {
			t.Fatalf("got %q %v, want %q", got, err, val)
		}
	}
	// Another owner's entry of the same name is another entry.
	if _, err := v.Get(bg, bob, "server/fx/secret/API_KEY"); !vault.IsNotFound(err) {
		t.Fatalf("another owner: %v", err)
	}
	tok := vault.OAuthToken{AccessToken: "at-1", RefreshToken: "rt-1", TokenType: "Bearer", Scope: "repo"}
	if err := v.PutToken(bg, ann, "github", tok); err != nil {
		t.Fatal(err)
	}
	if got, err := v.Token(bg, ann, "github"); err != nil || got != tok {
		t.Fatalf("token: %+v %v", got, err)
	}
	if err := v.PutSecret(bg, bob, "fx", "X-Api-Key", []byte("b-1")); err != nil {
		t.Fatal(err)
	}
	if got, err := v.Get(bg, bob, vault.SecretName("fx", "X-Api-Key")); err != nil || string(got) != "b-1" {
		t.Fatalf("secret: %q %v", got, err)
	}
	infos, err := v.List(bg, ann)
	if err != nil || len(infos) != 2 || infos[0].Name != "server/fx/secret/API_KEY" || infos[1].Name != "server/github/token" ||
		infos[0].KeyID != v.Keyring().Current() || infos[0].Updated.IsZero() {
		t.Fatalf("list: %+v %v", infos, err)
	}
	owners, err := s.Owners(bg)
	if err != nil || !slices.Equal(owners, []string{bob, ann}) && !slices.Equal(owners, []string{ann, bob}) {
		t.Fatalf("owners: %q %v", owners, err)
	}
	if err := v.Delete(bg, ann, "server/github/token"); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Token(bg, ann, "github"); !vault.IsNotFound(err) {
		t.Fatalf("deleted: %v", err)
	}
	Kind(t, "delete twice", v.Delete(bg, ann, "server/github/token"), vault.KindNotFound)
	if err := v.Delete(bg, bob, vault.SecretName("fx", "X-Api-Key")); err != nil {
		t.Fatal(err)
	}
	// An owner without entries is no owner.
	if owners, err := s.Owners(bg); err != nil || !slices.Equal(owners, []string{ann}) {
		t.Fatalf("owners after bob's last entry went: %q %v", owners, err)
	}
	// Names and owners that are none are refused, naming why.
	for _, c := range []struct{ owner, name string }{
		{"", "server/fx/token"}, {ann, ""}, {ann, "server//token"}, {ann, "/x"}, {ann, "x/"}, {"a\nb", "x"}, {ann, "x\x00"},
		{ann, strings.Repeat("n", vault.MaxNameBytes+1)}, {strings.Repeat("o", vault.MaxOwnerBytes+1), "x"}, {ann, "\xff"},
	} {
		Kind(t, fmt.Sprintf("put %q %q", c.owner, c.name), v.Put(bg, c.owner, c.name, []byte("x")), vault.KindInvalid)
		_, err := v.Get(bg, c.owner, c.name)
		Kind(t, fmt.Sprintf("get %q %q", c.owner, c.name), err, vault.KindInvalid)
	}
	// The longest owner and name are taken.
	long, longName := strings.Repeat("o", vault.MaxOwnerBytes), strings.Repeat("n", vault.MaxNameBytes)
	if err := v.Put(bg, long, longName, []byte("x")); err != nil {
		t.Fatalf("the longest owner and name: %v", err)
	}
	if got, err := v.Get(bg, long, longName); err != nil || string(got) != "x" {
		t.Fatalf("the longest owner and name: %q %v", got, err)
	}
}

// A sealed value copied under another owner, or another name, does not
// open: the owner and the name are bound to it.
func boundToEntry(t *testing.T, s vault.Store) {
	v := vault.New(s, Ring(t, NewKey(t)), vault.Options{})
	ann, bob := Owners[0], Owners[1]
	name := vault.SecretName("fx", "API_KEY")
	if err := v.Put(bg, ann, name, []byte("ann's key")); err != nil {
		t.Fatal(err)
	}
	if err := v.Put(bg, bob, name, []byte("bob's key")); err != nil {
		t.Fatal(err)
	}
	e, err := s.Get(bg, ann, name)
	if err != nil {
		t.Fatal(err)
	}
	for _, to := range []struct{ owner, name string }{{bob, name}, {ann, vault.SecretName("fx", "OTHER")}, {bob, vault.SecretName("gx", "API_KEY")}} {
		err := s.Update(bg, to.owner, to.name, 100, func(*vault.Entry) ([]byte, error) { return e.Sealed, nil })
		if err != nil {
			t.Fatal(err)
		}
		got, err := v.Get(bg, to.owner, to.name)
		ve := Kind(t, fmt.Sprintf("ann's value copied to %s of %s", to.name, to.owner), err, vault.KindCorrupt)
		if got != nil || ve.KeyID != v.Keyring().Current() || ve.Owner != to.owner || ve.Name != to.name ||
			strings.Contains(err.Error(), "ann's key") {
			t.Fatalf("copied: %q %v", got, err)
		}
	}
	// ann's own is still hers.
	if got, err := v.Get(bg, ann, name); err != nil || string(got) != "ann's key" {
		t.Fatalf("ann's: %q %v", got, err)
	}
}

// A value sealed with another key is refused as KindWrongKey naming the
// key that sealed it, without a panic, and never opened.
func wrongKey(t *testing.T, s vault.Store) {
	a, b := NewKey(t), NewKey(t)
	va := vault.New(s, Ring(t, a), vault.Options{})
	vb := vault.New(s, Ring(t, b), vault.Options{})
	Fill(t, va, "server/fx/token")
	for _, o := range Owners {
		got, err := vb.Get(bg, o, "server/fx/token")
		e := Kind(t, "another key", err, vault.KindWrongKey)
		if got != nil || e.KeyID != a.ID() || !strings.Contains(err.Error(), a.ID()) || !strings.Contains(err.Error(), "previous_key") {
			t.Fatalf("another key: %q %v", got, err)
		}
	}
	// With a as a previous key, b's vault opens them.
	CheckAll(t, vault.New(s, Ring(t, b, a), vault.Options{}), "server/fx/token")
}

// A sealed value changed in any byte, or cut, does not open.
func tampered(t *testing.T, s vault.Store) {
	v := vault.New(s, Ring(t, NewKey(t)), vault.Options{})
	owner, name := Owners[0], "server/fx/token"
	if err := v.Put(bg, owner, name, []byte("a token of some length")); err != nil {
		t.Fatal(err)
	}
	e, err := s.Get(bg, owner, name)
	if err != nil {
		t.Fatal(err)
	}
	for i := range e.Sealed {
		bad := bytes.Clone(e.Sealed)
		bad[i] ^= 0x40
		if err := s.Update(bg, owner, name, 100, func(*vault.Entry) ([]byte, error) { return bad, nil }); err != nil {
			t.Fatal(err)
		}
		_, err := v.Get(bg, owner, name)
		// A changed key id names a key the vault does not have.
		if k := vault.KindOf(err); k != vault.KindCorrupt && !(k == vault.KindWrongKey && i >= 1 && i <= 8) {
			t.Fatalf("byte %d changed: %v", i, err)
		}
	}
	for _, n := range []int{0, 1, vault.SealOverhead - 1} {
		cut := e.Sealed[:n]
		if n == 0 {
			cut = []byte{1}
		}
		if err := s.Update(bg, owner, name, 100, func(*vault.Entry) ([]byte, error) { return cut, nil }); err != nil {
			t.Fatal(err)
		}
		_, err := v.Get(bg, owner, name)
		Kind(t, fmt.Sprintf("cut to %d bytes", n), err, vault.KindCorrupt)
	}
}

// Without a key, Put and Get are refused with KindLocked saying how to
// configure one; List, Delete and Status work.
func locked(t *testing.T, s vault.Store) {
	open := vault.New(s, Ring(t, NewKey(t)), vault.Options{})
	Fill(t, open, "server/fx/token", "server/gx/token")
	v := vault.New(s, nil, vault.Options{})
	if !v.Locked() {
		t.Fatal("a vault without a key is not locked")
	}
	err := v.Put(bg, Owners[0], "server/fx/token", []byte("x"))
	e := Kind(t, "put", err, vault.KindLocked)
	if !strings.Contains(e.Message, "key_file") || !strings.Contains(e.Message, "key_env") || !strings.Contains(e.Message, vault.DefaultKeyEnv) {
		t.Errorf("the locked error says nothing of how to unlock: %v", err)
	}
	_, err = v.Get(bg, Owners[0], "server/fx/token")
	Kind(t, "get", err, vault.KindLocked)
	_, err = v.Rotate(bg, nil)
	Kind(t, "rotate", err, vault.KindLocked)
	if infos, err := v.List(bg, Owners[0]); err != nil || len(infos) != 2 {
		t.Fatalf("list: %+v %v", infos, err)
	}
	if err := v.Delete(bg, Owners[0], "server/gx/token"); err != nil {
		t.Fatal(err)
	}
	st, err := v.Status(bg)
	if err != nil || !st.Locked || st.Owners != len(Owners) || st.Entries != 2*len(Owners)-1 ||
		st.ByKey[open.Keyring().Current()] != st.Entries || st.CurrentKey != "" {
		t.Fatalf("status: %+v %v", st, err)
	}
	// The entry Put refused was not written over.
	if got, err := open.Get(bg, Owners[0], "server/fx/token"); err != nil || !bytes.Equal(got, Value(Owners[0], "server/fx/token")) {
		t.Fatalf("after a locked put: %q %v", got, err)
	}
}

// A value of the bound is taken, one byte more refused.
func valueBound(t *testing.T, s vault.Store) {
	const max = 300
	v := vault.New(s, Ring(t, NewKey(t)), vault.Options{MaxValueBytes: max})
	if err := v.Put(bg, Owners[0], "server/fx/token", bytes.Repeat([]byte("v"), max)); err != nil {
		t.Fatal(err)
	}
	err := v.Put(bg, Owners[0], "server/fx/token", bytes.Repeat([]byte("w"), max+1))
	if e := Kind(t, "one byte more", err, vault.KindTooLarge); e.Limit != max || !strings.Contains(err.Error(), "vault.max_value_bytes") {
		t.Fatalf("one byte more: %v", err)
	}
	if got, _ := v.Get(bg, Owners[0], "server/fx/token"); !bytes.Equal(got, bytes.Repeat([]byte("v"), max)) {
		t.Fatal("the refused value replaced the entry")
	}
	if v := vault.New(s, Ring(t, NewKey(t)), vault.Options{}); v.Options().MaxValueBytes != vault.DefaultMaxValueBytes {
		t.Fatalf("the default: %+v", v.Options())
	}
}

// An owner may have the bound's entries, not one more; replacing one at
// the bound is fine, and other owners are not held to one owner's count.
func entriesBound(t *testing.T, s vault.Store) {
	const max = 3
	v := vault.New(s, Ring(t, NewKey(t)), vault.Options{MaxEntriesPerOwner: max})
	for i := range max {
		if err := v.Put(bg, Owners[0], fmt.Sprint("n", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	err := v.Put(bg, Owners[0], "n-one-more", []byte("x"))
	if e := Kind(t, "one entry more", err, vault.KindTooMany); e.Limit != max || !strings.Contains(err.Error(), "vault.max_entries_per_owner") {
		t.Fatalf("one more: %v", err)
	}
	if _, err := v.Get(bg, Owners[0], "n-one-more"); !vault.IsNotFound(err) {
		t.Fatalf("the refused entry is there: %v", err)
	}
	if err := v.Put(bg, Owners[0], "n0", []byte("y")); err != nil {
		t.Fatalf("a replacement at the bound: %v", err)
	}
	if err := v.Put(bg, Owners[1], "n-one-more", []byte("x")); err != nil {
		t.Fatalf("another owner: %v", err)
	}
	if err := v.Delete(bg, Owners[0], "n1"); err != nil {
		t.Fatal(err)
	}
	if err := v.Put(bg, Owners[0], "n-one-more", []byte("x")); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
	if v := vault.New(s, nil, vault.Options{}); v.Options().MaxEntriesPerOwner != vault.DefaultMaxEntriesPerOwner {
		t.Fatalf("the default: %+v", v.Options())
	}
}

var names = []string{"server/fx/token", "server/fx/secret/API_KEY", "server/gx/token", "server/hx/secret/X-Token"}

// Entries sealed with the old key are re-sealed with the new one by a
// rotation: then the new key alone opens them all, the old one none; a
// second rotation has nothing to do.
func rotate(t *testing.T, s vault.Store) {
	old, cur := NewKey(t), NewKey(t)
	Fill(t, vault.New(s, Ring(t, old), vault.Options{}), names...)
	v := vault.New(s, Ring(t, cur, old), vault.Options{})
	st, err := v.Status(bg)
	if err != nil || st.ToRotate != len(Owners)*len(names) || st.ByKey[old.ID()] != st.ToRotate || st.Unopened != 0 ||
		st.CurrentKey != cur.ID() || !slices.Equal(st.PreviousKeys, []string{old.ID()}) {
		t.Fatalf("status before: %+v %v", st, err)
	}
	CheckAll(t, v, names...)
	var seen []string
	rep, err := v.Rotate(bg, func(owner string, resealed, current int) {
		seen = append(seen, owner)
		if resealed != len(names) || current != 0 {
			t.Errorf("%s: %d re-sealed, %d current", owner, resealed, current)
		}
	})
	if err != nil || rep.Owners != len(Owners) || rep.Resealed != len(Owners)*len(names) || rep.Current != 0 || len(rep.Failed) != 0 {
		t.Fatalf("rotate: %+v %v", rep, err)
	}
	if len(seen) != len(Owners) {
		t.Errorf("progress told of %q", seen)
	}
	CheckAll(t, vault.New(s, Ring(t, cur), vault.Options{}), names...)
	for _, o := range Owners {
		_, err := vault.New(s, Ring(t, old), vault.Options{}).Get(bg, o, names[0])
		Kind(t, "the old key after the rotation", err, vault.KindWrongKey)
	}
	rep, err = v.Rotate(bg, nil)
	if err != nil || rep.Resealed != 0 || rep.Current != len(Owners)*len(names) {
		t.Fatalf("rotate again: %+v %v", rep, err)
	}
	if st, err := v.Status(bg); err != nil || st.ToRotate != 0 || st.ByKey[cur.ID()] != st.Entries {
		t.Fatalf("status after: %+v %v", st, err)
	}
}

// failing is a store whose writes fail after the first n.
type failing struct {
	vault.Store
	left atomic.Int64
}

var errCut = errors.New("the power went")

func (f *failing) Update(ctx context.Context, owner, name string, max int, change func(*vault.Entry) ([]byte, error)) error {
	if f.left.Add(-1) < 0 {
		return vault.StoreFailed("writing", errCut)
	}
	return f.Store.Update(ctx, owner, name, max, change)
}

// A rotation that fails between two entries leaves every entry readable
// (with the old key or the new); run again, it re-seals what is left.
func rotateInterrupted(t *testing.T, s vault.Store) {
	old, cur := NewKey(t), NewKey(t)
	Fill(t, vault.New(s, Ring(t, old), vault.Options{}), names...)
	total := len(Owners) * len(names)
	f := &failing{Store: s}
	f.left.Store(int64(total / 2))
	v := vault.New(f, Ring(t, cur, old), vault.Options{})
	rep, err := v.Rotate(bg, nil)
	if !errors.Is(err, errCut) || rep.Resealed+rep.Current >= total {
		t.Fatalf("the cut rotation: %+v %v", rep, err)
	}
	st, err := v.Status(bg)
	if err != nil || st.ByKey[cur.ID()] != total/2 || st.ToRotate != total-total/2 {
		t.Fatalf("status after the cut: %+v %v", st, err)
	}
	if n, failed, err := v.Check(bg); err != nil || n != total || len(failed) != 0 {
		t.Fatalf("check after the cut: %d %v %v", n, failed, err)
	}
	CheckAll(t, v, names...)
	f.left.Store(1 << 30)
	rep, err = v.Rotate(bg, nil)
	if err != nil || rep.Resealed != total-total/2 || rep.Current != total/2 {
		t.Fatalf("the rotation run again: %+v %v", rep, err)
	}
	CheckAll(t, vault.New(s, Ring(t, cur), vault.Options{}), names...)
}

// A rotation whose context ends stops there, and is finished by another.
func rotateCancelled(t *testing.T, s vault.Store) {
	old, cur := NewKey(t), NewKey(t)
	Fill(t, vault.New(s, Ring(t, old), vault.Options{}), names...)
	v := vault.New(s, Ring(t, cur, old), vault.Options{})
	ctx, cancel := context.WithCancel(bg)
	rep, err := v.Rotate(ctx, func(string, int, int) { cancel() })
	if !errors.Is(err, context.Canceled) || rep.Owners != 1 || rep.Resealed != len(names) {
		t.Fatalf("cancelled: %+v %v", rep, err)
	}
	CheckAll(t, v, names...)
	if rep, err := v.Rotate(bg, nil); err != nil || rep.Resealed != (len(Owners)-1)*len(names) {
		t.Fatalf("finished: %+v %v", rep, err)
	}
}

// An entry no key of the ring opens is left as it is and reported, naming
// it; the rotation re-seals the others.
func rotateUnopened(t *testing.T, s vault.Store) {
	old, cur, lost := NewKey(t), NewKey(t), NewKey(t)
	Fill(t, vault.New(s, Ring(t, old), vault.Options{}), names...)
	if err := vault.New(s, Ring(t, lost), vault.Options{}).Put(bg, Owners[1], "server/zz/token", []byte("x")); err != nil {
		t.Fatal(err)
	}
	v := vault.New(s, Ring(t, cur, old), vault.Options{})
	if st, err := v.Status(bg); err != nil || st.Unopened != 1 {
		t.Fatalf("status: %+v %v", st, err)
	}
	rep, err := v.Rotate(bg, nil)
	if err != nil || rep.Resealed != len(Owners)*len(names) || len(rep.Failed) != 1 {
		t.Fatalf("rotate: %+v %v", rep, err)
	}
	e := Kind(t, "the entry of a key lost", rep.Failed[0], vault.KindWrongKey)
	if e.Owner != Owners[1] || e.Name != "server/zz/token" || e.KeyID != lost.ID() {
		t.Fatalf("failed: %+v", e)
	}
	if _, failed, err := v.Check(bg); err != nil || len(failed) != 1 {
		t.Fatalf("check: %v %v", failed, err)
	}
}

// Writers at once keep every entry each wrote.
func concurrentPuts(t *testing.T, s vault.Store) {
	v := vault.New(s, Ring(t, NewKey(t)), vault.Options{})
	const writers, each = 4, 8
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				errs <- v.Put(bg, Owners[0], fmt.Sprintf("w%d/n%d", w, i), []byte("x"))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if infos, err := v.List(bg, Owners[0]); err != nil || len(infos) != writers*each {
		t.Fatalf("%d entries kept of %d: %v", len(infos), writers*each, err)
	}
}
