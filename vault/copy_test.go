package vault_test

import (
	"context"
	"testing"

	"github.com/toolmux/toolmux/vault"
	"github.com/toolmux/toolmux/vault/vaulttest"
)

// Copy copies sealed entries as they are, without a key: they open in the
// destination with the key that sealed them; an entry the destination has
// is kept; the destination's bound on an owner's entries holds, and a
// copy run again goes on.
func TestCopy(t *testing.T) {
	ctx := context.Background()
	ring := vaulttest.Ring(t, vaulttest.NewKey(t))
	from := vault.New(newFileStore(t), ring, vault.Options{})
	for _, e := range []struct{ owner, secret, value string }{
		{"key:ann", "A", "ann-a"}, {"key:ann", "B", "ann-b"}, {"key:bob", "A", "bob-a"},
	} {
		if err := from.PutSecret(ctx, e.owner, "fx", e.secret, []byte(e.value)); err != nil {
			t.Fatal(err)
		}
	}
	to := newFileStore(t)
	if err := vault.New(to, ring, vault.Options{}).PutSecret(ctx, "key:bob", "fx", "A", []byte("bob-newer")); err != nil {
		t.Fatal(err)
	}

	// A locked vault copies; one entry per owner at most: ann's second
	// is refused.
	one := vault.New(to, nil, vault.Options{MaxEntriesPerOwner: 1})
	rep, err := one.Copy(ctx, from.Store())
	if vault.KindOf(err) != vault.KindTooMany || rep.Copied != 1 {
		t.Fatalf("a copy beyond the bound: %+v %v", rep, err)
	}
	rep, err = vault.New(to, nil, vault.Options{}).Copy(ctx, from.Store())
	if err != nil || rep != (vault.CopyReport{Owners: 2, Copied: 1, Kept: 2}) {
		t.Fatalf("the copy run again: %+v %v", rep, err)
	}
	got := vault.New(to, ring, vault.Options{})
	for _, e := range []struct{ owner, secret, want string }{
		{"key:ann", "A", "ann-a"}, {"key:ann", "B", "ann-b"}, {"key:bob", "A", "bob-newer"},
	} {
		if v, err := got.Secret(ctx, e.owner, "fx", e.secret); err != nil || string(v) != e.want {
			t.Errorf("%s's %s after the copy: %q %v", e.owner, e.secret, v, err)
		}
	}
	// Too large for the destination: refused, naming the entry.
	small := vault.New(newFileStore(t), nil, vault.Options{MaxValueBytes: 2})
	if _, err := small.Copy(ctx, from.Store()); vault.KindOf(err) != vault.KindTooLarge {
		t.Fatalf("a value too large for the destination: %v", err)
	}
}
