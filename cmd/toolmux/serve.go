package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/api"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/metrics"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/ratelimit"
	"github.com/toolmux/toolmux/schedule"
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
		watch           bool
		reloadDrain     time.Duration

		ff          fleetFlags
		natsListen  string
		withMetrics bool

		search   search
		codeMode codeModeFlag
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve every configured tool as one MCP server (gateway)",
		Long: `Serve the aggregated, governed catalog as an MCP server: streamable HTTP at
http://ADDR/mcp, or stdio with --stdio for clients that spawn their servers.
Tools are named server__tool; every call goes through toolmux's policy,
pipeline and manager. A call the policy asks about is put to someone who
can answer now: the client's user through MCP elicitation when the client
supports it, else the web page at http://ADDR/ while one is open (the
client hears by progress where to answer); otherwise it is refused at once
(approval_unavailable) with a message saying how to allow the call (--yes,
--approval-mode, a policy rule, or trust: true on the server). A client
that answers cancel, or declines within 250ms, showed the question to
nobody (an agent CLI run headless: claude -p, codex exec), and counts as
one that cannot ask. A question waits at most
--approval-timeout, and is withdrawn, never to run, when its client goes
away. With --stdio, --addr also serves the web page (and the API) on that
address; --stdio alone asks by elicitation only.

Each client session is a task in the task log (toolmux logs), named after
the client and ended closed, idle or shutdown.

Over HTTP, each configured MCP server (stdio, SSE or streamable HTTP) is
also served on its own at http://ADDR/servers/NAME/mcp: its tools under
their own names, calls still governed, and everything else of MCP
(resources, prompts, completion, logging, progress, sampling, elicitation,
roots, notifications) forwarded between the client and the server. Every
client session there gets a session of its own with the server (for a
stdio server, a process of its own). The built-in tools and command servers
are served on /mcp only. See docs/gateway.md.

With --tool-search (or tool_search: in the configuration, or automatically
above --tool-search-above tools), /mcp lists only the pinned tools (--pin,
tool_search.pinned) and two meta-tools: find_tools, which searches every
tool by name, server and description and returns the best matches with
their input schemas, and call_tool, which calls one of them, governed like
any call: for clients that cap the number of tools, and models whose
context a large catalog would fill. The virtual servers of the
configuration (virtual_servers:) are served at http://ADDR/virtual/NAME/mcp,
each with its subset of the tools. See docs/operations.md.

With --code-mode (or code_mode: in the configuration), /mcp, stdio and
the virtual servers list run_code too: it runs a model's JavaScript
program that calls tools as functions (tools.call("server__tool", {...})),
every call governed like a direct one and recorded in the client's task,
bounded in time, calls, output and memory (code_mode:). See
docs/codemode.md.

A server that fails to start is tried again in the background, with
backoff, until it comes up; one that crashes or stops answering (a ping
unanswered while a call waits, see health_check in docs/config.md) is
restarted. Meanwhile calls of its tools are refused at once with
server_unavailable and the server's stderr; when it is back, its tools
appear and clients are told the tool list changed.

Listening beyond loopback requires a bearer token (--token or TOOLMUX_TOKEN;
a blank one is refused, one shorter than 16 characters warned about) or an
API key (toolmux keys add NAME); clients then send "Authorization: Bearer
TOKEN" (or KEY). With API keys in the data directory, every request must
carry one (or the token); keys added and revoked apply within a second,
without a restart, and a serve started without any asks for one from the
first key added. With auth.issuers in the configuration, clients may send
instead an access token of a trusted identity provider (checked against its
keys, or introspected; its audience, expiry and scopes checked), and serve
may listen beyond loopback without --token; a refusal names the protected
resource metadata, which names the provider. See docs/identity.md. On
loopback, requests must
be addressed to localhost, 127.0.0.1 or [::1] (--allowed-host adds names),
which stops web pages from reaching the gateway through DNS rebinding.
Browser requests from another origin are refused unless --allowed-origin
lists it (its preflights are then answered, with CORS headers naming it). Request bodies (and, with --stdio, lines) are limited
to --max-request-bytes; a call's arguments to pipeline.validate.max_argument_bytes, weighed before they are decoded.

With --metrics, Prometheus metrics (calls, approvals, servers' health,
passthrough sessions, events, the task log) are served at
http://ADDR/metrics, behind the same token; see docs/operations.md.

On SIGINT or SIGTERM, toolmux stops accepting connections, gives the calls
in flight --shutdown-timeout to finish, cancels those still running (their
records say "cancelled: toolmux is shutting down"), ends the event streams,
closes every upstream server and the task log, and says what it cancelled.

On SIGHUP, and with --watch when the configuration file changes, the
configuration is read again and applied without a restart: servers added
start, servers removed or changed get --reload-drain for their calls in
flight, then stop (changed ones start again with their new settings);
allow/deny lists, policy rules and pipeline settings apply to the next
call; sessions and calls in flight go on; clients are told the tool list
changed. A configuration with errors is refused with their positions, and
the one in use stays; so is one without servers while servers run (an
empty file, or one read while it was being written), unless it says
"servers: {}". Write the file by rename (a temporary file in the same
directory, then mv). Signals and changes that come during a reload make
one more, 300ms after the last. See docs/operations.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			token, err := a.resolveToken(token, cmd.Flags().Changed("token"))
			if err != nil {
				return err
			}
			if err := search.check(); err != nil {
				return err
			}
			// --stdio serves MCP on stdin/stdout; it listens on HTTP too
			// (the web page, where approvals are answered, and the API)
			// only when --addr is given.
			onHTTP := !stdio || cmd.Flags().Changed("addr")
			if onHTTP {
				if err := checkAddr(addr); err != nil {
					return err
				}
			}
			// Over HTTP, the API keys of the data directory (keys.go).
			var keys *identity.StoreKeys
			if onHTTP {
				if keys, err = a.apiKeys(); err != nil {
					return err
				}
			}
			if onHTTP && !gateway.IsLoopback(addr) && token == "" && !hasKeys(keys) {
				// The configuration's issuers may guard it instead.
				cfg, err := a.loadConfig()
				if err != nil {
					return err
				}
				if !guardedByConfig(cfg) {
					return usageError("refusing to listen on %s without a token: set --token or TOOLMUX_TOKEN, add an API key (toolmux keys add NAME), or auth.issuers in the configuration (docs/identity.md), or listen on 127.0.0.1", addr)
				}
			}
			// The address is taken before any server starts, so that a
			// port in use is said at once.
			var ln net.Listener
			if onHTTP {
				var err error
				if ln, err = listen(addr); err != nil {
					if !stdio {
						return err
					}
					// The MCP client spawned us for stdio: serve it
					// anyway, without the page.
					fmt.Fprintf(a.stderr, "toolmux: no web page: %v; approvals are asked of the MCP client only\n", err)
					onHTTP = false
				} else {
					defer ln.Close()
				}
			}
			ctx := cmd.Context()
			// In a fleet, the gateway's task log is the fleet's journal
			// (its index under the data directory's fleet/), and the
			// page shows the workers' runs.
			fn, err := a.startFleetNode(ctx, ff, natsListen, token)
			if err != nil {
				return err
			}
			defer fn.close()
			tuneGC()
			st := newStartup(a.stderr)
			// Calls from clients go through the scheduler, for the policy
			// and the call events. A call that needs approval is put to
			// someone who can answer now: the client's user through MCP
			// elicitation, when the client declared it (with --stdio,
			// stdin is the MCP transport, never a terminal) and shows the
			// question to someone (a headless client's instant answer
			// passes it on); else the web page, while one is open; else
			// it is refused at once with a message saying how to allow it.
			var approvals *api.Approvals
			approver := a.approver(false)
			if approver == nil {
				// Who answers when callers are known (govern.go).
				cfg, err := a.loadConfig()
				if err != nil {
					return err
				}
				who := a.approvers(cfg)
				elicit := gateway.ElicitApprover{Timeout: approvalTimeout, NoSelfApproval: !who.self}
				if onHTTP {
					approvals = api.NewApprovals(&api.ApprovalOptions{Timeout: approvalTimeout,
						Where: pageURL(ln.Addr()), OnPending: a.sayPending, OnEnded: a.sayEnded,
						ApproversGroup: who.group, AdminGroup: who.admin, NoSelfApproval: !who.self})
					// A question of an MCP task is put to the page too.
					elicit.Also = approvals
					approver = policy.FirstOf(elicit, approvals)
				} else {
					approver = policy.FirstOf(elicit, policy.ApproverFunc(func(context.Context, policy.Request) (policy.Answer, error) {
						return 0, &policy.NoApproverError{Hints: []string{
							"serve --stdio --addr 127.0.0.1:8931 also serves a web page where calls can be approved"}}
					}))
				}
			}
			// Every call's states and output are events: /api/events
			// streams them, the task log keeps them for resumption.
			rel := newReleaser()
			sinks := []schedule.Sink{rel}
			// Metrics count calls from the scheduler's events, and only
			// when asked for: without --metrics a call pays nothing.
			var mx *metrics.Metrics
			if withMetrics {
				mx = metrics.New()
				sinks = append(sinks, mx)
			}
			// Users' own secrets for the servers that take them.
			cfg, err := a.loadConfig()
			if err != nil {
				return err
			}
			sv, err := a.serveVault(ctx, cfg, fn.fleet)
			if err != nil {
				return err
			}
			// A caller without a server's secrets is sent to the page's
			// Secrets tab, where there is a page.
			secretsURL := ""
			if onHTTP && sv != nil {
				secretsURL = pageURL(ln.Addr()) + "#secrets"
			}
			// Users' own OAuth authorizations of the servers that take them.
			// A completed authorization lets a call waiting for it go on
			// (the gateway, made below).
			var gw atomic.Pointer[gateway.Gateway]
			oc, err := a.upstreamOAuth(cfg, sv, ln, func(owner, server string) {
				if g := gw.Load(); g != nil {
					g.CredentialGiven(owner, server)
				}
			})
			if err != nil {
				return err
			}
			rt, err := a.openIn(ctx, toolmux.Options{NoAgents: true, Approver: approver, ConcurrentApprovals: true,
				Sinks: sinks, ManagerOptions: []manager.Option{st.option(), manager.WithRestartObserver(a.sayRestarted)}, TaskLog: fn.taskLog(), Vault: sv, SecretsURL: secretsURL, UpstreamOAuth: oc}, fn.dataSub())
			if err != nil {
				return err
			}
			defer closeRuntime(ctx, rt)
			stopProjecting := fn.project(ctx, rt)
			defer stopProjecting()
			// The workers' approval questions are put to the same people
			// as the gateway's clients' (the page, the console).
			stopApprovals, err := fn.serveApprovals(approver, a.logger())
			if err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			defer stopApprovals()
			// Whatever task this process still runs when it stops (a task
			// an API caller named, say) ends as shutdown, after the
			// sessions' own tasks.
			defer a.finishOwned(rt.Log)
			defer rel.stop()
			s, hub := rt.Scheduler, rt.Events
			reloads := newReloadStatus(rt.Config.Path)
			// The auth: section's groups: who sees everything, who
			// answers approvals (docs/identity.md).
			authSettings, err := identity.FromConfig(rt.Config.Auth, os.Getenv)
			if err != nil {
				return usageError("%v", err)
			}
			opts := gateway.Options{Version: versionString(), Logger: a.logger(), MaxDepth: rt.Config.Limits.MaxDepth, LargeBody: rel.arm,
				Sessions: sessionTasks(rt.Log, a.logger()), ToolSearch: search.apply(cmd, rt.Config.ToolSearch),
				Tracer: rt.Telemetry.Tracer(), Propagator: rt.Telemetry.Propagator(), Reissue: gateway.ReissueFromConfig(rt.Config.Reissue)}
			opts.Listens = gateway.ListensFromConfig(rt.Config.Subscriptions)
			opts.CodeMode = codeMode.apply(cmd, rt.Config.CodeMode, rt.Log)
			// A call whose user accepted to give a missing credential
			// waits for it as long as for an approval; the secrets API
			// and the OAuth callback say when one is given.
			opts.AuthTimeout, opts.AwaitCredentials = approvalTimeout, sv != nil
			opts.AdminGroups = []string{authSettings.AdminGroup}
			// Limits per caller (rate_limits), on every route and the API
			// alike; made even when none is configured, for a reload may
			// add some.
			opts.Limits = ratelimit.New(ratelimit.FromConfig(rt.Config.RateLimits))
			// What each caller sees (govern.go), on every route and the API.
			vis, err := newVisibility(rt.Config)
			if err != nil {
				return err
			}
			opts.Visibility = vis.get
			opts.API = api.New(api.Options{Catalog: rt.Pipeline, Caller: s, Health: rt.Manager.Health, Pins: rt.Pins, Presented: rt.Manager,
				Policy: rt.Gate, Approvals: approvals, Log: rt.Log, Events: hub, Version: versionString(), MaxDepth: rt.Config.Limits.MaxDepth,
				Fleet: fn.summary(authSettings.AdminGroup), Reload: reloads.infoFunc(), Limits: opts.Limits, Visibility: vis.get,
				AdminGroups: []string{authSettings.AdminGroup}, ApproverGroups: []string{authSettings.ApproversGroup},
				Secrets: secretsAPI(rt, sv, func(owner, server string) {
					if g := gw.Load(); g != nil {
						g.CredentialGiven(owner, server)
					}
				}), Connections: connectionsAPI(rt, sv, oc)})
			if onHTTP {
				opts.Virtual = gateway.VirtualFromConfig(rt.Config)
				opts.Passthrough = passthroughServers(rt.Config, a.logger())
				opts.OnSessionRefused = func(rs gateway.RouteSessions) {
					fmt.Fprintf(a.stderr, "toolmux: passthrough to %s refused a client session: %d of %d sessions open "+
						"(servers.%s.passthrough.max_sessions); %d refused so far\n", rs.Server, rs.Open, rs.Max, rs.Server, rs.Refused)
				}
			}
			if mx != nil {
				opts.Metrics = mx.Handler()
			}
			if rt.Log != nil && !stdio {
				// MCP tasks live in the task log (docs/gateway.md "Tasks");
				// over stdio the go-sdk refuses tasks/* before the gateway
				// sees them, so they are neither offered nor advertised.
				opts.Tasks = gateway.TasksFromConfig(rt.Config, rt.Log)
				opts.Tasks.ApprovalTimeout = approvalTimeout
			}
			g := gateway.New(gateway.Scheduled{Catalog: rt.Pipeline, Calls: s}, opts)
			gw.Store(g)
			defer g.Close()
			if mx != nil {
				mx.Watch(metricSources(rt, g, approvals, reloads))
			}
			// Servers that fail, crash or stop answering are brought back
			// in the background while serving; when one comes back (or
			// its tools change), the clients are told the tool list
			// changed.
			rt.Manager.Recover(func(cat *tool.Catalog) {
				a.pinCatalog(rt, cat)
				if err := g.Sync(ctx); err != nil && ctx.Err() == nil {
					a.logger().Warn("updating the gateway's tools", "error", err)
				}
			})
			// SIGHUP and --watch reload the configuration while serving.
			rl, err := a.startReloader(ctx, rt, g, reloads, watch, reloadDrain, vis)
			if err != nil {
				return err
			}
			defer rl.stop()
			// Discover now, so problems show at start rather than at the
			// first client request.
			st.begin()
			cat, err := rt.Manager.Tools(ctx)
			st.end()
			if err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			a.reportServers(cat, st)
			a.pinCatalog(rt, cat)
			if ts := opts.ToolSearch; ts.Enabled || ts.Above > 0 && cat.Len() > ts.Above {
				fmt.Fprintf(a.stderr, "toolmux: tool search on /mcp: %s behind find_tools and call_tool; pinned: %s\n",
					plural(cat.Len(), "tool"), cmp.Or(strings.Join(ts.Pinned, ", "), "none"))
			}
			codeModeLine(a.stderr, opts.CodeMode)
			sec.Loopback = gateway.IsLoopback(addr)
			var h http.Handler
			if onHTTP {
				var kv identity.Verifier // a nil *StoreKeys is no verifier
				if keys != nil {
					kv = keys
				}
				sa, err := a.withIssuers(ctx, rt.Config, a.gatewayAuth(keys, token, authSettings.AdminGroup), token, kv)
				if err != nil {
					return err
				}
				if err := checkPageResource(rt.Config, sec.Loopback); err != nil {
					return err
				}
				if !sec.Loopback && sa.auth.Verifier == nil && sa.auth.Page == nil {
					// The file changed since it was checked above.
					return usageError("refusing to listen on %s: nothing says who may call (--token, an API key, auth.issuers, auth.page)", addr)
				}
				sa.auth.Upstream = upstreamRoutes(rt.Config, oc)
				h = g.MuxAuth(sa.auth, sec)
			}
			if stdio {
				var stopHTTP func()
				if onHTTP {
					stopHTTP = serveBeside(ctx, ln, h)
					fmt.Fprintf(a.stderr, "toolmux: web page (approvals, live calls) at %s\n", pageURL(ln.Addr()))
				}
				// The transport ends with the signal: the session's end
				// must read as a shutdown, not as the client leaving.
				runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
				defer stopRun()
				go func() {
					select {
					case <-ctx.Done():
						g.BeginShutdown()
						stopRun()
					case <-runCtx.Done():
					}
				}()
				err := g.Server().Run(runCtx, g.Stdio(os.Stdin, os.Stdout, sec.MaxRequestBytes))
				if ctx.Err() == nil {
					// Not the signal: the client closed our stdin.
					g.InputEnded()
				}
				g.BeginShutdown()
				a.drain(s, shutdownTimeout)
				if stopHTTP != nil {
					stopHTTP()
				}
				if err != nil && ctx.Err() == nil {
					return &exitError{code: exitFailed, err: err}
				}
				return nil
			}
			return a.serveHTTP(ctx, ln, g, h, cat, s, shutdownTimeout)
		},
	}
	search.flags(cmd)
	codeMode.flags(cmd)
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8931", "address to listen on (with --stdio: also serve the web page there)")
	cmd.Flags().BoolVar(&stdio, "stdio", false, "serve MCP over stdin/stdout instead of HTTP")
	cmd.Flags().StringVar(&token, "token", "", "bearer token clients must send (default $TOOLMUX_TOKEN); beside API keys, one more: the caller default, in group admin")
	cmd.Flags().StringSliceVar(&sec.AllowedHosts, "allowed-host", nil, "further host names requests may be addressed to (repeatable)")
	cmd.Flags().StringSliceVar(&sec.AllowedOrigins, "allowed-origin", nil, `origins whose pages may call the gateway, e.g. https://app.example.com ("*" for any; repeatable)`)
	cmd.Flags().DurationVar(&approvalTimeout, "approval-timeout", api.DefaultApprovalTimeout, "how long a call waits for a person's answer (MCP elicitation or the web page) before it is refused")
	cmd.Flags().DurationVar(&shutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGINT/SIGTERM, how long calls in flight may go on before they are cancelled")
	cmd.Flags().Int64Var(&sec.MaxRequestBytes, "max-request-bytes", gateway.DefaultMaxRequestBytes, "largest request body (with --stdio: line) accepted (-1: no limit)")
	cmd.Flags().BoolVar(&withMetrics, "metrics", false, "serve Prometheus metrics at /metrics, behind the token (see docs/operations.md)")
	cmd.Flags().BoolVar(&watch, "watch", false, "reload the configuration when its file changes (as on SIGHUP)")
	cmd.Flags().DurationVar(&reloadDrain, "reload-drain", manager.DefaultDrain, "on a reload, how long calls in flight on a removed or changed server may go on before it is stopped")
	ff.add(cmd)
	cmd.Flags().StringVar(&natsListen, "nats-listen", "", "start an embedded NATS server with JetStream at ADDR (e.g. 127.0.0.1:4222) for a fleet of workers, its data in the data directory; the page shows the fleet. "+
		"Beyond loopback every client must send --token (nats://TOKEN@HOST:PORT). On loopback without --token it requires a token of its own, kept in DATA_DIR/nats/token.json "+
		"(readable by you only), which your fleet commands on this machine send: other local users and processes cannot submit runs, read events or act as workers")
	return cmd
}

// metricSources are the observation points serve's metrics read when
// scraped.
func metricSources(rt *toolmux.Runtime, g *gateway.Gateway, approvals *api.Approvals, reloads *reloadStatus) metrics.Sources {
	src := metrics.Sources{Catalog: rt.Manager.Catalog, Health: rt.Manager.Health, TaskLog: rt.Log,
		Passthrough: func() []metrics.RouteSessions {
			rss := g.PassthroughSessions()
			out := make([]metrics.RouteSessions, len(rss))
			for i, rs := range rss {
				out[i] = metrics.RouteSessions{Server: rs.Server, Open: rs.Open, Max: rs.Max, Refused: rs.Refused}
			}
			return out
		}}
	if rt.Events != nil {
		src.Events = rt.Events.Stats
	}
	if approvals != nil {
		src.Approvers = approvals.Approvers
	}
	src.Reissues = func() metrics.Reissues {
		st := g.ReissueStats()
		return metrics.Reissues{Answered: st.Answered, NotKept: st.NotKept, AfterGrace: st.AfterGrace}
	}
	if reloads != nil {
		src.Reloads = reloads.counts
	}
	src.Listens = func() metrics.Listens {
		st := g.ListenStats()
		return metrics.Listens{Open: st.Open, Max: st.Max, Refused: st.Refused, RefusedPerClient: st.RefusedPerClient}
	}
	src.Callers = g.Limits().Stats
	return src
}

// minTokenLength is the shortest bearer token serve accepts without a
// warning: 16 characters, 64 bits at least of a hex or base32 secret.
const minTokenLength = 16

// resolveToken returns the bearer token: --token when given (set), else
// $TOOLMUX_TOKEN (empty means none). A blank token, or one with spaces
// around it (which no Authorization header can match), is refused; a
// short one is served with a warning.
func (a *app) resolveToken(flag string, set bool) (string, error) {
	tok, from := flag, "--token"
	if !set {
		tok, from = os.Getenv("TOOLMUX_TOKEN"), "TOOLMUX_TOKEN"
		if tok == "" {
			return "", nil
		}
	}
	switch {
	case strings.TrimSpace(tok) == "":
		return "", usageError("%s is blank: give a token of at least %d characters (e.g. `openssl rand -hex 16`), or none to serve on loopback only", from, minTokenLength)
	case strings.TrimSpace(tok) != tok:
		return "", usageError("%s has spaces around it, which no client's Authorization header can match", from)
	case len(tok) < minTokenLength:
		fmt.Fprintf(a.stderr, "toolmux: warning: the token (%s) is %d characters long; use at least %d (e.g. `openssl rand -hex 16`)\n", from, len(tok), minTokenLength)
	}
	return tok, nil
}

// pageURL is the address of the web page served on addr.
func pageURL(addr net.Addr) string { return "http://" + addr.String() + "/" }

// sayPending says on the console that a call waits for approval, and
// where to answer it.
func (a *app) sayPending(p api.Pending) {
	fmt.Fprintf(a.stderr, "toolmux: %s/%s%s waits for approval on the web page (or POST {\"decision\": \"once\"} to /api/approvals/%s); refused at %s if nobody answers\n",
		p.Server, p.Tool, byWhom(" of ", p.Caller), p.ID, p.Deadline.Format(time.TimeOnly))
}

// byWhom names a caller after prefix, "" when callers are not known.
func byWhom(prefix, name string) string {
	if name == "" {
		return ""
	}
	return prefix + name
}

// sayEnded says how a wait for approval ended.
func (a *app) sayEnded(p api.Pending, e api.Ending) {
	switch e.Outcome {
	case api.OutcomeAnswered:
		fmt.Fprintf(a.stderr, "toolmux: %s/%s (call %s%s): answered %s%s\n", p.Server, p.Tool, p.ID, byWhom(" of ", p.Caller), e.Message, byWhom(" by ", e.By))
	case api.OutcomeWithdrawn:
		fmt.Fprintf(a.stderr, "toolmux: %s/%s (call %s) no longer waits for approval: %s\n", p.Server, p.Tool, p.ID, e.Message)
	default:
		fmt.Fprintf(a.stderr, "toolmux: %s/%s (call %s) refused: %s\n", p.Server, p.Tool, p.ID, e.Message)
	}
}

// serveBeside serves h on ln in the background, beside a command's main
// job (the page of serve --stdio, of run --serve); stop ends it: the
// streams first, which never end by themselves, then the server, within
// shutdownGrace.
func serveBeside(ctx context.Context, ln net.Listener, h http.Handler) (stop func()) {
	reqCtx, endRequests := context.WithCancel(context.WithoutCancel(ctx))
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return reqCtx }}
	go srv.Serve(ln)
	return func() {
		endRequests()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			srv.Close()
		}
	}
}

// reportServers says which servers failed to start, unless the start-up
// lines said so already.
func (a *app) reportServers(cat *tool.Catalog, st *startup) {
	for _, h := range cat.Servers() {
		if h.State == tool.StateFailed && !st.wasReported(h.Name) {
			fmt.Fprintf(a.stderr, "toolmux: server %s failed: %s\n", h.Name, h.Error)
		}
	}
}

// passthroughServers returns the MCP servers that get a passthrough route,
// with the transport settings the manager gives their sources and the
// bounds of their sessions: every enabled stdio, SSE and streamable HTTP
// server. The built-in tools and command servers speak no MCP of their own
// to pass through; a server with an auth section takes each caller's own
// credential, which a passthrough route, opening its upstream session with
// the configured one, would go around.
func passthroughServers(cfg *config.Config, log *slog.Logger) []gateway.Route {
	var out []gateway.Route
	for _, sc := range cfg.Servers {
		if sc.Disabled || sc.Transport == config.Command || sc.Auth != nil {
			continue
		}
		src := toolmux.MCPSourceConfig(cfg, sc, log.With("server", sc.Name, "route", "passthrough"))
		out = append(out, gateway.RouteFromConfig(cfg, sc, src))
	}
	return out
}

// sayRestarted says on stderr that a server whose session was lost (its
// process died, its connection dropped) answers again: how it was lost
// and how many restarts it has had, without --verbose, since a server
// that keeps dying is something to look into.
func (a *app) sayRestarted(r manager.Restart) {
	fmt.Fprintf(a.stderr, "toolmux: %s; restarted (%s so far)\n", r.Lost, plural(r.Restarts, "restart"))
}

// checkAddr refuses an address without a port, which net.Listen would
// only call "missing port in address".
func checkAddr(addr string) error {
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		return usageError("address %q has no port: give HOST:PORT, such as 127.0.0.1:8931 (port 0: any free one)", addr)
	}
	return nil
}

// listen takes the address to serve on. An address without a port, or
// one in use, is a mistake of the command line (exit 2) said in its words.
func listen(addr string) (net.Listener, error) {
	if err := checkAddr(addr); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, listenError("--addr", addr, err)
	}
	return ln, nil
}

// listenError is the exit of serve when flag's address cannot be
// listened on: a mistake of the command line (exit 2), naming the flag
// and the address, with another address to try when it is in use.
func listenError(flag, addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return &exitError{code: exitUsage, err: fmt.Errorf("%s is already in use (another toolmux serve?): choose another address with %s, such as %s %s", addr, flag, flag, nextPort(addr))}
	}
	return &exitError{code: exitUsage, err: fmt.Errorf("cannot listen on %s: %v (choose another address with %s)", addr, err, flag)}
}

// nextPort is addr with the port after its own, an address to suggest
// when addr is taken.
func nextPort(addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	n, err := strconv.Atoi(port)
	if err != nil || n <= 0 || n >= 65535 {
		return net.JoinHostPort(host, "0")
	}
	return net.JoinHostPort(host, strconv.Itoa(n+1))
}

func (a *app) serveHTTP(ctx context.Context, ln net.Listener, g *gateway.Gateway, h http.Handler, cat *tool.Catalog,
	s *schedule.Scheduler, grace time.Duration) error {
	passthrough := g.PassthroughNames()
	// Requests live in a context of their own, ended only once the calls
	// have: streams (/api/events, MCP's GET streams) never end by
	// themselves, and http.Server.Shutdown would wait for them in vain.
	reqCtx, endRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer endRequests()
	posts := &inflight{}
	srv := &http.Server{Handler: posts.wrap(h), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return reqCtx }}
	// One write for the whole announcement: whoever waits for "serving"
	// (a supervisor, a test) then has the routes too.
	var announce strings.Builder
	fmt.Fprintf(&announce, "toolmux: serving %s from %s at http://%s/mcp (web UI at http://%s/)\n",
		plural(cat.Len(), "tool"), serverCount(cat.Servers()), ln.Addr(), ln.Addr())
	if len(passthrough) > 0 {
		fmt.Fprintf(&announce, "toolmux: passthrough to %s at http://%s/servers/NAME/mcp\n", strings.Join(passthrough, ", "), ln.Addr())
	}
	if virtual := g.VirtualNames(); len(virtual) > 0 {
		fmt.Fprintf(&announce, "toolmux: virtual servers %s at http://%s/virtual/NAME/mcp\n", strings.Join(virtual, ", "), ln.Addr())
	}
	io.WriteString(a.stderr, announce.String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return &exitError{code: exitFailed, err: err}
	case <-ctx.Done():
	}
	g.BeginShutdown()
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
