package identity_test

import (
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/identity"
)

// A session is found by its id until it expires or ends; it holds a copy
// of its caller, expiring with it, and a CSRF token of its own; an id of
// another form is no session; one more session than the bound ends the
// oldest.
func TestSessions(t *testing.T) {
	clk := &fixedClock{at: time.Unix(1_800_000_000, 0)}
	s := identity.NewSessions(identity.SessionOptions{MaxAge: time.Hour, MaxEntries: 2, Now: clk.now})
	alice := &identity.Caller{Subject: "alice", Name: "Alice", Groups: []string{"eng"}, Method: identity.MethodSession, Issuer: "https://idp.test"}
	id, sess := s.Start(alice)
	if !identity.WellFormedSessionID(id) || !identity.WellFormedSessionID(sess.CSRF) || id == sess.CSRF {
		t.Fatalf("id %q, CSRF %q", id, sess.CSRF)
	}
	if !alice.Expires.IsZero() {
		t.Error("Start changed the caller it was given")
	}
	got, ok := s.Get(id)
	if !ok || got != sess || got.Caller.Name != "Alice" || got.Caller.Key() != alice.Key() || !got.Caller.Expires.Equal(clk.now().Add(time.Hour)) {
		t.Fatalf("get: %v %+v", ok, got)
	}
	if !sess.CheckCSRF(sess.CSRF) || sess.CheckCSRF("") || sess.CheckCSRF(sess.CSRF[1:]) || sess.CheckCSRF(identity.RandomToken()) {
		t.Error("the CSRF check")
	}
	for _, bad := range []string{"", "x", id + "x", id[1:], strings.Replace(id, id[:1], "!", 1), strings.ToUpper(id[:10]) + "." + id[11:], identity.RandomToken()} {
		if _, ok := s.Get(bad); ok {
			t.Errorf("%q is a session", bad)
		}
	}

	// The bound: a third session ends the oldest.
	clk.advance(time.Minute)
	id2, _ := s.Start(&identity.Caller{Subject: "bob", Name: "Bob"})
	clk.advance(time.Minute)
	id3, _ := s.Start(&identity.Caller{Subject: "carol", Name: "Carol"})
	if _, ok := s.Get(id); ok || s.Len() != 2 {
		t.Errorf("the oldest of 3 sessions, bound 2, is kept (%d kept)", s.Len())
	}
	if _, ok := s.Get(id2); !ok {
		t.Error("bob's session ended")
	}
	// Ended.
	if !s.End(id2) || s.End(id2) {
		t.Error("End")
	}
	if _, ok := s.Get(id2); ok {
		t.Error("an ended session is found")
	}
	// Expired: an hour after carol's login, hers is gone; and a new one
	// drops the expired ones first.
	clk.advance(time.Hour - time.Nanosecond)
	if _, ok := s.Get(id3); !ok {
		t.Error("carol's session ended before its hour")
	}
	clk.advance(time.Nanosecond)
	if _, ok := s.Get(id3); ok {
		t.Error("carol's session lasts past its hour")
	}
	s.Start(&identity.Caller{Subject: "dan"})
	if s.Len() != 1 {
		t.Errorf("%d sessions kept, want dan's alone", s.Len())
	}
}

// fixedClock is a clock that moves only when a test moves it.
type fixedClock struct{ at time.Time }

func (c *fixedClock) now() time.Time          { return c.at }
func (c *fixedClock) advance(d time.Duration) { c.at = c.at.Add(d) }
