package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/toolmux/toolmux/api"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tool"
)

// shutdownGrace bounds the parts of a shutdown that should take no time
// (flushing events, ending streams) once the calls have ended.
const shutdownGrace = 10 * time.Second

func (a *app) serveCommand() *cobra.Command {
	var (
		addr  string
		stdio bool
		token string
		sec   gateway.Security

		approvalTimeout time.Duration
		shutdownTimeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve every configured tool as one MCP server (gateway)",
		Long: `Serve the aggregated, governed catalog as an MCP server: streamable HTTP at
http://ADDR/mcp, or stdio with --stdio for clients that spawn their servers.
Tools are named server__tool; every call goes through toolmux's policy,
pipeline and manager. A call the policy asks about is put to the client's
user through MCP elicitation; a client that cannot show a question gets a
refusal with a message saying how to allow the call (--yes,
--approval-mode, a policy rule, or trust: true on the server).

Over HTTP, each configured MCP server (stdio, SSE or streamable HTTP) is
also served on its own at http://ADDR/servers/NAME/mcp: its tools under
their own names, calls still governed, and everything else of MCP
(resources, prompts, completion, logging, progress, sampling, elicitation,
roots, notifications) forwarded between the client and the server. Every
client session there gets a session of its own with the server (for a
stdio server, a process of its own). The built-in tools and command servers
are served on /mcp only. See docs/gateway.md.

A server that fails to start is tried again in the background, with
backoff, until it comes up; one that crashes or stops answering (a ping
unanswered while a call waits, see health_check in docs/config.md) is
restarted. Meanwhile calls of its tools are refused at once with
server_unavailable and the server's stderr; when it is back, its tools
appear and clients are told the tool list changed.

Listening beyond loopback requires a bearer token (--token or TOOLMUX_TOKEN);
clients then send "Authorization: Bearer TOKEN". On loopback, requests must
be addressed to localhost, 127.0.0.1 or [::1] (--allowed-host adds names),
which stops web pages from reaching the gateway through DNS rebinding.
Browser requests from another origin are refused unless --allowed-origin
lists it. Request bodies are limited to --max-request-bytes.

On SIGINT or SIGTERM, toolmux stops accepting connections, gives the calls
in flight --shutdown-timeout to finish, cancels those still running (their
records say "cancelled: toolmux is shutting down"), ends the event streams,
closes every upstream server and the task log, and says what it cancelled.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if token == "" {
				token = os.Getenv("TOOLMUX_TOKEN")
			}
			if !stdio && !gateway.IsLoopback(addr) && token == "" {
				return usageError("refusing to listen on %s without a token: set --token or TOOLMUX_TOKEN, or listen on 127.0.0.1", addr)
			}
			tuneGC()
			rt, err := a.open(cmd.Context(), true)
			if err != nil {
				return err
			}
			defer rt.Close()
			ctx := cmd.Context()
			// Calls from clients go through the scheduler, for the policy
			// and the call events. A call that needs approval is asked of
			// the client's user through MCP elicitation (with --stdio,
			// stdin is the MCP transport, never a terminal); a client that
			// cannot show a question gets a refusal saying how to allow it.
			// Without elicitation (or for calls made through the HTTP API),
			// the call waits for an answer in the API (and the web UI).
			approvals := api.NewApprovals(approvalTimeout)
			approvals.OnPending(func(p api.Pending) {
				fmt.Fprintf(a.stderr, "toolmux: %s/%s waits for approval: POST {\"decision\": \"once\"} to /api/approvals/%s (or \"deny\")\n", p.Server, p.Tool, p.ID)
			})
			approver := a.approver(false)
			if approver == nil {
				approver = policy.FirstOf(gateway.ElicitApprover{}, approvals)
			}
			// Every call's states and output are events: /api/events
			// streams them, the task log keeps them for resumption.
			hubOpts := []stream.Option{stream.WithLogger(a.logger())}
			if rt.log != nil {
				hubOpts = append(hubOpts, stream.WithStore(rt.log.StreamStore()))
			}
			hub, err := stream.NewHub(ctx, hubOpts...)
			if err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			defer func() {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
				defer cancel()
				_ = hub.Close(cctx)
			}()
			s := schedule.New(rt.pipeline, schedule.WithGate(rt.gate(approver, true, a.logger())), schedule.WithSink(stream.SchedulerSink(hub)))
			opts := gateway.Options{Version: versionString(), Logger: a.logger()}
			opts.API = api.New(api.Options{Catalog: rt.pipeline, Caller: s, Health: rt.manager.Health,
				Policy: rt.policy, Approvals: approvals, Log: rt.log, Events: hub})
			if !stdio {
				opts.Passthrough = passthroughServers(rt.config, a.logger())
			}
			g := gateway.New(scheduled{catalog: rt.pipeline, Scheduler: s}, opts)
			defer g.Close()
			// Servers that fail, crash or stop answering are brought back
			// in the background while serving; when one comes back (or
			// its tools change), the clients are told the tool list
			// changed.
			rt.manager.Recover(func(*tool.Catalog) {
				if err := g.Sync(ctx); err != nil && ctx.Err() == nil {
					a.logger().Warn("updating the gateway's tools", "error", err)
				}
			})
			// Discover now, so problems show at start rather than at the
			// first client request.
			cat, err := rt.manager.Tools(ctx)
			if err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			a.reportServers(cat)
			if stdio {
				err := g.Server().Run(ctx, &mcp.StdioTransport{})
				a.drain(s, shutdownTimeout)
				if err != nil && ctx.Err() == nil {
					return &exitError{code: exitFailed, err: err}
				}
				return nil
			}
			sec.Loopback = gateway.IsLoopback(addr)
			return a.serveHTTP(ctx, addr, g.Mux(token, sec), cat, g.PassthroughNames(), s, shutdownTimeout)
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8931", "address to listen on")
	cmd.Flags().BoolVar(&stdio, "stdio", false, "serve MCP over stdin/stdout instead of HTTP")
	cmd.Flags().StringVar(&token, "token", "", "bearer token clients must send (default $TOOLMUX_TOKEN)")
	cmd.Flags().StringSliceVar(&sec.AllowedHosts, "allowed-host", nil, "further host names requests may be addressed to (repeatable)")
	cmd.Flags().StringSliceVar(&sec.AllowedOrigins, "allowed-origin", nil, `origins whose pages may call the gateway, e.g. https://app.example.com ("*" for any; repeatable)`)
	cmd.Flags().DurationVar(&approvalTimeout, "approval-timeout", api.DefaultApprovalTimeout, "how long a call waits for an answer through the HTTP API before it is refused")
	cmd.Flags().DurationVar(&shutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGINT/SIGTERM, how long calls in flight may go on before they are cancelled")
	cmd.Flags().Int64Var(&sec.MaxRequestBytes, "max-request-bytes", gateway.DefaultMaxRequestBytes, "largest request body accepted (-1: no limit)")
	return cmd
}

// scheduled is the gateway's view of the runtime: the pipeline's catalog,
// and calls made through the scheduler.
type scheduled struct {
	catalog interface {
		Tools(ctx context.Context) (*tool.Catalog, error)
	}
	*schedule.Scheduler
}

// Tools returns the catalog.
func (s scheduled) Tools(ctx context.Context) (*tool.Catalog, error) { return s.catalog.Tools(ctx) }

func (a *app) reportServers(cat *tool.Catalog) {
	for _, h := range cat.Servers() {
		if h.State == tool.StateFailed {
			fmt.Fprintf(a.stderr, "toolmux: server %s failed: %s\n", h.Name, h.Error)
		}
	}
}

// passthroughServers returns the MCP servers that get a passthrough route,
// with the transport settings the manager gives their sources: every
// enabled stdio, SSE and streamable HTTP server. The built-in tools and
// command servers speak no MCP of their own to pass through.
func passthroughServers(cfg *config.Config, log *slog.Logger) []mcpsource.Config {
	var out []mcpsource.Config
	for _, sc := range cfg.Servers {
		if sc.Disabled || sc.Transport == config.Command {
			continue
		}
		out = append(out, manager.SourceConfig(cfg, sc, log.With("server", sc.Name, "route", "passthrough")))
	}
	return out
}

func (a *app) serveHTTP(ctx context.Context, addr string, h http.Handler, cat *tool.Catalog, passthrough []string,
	s *schedule.Scheduler, grace time.Duration) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	// Requests live in a context of their own, ended only once the calls
	// have: streams (/api/events, MCP's GET streams) never end by
	// themselves, and http.Server.Shutdown would wait for them in vain.
	reqCtx, endRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer endRequests()
	posts := &inflight{}
	srv := &http.Server{Handler: posts.wrap(h), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return reqCtx }}
	fmt.Fprintf(a.stderr, "toolmux: serving %d tools from %d servers at http://%s/mcp (web UI at http://%s/)\n", cat.Len(), len(cat.Servers()), ln.Addr(), ln.Addr())
	if len(passthrough) > 0 {
		fmt.Fprintf(a.stderr, "toolmux: passthrough to %s at http://%s/servers/NAME/mcp\n", strings.Join(passthrough, ", "), ln.Addr())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return &exitError{code: exitFailed, err: err}
	case <-ctx.Done():
	}
	// Stop accepting first: Shutdown closes the listener at once, then
	// waits for the requests in flight, which the drain below ends.
	stopped := make(chan error, 1)
	go func() { stopped <- srv.Shutdown(context.WithoutCancel(ctx)) }()
	a.drain(s, grace)
	// The calls have ended; let their answers reach the clients before
	// the streams are cut.
	posts.wait(shutdownGrace)
	endRequests()
	select {
	case err := <-stopped:
		if err != nil {
			srv.Close()
			return &exitError{code: exitFailed, err: err}
		}
	case <-time.After(shutdownGrace):
		srv.Close()
	}
	return nil
}

// drain ends the calls in flight at shutdown: they get grace to finish,
// then are cancelled, which is recorded in the task log and said here.
func (a *app) drain(s *schedule.Scheduler, grace time.Duration) {
	fmt.Fprintf(a.stderr, "toolmux: shutting down: no new calls; calls in flight have %s to finish\n", grace)
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	cancelled := s.Shutdown(ctx)
	for _, o := range cancelled {
		where := "call " + o.Call.ID
		if o.Call.Task != "" {
			where += ", task " + o.Call.Task
		}
		fmt.Fprintf(a.stderr, "toolmux: cancelled %s (%s)\n", tool.ExposedName(o.Call.Server, o.Call.Tool), where)
	}
	switch len(cancelled) {
	case 0:
		fmt.Fprintln(a.stderr, "toolmux: stopped; every call in flight finished")
	case 1:
		fmt.Fprintln(a.stderr, "toolmux: stopped; 1 call cancelled")
	default:
		fmt.Fprintf(a.stderr, "toolmux: stopped; %d calls cancelled\n", len(cancelled))
	}
}

// inflight counts the requests that are not GETs: the calls and messages
// whose answers a shutdown must let out before it ends the GET streams,
// which never end by themselves.
type inflight struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n drops to 0; nil while n is 0
}

func (f *inflight) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			h.ServeHTTP(w, r)
			return
		}
		f.mu.Lock()
		if f.n == 0 {
			f.zero = make(chan struct{})
		}
		f.n++
		f.mu.Unlock()
		defer func() {
			f.mu.Lock()
			if f.n--; f.n == 0 {
				close(f.zero)
				f.zero = nil
			}
			f.mu.Unlock()
		}()
		h.ServeHTTP(w, r)
	})
}

// wait waits until no request counted is in flight, at most d.
func (f *inflight) wait(d time.Duration) {
	f.mu.Lock()
	zero := f.zero
	f.mu.Unlock()
	if zero == nil {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-zero:
	case <-t.C:
	}
}

// serveGCPercent is the garbage collector's target for serve when GOGC is
// not set. A gateway's live heap is small and its allocation rate high
// (the MCP SDK allocates buffers per message on both sides of the hop), so
// at Go's default of 100 it collects every few calls and spends a fifth of
// its CPU doing so (BENCHMARKS.md §8); 400 lets the heap grow to five
// times what is live — a few tens of MB — for about a fifth less CPU per
// call.
const serveGCPercent = 400

// tuneGC applies serveGCPercent unless the user chose with GOGC.
func tuneGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(serveGCPercent)
	}
}
