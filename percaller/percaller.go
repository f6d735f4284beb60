// Package percaller is a source for a server that takes each caller's own
// credential (a server's auth: section, docs/identity.md "On whose behalf:
// upstream credentials"): every call goes over a connection of the
// caller's own, an mcpsource.Source made with that caller's credential
// (environment variables of a process of its own for a stdio server,
// headers or an HTTP client for an HTTP one). Connections are opened at a
// caller's first call, at most MaxConnections at once, and closed after
// IdleTimeout unused.
//
// What a credential is, and where a caller's comes from, is a Credential's
// business: this package knows only how to turn a caller into the
// configuration of its connection, or into an error of kind
// tool.KindAuthRequired saying what the caller must do. Secrets (secrets.go)
// is the first kind; OAuth and token exchange plug in the same way.
package percaller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/privfile"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/tool"
)

// Credential is one kind of per-caller credential: how one caller's own
// connection to a server is opened.
type Credential interface {
	// Kind names the credential in call records (tool.Record.Credential:
	// tool.CredentialUserSecret, ...). Never the credential itself.
	Kind() string
	// Connect returns the configuration of owner's own connection: base
	// (the server's configuration, shared; not to be changed) with the
	// owner's credential added: environment variables, headers, a bearer
	// token or an HTTP client whose transport adds one. An owner without
	// the credential gets an error of kind tool.KindAuthRequired whose
	// message says what to do (and a URL to open, when there is one).
	// owner is identity.Caller.Key(); ctx is the call's (its caller, for
	// a kind that needs more of it than the key).
	Connect(ctx context.Context, owner string, base mcpsource.Config) (mcpsource.Config, error)
}

// callErrors is what a Credential may also do: say what a call's error
// means when its credential failed on the way (a token exchange the
// provider refused), in place of the transport's error.
type callErrors interface {
	CallError(err error) error
}

// Holders is what a Credential may also do: name the owners that hold
// it, so that the server's tools can be listed over one of their
// connections when no caller's request is there to list them (at start).
type Holders interface {
	Holders(ctx context.Context) ([]string, error)
}

// Rechecker is what a Credential may also do: tell, after a call over a
// caller's connection failed, whether the credential was why (revoked
// meanwhile, its refresh refused): the error to give instead, of kind
// tool.KindAuthRequired; nil when it was not.
type Rechecker interface {
	Recheck(ctx context.Context, owner string, err error) error
}

// Defaults of Options.
const (
	DefaultMaxConnections = 16
	DefaultIdleTimeout    = 10 * time.Minute
)

// Options bound a Source's connections.
type Options struct {
	// MaxConnections bounds the connections (for stdio, the processes)
	// open at once; 0: DefaultMaxConnections.
	MaxConnections int
	// IdleTimeout closes a connection unused that long; 0:
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// ToolsFile, when set, keeps the server's tool list across restarts:
	// written after each listing, read when no connection can list.
	ToolsFile string
	// Logger gets a line when a connection opens and closes (the owner's
	// key, never a credential); nil: none.
	Logger *slog.Logger
}

// TooManyError refuses a caller's first call while every one of the
// MaxConnections connections is in use.
type TooManyError struct {
	Server string
	Max    int
}

func (e *TooManyError) Error() string {
	return fmt.Sprintf("server %s has its %d callers' connections all in use (servers.%s.auth.max_connections); try again when one is free",
		e.Server, e.Max, e.Server)
}

// Source is a manager.Source whose calls each go over a connection of
// their caller's own.
type Source struct {
	base mcpsource.Config
	cred Credential
	opts Options
	log  *slog.Logger

	mu     sync.Mutex
	conns  map[string]*conn
	closed bool
	tools  []tool.Tool // the last listing, kept for when none can list
	// tried are the owners whose own listing failed for want of their
	// credential since the last listing that did not (ListFor), at most
	// maxTried.
	tried map[string]bool
	// gen counts Disconnects: a connection whose credential was read
	// before one is not opened with it.
	gen uint64
	// closing counts connections being closed outside mu, which Close
	// waits for.
	closing sync.WaitGroup
}

// conn is one owner's connection.
type conn struct {
	owner string
	src   *mcpsource.Source
	busy  int       // calls and listings in flight
	used  time.Time // when it was last released
	idle  *time.Timer
}

// New returns the source of the server base describes, whose callers'
// connections are opened with cred. Nothing is started yet.
func New(base mcpsource.Config, cred Credential, o Options) *Source {
	if o.MaxConnections <= 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Source{base: base, cred: cred, opts: o, log: log, conns: map[string]*conn{}}
}

// Name is the server's name.
func (s *Source) Name() string { return s.base.Name }

// Credential is the kind of credential calls reach the server with, for
// the record.
func (s *Source) Credential() string { return s.cred.Kind() }

// Connections returns how many callers' connections are open.
func (s *Source) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Call calls the tool over the connection of the caller ctx carries.
func (s *Source) Call(ctx context.Context, name string, args map[string]any) (*tool.Result, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	c, err := s.acquire(ctx, owner)
	if err != nil {
		return nil, err
	}
	defer s.release(c)
	res, err := c.src.Call(ctx, name, args)
	if err != nil && tool.KindOf(err) != tool.KindAuthRequired {
		if rc, ok := s.cred.(Rechecker); ok {
			if e := rc.Recheck(ctx, owner, err); e != nil {
				return nil, e
			}
		}
	}
	return res, s.callError(err)
}

// callError is err as the credential explains it, when it does.
func (s *Source) callError(err error) error {
	if ce, ok := s.cred.(callErrors); ok && err != nil {
		return ce.CallError(err)
	}
	return err
}

// Tools lists the server's tools over a caller's connection: that of the
// caller ctx carries when it has the credential, else the list kept from
// the last listing (in memory, then ToolsFile), else over the connection
// of one of the credential's holders. Without any, the error is the
// caller's auth_required, or one saying that no caller has given a
// credential yet.
func (s *Source) Tools(ctx context.Context) ([]tool.Tool, error) {
	var first error
	if owner, err := s.owner(ctx); err == nil {
		ts, err := s.listAs(ctx, owner)
		if err == nil || tool.KindOf(err) != tool.KindAuthRequired {
			return ts, err
		}
		first = err
	}
	if ts := s.kept(); ts != nil {
		return ts, nil
	}
	if h, ok := s.cred.(Holders); ok {
		owners, err := h.Holders(ctx)
		if err != nil {
			return nil, err
		}
		for _, o := range owners {
			ts, err := s.listAs(ctx, o)
			if err == nil || tool.KindOf(err) != tool.KindAuthRequired {
				return ts, err
			}
		}
	}
	if first != nil {
		return nil, first
	}
	return nil, &tool.Error{Kind: tool.KindAuthRequired, Server: s.base.Name, Err: tool.ErrNotSent,
		Message: fmt.Sprintf("server %s takes each caller's own credential, and no caller has given one yet: its tools are listed over the first caller's connection once one has (see docs/identity.md)", s.base.Name)}
}

// maxTried bounds the owners remembered as having tried to list without
// their credential; past it they are forgotten, and may each try once
// more.
const maxTried = 4096

// ListFor reports whether the caller ctx carries should list the server's
// tools over its own connection (manager.CallerListing): it has not
// tried since the last listing, or since its credential changed
// (Disconnect). The first caller of a server reached by token exchange
// lists it so: nothing is stored that the server's recovery could list
// with.
func (s *Source) ListFor(ctx context.Context) bool {
	c := identity.From(ctx)
	if c == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.tried[c.Key()]
}

// triedAs remembers that owner could not list for want of its credential.
func (s *Source) triedAs(owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tried == nil || len(s.tried) >= maxTried {
		s.tried = map[string]bool{}
	}
	s.tried[owner] = true
}

// listAs lists the tools over owner's connection, and keeps them.
func (s *Source) listAs(ctx context.Context, owner string) ([]tool.Tool, error) {
	c, err := s.acquire(ctx, owner)
	if tool.KindOf(err) == tool.KindAuthRequired {
		s.triedAs(owner)
	}
	if err != nil {
		return nil, err
	}
	defer s.release(c)
	ts, err := c.src.Tools(ctx)
	if err != nil {
		err = s.callError(err)
		if tool.KindOf(err) == tool.KindAuthRequired {
			s.triedAs(owner)
		}
		return nil, err
	}
	s.keep(ts)
	return ts, nil
}

// owner is the key of the caller ctx carries.
func (s *Source) owner(ctx context.Context) (string, error) {
	c := identity.From(ctx)
	if c == nil {
		return "", &tool.Error{Kind: tool.KindAuthRequired, Server: s.base.Name, Err: tool.ErrNotSent,
			Message: fmt.Sprintf("server %s takes each caller's own credential, and this call has no caller: configure authentication (auth: in the configuration, docs/identity.md)", s.base.Name)}
	}
	return c.Key(), nil
}

// acquire returns owner's connection, opened when it has none, counted
// busy until release. A new connection beyond MaxConnections closes the
// one unused longest first, or is refused when every one is in use.
func (s *Source) acquire(ctx context.Context, owner string) (*conn, error) {
	for {
		s.mu.Lock()
		if c, err := s.existing(owner); c != nil || err != nil {
			s.mu.Unlock()
			return c, err
		}
		gen := s.gen
		s.mu.Unlock()
		// The credential first, without the lock (an OAuth credential may
		// refresh a token over the network): a caller without one takes
		// no place and closes nobody's connection.
		cfg, err := s.cred.Connect(ctx, owner, s.base)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		if c, err := s.existing(owner); c != nil || err != nil {
			// Opened by another call of the same caller meanwhile.
			s.mu.Unlock()
			return c, err
		}
		if s.gen != gen {
			// A credential changed (Disconnect) while this one was read:
			// read it again rather than open with the old one.
			s.mu.Unlock()
			continue
		}
		return s.open(owner, cfg)
	}
}

// existing returns owner's open connection, counted busy; s.mu is held.
func (s *Source) existing(owner string) (*conn, error) {
	if s.closed {
		return nil, s.closedError()
	}
	c := s.conns[owner]
	if c != nil {
		c.busy++
		c.idle.Stop()
	}
	return c, nil
}

// open makes owner's connection with cfg, closing the one unused longest
// when MaxConnections are open; s.mu is held, and released.
func (s *Source) open(owner string, cfg mcpsource.Config) (*conn, error) {
	var evicted *conn
	if len(s.conns) >= s.opts.MaxConnections {
		for _, c := range s.conns {
			if c.busy == 0 && (evicted == nil || c.used.Before(evicted.used)) {
				evicted = c
			}
		}
		if evicted == nil {
			s.mu.Unlock()
			tm := &TooManyError{Server: s.base.Name, Max: s.opts.MaxConnections}
			return nil, &tool.Error{Kind: tool.KindExecutionFailed, Server: s.base.Name, Message: tm.Error(),
				Err: errors.Join(tm, tool.ErrNotSent)}
		}
		s.remove(evicted)
	}
	src, err := mcpsource.New(cfg)
	if err != nil {
		s.mu.Unlock()
		s.finish(evicted, "closed for another caller's")
		return nil, err
	}
	c := &conn{owner: owner, src: src, busy: 1}
	c.idle = time.AfterFunc(s.opts.IdleTimeout, func() { s.reap(c) })
	c.idle.Stop()
	s.conns[owner] = c
	s.mu.Unlock()
	// The connection closed for this one is gone before this one's
	// process starts (at its first request), so that no more than
	// MaxConnections processes run at once.
	s.finish(evicted, "closed for another caller's")
	s.log.Info("caller's connection opened", "server", s.base.Name, "caller", owner)
	return c, nil
}

// Disconnect closes owner's connection, when it has one, so that the next
// call opens it again with the owner's credential as it is now (a secret
// set again, or deleted). Calls in flight over it are cancelled.
func (s *Source) Disconnect(owner string) {
	s.mu.Lock()
	s.gen++
	delete(s.tried, owner)
	s.mu.Unlock()
	s.closeIf(owner, func(*conn) bool { return true }, "credential changed")
}

// release ends a use of c; the last one arms its idle timer.
func (s *Source) release(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.busy--
	if c.busy == 0 {
		c.used = time.Now()
		if s.conns[c.owner] == c {
			c.idle.Reset(s.opts.IdleTimeout)
		}
	}
}

// reap closes c when its idle timer fired while nothing used it.
func (s *Source) reap(c *conn) {
	s.closeIf(c.owner, func(open *conn) bool { return open == c && c.busy == 0 }, "idle")
}

// closeIf closes owner's connection when it has one and ok says so.
func (s *Source) closeIf(owner string, ok func(*conn) bool, why string) {
	s.mu.Lock()
	c := s.conns[owner]
	if c == nil || !ok(c) {
		s.mu.Unlock()
		return
	}
	s.remove(c)
	s.mu.Unlock()
	s.finish(c, why)
}

// remove takes c out of the connections, to be closed by finish; s.mu is
// held.
func (s *Source) remove(c *conn) {
	delete(s.conns, c.owner)
	c.idle.Stop()
	s.closing.Add(1)
}

// finish closes a connection remove took out (nil: none).
func (s *Source) finish(c *conn, why string) {
	if c == nil {
		return
	}
	defer s.closing.Done()
	_ = c.src.Close()
	s.log.Info("caller's connection closed", "server", s.base.Name, "caller", c.owner, "why", why)
}

// Close closes every connection (their calls in flight are cancelled) and
// waits for them; calls after it are refused.
func (s *Source) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.closing.Wait()
		return nil
	}
	s.closed = true
	all := make([]*conn, 0, len(s.conns))
	for _, c := range s.conns {
		all = append(all, c)
	}
	for _, c := range all {
		s.remove(c)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range all {
		wg.Go(func() { s.finish(c, "closed") })
	}
	wg.Wait()
	s.closing.Wait()
	if ic, ok := s.cred.(interface{ CloseIdleConnections() }); ok {
		ic.CloseIdleConnections()
	}
	return nil
}

func (s *Source) closedError() error {
	return &tool.Error{Kind: tool.KindServerUnavailable, Server: s.base.Name, Err: tool.ErrNotSent,
		Message: fmt.Sprintf("server %s is closed", s.base.Name)}
}

// keep remembers a listing, and writes it to ToolsFile.
func (s *Source) keep(ts []tool.Tool) {
	s.mu.Lock()
	s.tools, s.tried = ts, nil
	s.mu.Unlock()
	if s.opts.ToolsFile == "" {
		return
	}
	b, err := json.Marshal(ts)
	if err == nil {
		err = privfile.Write(s.opts.ToolsFile, b)
	}
	if err != nil {
		s.log.Warn("keeping the tool list", "server", s.base.Name, "file", s.opts.ToolsFile, "err", err)
	}
}

// kept returns the listing kept in memory, else in ToolsFile; nil when
// there is none.
func (s *Source) kept() []tool.Tool {
	s.mu.Lock()
	ts := s.tools
	s.mu.Unlock()
	if ts != nil || s.opts.ToolsFile == "" {
		return ts
	}
	b, err := os.ReadFile(s.opts.ToolsFile)
	if err != nil {
		return nil
	}
	if err := json.Unmarshal(b, &ts); err != nil {
		s.log.Warn("reading the kept tool list", "server", s.base.Name, "file", s.opts.ToolsFile, "err", err)
		return nil
	}
	for i := range ts {
		ts[i].Server = s.base.Name
	}
	s.mu.Lock()
	if s.tools == nil {
		s.tools = ts
	}
	s.mu.Unlock()
	return ts
}
