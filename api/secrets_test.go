package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/api"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/vault"
	"github.com/toolmux/toolmux/vault/vaulttest"
)

// Each caller sets, lists and deletes their own secrets; a value never
// comes back; one byte over the configured bound is refused; another's
// entry cannot be reached.
func TestSecrets(t *testing.T) {
	v := vault.New(vault.NewFileStore(t.TempDir()), vaulttest.Ring(t, vaulttest.NewKey(t)), vault.Options{})
	var changed []string
	h := api.New(api.Options{Secrets: &api.Secrets{Vault: v, MaxValueBytes: 16,
		Needed:  func() map[string][]string { return map[string][]string{"jira": {"TOKEN"}} },
		Changed: func(owner, server string) { changed = append(changed, owner+" "+server) }}})
	ann := &identity.Caller{Subject: "key:ann", Name: "ann", Method: identity.MethodKey}
	bob := &identity.Caller{Subject: "key:bob", Name: "bob", Method: identity.MethodKey}
	do := func(c *identity.Caller, method, path, body string) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		if c != nil {
			req = req.WithContext(identity.With(req.Context(), c))
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	list := func(c *identity.Caller) []api.SecretInfo {
		t.Helper()
		rec := do(c, "GET", "/api/secrets", "")
		var out struct{ Secrets []api.SecretInfo }
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || rec.Code != 200 {
			t.Fatalf("%d %v %s", rec.Code, err, rec.Body)
		}
		return out.Secrets
	}
	if l := list(ann); len(l) != 1 || l[0].Set || !l[0].Configured || l[0].Name != "TOKEN" {
		t.Errorf("before: %+v", l)
	}
	// 16 bytes: the bound; 17: one more, refused.
	if rec := do(ann, "PUT", "/api/secrets/jira/TOKEN", `{"value":"0123456789abcdef"}`); rec.Code != http.StatusNoContent {
		t.Fatalf("put: %d %s", rec.Code, rec.Body)
	}
	if rec := do(ann, "PUT", "/api/secrets/jira/TOKEN", `{"value":"0123456789abcdefX"}`); rec.Code != http.StatusRequestEntityTooLarge ||
		!strings.Contains(rec.Body.String(), "vault.max_value_bytes") || strings.Contains(rec.Body.String(), "0123456789") {
		t.Errorf("one byte over: %d %s", rec.Code, rec.Body)
	}
	if b, err := v.Secret(context.Background(), "key:ann", "jira", "TOKEN"); err != nil || string(b) != "0123456789abcdef" {
		t.Errorf("kept: %q %v", b, err)
	}
	l := list(ann)
	if len(l) != 1 || !l[0].Set || l[0].Updated.IsZero() {
		t.Errorf("after: %+v", l)
	}
	if rec := do(ann, "GET", "/api/secrets", ""); strings.Contains(rec.Body.String(), "0123456789") {
		t.Errorf("the list shows the value: %s", rec.Body)
	}
	// Bob sees his own (none), and deleting "his" removes nothing of ann's.
	if l := list(bob); len(l) != 1 || l[0].Set {
		t.Errorf("bob sees: %+v", l)
	}
	if rec := do(bob, "DELETE", "/api/secrets/jira/TOKEN", ""); rec.Code != http.StatusNotFound {
		t.Errorf("bob deleting: %d %s", rec.Code, rec.Body)
	}
	if _, err := v.Secret(context.Background(), "key:ann", "jira", "TOKEN"); err != nil {
		t.Errorf("ann's secret after bob's delete: %v", err)
	}
	// A secret no server takes, a body that is not one, no caller.
	for _, c := range []struct {
		c      *identity.Caller
		method string
		path   string
		body   string
		status int
	}{
		{ann, "PUT", "/api/secrets/jira/OTHER", `{"value":"x"}`, http.StatusNotFound},
		{ann, "PUT", "/api/secrets/other/TOKEN", `{"value":"x"}`, http.StatusNotFound},
		{ann, "PUT", "/api/secrets/jira/TOKEN", `"x"`, http.StatusBadRequest},
		{ann, "PUT", "/api/secrets/jira/TOKEN", `{"value":""}`, http.StatusBadRequest},
		{nil, "GET", "/api/secrets", "", http.StatusForbidden},
		{nil, "PUT", "/api/secrets/jira/TOKEN", `{"value":"x"}`, http.StatusForbidden},
	} {
		if rec := do(c.c, c.method, c.path, c.body); rec.Code != c.status {
			t.Errorf("%s %s %s: %d %s, want %d", c.c, c.method, c.path, rec.Code, rec.Body, c.status)
		}
	}
	if rec := do(ann, "DELETE", "/api/secrets/jira/TOKEN", ""); rec.Code != http.StatusNoContent {
		t.Errorf("delete: %d %s", rec.Code, rec.Body)
	}
	if l := list(ann); len(l) != 1 || l[0].Set {
		t.Errorf("after delete: %+v", l)
	}
	if len(changed) != 2 || changed[0] != "key:ann jira" {
		t.Errorf("told of changes: %q", changed)
	}
}
