package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/toolmux/toolmux/api"
	"github.com/toolmux/toolmux/identity"
)

// /api/info names the request's caller (name, groups, how it proved it,
// nothing of its credential), and none where there is no caller.
func TestInfoCaller(t *testing.T) {
	h := api.New(api.Options{Version: "test"})
	info := func(c *identity.Caller) map[string]any {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, "/api/info", nil)
		if c != nil {
			req = req.WithContext(identity.With(req.Context(), c))
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var in map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &in); err != nil || rec.Code != http.StatusOK {
			t.Fatalf("%d %v %s", rec.Code, err, rec.Body)
		}
		return in
	}
	if in := info(nil); in["caller"] != nil {
		t.Errorf("no caller: %v", in["caller"])
	}
	in := info(&identity.Caller{Subject: "key:ci", Name: "ci", Groups: []string{"dev"}, Method: identity.MethodKey})
	c, _ := in["caller"].(map[string]any)
	if len(c) != 3 || c["name"] != "ci" || c["method"] != "key" || len(c["groups"].([]any)) != 1 {
		t.Errorf("the caller: %v", in["caller"])
	}
	in = info(&identity.Caller{Subject: "u1", Name: "ann", Method: identity.MethodJWT})
	if c, _ := in["caller"].(map[string]any); c["groups"] == nil {
		t.Errorf("a caller without groups: %v", in["caller"])
	}
}
