// Package mcpsource is a toolmux source backed by one MCP server, over stdio,
// SSE or streamable HTTP, through the official go-sdk.
//
// A Source keeps one long-lived session that every concurrent call shares
// (JSON-RPC multiplexes them). It connects on first use, notices when the
// server crashes or the connection drops, and reconnects (restarting the
// process) on the next use, with exponential backoff between attempts. It
// also notices a wedged server, one that is still there but no longer
// answers: while a call waits long for its answer, or when a call times out,
// it pings the session, and a ping that gets no answer drops the session
// (see [HealthCheck]). The stderr of a stdio server is kept in a bounded
// ring buffer and quoted in connection errors. Close ends the process group
// and every goroutine.
//
// Dial opens a connection of its own to the same server for a caller that
// runs its own go-sdk session (the gateway's passthrough route, one per
// client session), and WithCallFunc lets such a caller have a Source's
// calls made over that session while they still go through the manager.
package mcpsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolmux/toolmux/internal/mcpwire"
	"github.com/toolmux/toolmux/internal/ringbuf"
	"github.com/toolmux/toolmux/tool"
)

// Transport names.
const (
	Stdio          = "stdio"
	SSE            = "sse"
	StreamableHTTP = "http"
)

// Defaults.
const (
	DefaultConnectTimeout  = 15 * time.Second
	DefaultMaxMessageBytes = 64 << 20
	// DefaultMaxResultBytes is the default bound on a result's text held
	// in memory: twenty times what a model is shown of one result by
	// default (truncate.max_chars), enough for any answer meant to be
	// read whole, small enough that the go-sdk's copies while decoding
	// the message stay a few megabytes.
	DefaultMaxResultBytes = 1 << 20
	DefaultStderrBytes    = 64 << 10
	DefaultMinBackoff     = 250 * time.Millisecond
	DefaultMaxBackoff     = 30 * time.Second
	DefaultPingAfter      = 15 * time.Second
	DefaultPingTimeout    = 10 * time.Second
	// progressGrace is how long progress reports are still delivered after
	// the call's result.
	progressGrace = time.Second
	// stderrTailLines is how much of a server's stderr an error quotes.
	stderrTailLines = 20
)

// Config describes one MCP server.
type Config struct {
	// Name is the server's name in toolmux (the "server" of server__tool).
	Name string
	// Transport is Stdio, SSE or StreamableHTTP.
	Transport string

	// Command, Args, Env and Dir start a stdio server. Env adds to (and
	// overrides) toolmux's own environment.
	Command string
	Args    []string
	Env     map[string]string
	Dir     string

	// URL is the endpoint of an SSE or streamable HTTP server.
	URL string
	// Headers are sent with every HTTP request.
	Headers map[string]string
	// BearerToken, when set, is sent as "Authorization: Bearer TOKEN".
	BearerToken string
	// HTTPClient overrides the HTTP client (its Transport is wrapped to add
	// the headers).
	HTTPClient *http.Client

	// ConnectTimeout bounds starting the server and the MCP handshake.
	ConnectTimeout time.Duration
	// ConnectTimeoutHint says how to raise ConnectTimeout (the
	// configuration's keys and value, from toolmux.MCPSourceConfig); it
	// ends the error of a handshake that outlasted it.
	ConnectTimeoutHint string
	// MaxMessageBytes bounds one message from a stdio server.
	MaxMessageBytes int
	// MaxResultBytes bounds the text of a server's result held in memory
	// (one message's result.content texts, about their JSON size):
	// a text that would go past it is decoded into a file in SpillDir as
	// it arrives, and the result keeps its beginning and end around a
	// marker naming the file (tool.Content.Spill says where it is). 0 means
	// DefaultMaxResultBytes.
	MaxResultBytes int
	// SpillDir is where such texts go, in a directory per server; ""
	// means toolmux-spill in the system's temporary directory.
	SpillDir string
	// StderrBytes is how much of a stdio server's stderr is kept.
	StderrBytes int
	// MinBackoff and MaxBackoff bound the wait between reconnection attempts.
	MinBackoff, MaxBackoff time.Duration
	// StopGrace is how long Close waits after closing stdin before SIGTERM,
	// and after SIGTERM before SIGKILL.
	StopGrace time.Duration
	// HealthCheck says when the session is pinged to find out whether the
	// server still answers.
	HealthCheck HealthCheck

	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Tracer, when set, makes a client span of every tools/call (see
	// trace.go); Propagator then writes its trace context into the
	// request's params._meta and, over HTTP, the request's headers.
	Tracer     trace.Tracer
	Propagator propagation.TextMapPropagator
}

// HealthCheck detects a wedged session: a server whose process still runs,
// or whose port still accepts connections, but which no longer answers (a
// deadlock, a loop, a blocked event loop, a stdin it stopped reading). The
// session is pinged while a call has waited PingAfter for its answer (and
// again every PingAfter while it keeps waiting), whenever a call or a
// listing times out, and every Interval when one is set. A ping answered in
// any way, an error included, means the server is alive; a ping that gets
// no answer within PingTimeout means it is wedged: the session is dropped
// and the process group stopped, calls waiting on the session end at once
// with server_unavailable (wrapping [ErrWedged]), and the next use (or the
// manager's recovery) starts the server again, with the usual backoff.
// A healthy server costs nothing but a timer per call: no ping is sent
// unless a call waits PingAfter or times out.
type HealthCheck struct {
	// Disabled turns the pings off: a wedged server is then noticed only
	// when its calls time out, and never restarted for it.
	Disabled bool
	// PingAfter is how long a call waits for its answer before the session
	// is pinged; default 15 seconds.
	PingAfter time.Duration
	// PingTimeout is how long a ping may go unanswered before the server
	// counts as wedged; default 10 seconds. A server that cannot answer a
	// ping while it works (a single-threaded one running a long, blocking
	// tool) needs a longer one, or Disabled.
	PingTimeout time.Duration
	// Interval, when positive, also pings the session that often while it
	// is idle, so that a wedged or vanished server is noticed (and
	// restarted) before the next call.
	Interval time.Duration
}

// ErrWedged is in the chain of the error of a call or a session that ended
// because the server stopped answering pings.
var ErrWedged = errors.New("the server stopped answering")

// Source is a toolmux source backed by one MCP server.
type Source struct {
	cfg    Config
	log    *slog.Logger
	client *mcp.Client
	stderr *ringbuf.Buffer
	http   *http.Client
	own    *http.Transport // closed on Close, when we created it
	// upstreamTasks says the server offers MCP tasks (tasks.go): the
	// HTTP transport then follows the tasks it answers calls with.
	upstreamTasks atomic.Bool

	mu         sync.Mutex
	cur        *conn
	connecting chan struct{} // closed when the connect in progress ends
	connErr    *tool.Error   // how the last connect attempt failed
	failures   int           // consecutive failed connects or crashes
	retryAt    time.Time     // no new connect before this
	lastErr    *tool.Error
	lastErrAt  time.Time
	connects   int
	closed     bool
	onChange   func()
	onLost     func()

	// closing is cancelled by Close. Every call is bound to it, because the
	// go-sdk's ClientSession.Close waits for in-flight calls: a hung tool
	// would otherwise hold Close forever.
	closing  context.Context
	stopAll  context.CancelFunc
	progress progressTokens
	wg       sync.WaitGroup
}

// conn is one session (and, for stdio, one process).
type conn struct {
	cs     *mcp.ClientSession
	wire   *stdioConn // tool calls go here, when set (stdio)
	proc   *process
	cancel context.CancelFunc // ends the session's lifetime context
	// gone is cancelled when the session is retired or the source closes:
	// calls on the session are bound to it, so that a session dropped
	// because its server stopped answering does not keep them waiting.
	gone    context.Context
	abandon context.CancelFunc
	stop    sync.Once // shutdown runs once

	// watch pings the session when its requests wait too long.
	watch callWatch

	// Guarded by Source.mu.
	why      *tool.Error // why it was retired
	healthy  bool        // a call or listing succeeded on it
	probing  bool        // a ping is under way
	answered time.Time   // when a ping was last answered
}

// New returns a source for cfg. It does not connect: the first call, or the
// first listing, does.
func New(cfg Config) (*Source, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	s := &Source{cfg: cfg, log: cfg.Logger, stderr: ringbuf.New(cfg.StderrBytes)}
	s.closing, s.stopAll = context.WithCancel(context.Background())
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	caps := &mcp.ClientCapabilities{}
	if cfg.Transport != Stdio {
		s.http, s.own = newHTTPClient(cfg)
	}
	if cfg.Transport == StreamableHTTP {
		sp, _ := s.http.Transport.(*spillRoundTripper)
		// Tasks are answers to POSTs, which only streamable HTTP has.
		sp.base = &taskRoundTripper{base: sp.base, on: &s.upstreamTasks}
		caps.AddExtension(tasksExtension, map[string]any{})
	}
	s.client = mcp.NewClient(&mcp.Implementation{Name: "toolmux", Version: clientVersion()}, &mcp.ClientOptions{
		Logger:                      s.log,
		Capabilities:                caps,
		ToolListChangedHandler:      func(context.Context, *mcp.ToolListChangedRequest) { s.toolsChanged() },
		ProgressNotificationHandler: s.handleProgress,
	})
	return s, nil
}

// normalize checks cfg and fills in the defaults.
func (cfg Config) normalize() (Config, error) {
	if cfg.Name == "" {
		return cfg, errors.New("mcpsource: a server needs a name")
	}
	switch cfg.Transport {
	case Stdio:
		if cfg.Command == "" {
			return cfg, fmt.Errorf("mcpsource: server %q: stdio transport needs a command", cfg.Name)
		}
	case SSE, StreamableHTTP:
		if cfg.URL == "" {
			return cfg, fmt.Errorf("mcpsource: server %q: %s transport needs a url", cfg.Name, cfg.Transport)
		}
	default:
		return cfg, fmt.Errorf("mcpsource: server %q: unknown transport %q (want stdio, sse or http)", cfg.Name, cfg.Transport)
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if cfg.MaxResultBytes <= 0 {
		cfg.MaxResultBytes = DefaultMaxResultBytes
	}
	if cfg.SpillDir == "" {
		cfg.SpillDir = filepath.Join(os.TempDir(), "toolmux-spill")
	}
	if cfg.StderrBytes <= 0 {
		cfg.StderrBytes = DefaultStderrBytes
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 2 * time.Second
	}
	if cfg.HealthCheck.PingAfter <= 0 {
		cfg.HealthCheck.PingAfter = DefaultPingAfter
	}
	if cfg.HealthCheck.PingTimeout <= 0 {
		cfg.HealthCheck.PingTimeout = DefaultPingTimeout
	}
	return cfg, nil
}

// clientVersion is the version toolmux announces to servers: the main
// module's version when built from a tagged release, else "dev".
func clientVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "dev"
}

// Name returns the server's name.
func (s *Source) Name() string { return s.cfg.Name }

// Transport returns the transport name.
func (s *Source) Transport() string { return s.cfg.Transport }

// OnToolsChanged registers fn to be called (from any goroutine) when the
// server's tool list may have changed: it sent notifications/tools/list_changed,
// or it was restarted.
func (s *Source) OnToolsChanged(fn func()) {
	s.mu.Lock()
	s.onChange = fn
	s.mu.Unlock()
}

// OnSessionLost registers fn to be called (from any goroutine) when the
// session is lost: the server crashed, the connection dropped, or the
// server stopped answering and its session was dropped. The source starts
// the server again on its next use; fn lets the caller make that use now
// (the manager's recovery re-lists the server).
func (s *Source) OnSessionLost(fn func()) {
	s.mu.Lock()
	s.onLost = fn
	s.mu.Unlock()
}

func (s *Source) toolsChanged() {
	s.mu.Lock()
	fn := s.onChange
	s.mu.Unlock()
	if fn != nil {
		fn()
	}
}

// Tools lists the server's tools, connecting first if needed.
func (s *Source) Tools(ctx context.Context) ([]tool.Tool, error) {
	parent := ctx
	c, err := s.session(ctx)
	if err != nil {
		return nil, s.closedError(parent, err)
	}
	ctx, done := c.bind(ctx)
	defer done()
	slot := s.waitFor(c, "", true)
	defer c.watch.done(slot)
	var out []tool.Tool
	for t, err := range c.cs.Tools(ctx, nil) {
		if err != nil {
			return nil, s.callError(parent, ctx, c, err, "listing tools")
		}
		out = append(out, convertTool(s.cfg.Name, t))
	}
	s.markHealthy(c)
	return out, nil
}

// Call calls one tool. A tool that reports an error (isError) returns a
// result, not an error; errors are for calls that did not complete.
//
// A context from [WithCallFunc] for this server makes the call through its
// function instead of over the source's own session.
func (s *Source) Call(ctx context.Context, name string, args map[string]any) (_ *tool.Result, err error) {
	if fn := callFuncFrom(ctx, s.cfg.Name); fn != nil {
		return s.callWith(ctx, fn, name, args)
	}
	parent := ctx
	c, err := s.session(ctx)
	if err != nil {
		return nil, s.closedError(parent, err)
	}
	ctx, done := c.bind(ctx)
	defer done()
	if args == nil {
		args = map[string]any{}
	}
	params := &mcp.CallToolParams{Name: name, Arguments: args}
	if s.cfg.Tracer != nil {
		var sp trace.Span
		ctx, sp = s.startSpan(ctx, params)
		defer func() { endSpan(sp, err) }()
	}
	if fn := tool.ProgressFrom(ctx); fn != nil {
		token := s.progress.add(fn)
		defer s.progress.retire(token)
		params.SetProgressToken(token)
	}
	col := &collector{}
	defer col.done()
	slot := s.waitFor(c, name, false)
	out, err := c.callTool(withCollector(ctx, col), params)
	c.watch.done(slot)
	if err != nil {
		return nil, s.callError(parent, ctx, c, err, "calling "+name)
	}
	s.markHealthy(c)
	col.apply(out)
	return out, nil
}

func (s *Source) handleProgress(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	token, ok := req.Params.ProgressToken.(string)
	if !ok {
		return
	}
	if fn := s.progress.get(token); fn != nil {
		fn(tool.Progress{Progress: req.Params.Progress, Total: req.Params.Total, Message: req.Params.Message})
	}
}

// bind returns ctx, also cancelled when the source closes.
func (s *Source) bind(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.closing, cancel)
	return ctx, func() { stop(); cancel() }
}

// closedError turns the cancellation Close caused into server_unavailable:
// the caller did not cancel, the server went away under it.
func (s *Source) closedError(parent context.Context, err error) error {
	if parent.Err() == nil && s.closing.Err() != nil && errors.Is(err, context.Canceled) {
		return &tool.Error{Kind: tool.KindServerUnavailable, Server: s.cfg.Name, Message: "server " + s.cfg.Name + " was closed during the call"}
	}
	return err
}

// bind returns ctx, also cancelled when the session is retired or the
// source closes.
func (c *conn) bind(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.gone, cancel)
	return ctx, func() { stop(); cancel() }
}

// sourceProtocol is the protocol version a source asks its servers for:
// the latest before 2026-07-28, whose requests each carry the client's
// identity, capabilities and version in _meta for the server to decode
// and check again (a third of what a go-sdk server spends on a trivial
// call, BENCHMARKS.md §12), for nothing a source uses: it answers no
// questions of the server's, and list_changed comes as a notification
// either way.
const sourceProtocol = "2025-11-25"

// modernProtocol is the version a source asks for of a server over HTTP
// whose handshake at sourceProtocol failed: one that speaks only the
// sessionless protocol.
const modernProtocol = "2026-07-28"

// wireOf returns the connection tool calls can be made on directly: a
// stdio session's, on a protocol before 2026-07-28 (whose requests need
// no per-request _meta); nil for the rest, whose calls go through the
// go-sdk.
func wireOf(t mcp.Transport, cs *mcp.ClientSession) *stdioConn {
	st, ok := t.(*spillTransport)
	if !ok {
		return nil
	}
	if r := cs.InitializeResult(); r == nil || r.ProtocolVersion >= modernProtocol {
		return nil
	}
	return st.connection()
}

// callTool makes one tools/call on the session.
func (c *conn) callTool(ctx context.Context, params *mcp.CallToolParams) (*tool.Result, error) {
	if c.wire != nil {
		return c.wire.call(ctx, params)
	}
	res, err := c.cs.CallTool(ctx, params)
	if err != nil {
		return nil, err
	}
	return convertResult(res), nil
}

// callError classifies an error from the session. An error response from
// the server is the server's answer; anything else means the connection is
// no longer trustworthy, so it is dropped and the next use reconnects. A
// call that timed out has the session pinged: if every call times out
// because the server stopped answering, the first one finds it out.
func (s *Source) callError(parent, ctx context.Context, c *conn, err error, doing string) error {
	if why := s.abandoned(parent, c); why != nil {
		return why
	}
	if ctx.Err() != nil {
		if errors.Is(parent.Err(), context.DeadlineExceeded) {
			s.probeSoon(c, doing+" timed out")
		}
		return s.closedError(parent, ctx.Err())
	}
	if e := s.answerError(err, doing); e != nil {
		return e
	}
	return s.drop(c, fmt.Errorf("%s: %w", doing, notSent(err)))
}

// answerError returns the error the server answered with, or nil when err
// is not an answer from the server.
func (s *Source) answerError(err error, doing string) *tool.Error {
	var wire *jsonrpc.Error
	if !errors.As(err, &wire) || mcpwire.LocalCode(wire.Code) {
		return nil
	}
	kind := tool.KindExecutionFailed
	if wire.Code == jsonrpc.CodeInvalidParams {
		kind = tool.KindInvalidParams
	}
	return &tool.Error{Kind: kind, Server: s.cfg.Name, Message: fmt.Sprintf("server %s answered %s with error %d: %s", s.cfg.Name, doing, wire.Code, wire.Message), Err: err}
}

// notSent marks err as tool.ErrNotSent when the go-sdk rejected the
// request before it reached the server.
func notSent(err error) error {
	var wire *jsonrpc.Error
	if errors.As(err, &wire) && wire.Code == mcpwire.CodeRejected {
		return errors.Join(tool.ErrNotSent, err)
	}
	return err
}

// abandoned returns, for a call the session's retirement cut short, why the
// session was retired (a copy: callers add to it); nil when the caller gave
// up itself, the source is closing, or the session still stands.
func (s *Source) abandoned(parent context.Context, c *conn) *tool.Error {
	if parent.Err() != nil || s.closing.Err() != nil {
		return nil
	}
	s.mu.Lock()
	why := c.why
	s.mu.Unlock()
	if why == nil {
		return nil
	}
	e := *why
	return &e
}

// drop ends c because it failed, and returns the error that describes why,
// with the process's exit status and stderr tail when there is one.
func (s *Source) drop(c *conn, cause error) *tool.Error {
	if c.proc != nil {
		// The process usually dies a moment before its pipe reports EOF;
		// waiting briefly lets the error say how it died.
		select {
		case <-c.proc.exited:
			c.proc.drainStderr(200 * time.Millisecond)
		case <-time.After(200 * time.Millisecond):
		}
	}
	msg := fmt.Sprintf("server %s: connection lost while %v", s.cfg.Name, cause)
	if c.proc != nil && !c.proc.alive() {
		msg = fmt.Sprintf("server %s %s (%v)", s.cfg.Name, c.proc.exitDescription(), cause)
	}
	e := s.unavailable(msg, cause)
	s.end(c, e)
	return e
}

// unavailable builds a server_unavailable error quoting the stderr tail.
func (s *Source) unavailable(msg string, cause error) *tool.Error {
	e := &tool.Error{Kind: tool.KindServerUnavailable, Server: s.cfg.Name, Message: msg, Err: cause}
	if tail := s.stderr.Tail(stderrTailLines); tail != "" {
		e.Detail = "stderr of " + s.cfg.Name + ":\n" + tail
	}
	return e
}

// end retires c (once): the calls waiting on it end, its process is
// stopped, and later uses reconnect, after a backoff.
func (s *Source) end(c *conn, why *tool.Error) {
	s.mu.Lock()
	if c.why != nil || s.closed {
		// Retired already, or Close is stopping it.
		s.mu.Unlock()
		return
	}
	c.why = why
	if s.cur == c {
		s.cur = nil
	}
	s.failed(why)
	lost := s.onLost
	// Release it now: an HTTP session whose server went away may never
	// end on its own, nor a process that stopped reading.
	s.wg.Add(1)
	s.mu.Unlock()
	c.abandon()
	go func() {
		defer s.wg.Done()
		s.shutdown(c, true)
	}()
	if lost != nil {
		lost()
	}
}

// failed records a failure and schedules the next connection attempt.
// Callers hold s.mu.
func (s *Source) failed(why *tool.Error) {
	s.lastErr, s.lastErrAt = why, time.Now()
	s.failures++
	d := s.cfg.MinBackoff << min(s.failures-1, 16)
	if d > s.cfg.MaxBackoff || d <= 0 {
		d = s.cfg.MaxBackoff
	}
	// Full jitter on the upper half keeps restarts of many servers apart.
	d = d/2 + rand.N(d/2+1)
	s.retryAt = time.Now().Add(d)
}

func (s *Source) markHealthy(c *conn) {
	s.mu.Lock()
	if !c.healthy && s.cur == c {
		c.healthy = true
		s.failures = 0
	}
	s.mu.Unlock()
}

// session returns the live session, starting a connection (or waiting for
// the one in progress) when there is none. The connection attempt belongs to
// the source, not to the caller: a caller that gives up stops waiting, but
// the attempt goes on for the others, bounded by ConnectTimeout and Close.
func (s *Source) session(ctx context.Context) (*conn, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, s.closedErr()
	}
	if c := s.cur; c != nil {
		s.mu.Unlock()
		return c, nil
	}
	if s.connecting == nil {
		s.startConnect()
	}
	ch := s.connecting
	s.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, s.closedErr()
	case s.cur != nil:
		return s.cur, nil
	case s.connErr != nil:
		return nil, s.connErr
	}
	// Connected and already lost again before we looked.
	return nil, s.lastErr
}

func (s *Source) closedErr() *tool.Error {
	return &tool.Error{Kind: tool.KindServerUnavailable, Server: s.cfg.Name, Message: "server " + s.cfg.Name + " is closed", Err: tool.ErrNotSent}
}

// startConnect begins a connection attempt. Callers hold s.mu.
func (s *Source) startConnect() {
	ch := make(chan struct{})
	s.connecting = ch
	s.connErr = nil
	wait := time.Until(s.retryAt)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		c, err := s.connectAfter(wait)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.connecting = nil
		defer close(ch)
		if err != nil {
			te := tool.AsError(err)
			s.connErr = te
			if !s.closed {
				s.failed(te)
			}
			return
		}
		if s.closed {
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.shutdown(c, false)
			}()
			return
		}
		s.cur = c
		s.connects++
		s.wg.Add(1)
		go s.watch(c)
		if hc := s.cfg.HealthCheck; !hc.Disabled && hc.Interval > 0 {
			s.wg.Add(1)
			go s.keepAlive(c)
		}
		if s.connects > 1 {
			go s.toolsChanged()
		}
	}()
}

func (s *Source) connectAfter(wait time.Duration) (*conn, error) {
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.closing.Done():
			return nil, s.closedErr()
		}
	}
	return s.connect()
}

// connect starts the server (for stdio) and performs the MCP handshake
// within ConnectTimeout.
func (s *Source) connect() (*conn, error) {
	// The session gets its own lifetime context (an SSE stream is bound to
	// the context it was opened with); the timeout and Close only cut the
	// handshake short.
	life, cancel := context.WithCancel(context.Background())
	deadline, stopDeadline := context.WithTimeout(s.closing, s.cfg.ConnectTimeout)
	defer stopDeadline()
	stop := context.AfterFunc(deadline, cancel)

	c := &conn{cancel: cancel}
	c.gone, c.abandon = context.WithCancel(s.closing)
	if s.cfg.Transport == Stdio {
		// A new process, a fresh stderr: earlier output would blame the
		// wrong run.
		s.stderr.Reset()
	}
	transport, proc, err := newTransport(s.cfg, s.http, s.stderr)
	if err != nil {
		stop()
		cancel()
		c.abandon()
		return nil, startError(s.cfg, err)
	}
	c.proc = proc

	cs, err := s.client.Connect(life, transport, &mcp.ClientSessionOptions{ProtocolVersion: sourceProtocol})
	if err != nil && c.proc == nil && life.Err() == nil {
		// A server over HTTP that speaks only the sessionless protocol
		// refuses the handshake at 2025-11-25: asked for 2026-07-28, the
		// go-sdk's client probes it with server/discover (and falls back
		// to the handshake again with a server that does not know that).
		// The first failure is the one reported if this fails too.
		if t, _, terr := newTransport(s.cfg, s.http, s.stderr); terr == nil {
			if cs2, err2 := s.client.Connect(life, t, &mcp.ClientSessionOptions{ProtocolVersion: modernProtocol}); err2 == nil {
				transport, cs, err = t, cs2, nil
			}
		}
	}
	if stop() && err == nil {
		c.cs, c.wire = cs, wireOf(transport, cs)
		if r := cs.InitializeResult(); r != nil && r.Capabilities != nil {
			s.upstreamTasks.Store(r.Capabilities.Extensions[tasksExtension] != nil)
		}
		return c, nil
	}
	// Failed, timed out, or closed (possibly just after succeeding).
	if cs != nil {
		_ = cs.Close()
	}
	cancel()
	c.abandon()
	if err == nil {
		err = context.Cause(deadline)
	}
	var msg string
	switch {
	case s.closing.Err() != nil:
		s.cleanupAsync(c)
		return nil, s.closedErr()
	case deadline.Err() != nil:
		msg = fmt.Sprintf("server %s did not complete the MCP handshake within %s%s", s.cfg.Name, s.cfg.ConnectTimeout, timeoutHint(s.cfg))
	case c.proc == nil && networkCause(err) != "":
		// The cause (a refused connection, an unknown host) ends a long
		// chain of wrapped errors; say it first, the chain in the detail.
		msg = fmt.Sprintf("server %s: cannot reach %s: %s", s.cfg.Name, s.cfg.URL, networkCause(err))
	default:
		msg = fmt.Sprintf("server %s: connecting: %v", s.cfg.Name, err)
	}
	if c.proc != nil && deadline.Err() == nil {
		// (Past the deadline the process exits as its stdin is closed:
		// the timeout is the cause, said above.)
		select {
		case <-c.proc.exited:
			msg = fmt.Sprintf("server %s %s before completing the MCP handshake (%v)", s.cfg.Name, c.proc.exitDescription(), err)
			c.proc.drainStderr(200 * time.Millisecond)
		case <-time.After(100 * time.Millisecond):
		}
	}
	// Stopping a hung process can take two grace periods; nobody waiting
	// for this server should wait for that too.
	e := s.unavailable(msg, errors.Join(tool.ErrNotSent, err))
	if c.proc == nil && e.Detail == "" && networkCause(err) != "" {
		e.Detail = err.Error()
	}
	s.cleanupAsync(c)
	return nil, e
}

// timeoutHint is cfg's ConnectTimeoutHint as the end of an error: " (HINT)".
func timeoutHint(cfg Config) string {
	if cfg.ConnectTimeoutHint == "" {
		return ""
	}
	return " (" + cfg.ConnectTimeoutHint + ")"
}

// networkCause names why a server could not be reached over the network,
// from the error at the bottom of err ("connection refused", "no such host
// example.invalid"); "" when err is no network failure.
func networkCause(err error) string {
	if de, ok := errors.AsType[*net.DNSError](err); ok {
		return fmt.Sprintf("cannot resolve %s: %s", de.Name, de.Err)
	}
	if errno, ok := errors.AsType[syscall.Errno](err); ok {
		return errno.Error()
	}
	if oe, ok := errors.AsType[*net.OpError](err); ok && oe.Err != nil {
		return oe.Err.Error()
	}
	return ""
}

func (s *Source) cleanupAsync(c *conn) {
	if c.proc == nil {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		c.proc.stop(s.cfg.StopGrace)
	}()
}

// watch waits for the session to end, however it ends, then releases its
// process.
func (s *Source) watch(c *conn) {
	defer s.wg.Done()
	done := make(chan struct{})
	go func() {
		_ = c.cs.Wait()
		close(done)
	}()
	var exited <-chan struct{}
	if c.proc != nil {
		exited = c.proc.exited
	}
	select {
	case <-done:
	case <-exited:
	}
	s.mu.Lock()
	unexpected := !s.closed && c.why == nil
	s.mu.Unlock()
	if unexpected {
		s.log.Warn("mcp server session ended", "server", s.cfg.Name)
		s.drop(c, errors.New("the session ended"))
	}
	s.shutdown(c, false)
	<-done
}

// shutdown closes the session and stops its process, once; later callers
// return at once. A session dropped because it failed goes abruptly: its
// lifetime context and the process's stdin are cut first, because closing
// a go-sdk session waits for the writes in progress, and a write to a
// server that stopped reading never ends by itself.
func (s *Source) shutdown(c *conn, abrupt bool) {
	c.stop.Do(func() {
		c.watch.stop()
		if abrupt {
			c.cancel()
			if c.proc != nil {
				c.proc.closeStdin()
			}
		}
		_ = c.cs.Close()
		c.cancel()
		c.abandon()
		if c.proc != nil {
			c.proc.stop(s.cfg.StopGrace)
		}
	})
}

// Close ends the session, stops the server's process group and waits for
// every goroutine the source started.
func (s *Source) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	c := s.cur
	s.cur = nil
	s.mu.Unlock()
	s.stopAll()
	if c != nil {
		s.shutdown(c, false)
	}
	s.wg.Wait()
	s.progress.close()
	if s.own != nil {
		s.own.CloseIdleConnections()
	}
	return nil
}

// Health returns the current state of the connection: connecting (also
// before the first use), ready, degraded (it failed, was restarted or is
// being restarted, and no call has succeeded since) or failed (it never
// connected; also while it is being tried again).
func (s *Source) Health() tool.ServerHealth {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := tool.ServerHealth{Name: s.cfg.Name, Transport: s.cfg.Transport, Restarts: max(s.connects-1, 0)}
	if s.lastErr != nil {
		h.Error, h.Detail, h.ErrorAt = s.lastErr.Message, s.lastErr.Detail, s.lastErrAt
	}
	switch {
	case s.connecting != nil && s.lastErr == nil:
		h.State = tool.StateConnecting
	case s.cur != nil && (s.cur.healthy || s.lastErr == nil):
		h.State = tool.StateReady
	case s.cur != nil:
		h.State = tool.StateDegraded
	case s.lastErr != nil && s.connects > 0:
		// It ran before: it is being restarted, or will be on the next use.
		h.State = tool.StateDegraded
	case s.lastErr != nil:
		h.State = tool.StateFailed
	default:
		h.State = tool.StateConnecting
	}
	if s.cur != nil && s.cur.proc != nil {
		h.PID = s.cur.proc.pid
	}
	return h
}

// StderrTail returns the last lines a stdio server wrote to stderr.
func (s *Source) StderrTail(lines int) string { return s.stderr.Tail(lines) }

func mergeEnv(base []string, extra map[string]string) []string {
	if len(extra) == 0 {
		return base
	}
	out := make([]string, 0, len(base)+len(extra))
	for _, kv := range base {
		k := kv
		for i := 0; i < len(kv); i++ {
			if kv[i] == '=' {
				k = kv[:i]
				break
			}
		}
		if _, ok := extra[k]; !ok {
			out = append(out, kv)
		}
	}
	for k, v := range extra {
		out = append(out, k+"="+v)
	}
	return out
}

// probeSoon pings the session in the background.
func (s *Source) probeSoon(c *conn, why string) {
	if s.cfg.HealthCheck.Disabled || !s.track() {
		return
	}
	go func() {
		defer s.wg.Done()
		s.ping(c, why, 0)
	}()
}

// keepAlive pings the session every HealthCheck.Interval until it ends.
func (s *Source) keepAlive(c *conn) {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.HealthCheck.Interval)
	defer t.Stop()
	for {
		select {
		case <-c.gone.Done():
			return
		case <-t.C:
			if !s.ping(c, "a keep-alive ping was due", 0) {
				return
			}
		}
	}
}

// track counts a goroutine in s.wg unless the source is closed, so that
// Close waits for it. The caller must call s.wg.Done when it returns true.
func (s *Source) track() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// ping pings the session, unless another ping is under way or one was
// answered less than fresh ago, and reports whether the session still
// stands. A ping that gets no answer within PingTimeout retires the
// session as wedged. The caller is counted in s.wg.
func (s *Source) ping(c *conn, why string, fresh time.Duration) bool {
	timeout := s.cfg.HealthCheck.PingTimeout
	s.mu.Lock()
	switch {
	case s.closed || c.why != nil:
		s.mu.Unlock()
		return false
	case c.probing || fresh > 0 && !c.answered.IsZero() && time.Since(c.answered) < fresh:
		s.mu.Unlock()
		return true
	}
	c.probing = true
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(c.gone, timeout)
	defer cancel()
	// The ping runs apart: over stdio, a write to a server that stopped
	// reading blocks on the full pipe, deadline or not, until the session
	// is dropped.
	answer := make(chan error, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		answer <- c.cs.Ping(ctx, nil)
	}()
	var err error
	select {
	case err = <-answer:
	case <-ctx.Done():
		err = ctx.Err()
	}
	// An error answered by the server is an answer: it is alive.
	alive := err == nil || s.answerError(err, "ping") != nil

	s.mu.Lock()
	c.probing = false
	if alive {
		c.answered = time.Now()
	}
	retired := s.closed || c.why != nil
	s.mu.Unlock()
	switch {
	case alive:
		return true
	case retired:
		return false
	case errors.Is(err, context.DeadlineExceeded):
		s.log.Warn("mcp server stopped answering; dropping its session", "server", s.cfg.Name, "reason", why)
		msg := fmt.Sprintf("server %s stopped answering: %s, and a ping got no answer within %s; the session was dropped and the server is restarted", s.cfg.Name, why, timeout)
		s.end(c, s.unavailable(msg, fmt.Errorf("%w: %w", ErrWedged, err)))
	default:
		s.drop(c, fmt.Errorf("pinging it (%s): %w", why, err))
	}
	return false
}
