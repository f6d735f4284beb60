// Package manager owns every tool source and is the one place calls go
// through on their way to a tool: it builds the aggregated catalog, routes a
// call to its source, and enforces the per-server rules that keep one
// misbehaving server from hurting the rest — allow/deny lists (identically
// at discovery and at execution), timeouts through context, retries of
// transport failures for tools that are safe to repeat, a circuit breaker,
// and health reporting.
//
// Its whole contract is two methods, Tools and Call, so callers can wrap or
// replace it.
package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolmux/toolmux/internal/toolglob"
	"github.com/toolmux/toolmux/tool"
)

// Source lists and calls the tools of one server.
type Source interface {
	Name() string
	Tools(ctx context.Context) ([]tool.Tool, error)
	Call(ctx context.Context, name string, args map[string]any) (*tool.Result, error)
	Close() error
}

// healthReporter is implemented by sources with a connection worth
// describing (MCP servers).
type healthReporter interface {
	Health() tool.ServerHealth
}

// changeNotifier is implemented by sources whose tool list can change while
// they run.
type changeNotifier interface {
	OnToolsChanged(func())
}

// Defaults.
const (
	DefaultTimeout        = 20 * time.Minute
	DefaultConnectTimeout = 15 * time.Second
	// listMargin is the time discovery allows for listing tools on top of
	// the connect timeout, which sources apply to start and handshake.
	listMargin = 5 * time.Second
	// rediscoverAfter is how long a server that failed discovery is left
	// alone before Tools tries it again.
	rediscoverAfter = 30 * time.Second
)

// ServerOptions is the policy the manager applies to one source.
type ServerOptions struct {
	// Allow and Deny are tool-name globs for this server (path.Match syntax).
	Allow, Deny []string
	// Timeout bounds one call, retries included; default 20 minutes.
	Timeout time.Duration
	// ToolTimeouts overrides Timeout per tool name.
	ToolTimeouts map[string]time.Duration
	// ConnectTimeout bounds the server's discovery; default 15 seconds.
	ConnectTimeout time.Duration
	// Retry says when failed calls are repeated.
	Retry Retry
	// Breaker says when to stop calling a failing server for a while.
	Breaker Breaker
	// Disabled keeps the server listed but never started.
	Disabled bool
	// Transport is shown in health reports for sources that do not report
	// their own.
	Transport string
	// Recovery paces the background attempts to bring the server back
	// after a failure, once Recover has been called.
	Recovery Recovery
}

// Retry is the retry policy of one server. Only server_unavailable failures
// are retried: always when the request never reached the server, otherwise
// only for tools that are read-only, idempotent, or listed in Tools.
type Retry struct {
	// MaxAttempts counts the first attempt; 0 means 3, 1 disables retries.
	MaxAttempts int
	// InitialBackoff and MaxBackoff bound the exponential, jittered wait;
	// defaults 200ms and 5s.
	InitialBackoff, MaxBackoff time.Duration
	// Tools are globs of further tools that are safe to repeat.
	Tools []string
}

// Breaker opens after Failures consecutive transport failures and lets one
// trial call through after Cooldown.
type Breaker struct {
	// Failures defaults to 5; negative disables the breaker.
	Failures int
	// Cooldown defaults to 30 seconds.
	Cooldown time.Duration
}

// Option configures a Manager.
type Option func(*Manager) error

// WithSource adds a source with its policy. Names must be unique.
func WithSource(src Source, opts ServerOptions) Option {
	return func(m *Manager) error {
		name := src.Name()
		if _, dup := m.init.servers[name]; dup {
			return fmt.Errorf("manager: two sources named %q", name)
		}
		s, err := newServer(src, opts)
		if err != nil {
			return fmt.Errorf("manager: server %q: %w", name, err)
		}
		m.init.servers[name] = s
		m.init.order = append(m.init.order, name)
		return nil
	}
}

// WithFilter sets the global allow and deny lists: "server/tool" globs, or
// bare "tool" globs that match in every server. Deny wins.
func WithFilter(allow, deny []string) Option {
	return func(m *Manager) error {
		a, err := toolglob.ParseAll(allow, true)
		if err != nil {
			return err
		}
		d, err := toolglob.ParseAll(deny, true)
		if err != nil {
			return err
		}
		m.init.filter = filter{allow: a, deny: d}
		return nil
	}
}

// WithLogger sets the logger for warnings (a server that crashed, a name
// collision); the default discards them.
func WithLogger(l *slog.Logger) Option {
	return func(m *Manager) error {
		m.log = l
		return nil
	}
}

// Listing reports one server's tool listing during discovery ([Manager.Tools],
// [Manager.Refresh]): once when it starts, once when it ends.
type Listing struct {
	// Server is the server's name.
	Server string
	// Done is false when the listing starts, true when it has ended.
	Done bool
	// Took is how long the listing took (start-up and handshake
	// included), once Done.
	Took time.Duration
	// Tools counts the tools the server listed that the allow and deny
	// lists let through, once Done without Err.
	Tools int
	// Err is why the listing failed (a *tool.Error, or the context's error
	// when the caller gave up), once Done.
	Err error
}

// WithListingObserver has f told when discovery starts and ends listing
// each server, so that a caller can show servers coming up. f is called
// from the goroutines that list, concurrently, and delays the listing it
// reports on: it must be safe for concurrent use and return quickly.
// Listings made for a call (a tool looked up on a server never listed)
// are not reported.
func WithListingObserver(f func(Listing)) Option {
	return func(m *Manager) error {
		m.observe = f
		return nil
	}
}

// Restart reports a server whose session was lost (it crashed, its
// connection dropped, it stopped answering) and that the manager's
// recovery ([Manager.Recover]) brought back.
type Restart struct {
	// Server is the server's name.
	Server string
	// Lost is why its session was lost, as its source said it: for a
	// process, how it ended ("server memory killed by signal 9 (killed)
	// (...)", "... exited with status 1 ...").
	Lost string
	// Restarts counts the server's restarts since it was first started,
	// this one included.
	Restarts int
}

// WithRestartObserver has f told each time recovery brings back a server
// whose session was lost, once it answers again (serve says so on
// stderr). f is called from the server's recovery goroutine and must
// return quickly. A server that does not come back is not reported: its
// health says why.
func WithRestartObserver(f func(Restart)) Option {
	return func(m *Manager) error {
		m.restarted = f
		return nil
	}
}

// Manager aggregates sources. It is safe for concurrent use.
type Manager struct {
	log       *slog.Logger
	observe   func(Listing) // nil: nobody watches discovery
	restarted func(Restart) // nil: nobody watches restarts
	// set is the servers and the global filter, swapped whole by
	// Reconfigure: a call, a listing or a catalog reads one set and never
	// sees half of a reload. init is the set the options build in New.
	set  atomic.Pointer[serverSet]
	init *serverSet

	// reconfMu makes reloads take turns; retired holds the servers a
	// reload took out, until they are closed (by it, or by Close).
	reconfMu sync.Mutex
	retired  map[*server]struct{}

	built     atomic.Pointer[built]
	refreshMu sync.Mutex
	closed    atomic.Bool
	bg        background
}

// serverSet is the servers in configuration order and the global allow
// and deny lists. It is never changed once stored: a reload stores another.
type serverSet struct {
	servers map[string]*server
	order   []string
	filter  filter
}

// allowed returns "" when the tool passes the global and the server's
// filters, else the reason it does not.
func (set *serverSet) allowed(s *server, toolName string) string {
	if why := set.filter.verdict(s.name, toolName); why != "" {
		return why
	}
	return s.filter.verdict(s.name, toolName)
}

// built is a catalog and the listing generation of each server (in
// configuration order) it was built from, and the set they were in.
type built struct {
	catalog *tool.Catalog
	set     *serverSet
	gens    []uint64
}

// catalog returns the current catalog, or nil before the first Tools.
func (m *Manager) catalog() *tool.Catalog {
	if b := m.built.Load(); b != nil {
		return b.catalog
	}
	return nil
}

// Catalog returns the catalog as last built, or nil before the first
// Tools: it never discovers, so an observer (the metrics, asking which
// tools exist) costs a call nothing.
func (m *Manager) Catalog() *tool.Catalog { return m.catalog() }

// New returns a manager. Sources are not contacted until the first Tools
// or Call.
func New(opts ...Option) (*Manager, error) {
	m := &Manager{log: slog.New(slog.DiscardHandler), init: &serverSet{servers: map[string]*server{}},
		retired: map[*server]struct{}{}}
	m.bg.ctx, m.bg.stop = context.WithCancel(context.Background())
	m.set.Store(m.init)
	for _, o := range opts {
		if err := o(m); err != nil {
			m.Close()
			return nil, err
		}
	}
	m.init = nil
	for _, s := range m.set.Load().servers {
		// Set here rather than in WithSource, so WithLogger may come in any order.
		m.attach(s)
	}
	return m, nil
}

// attach wires a server to the manager: its logger, its recovery and the
// source's notices.
func (m *Manager) attach(s *server) {
	s.log = m.log
	s.kick = func() { m.kick(s) }
	if cn, ok := s.src.(changeNotifier); ok {
		cn.OnToolsChanged(func() {
			s.markStale()
			m.kick(s)
		})
	}
	if ln, ok := s.src.(lossNotifier); ok {
		// A lost session is restarted by the next use; recovery makes
		// that use now. Without recovery nothing changes: the tools
		// last listed stand until a call finds the server again.
		ln.OnSessionLost(func() {
			if m.recovering() {
				s.markLost()
				m.kick(s)
			}
		})
	}
}

// Tools returns the catalog of every allowed tool of every enabled server,
// discovering servers in parallel the first time and re-listing only
// servers whose tools changed (or that failed a while ago). A server that
// fails or hangs appears in the catalog's health list with its error; it
// never delays the others beyond its own connect timeout.
func (m *Manager) Tools(ctx context.Context) (*tool.Catalog, error) {
	if m.closed.Load() {
		return nil, errClosed
	}
	mine := m.forCaller(ctx)
	if b := m.built.Load(); b != nil && len(mine) == 0 && !m.needsRefresh(b) {
		return b.catalog, nil
	}
	m.refreshMu.Lock()
	defer m.refreshMu.Unlock()
	if b := m.built.Load(); b != nil && len(mine) == 0 && !m.needsRefresh(b) {
		return b.catalog, nil
	}
	m.discover(ctx, false, mine...)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return m.rebuild(), nil
}

// CallerListing is what a source may also do whose tools are listed over
// a caller's own connection (package percaller): after its listing failed
// for want of a credential (auth_required), say whether the caller ctx
// carries may have one it has not listed with yet. Such a source is then
// listed again with ctx, on that caller's request, rather than only by
// the server's recovery, which has no caller: the first caller of a
// server reached by token exchange has nothing stored to list with.
type CallerListing interface {
	ListFor(ctx context.Context) bool
}

// forCaller returns the servers whose listing failed for want of a
// credential and that the caller ctx carries may list now.
func (m *Manager) forCaller(ctx context.Context) []*server {
	var out []*server
	set := m.set.Load()
	for _, name := range set.order {
		s := set.servers[name]
		if cl, ok := s.src.(CallerListing); ok && s.authFailed() && cl.ListFor(ctx) {
			out = append(out, s)
		}
	}
	return out
}

// Refresh re-lists every enabled server and rebuilds the catalog.
func (m *Manager) Refresh(ctx context.Context) (*tool.Catalog, error) {
	if m.closed.Load() {
		return nil, errClosed
	}
	m.refreshMu.Lock()
	defer m.refreshMu.Unlock()
	m.discover(ctx, true)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return m.rebuild(), nil
}

var errClosed = &tool.Error{Kind: tool.KindServerUnavailable, Message: "the tool manager is closed"}

// needsRefresh reports whether a server must be listed again, or was listed
// (by a call that looked up a new tool) since b was built.
func (m *Manager) needsRefresh(b *built) bool {
	set := m.set.Load()
	if b.set != set {
		return true
	}
	for i, name := range set.order {
		s := set.servers[name]
		if s.needsListing(false) || s.generation() != b.gens[i] {
			return true
		}
	}
	return false
}

// discover lists, in parallel, every server that needs it, and those of
// also.
func (m *Manager) discover(ctx context.Context, all bool, also ...*server) {
	var wg sync.WaitGroup
	set := m.set.Load()
	for _, name := range set.order {
		s := set.servers[name]
		if !s.needsListing(all) && !slices.Contains(also, s) {
			continue
		}
		wg.Go(func() { m.listObserved(ctx, set, s) })
	}
	wg.Wait()
}

// listObserved lists one server for discovery, telling the observer.
func (m *Manager) listObserved(ctx context.Context, set *serverSet, s *server) {
	if m.observe == nil {
		_ = s.list(ctx)
		return
	}
	m.observe(Listing{Server: s.name})
	start := time.Now()
	err := s.list(ctx)
	l := Listing{Server: s.name, Done: true, Took: time.Since(start), Err: err}
	if err == nil {
		listed, _ := s.snapshot()
		for _, t := range listed {
			if set.allowed(s, t.Name) == "" {
				l.Tools++
			}
		}
	}
	m.observe(l)
}

// rebuild makes a new catalog from what the servers last listed.
func (m *Manager) rebuild() *tool.Catalog {
	var tools []tool.Tool
	set := m.set.Load()
	health := make([]tool.ServerHealth, 0, len(set.order))
	gens := make([]uint64, len(set.order))
	for i, name := range set.order {
		s := set.servers[name]
		health = append(health, s.health())
		var listed []tool.Tool
		listed, gens[i] = s.snapshot()
		for _, t := range listed {
			if set.allowed(s, t.Name) == "" {
				tools = append(tools, t)
			}
		}
	}
	c := tool.NewCatalog(tools, health)
	for _, col := range c.Collisions() {
		m.log.Warn("tool name collision", "name", col.Name, "server", col.Server, "tool", col.Tool, "held_by", col.Holder, "assigned", col.Assigned)
	}
	m.built.Store(&built{catalog: c, set: set, gens: gens})
	return c
}

// Health returns the current health of every server, in configuration order.
func (m *Manager) Health() []tool.ServerHealth {
	set := m.set.Load()
	out := make([]tool.ServerHealth, 0, len(set.order))
	for _, name := range set.order {
		h := set.servers[name].health()
		if c := m.catalog(); c != nil {
			if ch, ok := c.Server(name); ok {
				h.Tools = ch.Tools
			}
		}
		out = append(out, h)
	}
	return out
}

// Servers returns the server names in configuration order.
func (m *Manager) Servers() []string { return slices.Clone(m.set.Load().order) }

// Call runs one tool call and returns its record; a failed call is a record
// with Error set. The call is refused with policy_violation when the tool
// is denied, whether or not it exists; it fails fast with
// server_unavailable while the server's circuit breaker is open.
//
// A call carrying the definition it was admitted against (tool.Call.Def)
// is made against it, without looking the tool up again.
func (m *Manager) Call(ctx context.Context, call tool.Call) *tool.Record {
	if call.ID == "" {
		call.ID = tool.NewID()
	}
	def := call.Def()
	name := ""
	if def != nil {
		name = def.Exposed
	} else if c := m.catalog(); c != nil {
		if t, ok := c.Find(call.Server, call.Tool); ok {
			name = t.Exposed
		}
	}
	rec := tool.NewRecord(&call, name)
	res, err := m.call(ctx, &call, def, rec)
	rec.Ended = time.Now()
	rec.Duration = rec.Ended.Sub(rec.Started)
	rec.Result = res
	if err != nil {
		rec.Error = tool.AsError(err)
		if rec.Error.Server == "" {
			rec.Error.Server = call.Server
		}
		if rec.Error.Tool == "" {
			rec.Error.Tool = call.Tool
		}
	} else if res != nil && res.IsError {
		rec.Error = &tool.Error{Kind: tool.KindToolError, Server: call.Server, Tool: call.Tool, Message: res.Text()}
	}
	if rec.Error != nil && rec.Error.Kind == tool.KindAuthRequired {
		rec.Credential = "" // none was used
		withoutURL(rec.Error)
	}
	return rec
}

// withoutURL takes e's URL out of its message and detail, which records
// and events keep: an authorization URL holds a single-use state meant
// for the caller's user alone, whom the gateway sends there (e.URL, not
// serialized).
func withoutURL(e *tool.Error) {
	if e.URL == "" {
		return
	}
	e.Message = strings.ReplaceAll(e.Message, e.URL, "the URL given to the caller")
	e.Detail = strings.ReplaceAll(e.Detail, e.URL, "the URL given to the caller")
}

// credentialed is a source whose calls each go with their caller's own
// credential (percaller.Source): the record names its kind.
type credentialed interface{ Credential() string }

// call makes the call against def, or against the definition it looks up
// when def is nil.
func (m *Manager) call(ctx context.Context, call *tool.Call, def *tool.Tool, rec *tool.Record) (*tool.Result, error) {
	if m.closed.Load() {
		return nil, copyError(errClosed)
	}
	s, err := m.enter(call.Server, call.Tool)
	if err != nil {
		return nil, err
	}
	defer s.exit()
	if cs, ok := s.src.(credentialed); ok {
		rec.Credential = cs.Credential()
	}

	ctx, cancel := context.WithTimeoutCause(ctx, s.timeout(call.Tool), errTimedOut)
	defer cancel()
	ctx = tool.WithCall(ctx, *call)

	if def == nil {
		t, err := s.lookup(ctx, call.Tool)
		if err != nil {
			return nil, m.contextError(ctx, s, call.Tool, err)
		}
		def = &t
	}
	if err := s.down(); err != nil {
		return nil, err
	}
	res, attempts, err := s.invoke(ctx, def, call.Arguments)
	rec.Attempts = attempts
	if attempts > 1 {
		rec.Note("manager", fmt.Sprintf("retried %d times after transport failures", attempts-1), map[string]any{"attempts": attempts})
	}
	if err != nil {
		return nil, m.contextError(ctx, s, call.Tool, err)
	}
	return res, nil
}

var errTimedOut = errors.New("tool call timed out")

// server returns the server a call to (server, name) goes to, or the error
// that refuses it before anything is contacted: unknown server, disabled
// server, or a tool the allow/deny lists exclude.
func (m *Manager) server(server, name string) (*server, error) {
	set := m.set.Load()
	s, ok := set.servers[server]
	switch {
	case !ok:
		return nil, &tool.Error{Kind: tool.KindServerNotFound, Server: server, Tool: name,
			Message: fmt.Sprintf("no server named %q is configured", server), Suggestion: tool.Closest(server, set.order)}
	case s.opts.Disabled:
		return nil, &tool.Error{Kind: tool.KindServerUnavailable, Server: server, Tool: name,
			Message: fmt.Sprintf("server %s is disabled in the configuration", server)}
	}
	if why := set.allowed(s, name); why != "" {
		return nil, &tool.Error{Kind: tool.KindPolicyViolation, Server: server, Tool: name,
			Message: fmt.Sprintf("tool %s/%s is not allowed by the configuration (%s)", server, name, why)}
	}
	return s, nil
}

// Tool returns the definition of one tool, listing its server first if
// needed (only that server). It fails like Call would: server_not_found,
// server_unavailable, policy_violation for denied tools, tool_not_registered.
func (m *Manager) Tool(ctx context.Context, server, name string) (tool.Tool, error) {
	if m.closed.Load() {
		return tool.Tool{}, copyError(errClosed)
	}
	s, err := m.server(server, name)
	if err != nil {
		return tool.Tool{}, err
	}
	t, err := s.lookup(ctx, name)
	if err != nil {
		return tool.Tool{}, err
	}
	if c := m.catalog(); c != nil {
		if ct, ok := c.Find(server, name); ok {
			t.Exposed = ct.Exposed
		}
	}
	if t.Exposed == "" {
		t.Exposed = tool.ExposedName(server, name)
	}
	return t, nil
}

// contextError turns context errors into timeout or cancelled errors that
// say which limit was hit.
func (m *Manager) contextError(ctx context.Context, s *server, toolName string, err error) error {
	if ctx.Err() == nil {
		// The source's own limit (a call command's timeout) already says
		// what happened, with the command's output; keep its words.
		if _, typed := errors.AsType[*tool.Error](err); typed ||
			(!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)) {
			return err
		}
	}
	switch {
	case errors.Is(context.Cause(ctx), errTimedOut):
		return &tool.Error{Kind: tool.KindTimeout, Server: s.name, Tool: toolName, Err: err,
			Message: fmt.Sprintf("call to %s/%s timed out after %s and was cancelled", s.name, toolName, s.timeout(toolName))}
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		msg := fmt.Sprintf("call to %s/%s ran past the caller's deadline and was cancelled", s.name, toolName)
		// A cause says whose deadline it was (toolmux call --timeout).
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.DeadlineExceeded) {
			msg += ": " + cause.Error()
		}
		return &tool.Error{Kind: tool.KindTimeout, Server: s.name, Tool: toolName, Err: err, Message: msg}
	default:
		msg := fmt.Sprintf("call to %s/%s was cancelled", s.name, toolName)
		// A cause says who cancelled (a shutting-down gateway).
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			msg += ": " + cause.Error()
		}
		return &tool.Error{Kind: tool.KindCancelled, Server: s.name, Tool: toolName, Err: err, Message: msg}
	}
}

// Close closes every source in parallel and waits for them.
func (m *Manager) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	m.stopRecovery()
	set := m.set.Load()
	// A reload may still drain servers it took out: they are closed here
	// too (closing is once per server), so Close releases everything.
	m.reconfMu.Lock()
	all := make([]*server, 0, len(set.order)+len(m.retired))
	for _, name := range set.order {
		all = append(all, set.servers[name])
	}
	for s := range m.retired {
		all = append(all, s)
	}
	m.reconfMu.Unlock()
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, s := range all {
		wg.Go(func() { errs[i] = s.close() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// safeCall runs the source's Call, turning a panic into execution_failed so
// that a bug in one tool cannot take the process down.
func safeCall(ctx context.Context, src Source, name string, args map[string]any) (res *tool.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, &tool.Error{Kind: tool.KindExecutionFailed, Server: src.Name(), Tool: name,
				Message: fmt.Sprintf("tool %s/%s panicked: %v", src.Name(), name, p), Detail: string(debug.Stack())}
		}
	}()
	return src.Call(ctx, name, args)
}
