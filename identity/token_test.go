package identity_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/identity"
)

// The caller's token rides in the context, and formatting it any way (a
// log line, an error, a record) shows no credential.
func TestTokenInContextRedacted(t *testing.T) {
	ctx := context.Background()
	if tok, ok := identity.TokenFrom(ctx); ok || !tok.IsZero() {
		t.Fatalf("a token in an empty context: %v", ok)
	}
	const raw = "eyJhbGciOiJSUzI1NiJ9.secret-claims.signature"
	ctx = identity.WithToken(ctx, raw)
	tok, ok := identity.TokenFrom(ctx)
	if !ok || tok.Raw() != raw {
		t.Fatalf("TokenFrom: %v, its value differs", ok)
	}
	if _, ok := identity.TokenFrom(identity.WithToken(context.Background(), "")); ok {
		t.Error("an empty token is a token")
	}
	var sb strings.Builder
	slog.New(slog.NewTextHandler(&sb, nil)).Info("call", "token", tok)
	slog.New(slog.NewJSONHandler(&sb, nil)).Info("call", "token", tok)
	js, err := json.Marshal(struct {
		T identity.Token            `json:"t"`
		M map[identity.Token]string `json:"m"`
	}{tok, map[identity.Token]string{tok: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		fmt.Sprint(tok), fmt.Sprintf("%v %+v %#v %s %q %x %X %d", tok, tok, tok, tok, tok, tok, tok, tok),
		fmt.Sprint(&tok), fmt.Sprintf("%v", struct{ T identity.Token }{tok}), sb.String(), string(js),
	} {
		if strings.Contains(s, "secret") || strings.Contains(s, "eyJ") {
			t.Errorf("a token formatted shows the credential: %s", s)
		}
		if !strings.Contains(s, "redacted") {
			t.Errorf("a token formatted: %s", s)
		}
	}
}

// Carry gives a context apart from the request's the request's caller
// and token, and no token when the request has none.
func TestCarry(t *testing.T) {
	ann := &identity.Caller{Subject: "u1", Name: "ann", Method: identity.MethodJWT}
	req := identity.WithToken(identity.With(context.Background(), ann), "ann-token")
	stale := identity.WithToken(context.Background(), "stale-token")
	ctx := identity.Carry(stale, req)
	if tok, ok := identity.TokenFrom(ctx); identity.From(ctx) != ann || !ok || tok.Raw() != "ann-token" {
		t.Errorf("carried: %v, a token %v", identity.From(ctx), ok)
	}
	key := identity.With(context.Background(), &identity.Caller{Subject: "key:ci", Name: "ci", Method: identity.MethodKey})
	ctx = identity.Carry(stale, key)
	if _, ok := identity.TokenFrom(ctx); ok || identity.From(ctx).Name != "ci" {
		t.Errorf("an API key's caller carried with a token: %v", ok)
	}
}
