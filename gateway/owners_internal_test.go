package gateway

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/toolmux/toolmux/identity"
)

// A re-issued request is answered from the execution of the same
// caller's request only: another caller sending the same request (the
// same client, id, tool and arguments) does not attach to it, its call
// runs; the same caller re-issuing with another credential (a refreshed
// token: here a second key of the same name, the same caller) attaches.
func TestReissueOfCallers(t *testing.T) {
	ann1, ann2, bob := identity.NewKeySecret(), identity.NewKeySecret(), identity.NewKeySecret()
	rig := newReissueRig(t, Reissue{}, Auth{Verifier: identity.NewKeys(identity.Key{Name: "ann", Hash: identity.HashKey(ann1)},
		identity.Key{Name: "ann", Hash: identity.HashKey(ann2)}, identity.Key{Name: "bob", Hash: identity.HashKey(bob)})})
	c := client26{url: rig.url + "/mcp", name: "agent"}
	as := func(req *http.Request, token string) *http.Request {
		req.Header.Set("Authorization", "Bearer "+token)
		return req
	}
	path := filepath.Join(rig.dir, "out.txt")
	args := appendArgs(path, "first", 1500)

	ctx, cancel := context.WithCancel(context.Background())
	cut(t, as(c.request(ctx, "7", "fx__append", args), ann1), cancel, func() bool { return len(lines(t, path)) > 0 })

	// The same request again as who: its answer is the first execution's
	// text either way; whether it ran again shows in the file and in the
	// re-issues answered.
	again := func(who, token string, wantRuns int, wantAnswered uint64) {
		t.Helper()
		got := do(t, as(c.request(context.Background(), "7", "fx__append", args), token))
		if text, isErr := resultText(t, got); isErr || text != "appended first" {
			t.Fatalf("%s's request got %q (isError %v)", who, text, isErr)
		}
		if l := lines(t, path); len(l) != wantRuns {
			t.Fatalf("after %s's request the file holds %q, want %d runs", who, l, wantRuns)
		}
		if s := rig.g.ReissueStats(); s.Answered != wantAnswered {
			t.Fatalf("after %s's request: %+v, want %d answered from a first execution", who, s, wantAnswered)
		}
	}
	again("bob", bob, 2, 0)  // a call of his own, never ann's
	again("ann", ann2, 2, 1) // her execution answers her, whatever her token
	if n := rig.calls.count("append"); n != 2 {
		t.Errorf("%d calls reached the tool, want 2 (ann's, bob's)", n)
	}
}
