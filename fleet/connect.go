package fleet

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ConnectOptions say how ConnectWith reaches the fleet's NATS server. The
// zero value is Connect's: the URL's own credentials, and an error at once
// when the server cannot be reached.
type ConnectOptions struct {
	// Token, when set and the URL names no credentials, is the token sent
	// at every connection attempt. It is asked again each time, so that a
	// token written after this member started (by the gateway that starts
	// the server) is found by the next attempt.
	Token func() string
	// Wait, when set, waits for a server that cannot be reached yet, and
	// for its JetStream, instead of failing at once: for members that run
	// unattended (workers), started before or while the server is down.
	Wait *Wait
	// Credentials, when set, are the member's own (its nkey,
	// docs/fleet.md "Members"): Token is then not sent.
	Credentials *Credentials
	// Role is what the member of Credentials is: a worker or a
	// submitter binds to what the fleet's gateway set up and changes
	// nothing, and a submitter's runs are its own (Options.Member); ""
	// or RoleGateway: the fleet's admin.
	Role Role
}

// Wait is how a member waits for the fleet: attempts spaced by an
// exponential back-off from First to Most, each failure told to OnRetry,
// until one succeeds, an error comes that waiting cannot mend, or the
// context ends.
type Wait struct {
	// First is the wait after the first failure (default 500ms); each
	// next one doubles, up to Most (default 10s).
	First, Most time.Duration
	// OnRetry, when set, is told of every failed attempt. It may be
	// called from the NATS client's goroutines.
	OnRetry func(Retry)
}

// Retry is a failed attempt of a member waiting for the fleet.
type Retry struct {
	// What was awaited: WaitServer, WaitJetStream, or what Wait.Do was
	// given.
	What    string
	Attempt int
	Err     error
	// Next is the wait before the next attempt; 0 while the NATS client
	// spaces its own attempts (at most Wait.Most apart).
	Next time.Duration
}

// What a member waits for.
const (
	WaitServer    = "the NATS server"
	WaitJetStream = "JetStream"
)

// reconnectWait spaces the attempts of a member that had connected and
// lost its server: short, so that a run's lease is renewed as soon as the
// server is back.
const reconnectWait = 250 * time.Millisecond

func (w *Wait) first() time.Duration {
	if w.First > 0 {
		return w.First
	}
	return 500 * time.Millisecond
}

func (w *Wait) most() time.Duration {
	if w.Most > 0 {
		return max(w.Most, w.first())
	}
	return max(10*time.Second, w.first())
}

// Longest is the longest wait between two attempts: Most, or its
// default.
func (w *Wait) Longest() time.Duration { return w.most() }

// backoff is the wait after the attempt-th failure: First doubled each
// time up to Most, less up to a fifth at random, so that the workers of a
// fleet waiting for the same server do not all knock at once.
func (w *Wait) backoff(attempt int) time.Duration {
	d := w.most()
	if attempt < 32 {
		d = min(w.first()<<(attempt-1), d)
	}
	return d - rand.N(d/5+1)
}

func (w *Wait) report(r Retry) {
	if w.OnRetry != nil {
		w.OnRetry(r)
	}
}

// Do runs setup until it succeeds, fails in a way waiting cannot mend (a
// refusal, a configuration in conflict), or ctx ends; after each failure
// that waiting may mend (no JetStream yet, a timeout, the connection
// down) it waits its back-off. what names what is awaited, for OnRetry.
func (w *Wait) Do(ctx context.Context, what string, setup func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := setup(ctx)
		if err == nil || !mendable(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("gave up waiting for %s: %w (the last attempt: %v)", what, ctx.Err(), err)
		}
		next := w.backoff(attempt)
		w.report(Retry{What: what, Attempt: attempt, Err: err, Next: next})
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("gave up waiting for %s: %w (the last attempt: %v)", what, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// mendable reports whether an error of setting up the fleet may go away
// by itself: the server's JetStream not up yet (no responders, 503 while
// a cluster elects its leader), a request timed out, the connection lost
// for now.
func mendable(err error) bool {
	var api *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrDisconnected):
		return true
	case errors.As(err, &api):
		return api.Code == http.StatusServiceUnavailable
	case errors.As(err, new(*NotSetUpError)):
		// The gateway sets the fleet up when it starts.
		return true
	}
	return false
}

// Connect dials the NATS server at url (a comma-separated list for a
// cluster; nats://user:pass@host:port or nats://TOKEN@host:port) and opens
// the fleet on it; a server that cannot be reached is an
// *UnreachableError at once. Close closes the connection.
func Connect(ctx context.Context, url, name string, o Options) (*Fleet, error) {
	return ConnectWith(ctx, url, name, o, ConnectOptions{})
}

// ConnectWith is Connect as co says: with a token of its own, and waiting
// for the server (co.Wait) until ctx ends. A wait that ctx ends is an
// *UnreachableError wrapping ctx's error.
func ConnectWith(ctx context.Context, url, name string, o Options, co ConnectOptions) (*Fleet, error) {
	o.defaults()
	denied := &denials{}
	opts := []nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(reconnectWait), nats.Timeout(5 * time.Second),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				denied.refused(err)
			}
		})}
	switch {
	case co.Credentials != nil:
		opts = append(opts, co.Credentials.opt)
		if co.Role != "" && co.Role != RoleGateway {
			o.Member = &Membership{Role: co.Role, Key: co.Credentials.PublicKey}
			denied.member = o.Member
			// Its replies come to an inbox only it may read.
			opts = append(opts, nats.CustomInboxPrefix(InboxPrefix(o.Prefix, co.Credentials.PublicKey)))
		}
	case co.Token != nil && !HasCredentials(url):
		opts = append(opts, nats.TokenHandler(co.Token))
	}
	w := co.Wait
	// joined: the first connection is made; from then on the client's
	// attempts are reconnections, spaced as every member's are, and not
	// reported.
	var joined atomic.Bool
	if w != nil {
		var failed atomic.Int64
		opts = append(opts, nats.RetryOnFailedConnect(true),
			nats.CustomReconnectDelay(func(attempt int) time.Duration {
				if joined.Load() {
					return reconnectWait + rand.N(100*time.Millisecond)
				}
				return w.backoff(attempt)
			}),
			nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
				if joined.Load() {
					return
				}
				if errors.Is(err, nats.ErrNoServers) {
					// The first attempt's: the client says so when every
					// server refused the connection.
					err = fmt.Errorf("connection refused (%w)", err)
				}
				w.report(Retry{What: WaitServer, Attempt: int(failed.Add(1)), Err: err})
			}))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, &UnreachableError{URL: url, Err: err}
	}
	var f *Fleet
	open := func(ctx context.Context) (err error) {
		gctx, end := denied.guard(ctx)
		f, err = Open(gctx, nc, o)
		return end(err)
	}
	if w == nil {
		err = open(ctx)
	} else {
		if err := awaitConnected(ctx, nc); err != nil {
			nc.Close()
			return nil, &UnreachableError{URL: url, Err: err}
		}
		joined.Store(true)
		// Connected is not ready: the streams and buckets are set up
		// through JetStream, which may not answer yet (a cluster
		// electing its leader, a server still recovering its streams).
		err = w.Do(ctx, WaitJetStream, open)
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	f.ownConn = true
	f.denied = denied
	return f, nil
}

// PermissionError is what the fleet's NATS server refused this member:
// its role may not do it (docs/fleet.md "Members"), such as a worker's
// credentials submitting a run, or a submitter reading another's.
type PermissionError struct {
	// Member is who was refused; nil for the fleet's admin.
	Member *Membership
	// Err is the server's refusal (errors.Is nats.ErrPermissionViolation).
	Err error
}

func (e *PermissionError) Error() string {
	who := "this connection"
	if e.Member != nil {
		who = fmt.Sprintf("this %s (nkey %s)", e.Member.Role, e.Member.Key)
	}
	return fmt.Sprintf("fleet: the NATS server refused %s: %v", who, e.Err)
}

func (e *PermissionError) Unwrap() error { return e.Err }

// denials tells the operations of a connection that the server refused
// something of it. The server says so on its own (a permission violation
// comes apart from any answer): a request on a subject the member may not
// publish on gets no answer, and would wait out its timeout; the
// operations waiting end at once instead, with a *PermissionError.
type denials struct {
	member *Membership

	mu      sync.Mutex
	waiting map[*int]context.CancelCauseFunc
}

func (d *denials) refused(err error) {
	if d == nil {
		return
	}
	pe := &PermissionError{Member: d.member, Err: err}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, cancel := range d.waiting {
		cancel(pe)
	}
}

// guard returns ctx ended by the next refusal, and end, which stops
// watching and gives the refusal, when there was one, in place of err.
func (d *denials) guard(ctx context.Context) (context.Context, func(err error) error) {
	if d == nil {
		return ctx, func(err error) error { return err }
	}
	gctx, cancel := context.WithCancelCause(ctx)
	tok := new(int)
	d.mu.Lock()
	if d.waiting == nil {
		d.waiting = map[*int]context.CancelCauseFunc{}
	}
	d.waiting[tok] = cancel
	d.mu.Unlock()
	return gctx, func(err error) error {
		d.mu.Lock()
		delete(d.waiting, tok)
		d.mu.Unlock()
		pe, refused := context.Cause(gctx).(*PermissionError)
		cancel(nil)
		if refused && err != nil {
			return pe
		}
		return err
	}
}

// awaitConnected returns once nc, connecting in the background
// (RetryOnFailedConnect), is connected; or the error it was closed with
// (a refused token: the client gives up after the same refusal twice);
// or ctx's.
func awaitConnected(ctx context.Context, nc *nats.Conn) error {
	ch := nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
	defer nc.RemoveStatusListener(ch)
	for {
		switch nc.Status() {
		case nats.CONNECTED:
			return nil
		case nats.CLOSED:
			if err := nc.LastError(); err != nil {
				return err
			}
			return nats.ErrConnectionClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("gave up waiting: %w", ctx.Err())
		}
	}
}

// HasCredentials reports whether a NATS URL (or any of a comma-separated
// list) names credentials: nats://TOKEN@ or nats://USER:PASSWORD@ (or may:
// a part that does not parse and holds an '@').
func HasCredentials(urls string) bool {
	for _, s := range strings.Split(urls, ",") {
		u, _ := parseNATSURL(s)
		if u != nil && u.User != nil || u == nil && strings.Contains(s, "@") {
			return true
		}
	}
	return false
}

// RedactURL is a NATS URL (or comma-separated list) fit to be shown: its
// credentials, a token or a password, replaced by "xxxxx". A part that
// does not parse is replaced whole when it holds an '@'.
func RedactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, s := range parts {
		u, schemeless := parseNATSURL(s)
		switch {
		case u == nil && strings.Contains(s, "@"):
			parts[i] = "xxxxx"
		case u == nil || u.User == nil:
		default:
			if _, hasPassword := u.User.Password(); hasPassword {
				u.User = url.UserPassword(u.User.Username(), "xxxxx")
			} else {
				u.User = url.User("xxxxx")
			}
			parts[i] = u.String()
			if schemeless {
				parts[i] = strings.TrimPrefix(parts[i], "nats://")
			}
		}
	}
	return strings.Join(parts, ",")
}

// parseNATSURL parses one server's URL as the NATS client does, which
// takes HOST:PORT for nats://HOST:PORT; nil when it does not parse.
func parseNATSURL(s string) (u *url.URL, schemeless bool) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "://") {
		s, schemeless = "nats://"+s, true
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, schemeless
	}
	return u, schemeless
}
