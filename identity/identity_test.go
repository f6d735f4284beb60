package identity_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/identity"
)

// A key verifies as its caller; a revoked one, or any credential with the
// key prefix that is no key, is invalid; anything else is left to the
// next verifier, and a credential nobody knows is invalid.
func TestKeys(t *testing.T) {
	ctx := context.Background()
	secret := identity.NewKeySecret()
	if !strings.HasPrefix(secret, identity.KeyPrefix) || len(secret) != len(identity.KeyPrefix)+43 {
		t.Fatalf("secret %q", secret)
	}
	if other := identity.NewKeySecret(); other == secret {
		t.Fatal("two secrets alike")
	}
	keys := identity.NewKeys(identity.Key{Name: "ci", Groups: []string{"dev"}, Hash: identity.HashKey(secret)})
	c, err := keys.Verify(ctx, secret)
	if err != nil || c.Name != "ci" || c.Subject != "key:ci" || !c.In("dev") || c.In("admin") || c.Method != identity.MethodKey {
		t.Fatalf("%+v %v", c, err)
	}
	if _, err := keys.Verify(ctx, identity.NewKeySecret()); identity.KindOf(err) != identity.KindInvalid {
		t.Fatalf("an unknown key: %v", err)
	}
	if _, err := keys.Verify(ctx, "eyJhbGciOi.x.y"); !errors.Is(err, identity.ErrNotMine) {
		t.Fatalf("a JWT: %v", err)
	}
	keys.Set(nil) // revoked
	if _, err := keys.Verify(ctx, secret); identity.KindOf(err) != identity.KindInvalid || strings.Contains(err.Error(), secret) {
		t.Fatalf("a revoked key: %v", err)
	}
	if _, err := (identity.Verifiers{keys}).Verify(ctx, "not-a-key"); identity.KindOf(err) != identity.KindInvalid {
		t.Fatalf("a credential nobody knows: %v", err)
	}
}

func TestKinds(t *testing.T) {
	for k, want := range map[identity.Kind]struct {
		status int
		oauth  string
	}{
		identity.KindMissing:     {401, ""},
		identity.KindInvalid:     {401, "invalid_token"},
		identity.KindExpired:     {401, "invalid_token"},
		identity.KindAudience:    {401, "invalid_token"},
		identity.KindIssuer:      {401, "invalid_token"},
		identity.KindScope:       {403, "insufficient_scope"},
		identity.KindUnavailable: {503, ""},
	} {
		if k.Status() != want.status || k.OAuthError() != want.oauth {
			t.Errorf("%s: %d %q", k, k.Status(), k.OAuthError())
		}
	}
	if identity.KindOf(nil) != "" || identity.KindOf(errors.New("x")) != identity.KindInvalid {
		t.Error("KindOf")
	}
	var nobody *identity.Caller
	if nobody.In("admin") || nobody.Key() != "" || nobody.String() != "nobody" {
		t.Error("a nil caller")
	}
	ctx := identity.With(context.Background(), &identity.Caller{Name: "ann"})
	if c := identity.From(ctx); c == nil || c.Name != "ann" || identity.From(context.Background()) != nil {
		t.Error("context")
	}
}

// A caller sees its own things only; a member of an all-seeing group, and
// no caller at all (no authentication configured), see everything; a
// thing of no owner is seen only by those who see everything; two tokens
// of one issuer and subject are one caller, the same subject at another
// issuer is another.
func TestScope(t *testing.T) {
	ann := &identity.Caller{Subject: "u1", Name: "ann", Issuer: "https://idp", Method: identity.MethodJWT}
	annAgain := &identity.Caller{Subject: "u1", Name: "Ann B.", Issuer: "https://idp", Method: identity.MethodJWT, Scopes: []string{"mcp"}}
	elsewhere := &identity.Caller{Subject: "u1", Name: "ann", Issuer: "https://other", Method: identity.MethodJWT}
	root := &identity.Caller{Subject: "key:root", Name: "root", Groups: []string{"ops"}, Method: identity.MethodKey}
	all := []string{identity.AdminGroup, "ops"}
	mine := ann.Ref()
	if mine.Name != "ann" || mine.Key != ann.Key() || mine.String() != "ann" {
		t.Fatalf("ref %+v", mine)
	}
	for _, c := range []struct {
		who   *identity.Caller
		owner *identity.Ref
		sees  bool
	}{
		{ann, mine, true},
		{annAgain, mine, true},
		{elsewhere, mine, false},
		{ann, nil, false},
		{ann, root.Ref(), false},
		{root, mine, true},
		{root, nil, true},
		{nil, mine, true},
		{nil, nil, true},
	} {
		s := identity.ScopeOf(c.who, all)
		if got := s.Sees(c.owner); got != c.sees {
			t.Errorf("%v sees %+v: %v", c.who, c.owner, got)
		}
		if s.All() != (c.who == nil || c.who == root) || !s.All() && s.Key() != c.who.Key() {
			t.Errorf("%v: scope %+v", c.who, s)
		}
	}
	if (*identity.Caller)(nil).Ref() != nil || identity.RefFrom(context.Background()) != nil || (*identity.Ref)(nil).String() != "" {
		t.Error("no caller has a ref")
	}
	if r := identity.RefFrom(identity.With(context.Background(), ann)); r == nil || *r != *mine {
		t.Errorf("RefFrom: %+v", r)
	}
}
