package identity

import (
	"container/list"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"sync"
	"time"
)

// The web page's sessions: a person who logged in on the page (Login) is
// given a session, whose random id the browser sends back in a cookie
// instead of a bearer credential. A session is kept in the gateway's
// memory only, by the SHA-256 of its id (a dump of the memory holds no
// cookie), with the caller its login found and a CSRF token bound to it;
// it lasts a bounded time, and at most a bounded number are kept, the
// oldest ended first. A gateway restarted has none: its users log in again.

// Defaults of the page's sessions and logins (auth.page).
const (
	DefaultSessionMaxAge = 8 * time.Hour
	DefaultMaxSessions   = 10_000
	DefaultLoginTimeout  = 10 * time.Minute
)

// sessionIDBytes is the randomness of a session id and of a CSRF token:
// 256 bits, nothing to guess.
const sessionIDBytes = 32

// SessionIDLen is the length of a session id and of a CSRF token as
// written (base64url without padding).
var SessionIDLen = base64.RawURLEncoding.EncodedLen(sessionIDBytes)

// SessionOptions bound the sessions. Zero values mean the defaults.
type SessionOptions struct {
	// MaxAge is how long a session lasts after its login.
	MaxAge time.Duration
	// MaxEntries bounds the sessions kept; one more ends the oldest.
	MaxEntries int
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Session is one session of the page.
type Session struct {
	// Caller is who logged in; its Expires is the session's end.
	Caller *Caller
	// CSRF is the token a request that changes something must carry
	// besides the cookie (the page reads it, another site cannot).
	CSRF string
}

type sessionEntry struct {
	key     [sha256.Size]byte
	session *Session
}

// Sessions keeps the page's sessions. It is safe for concurrent use.
type Sessions struct {
	opts SessionOptions

	mu    sync.Mutex
	byKey map[[sha256.Size]byte]*list.Element
	order list.List // of *sessionEntry, oldest first (the first to expire)
}

// NewSessions returns an empty set of sessions bounded by o.
func NewSessions(o SessionOptions) *Sessions {
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultSessionMaxAge
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxSessions
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Sessions{opts: o, byKey: map[[sha256.Size]byte]*list.Element{}}
}

// MaxAge is how long a session lasts.
func (s *Sessions) MaxAge() time.Duration { return s.opts.MaxAge }

// Start begins a session for c (a copy of it, whose Expires is the
// session's end) and returns its id, for the cookie, and the session. The
// expired sessions are dropped; with MaxEntries kept still, the oldest is
// ended.
func (s *Sessions) Start(c *Caller) (id string, session *Session) {
	id = randomToken()
	cc := *c
	cc.Expires = s.opts.Now().Add(s.opts.MaxAge)
	session = &Session{Caller: &cc, CSRF: randomToken()}
	key := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropExpiredLocked()
	for s.order.Len() >= s.opts.MaxEntries {
		s.removeLocked(s.order.Front())
	}
	s.byKey[key] = s.order.PushBack(&sessionEntry{key: key, session: session})
	return id, session
}

// Get returns the session of id, if it is kept and has not expired. An
// id of another form than Start's is none, without a lookup.
func (s *Sessions) Get(id string) (*Session, bool) {
	if !WellFormedSessionID(id) {
		return nil, false
	}
	key := sha256.Sum256([]byte(id))
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.byKey[key]
	if !ok {
		return nil, false
	}
	e := el.Value.(*sessionEntry)
	if !now.Before(e.session.Caller.Expires) {
		s.removeLocked(el)
		return nil, false
	}
	return e.session, true
}

// End ends the session of id (logging out); it reports whether there was
// one.
func (s *Sessions) End(id string) bool {
	if !WellFormedSessionID(id) {
		return false
	}
	key := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.byKey[key]
	if ok {
		s.removeLocked(el)
	}
	return ok
}

// Len is the number of sessions kept (expired ones not yet dropped
// included).
func (s *Sessions) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.order.Len()
}

// dropExpiredLocked drops the expired sessions, which are the oldest:
// every session lasts MaxAge.
func (s *Sessions) dropExpiredLocked() {
	now := s.opts.Now()
	for el := s.order.Front(); el != nil; el = s.order.Front() {
		if now.Before(el.Value.(*sessionEntry).session.Caller.Expires) {
			return
		}
		s.removeLocked(el)
	}
}

func (s *Sessions) removeLocked(el *list.Element) {
	delete(s.byKey, el.Value.(*sessionEntry).key)
	s.order.Remove(el)
}

// CheckCSRF reports whether token, as a request sent it, is the
// session's CSRF token (compared in constant time).
func (s *Session) CheckCSRF(token string) bool {
	return len(token) == len(s.CSRF) && subtle.ConstantTimeCompare([]byte(token), []byte(s.CSRF)) == 1
}

// WellFormedSessionID reports whether id has the form of a session id (or
// a CSRF token): SessionIDLen characters of base64url.
func WellFormedSessionID(id string) bool {
	if len(id) != SessionIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// randomToken is 32 random bytes in base64url: a session id, a CSRF
// token, a login's state and nonce.
func randomToken() string {
	var b [sessionIDBytes]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// RandomToken returns a new random token of the form of a session id
// (SessionIDLen characters of base64url): a login's state and nonce.
func RandomToken() string { return randomToken() }
