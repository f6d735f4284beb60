package mcpsource

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/ringbuf"
	"github.com/toolmux/toolmux/tool"
)

// newTransport returns the go-sdk transport of one session with the server
// of cfg; for a stdio server it starts the process, in a process group of
// its own, its stderr copied into stderr.
func newTransport(cfg Config, hc *http.Client, stderr *ringbuf.Buffer) (mcp.Transport, *process, error) {
	switch cfg.Transport {
	case Stdio:
		cmd := exec.Command(cfg.Command, cfg.Args...)
		cmd.Dir = cfg.Dir
		cmd.Env = mergeEnv(os.Environ(), cfg.Env)
		proc, stdin, stdout, err := startProcess(cmd, stderr)
		if err != nil {
			return nil, nil, err
		}
		return newSpillTransport(cfg, stdin, stdout), proc, nil
	case SSE:
		return &mcp.SSEClientTransport{Endpoint: cfg.URL, HTTPClient: hc, MaxEventSize: cfg.MaxMessageBytes}, nil, nil
	case StreamableHTTP:
		return &mcp.StreamableClientTransport{Endpoint: cfg.URL, HTTPClient: hc, MaxEventSize: cfg.MaxMessageBytes}, nil, nil
	}
	return nil, nil, fmt.Errorf("unknown transport %q", cfg.Transport)
}

// startError describes a server that could not be started.
func startError(cfg Config, err error) *tool.Error {
	return &tool.Error{Kind: tool.KindServerUnavailable, Server: cfg.Name,
		Message: fmt.Sprintf("server %s: cannot start %q: %v", cfg.Name, cfg.Command, err), Err: errors.Join(tool.ErrNotSent, err)}
}

// Conn is one connection to the server a Config describes, for a caller
// that runs a go-sdk client session of its own over it rather than sharing
// a Source's (the gateway's passthrough route opens one for each of its
// clients' sessions, so that the server's requests and notifications reach
// the right client). For a stdio server a Conn owns one process of the
// server, with the same process-group handling as a Source: each Conn
// starts a process of its own.
type Conn struct {
	cfg       Config
	transport mcp.Transport
	proc      *process
	stderr    *ringbuf.Buffer
	own       *http.Transport // closed on Close, when Dial created it
}

// Dial prepares a connection to the server cfg describes: for a stdio
// server it starts the process; for SSE and streamable HTTP it builds the
// HTTP client (headers, bearer token), and the go-sdk connects when the
// session is opened over [Conn.Transport]. cfg gets the defaults of [New].
func Dial(cfg Config) (*Conn, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	c := &Conn{cfg: cfg, stderr: ringbuf.New(cfg.StderrBytes)}
	var hc *http.Client
	if cfg.Transport != Stdio {
		hc, c.own = newHTTPClient(cfg)
	}
	c.transport, c.proc, err = newTransport(cfg, hc, c.stderr)
	if err != nil {
		return nil, startError(cfg, err)
	}
	return c, nil
}

// Transport returns the go-sdk transport to open one session over.
func (c *Conn) Transport() mcp.Transport { return c.transport }

// Exited is closed when the process of a stdio server has exited; it is
// nil (never ready) for other servers.
func (c *Conn) Exited() <-chan struct{} {
	if c.proc == nil {
		return nil
	}
	return c.proc.exited
}

// Describe says how the connection ended, for error messages: the process's
// exit status and the tail of its stderr for a stdio server that exited, ""
// otherwise. A process that died is usually reaped a moment after its pipe
// reports EOF, so Describe waits for that (a fraction of a second) first.
func (c *Conn) Describe() string {
	if c.proc == nil {
		return ""
	}
	t := time.NewTimer(drainWait)
	defer t.Stop()
	select {
	case <-c.proc.exited:
	case <-t.C:
		return ""
	}
	c.proc.drainStderr(drainWait)
	msg := "server " + c.cfg.Name + " " + c.proc.exitDescription()
	if tail := c.stderr.Tail(stderrTailLines); tail != "" {
		msg += "\nstderr of " + c.cfg.Name + ":\n" + tail
	}
	return msg
}

// Close releases the connection: for a stdio server it closes the
// process's stdin and stops its process group (SIGTERM after StopGrace,
// SIGKILL after another), returning once the process has been reaped.
// Close the go-sdk session first, so that nothing is still reading.
func (c *Conn) Close() error {
	if t, ok := c.transport.(*spillTransport); ok {
		_ = t.stdin.Close() // already closed by the session, usually
		c.proc.stop(c.cfg.StopGrace)
		_ = t.stdout.Close()
	}
	if c.own != nil {
		c.own.CloseIdleConnections()
	}
	return nil
}

// drainWait is how long an error waits for the last words of an exited
// process.
const drainWait = 200 * time.Millisecond

// A CallFunc makes one tools/call over a session of the caller's choosing
// (Conn.Call makes one over a Conn).
type CallFunc func(ctx context.Context, params *mcp.CallToolParams) (*tool.Result, error)

// Call makes a tools/call over cs, a session opened on the connection's
// Transport: for a stdio server, on the connection itself, without the
// go-sdk's decoding (wire.go); otherwise through cs. Its context's values
// go with it, as with cs.CallTool: what the server sends during the call
// finds the call by them.
func (c *Conn) Call(ctx context.Context, cs *mcp.ClientSession, params *mcp.CallToolParams) (*tool.Result, error) {
	if w := wireOf(c.transport, cs); w != nil {
		return w.call(ctx, params)
	}
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		return nil, err
	}
	return convertResult(res), nil
}

type callFuncKey struct{ server string }

// WithCallFunc returns a context in which the source named server makes its
// tool calls through fn instead of over its own shared session. Everything
// else about the call stays the same: it still goes through the manager
// (allow/deny, timeouts, retries, breaker) and whatever wraps it (the
// pipeline, the scheduler's policy), and fn's result or error is turned into
// a record as the source's own would be. The gateway's passthrough route
// uses it so that a governed call reaches the server over the client's own
// session, where the server's requests back (sampling, elicitation) and its
// notifications (progress, logging) find that client.
func WithCallFunc(ctx context.Context, server string, fn CallFunc) context.Context {
	return context.WithValue(ctx, callFuncKey{server}, fn)
}

func callFuncFrom(ctx context.Context, server string) CallFunc {
	fn, _ := ctx.Value(callFuncKey{server}).(CallFunc)
	return fn
}

// callWith makes a call through fn. Failures are classified as they are
// for the source's own session, except that a broken session is the
// caller's, so nothing of the source's is dropped.
func (s *Source) callWith(ctx context.Context, fn CallFunc, name string, args map[string]any) (*tool.Result, error) {
	parent := ctx
	ctx, done := s.bind(ctx)
	defer done()
	if args == nil {
		args = map[string]any{}
	}
	col := &collector{}
	defer col.done()
	out, err := fn(withCollector(ctx, col), &mcp.CallToolParams{Name: name, Arguments: args})
	if err == nil {
		col.apply(out)
		return out, nil
	}
	if ctx.Err() != nil {
		return nil, s.closedError(parent, ctx.Err())
	}
	doing := "calling " + name
	if e := s.answerError(err, doing); e != nil {
		return nil, e
	}
	return nil, &tool.Error{Kind: tool.KindServerUnavailable, Server: s.cfg.Name,
		Message: fmt.Sprintf("server %s: connection lost while %s: %v", s.cfg.Name, doing, err), Err: notSent(err)}
}
