package identity

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// Claims are read by name, or by a path of names when the token has no
// claim of that name; groups from a list or a string; the name falls
// back to preferred_username, username, the subject; scopes from scope,
// else scp.
func TestClaims(t *testing.T) {
	decode := func(s string) map[string]any {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, tc := range []struct {
		claims, json string
		want         Caller
		kind         Kind
	}{
		{"", `{"sub":"u","groups":["a","b","a",""],"scope":"x y"}`, Caller{Subject: "u", Name: "u", Groups: []string{"a", "b"}, Scopes: []string{"x", "y"}}, ""},
		{"", `{"sub":"u","preferred_username":"ann","groups":"a, b,c","scp":["x"]}`, Caller{Subject: "u", Name: "ann", Groups: []string{"a", "b", "c"}, Scopes: []string{"x"}}, ""},
		{"", `{"sub":"u","username":"bob","name":"Bob B","scp":"x y"}`, Caller{Subject: "u", Name: "Bob B", Scopes: []string{"x", "y"}}, ""},
		{"realm_access.roles", `{"sub":"u","realm_access":{"roles":["dev"]}}`, Caller{Subject: "u", Name: "u", Groups: []string{"dev"}}, ""},
		// A namespaced claim, dots and all, is a claim of its own.
		{"https://example.com/groups", `{"sub":"u","https://example.com/groups":["ops"]}`, Caller{Subject: "u", Name: "u", Groups: []string{"ops"}}, ""},
		{"a.b.c", `{"sub":"u","a":{"b":"not a mapping"}}`, Caller{Subject: "u", Name: "u"}, ""},
		{"", `{"sub":"u","groups":{"not":"a list"}}`, Caller{}, KindInvalid},
		{"", `{"sub":""}`, Caller{}, KindInvalid},
		{"", `{"name":"no subject"}`, Caller{}, KindInvalid},
	} {
		c, err := callerOf(decode(tc.json), Claims{Subject: DefaultSubjectClaim, Groups: cmpOr(tc.claims, DefaultGroupsClaim)})
		if KindOf(err) != tc.kind {
			t.Errorf("%s: %v, want kind %q", tc.json, err, tc.kind)
			continue
		}
		if err != nil {
			continue
		}
		if c.Subject != tc.want.Subject || c.Name != tc.want.Name || !slices.Equal(c.Groups, tc.want.Groups) || !slices.Equal(c.Scopes, tc.want.Scopes) {
			t.Errorf("%s: %+v, want %+v", tc.json, c, tc.want)
		}
	}
	// A name claim configured comes first; missing, the defaults follow.
	c, _ := callerOf(decode(`{"sub":"u","name":"N","ext":{"display":"D"}}`), Claims{Subject: "sub", Name: "ext.display", Groups: "groups"})
	if c.Name != "D" {
		t.Errorf("configured name claim: %q", c.Name)
	}
	c, _ = callerOf(decode(`{"sub":"u","name":"N"}`), Claims{Subject: "sub", Name: "ext.display", Groups: "groups"})
	if c.Name != "N" {
		t.Errorf("configured name claim missing: %q", c.Name)
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// FuzzClaims: any JSON object makes a caller or a typed refusal, never a
// panic; a caller has a subject and no empty group.
func FuzzClaims(f *testing.F) {
	for _, s := range []string{`{"sub":"u","groups":["a"],"scope":"x"}`, `{"sub":"u","realm_access":{"roles":"a,b"}}`,
		`{"sub":1}`, `{"sub":"u","groups":[1,null,{}],"scp":[2]}`, `{"sub":"u","a":{"b":{"c":[]}}}`} {
		f.Add(s, "realm_access.roles")
		f.Add(s, "groups")
	}
	f.Fuzz(func(t *testing.T, doc, groups string) {
		var m map[string]any
		if json.Unmarshal([]byte(doc), &m) != nil || m == nil {
			return
		}
		if groups == "" {
			groups = DefaultGroupsClaim
		}
		c, err := callerOf(m, Claims{Subject: "sub", Groups: groups})
		if err != nil {
			if KindOf(err) != KindInvalid {
				t.Fatalf("refusal of kind %q", KindOf(err))
			}
			return
		}
		if c.Subject == "" || c.Name == "" || slices.Contains(c.Groups, "") {
			t.Fatalf("caller %+v", c)
		}
	})
}

// FuzzJWT: any string given to the JWT verifier is its caller, a typed
// refusal that does not hold the token, or not its; never a panic. The
// verifier trusts one issuer whose key signs the seeds.
func FuzzJWT(f *testing.F) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		f.Fatal(err)
	}
	set, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(set)
	}))
	f.Cleanup(srv.Close)
	v := NewTokens(TokenOptions{Issuers: []Issuer{{URL: srv.URL, JWKSURL: srv.URL}}, JWKSRefetchInterval: time.Hour}).JWT
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", "k1"))
	if err != nil {
		f.Fatal(err)
	}
	sign := func(claims map[string]any) string {
		b, _ := json.Marshal(claims)
		jws, err := signer.Sign(b)
		if err != nil {
			f.Fatal(err)
		}
		s, _ := jws.CompactSerialize()
		return s
	}
	exp := time.Now().Add(time.Hour).Unix()
	good := sign(map[string]any{"iss": srv.URL, "sub": "u", "exp": exp, "aud": "x", "groups": []string{"g"}})
	f.Add(good)
	f.Add(sign(map[string]any{"iss": srv.URL, "sub": "u", "exp": 1}))
	f.Add(sign(map[string]any{"iss": srv.URL, "exp": exp}))
	f.Add(sign(map[string]any{"iss": "https://elsewhere", "sub": "u", "exp": exp}))
	f.Add(sign(map[string]any{"iss": srv.URL, "sub": "u", "exp": "soon"}))
	f.Add(base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none"}`)) + "." + strings.Split(good, ".")[1] + ".")
	f.Add(strings.Split(good, ".")[0] + ".e30.AAAA")
	f.Add("ory_at_opaque.token")
	f.Add("a.b.c")
	f.Fuzz(func(t *testing.T, token string) {
		c, err := v.Verify(context.Background(), token)
		switch {
		case errors.Is(err, ErrNotMine):
		case err != nil:
			if len(token) >= 16 && strings.Contains(err.Error(), token) {
				t.Fatalf("the refusal holds the token: %v", err)
			}
			if k := KindOf(err); k == KindMissing || k == KindScope || k == KindAudience {
				t.Fatalf("refusal of kind %q", k)
			}
		case c == nil || c.Subject == "" || c.Issuer != srv.URL || c.Method != MethodJWT:
			t.Fatalf("caller %+v", c)
		}
	})
}
