package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/agent"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tasklog/jsjournal"
	"github.com/toolmux/toolmux/tool"
	"github.com/toolmux/toolmux/upstreamauth"
	"github.com/toolmux/toolmux/vault"
	"github.com/toolmux/toolmux/vault/jsvault"
)

// fleetFlags are the flags every fleet command shares.
type fleetFlags struct {
	url    string
	prefix string
	lease  time.Duration
	// creds is --nats-creds: the member's own credentials (its nkey's
	// seed file, or a NATS credentials file).
	creds string
	// maxDeliveries is the worker's --max-deliveries (0: the fleet's
	// default); only workers give runs up.
	maxDeliveries int
}

func (f *fleetFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.url, "nats", "", "the fleet's NATS server, e.g. nats://HOST:4222 (default $TOOLMUX_NATS)")
	cmd.Flags().StringVar(&f.prefix, "fleet-prefix", "toolmux", "the fleet's name on the NATS server (its subjects, streams and buckets)")
	cmd.Flags().DurationVar(&f.lease, "lease", 10*time.Second, "how long a worker holds a run without renewing it (every member of a fleet must use the same)")
	cmd.Flags().StringVar(&f.creds, "nats-creds", "", "this member's own credentials for the fleet's NATS server: the nkey seed file toolmux fleet add printed "+
		"(or toolmux fleet nkey wrote), or a NATS credentials file (default $TOOLMUX_NATS_CREDS; docs/fleet.md \"Members\")")
}

func (f *fleetFlags) options() fleet.Options {
	return fleet.Options{Prefix: f.prefix, Lease: f.lease, MaxDeliveries: f.maxDeliveries}
}

// connectFleet opens the fleet named by the flags, as co says (a worker
// waits for it; co.Role is what the member is, with --nats-creds). A URL
// on loopback without credentials gets the token of the embedded NATS
// server of this user's serve --nats-listen, when its file names that
// port.
func (a *app) connectFleet(ctx context.Context, f fleetFlags, name string, co fleet.ConnectOptions) (*fleet.Fleet, error) {
	if f.url == "" {
		f.url = os.Getenv("TOOLMUX_NATS")
	}
	if f.url == "" {
		return nil, usageError("name the fleet's NATS server: --nats nats://HOST:4222 (toolmux serve --nats-listen ADDR starts one)")
	}
	if f.lease < time.Second {
		return nil, usageError("--lease must be at least 1s, not %s", f.lease)
	}
	// The fleet's journal is bounded as a local task log is, by
	// task_log.retention (30 days and 1 GiB by default): its stream's
	// limits, set by the members that open it (workers, serve, logs).
	cfg, err := a.loadConfig()
	if err != nil {
		return nil, err
	}
	o := f.options()
	o.Journal.MaxAge, o.Journal.MaxBytes = cfg.TaskLog.Retention.MaxAge, cfg.TaskLog.Retention.MaxBytes
	if f.creds == "" {
		f.creds = os.Getenv("TOOLMUX_NATS_CREDS")
	}
	if f.creds != "" && co.Credentials == nil {
		if co.Credentials, err = fleet.LoadCredentials(f.creds); err != nil {
			return nil, usageError("--nats-creds: %v", err)
		}
	}
	if co.Credentials == nil {
		co.Role = ""
	}
	if co.Token == nil && co.Credentials == nil {
		if dir := a.resolveDataDir(cfg); dir != "" {
			co.Token = localNATSToken(f.url, natsTokenPath(dir))
		}
	}
	fl, err := fleet.ConnectWith(ctx, f.url, name, o, co)
	if err != nil {
		var ce *fleet.ConfigError
		switch {
		case errors.As(err, &ce):
			return nil, usageError("%v", err)
		case errors.Is(err, nats.ErrAuthorization) && co.Credentials != nil:
			return nil, &exitError{code: exitFailed, err: fmt.Errorf("%w (the server does not know the key of %s, %s: "+
				"register it on the fleet's gateway with toolmux fleet add NAME --role %s --nkey %s)",
				err, co.Credentials.From, co.Credentials.PublicKey, orRole(co.Role), co.Credentials.PublicKey)}
		case errors.Is(err, nats.ErrAuthorization):
			return nil, &exitError{code: exitFailed, err: fmt.Errorf("%w (the server requires credentials: this member's own, "+
				"--nats-creds FILE (toolmux fleet add on the gateway makes them), or a token, nats://TOKEN@HOST:PORT; "+
				"a serve --nats-listen on loopback keeps its own in DATA_DIR/nats/token.json, which its user's commands on that machine send)", err)}
		case errors.As(err, new(*fleet.PermissionError)):
			return nil, &exitError{code: exitFailed, err: fmt.Errorf("%w (--nats-creds are not a %s's)", err, orRole(co.Role))}
		}
		return nil, &exitError{code: exitFailed, err: err}
	}
	return fl, nil
}

func (a *app) workerCommand() *cobra.Command {
	var (
		ff          fleetFlags
		concurrency int
		name        string
		grace       time.Duration
		share       []string

		connectTimeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "worker --nats URL",
		Short: "Run agent runs from a fleet's queue",
		Long: `Join a fleet: take agent runs from its JetStream work queue and run them
with this machine's runtime (the configuration's servers, model, agent,
pipeline and policy), --concurrency at a time. A run is held by a lease
renewed while it lives; a worker that dies loses its runs to another worker
once the lease lapses, which resumes each from its journal. Calls of
non-idempotent tools are never run twice (the call ledger).

A worker started while its NATS server cannot be reached (or its JetStream
does not answer yet) waits for it, with back-off up to 10s, saying each
failed attempt on stderr, until it joins, --connect-timeout passes (exit 1)
or it is stopped (exit 0). A URL on loopback without credentials gets the
token of this user's serve --nats-listen there (docs/fleet.md). In a fleet
of members, --nats-creds FILE are the worker's own (toolmux fleet add on
the gateway): it runs each run for its submitter, with its groups' policy
and tools, and takes its name and the fleet's lease from the gateway.

A server with auth: (user_secrets, oauth) is called with the submitter's own
secrets or OAuth token, from the fleet's vault (a JetStream bucket the
gateway keeps them in), opened with this machine's vault key: vault.key_file,
vault.key_env or TOOLMUX_VAULT_KEY, the gateway's. Without it the vault is
locked and such calls fail; a worker never starts an OAuth authorization
(docs/vault.md "In a fleet").

SIGTERM or Ctrl-C drains: no new runs are taken, the runs in progress have
--grace to finish, and the rest are handed back to the fleet.

Calls the policy asks about are put to the fleet's gateway (toolmux serve
--nats, its page and API) and refused at once when none is up or nobody has
its page open; --yes approves them on the worker.

  toolmux worker --nats nats://gateway:4222 --concurrency 4`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runWorker(cmd.Context(), ff, name, concurrency, grace, connectTimeout, share)
		},
	}
	ff.add(cmd)
	cmd.Flags().IntVar(&concurrency, "concurrency", 1, "runs at once on this worker")
	cmd.Flags().StringVar(&name, "name", "", "the worker's name (default HOST-PID)")
	cmd.Flags().DurationVar(&grace, "grace", 30*time.Second, "on SIGTERM, how long runs in progress may finish before they are handed back")
	cmd.Flags().DurationVar(&connectTimeout, "connect-timeout", 0, "how long a starting worker waits for the fleet's NATS server (and its JetStream) before it gives up, exit 1 (0: until it is there or the worker is stopped)")
	cmd.Flags().StringSliceVar(&share, "share", nil, "offer a configured server to the whole fleet, SERVER or SERVER=MAX (MAX calls at once fleet-wide, default 1; repeatable)")
	cmd.Flags().IntVar(&ff.maxDeliveries, "max-deliveries", 3, "how many times a run is handed to a worker before it is given up as failed (its workers died or handed it back every time)")
	return cmd
}

func (a *app) runWorker(ctx context.Context, ff fleetFlags, name string, concurrency int, grace, connectTimeout time.Duration, share []string) error {
	if concurrency < 1 {
		return usageError("--concurrency must be at least 1, not %d", concurrency)
	}
	if ff.maxDeliveries < 1 {
		return usageError("--max-deliveries must be at least 1, not %d", ff.maxDeliveries)
	}
	if connectTimeout < 0 {
		return usageError("--connect-timeout must be 0 (wait until the server is there) or more, not %s", connectTimeout)
	}
	cfg, err := a.loadConfig()
	if err != nil {
		return err
	}
	shares, err := parseShares(share, cfg)
	if err != nil {
		return err
	}
	if cfg.Model, err = resolveModel(cfg.Model, runFlags{}, os.Getenv); err != nil {
		return err
	}
	w0 := name
	if w0 == "" {
		host, _ := os.Hostname()
		w0 = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	// A worker runs unattended, and may start before its NATS server
	// (a machine booting, the server restarting): it waits for the
	// server, and for its JetStream, until it is there, --connect-timeout
	// passes or the worker is stopped.
	wait := &fleet.Wait{}
	wait.OnRetry = func(r fleet.Retry) {
		next := fmt.Sprintf("trying again within %s", wait.Longest())
		if r.Next > 0 {
			next = "next try in " + r.Next.Round(100*time.Millisecond).String()
		}
		fmt.Fprintf(a.stderr, "toolmux: worker %s is waiting for %s at %s: %v (attempt %d; %s; Ctrl-C stops it)\n",
			w0, r.What, ff.urlOrEnv(), r.Err, r.Attempt, next)
	}
	// Each wait (for the connection and the journal; for the work queue,
	// once the runtime is up) has --connect-timeout.
	setupCtx, endSetup := ctx, context.CancelFunc(func() {})
	startWait := func() {
		endSetup()
		if connectTimeout > 0 {
			setupCtx, endSetup = context.WithTimeout(ctx, connectTimeout)
		}
	}
	startWait()
	defer func() { endSetup() }()
	// setupFailed is the exit of a wait that ended: stopped (exit 0, as
	// a worker stopped is), or past --connect-timeout.
	setupFailed := func(err error) error {
		switch {
		case ctx.Err() != nil:
			fmt.Fprintf(a.stderr, "toolmux: worker %s stopped before it joined the fleet at %s\n", w0, ff.urlOrEnv())
			return nil
		case setupCtx.Err() != nil:
			return &exitError{code: exitFailed, err: fmt.Errorf("%w (--connect-timeout %s)", err, connectTimeout)}
		}
		return &exitError{code: exitFailed, err: err}
	}
	fl, err := a.connectFleet(setupCtx, ff, "toolmux worker", fleet.ConnectOptions{Wait: wait, Role: fleet.RoleWorker})
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) && ee.code == exitUsage {
			return err
		}
		return setupFailed(err)
	}
	defer fl.Close()
	if fl.Options().Member != nil {
		// A member's name is the fleet's (toolmux fleet add NAME).
		var self *fleet.Member
		if err := wait.Do(setupCtx, "the fleet's members", func(ctx context.Context) (err error) {
			self, err = fl.Self(ctx)
			return err
		}); err != nil {
			return setupFailed(err)
		}
		if name != "" && name != self.Name {
			return usageError("--name %s: these credentials are fleet member %s's, and a member's worker has its member's name", name, self.Name)
		}
		if self.Role != fleet.RoleWorker {
			return &exitError{code: exitFailed, err: fmt.Errorf("--nats-creds are fleet member %s's, a %s, not a worker", self.Name, self.Role)}
		}
		w0 = self.Name
	}
	var j *jsjournal.Journal
	if err := wait.Do(setupCtx, "the fleet's journal", func(ctx context.Context) (err error) {
		j, err = fl.OpenJournal(ctx)
		return err
	}); err != nil {
		return setupFailed(err)
	}
	defer j.Close()
	// The worker's index of the fleet's journal is a cache: under
	// --data-dir when given (fleet/PREFIX/worker-NAME, kept for the next
	// start of a worker of that name), else in a directory of its own
	// removed at exit.
	var dir string
	if a.dataDir != "" {
		dir = filepath.Join(a.dataDir, "fleet", ff.prefix, "worker-"+w0)
	} else {
		if dir, err = os.MkdirTemp("", "toolmux-worker-"); err != nil {
			return &exitError{code: exitInternal, err: err}
		}
		defer os.RemoveAll(dir)
	}
	cfg.DataDir = dir
	cfg.TaskLog.Enabled = true
	log := a.logger()
	// Shared servers: this worker's own are served from a manager of
	// their own, and its runs call them through the fleet like everyone
	// else's, so the fleet-wide cap holds for all.
	var sources []manager.Source
	if len(shares) > 0 {
		held := *cfg
		held.Builtin.Enabled = false
		held.Servers, held.OpenAPI = nil, nil // APIs are not shared (yet)
		var rest []config.Server
		for _, sc := range cfg.Servers {
			if _, ok := shares[sc.Name]; ok {
				held.Servers = append(held.Servers, sc)
			} else {
				rest = append(rest, sc)
			}
		}
		cfg.Servers = rest
		hm, err := toolmux.NewManager(&held, log)
		if err != nil {
			return &exitError{code: exitUsage, err: err}
		}
		defer hm.Close()
		for server, most := range shares {
			stop, err := fl.Share(ctx, fleet.ShareOptions{Server: server, Max: most, Holder: w0, Caller: hm, Logger: log})
			if err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			defer stop()
			fmt.Fprintf(a.stderr, "toolmux: worker %s shares %s with the fleet (%d at once)\n", w0, server, most)
		}
	}
	offered, err := fl.SharedServers(ctx)
	if err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	for _, server := range offered {
		if cfgHas(cfg, server) {
			continue // its own copy of that server
		}
		r, err := fl.RemoteSource(ctx, server)
		if err != nil {
			return &exitError{code: exitFailed, err: err}
		}
		sources = append(sources, r)
	}
	store := fleet.NewEventStore(fl, w0)
	hub, err := stream.NewHub(ctx, stream.WithStore(store), stream.WithLogger(log))
	if err != nil {
		return &exitError{code: exitInternal, err: err}
	}
	ledger := fl.Ledger(fleet.LedgerOptions{Worker: w0, Logger: log})
	// Calls the policy asks about go to the fleet's gateway (its page),
	// or are approved by --yes.
	approver := a.approver(false)
	if approver == nil {
		approver = fl.Approver(w0, 0)
	}
	// A run is its submitter's: it sees the tools its groups may
	// (groups.NAME.tools), as the submitter would through a gateway.
	vis, err := newVisibility(cfg)
	if err != nil {
		return usageError("%v", err)
	}
	// A run's calls of a server taking its users' secrets or tokens go
	// with its submitter's, from the fleet's vault.
	wv, err := a.workerVault(setupCtx, fl, cfg, wait, w0)
	if err != nil {
		hub.Close(context.WithoutCancel(ctx))
		if _, ok := errors.AsType[*exitError](err); ok {
			return err
		}
		return setupFailed(err)
	}
	oc, err := workerOAuth(cfg, wv, log)
	if err != nil {
		hub.Close(context.WithoutCancel(ctx))
		return err
	}
	rt, err := toolmux.Open(ctx, cfg, toolmux.Options{Logger: log, Approver: approver, ConcurrentApprovals: true, Events: hub, Sources: sources, Getenv: os.Getenv,
		TaskLog: []tasklog.Option{tasklog.WithJournal(j)}, Middleware: []pipeline.Middleware{ledger.Middleware}, Visibility: vis.get,
		Vault: wv, UpstreamOAuth: oc})
	if err != nil {
		hub.Close(context.WithoutCancel(ctx))
		return &exitError{code: exitUsage, err: err}
	}
	defer func() {
		closeRuntime(ctx, rt)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
		hub.Close(cctx)
		cancel()
	}()
	if _, err := rt.Agent(); err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	var w *fleet.Worker
	startWait()
	if err := wait.Do(setupCtx, "the fleet's work queue", func(ctx context.Context) (err error) {
		w, err = fl.NewWorker(ctx, fleet.WorkerOptions{Name: w0, Concurrency: concurrency, Runner: rt, Journal: j,
			Events: store, Grace: grace, Logger: log, Servers: serverHealth(rt), OnRun: a.sayRun(w0)})
		return err
	}); err != nil {
		var ce *fleet.ConfigError
		if errors.As(err, &ce) {
			return &exitError{code: exitUsage, err: err}
		}
		return setupFailed(err)
	}
	endSetup()
	fmt.Fprintf(a.stderr, "toolmux: worker %s joined the fleet at %s (%d at once); Ctrl-C drains it\n", w.Name(), ff.urlOrEnv(), concurrency)
	err = w.Run(ctx)
	fmt.Fprintf(a.stderr, "toolmux: worker %s left the fleet\n", w.Name())
	return err
}

// sayRun says on stderr, without --verbose, each run worker takes,
// resumes, finishes, hands back or loses: its id, what happened, and how
// long the worker held it; of the task, only its first words (the task
// is its submitter's, and may hold what a log should not).
func (a *app) sayRun(worker string) func(fleet.RunNotice) {
	return func(n fleet.RunNotice) {
		took := n.Took.Round(time.Millisecond)
		var what string
		switch n.State {
		case fleet.RunTaken:
			what = fmt.Sprintf("took run %s (%q)", n.Run, oneLine(n.Task, 32))
		case fleet.RunResumed:
			what = fmt.Sprintf("resumed run %s, delivery %d (%q)", n.Run, n.Deliveries, oneLine(n.Task, 32))
		case fleet.RunFinished:
			what = fmt.Sprintf("finished run %s: %s", n.Run, n.Status)
			if n.AgentStatus != "" {
				what += " (" + n.AgentStatus + ")"
			}
			what += fmt.Sprintf(" after %s", took)
		case fleet.RunHandedBack:
			what = fmt.Sprintf("handed run %s back after %s, to be resumed", n.Run, took)
		case fleet.RunLost:
			what = fmt.Sprintf("lost run %s to another worker after %s", n.Run, took)
		case fleet.RunGivenUp:
			what = fmt.Sprintf("gave up run %s after %d deliveries", n.Run, n.Deliveries-1)
		default:
			what = fmt.Sprintf("run %s: %s", n.Run, n.State)
		}
		fmt.Fprintf(a.stderr, "toolmux: worker %s %s\n", worker, what)
	}
}

// workerVault is the fleet's vault, for the runs' calls of the servers
// that take their users' secrets or tokens (nil when no server does): the
// bucket the gateway keeps them in, opened with this machine's key
// (vault.key_file, vault.key_env, TOOLMUX_VAULT_KEY); locked without one,
// said on stderr, and such calls then fail saying what to configure. A
// key configured that cannot be read is exit 1. The bucket is waited for
// as the journal is: in a fleet of members, the gateway makes it.
func (a *app) workerVault(ctx context.Context, fl *fleet.Fleet, cfg *config.Config, wait *fleet.Wait, worker string) (*vault.Vault, error) {
	server := authServer(cfg)
	if server == "" {
		return nil, nil
	}
	ring, err := vault.KeysFromConfig(cfg.Vault).Load(os.LookupEnv)
	if err != nil {
		return nil, &exitError{code: exitFailed, err: fmt.Errorf("the fleet's vault, which server %s's users' secrets or tokens are kept in: %w", server, err)}
	}
	opts := vault.OptionsFromConfig(cfg.Vault)
	var s *jsvault.Store
	if err := wait.Do(ctx, "the fleet's vault", func(ctx context.Context) (err error) {
		s, err = openFleetVault(ctx, fl, opts)
		return err
	}); err != nil {
		return nil, err
	}
	if ring == nil {
		fmt.Fprintf(a.stderr, "toolmux: worker %s: the fleet's vault (%s) is locked: no vault key on this machine, so runs' calls of server %s "+
			"(and any other taking its users' secrets or tokens) fail; give the worker the fleet's key: vault.key_file, vault.key_env or %s (docs/vault.md)\n",
			worker, s, server, vault.DefaultKeyEnv)
	}
	return vault.New(s, ring, opts), nil
}

// workerOAuthElsewhere is what a worker's run is told of an oauth server
// its submitter has not authorized: where to.
const workerOAuthElsewhere = "a fleet's worker cannot start an authorization (it completes at the gateway's callback route): " +
	"connect the server on the fleet's gateway, on its web page's Connections tab, then submit the run again"

// workerOAuth is the OAuth client of a worker's runs, for the servers of
// auth kind oauth (nil without a vault or such a server): it sends the
// tokens the gateway got for its users, kept in the fleet's vault, and
// refreshes them there, with the clients the gateway registered; it never
// starts an authorization (upstreamauth.Options.Elsewhere): its callback
// would be the gateway's.
func workerOAuth(cfg *config.Config, v *vault.Vault, log *slog.Logger) (*upstreamauth.Client, error) {
	if v == nil || !slices.ContainsFunc(cfg.Servers, func(sc config.Server) bool { return sc.Auth != nil && sc.Auth.Kind == config.AuthOAuth }) {
		return nil, nil
	}
	// The gateway's public URL, when the configuration names it: the
	// client of its Client ID Metadata Document is then the worker's too.
	public := cmp.Or(cfg.UpstreamOAuth.PublicURL, cfg.Auth.Resource)
	o := upstreamauth.OptionsFromConfig(cfg.UpstreamOAuth, public)
	if public == "" {
		o.RedirectURL, o.ClientMetadataURL = "", ""
	}
	o.Logger, o.Elsewhere = log, workerOAuthElsewhere
	c, err := upstreamauth.New(v, upstreamauth.VaultRegistrations(v), o)
	if err != nil {
		return nil, usageError("upstream_oauth: %v", err)
	}
	return c, nil
}

// parseShares reads --share: SERVER or SERVER=MAX, each a configured
// server.
func parseShares(share []string, cfg *config.Config) (map[string]int, error) {
	out := map[string]int{}
	for _, s := range share {
		server, most, hasMax := strings.Cut(s, "=")
		n := 1
		if hasMax {
			v, err := strconv.Atoi(most)
			if err != nil || v < 1 {
				return nil, usageError("--share %s: the most calls at once must be a number from 1, not %q", s, most)
			}
			n = v
		}
		if !cfgHas(cfg, server) {
			return nil, usageError("--share %s: no server %q is configured", s, server)
		}
		out[server] = n
	}
	return out, nil
}

func cfgHas(cfg *config.Config, server string) bool {
	for _, sc := range cfg.Servers {
		if sc.Name == server {
			return true
		}
	}
	return false
}

// orRole names a role for messages: the gateway's when none.
func orRole(r fleet.Role) fleet.Role {
	if r == "" {
		return fleet.RoleGateway
	}
	return r
}

// urlOrEnv is the fleet's URL, from --nats or $TOOLMUX_NATS, fit to be
// shown: without its credentials.
func (f fleetFlags) urlOrEnv() string {
	if f.url != "" {
		return fleet.RedactURL(f.url)
	}
	return fleet.RedactURL(os.Getenv("TOOLMUX_NATS"))
}

// serverHealth reports the runtime's servers' states for the page.
func serverHealth(rt *toolmux.Runtime) func() map[string]string {
	return func() map[string]string {
		out := map[string]string{}
		for _, h := range rt.Manager.Health() {
			out[h.Name] = string(h.State)
		}
		return out
	}
}

func (a *app) submitCommand() *cobra.Command {
	var (
		ff   fleetFlags
		wait bool
	)
	cmd := &cobra.Command{
		Use:   "submit --nats URL FILE",
		Short: "Submit a JSONL file of runs to a fleet",
		Long: `Submit every line of FILE ("-" for stdin) as a run: one JSON object per line,
{"id": "...", "task": "...", "agent": "..."} (agent optional). A run's id is
its identity: submitting a file again runs nothing twice (lines whose id was
submitted before are reported, not queued).

Without --wait, each run's id and state is written to stdout as one JSON
line. With --wait, a progress bar on stderr follows the runs, and each run's
result ({"id", "status", "answer"}, and "error" for a failed one) is written
to stdout as it ends. Exit status 1 when a run failed.

In a fleet of members, --nats-creds FILE are the submitter's own: its runs
are run for it (its groups' policy and tools), and its ids are its own.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.submit(cmd.Context(), ff, args[0], wait)
		},
	}
	ff.add(cmd)
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the runs to end, showing progress on stderr, and write their results")
	return cmd
}

// readRuns reads a JSONL file of run requests (fleet.ReadRequests); a
// bad line, a repeated id or a file without runs is a usage error naming
// the line.
func readRuns(r io.Reader, name string) ([]fleet.Request, error) {
	reqs, err := fleet.ReadRequests(r, name)
	if err != nil {
		return nil, usageError("%v", err)
	}
	return reqs, nil
}

// resultLine is a run's line on submit's stdout.
type resultLine struct {
	ID         string       `json:"id"`
	Status     fleet.Status `json:"status"`
	Answer     string       `json:"answer,omitempty"`
	Error      string       `json:"error,omitempty"`
	Worker     string       `json:"worker,omitempty"`
	Submitted  bool         `json:"submitted"`
	Deliveries int          `json:"deliveries,omitempty"`
}

func (a *app) submit(ctx context.Context, ff fleetFlags, file string, wait bool) error {
	var in io.Reader = a.stdin
	name := "stdin"
	if file != "-" {
		fh, err := os.Open(file)
		if err != nil {
			return usageError("%v", err)
		}
		defer fh.Close()
		in, name = fh, file
	}
	reqs, err := readRuns(in, name)
	if err != nil {
		return err
	}
	fl, err := a.connectFleet(ctx, ff, "toolmux submit", fleet.ConnectOptions{Role: fleet.RoleSubmitter})
	if err != nil {
		return err
	}
	defer fl.Close()
	enc := json.NewEncoder(a.stdout)
	ids := make([]string, 0, len(reqs))
	fresh := map[string]bool{}
	for _, req := range reqs {
		run, created, err := fl.Submit(ctx, req)
		if err != nil {
			return &exitError{code: exitFailed, err: err}
		}
		ids = append(ids, run.ID)
		fresh[run.ID] = created
		if !wait {
			enc.Encode(resultLine{ID: run.ID, Status: run.Status, Answer: run.Answer, Error: run.Error, Worker: run.Worker, Submitted: created})
		}
	}
	if !wait {
		return nil
	}
	bar := newBar(a.stderr, len(ids))
	states := map[string]*fleet.Run{}
	failed := 0
	var mu sync.Mutex
	err = fl.Watch(ctx, func(r *fleet.Run) bool {
		mu.Lock()
		defer mu.Unlock()
		if _, ours := fresh[r.ID]; !ours {
			return true
		}
		prev := states[r.ID]
		states[r.ID] = r
		if r.Status.Final() && (prev == nil || !prev.Status.Final()) {
			if r.Status == fleet.StatusFailed {
				failed++
			}
			enc.Encode(resultLine{ID: r.ID, Status: r.Status, Answer: r.Answer, Error: r.Error, Worker: r.Worker,
				Submitted: fresh[r.ID], Deliveries: r.Deliveries})
		}
		bar.show(states)
		return countFinal(states) < len(ids)
	}, ids...)
	bar.done()
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(a.stderr, "toolmux: stopped waiting; the runs go on in the fleet (toolmux runs --nats %s)\n", ff.urlOrEnv())
			return &exitError{code: exitInterrupted}
		}
		return &exitError{code: exitFailed, err: err}
	}
	if failed > 0 {
		return &exitError{code: exitFailed, err: fmt.Errorf("%d of %d runs failed", failed, len(ids))}
	}
	return nil
}

func countFinal(states map[string]*fleet.Run) int {
	n := 0
	for _, r := range states {
		if r.Status.Final() {
			n++
		}
	}
	return n
}

// bar is submit's progress bar: redrawn in place on a terminal, a line
// per change elsewhere.
type bar struct {
	w     io.Writer
	tty   bool
	total int
	last  string
}

func newBar(w io.Writer, total int) *bar {
	b := &bar{w: w, total: total}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		b.tty = true
	}
	return b
}

func (b *bar) show(states map[string]*fleet.Run) {
	var done, failed, running int
	for _, r := range states {
		switch r.Status {
		case fleet.StatusDone:
			done++
		case fleet.StatusFailed:
			failed++
		case fleet.StatusRunning:
			running++
		}
	}
	const width = 30
	filled := (done + failed) * width / max(b.total, 1)
	line := fmt.Sprintf("[%s%s] %d/%d done · %d running · %d failed", strings.Repeat("=", filled), strings.Repeat(" ", width-filled),
		done+failed, b.total, running, failed)
	if line == b.last {
		return
	}
	b.last = line
	if b.tty {
		fmt.Fprintf(b.w, "\r%s\x1b[K", line)
	} else {
		fmt.Fprintln(b.w, line)
	}
}

func (b *bar) done() {
	if b.tty && b.last != "" {
		fmt.Fprintln(b.w)
	}
}

func (a *app) runsCommand() *cobra.Command {
	var (
		ff      fleetFlags
		asJSON  bool
		workers bool
	)
	cmd := &cobra.Command{
		Use:   "runs --nats URL",
		Short: "List a fleet's runs with their state and worker",
		Long: `List the runs a fleet keeps, oldest first: id, state (queued, running, done,
failed), the worker that holds or held it, deliveries and the task. With
--workers, the workers alive come first. --json writes one JSON object per
line instead.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.listRuns(cmd.Context(), ff, asJSON, workers)
		},
	}
	ff.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per run")
	cmd.Flags().BoolVar(&workers, "workers", false, "list the workers alive too")
	return cmd
}

func (a *app) listRuns(ctx context.Context, ff fleetFlags, asJSON, workers bool) error {
	fl, err := a.connectFleet(ctx, ff, "toolmux runs", fleet.ConnectOptions{Role: fleet.RoleSubmitter})
	if err != nil {
		return err
	}
	defer fl.Close()
	if workers {
		ws, err := fl.Workers(ctx)
		if err != nil {
			return &exitError{code: exitFailed, err: err}
		}
		for _, w := range ws {
			if asJSON {
				b, _ := json.Marshal(map[string]any{"worker": w})
				fmt.Fprintln(a.stdout, string(b))
				continue
			}
			fmt.Fprintf(a.stdout, "worker %s  %s pid %d  %d/%d running  up %s\n", w.Name, w.Host, w.PID, len(w.Running), w.Concurrency,
				time.Since(w.Started).Round(time.Second))
		}
	}
	runs, err := fl.Runs(ctx)
	if err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].Submitted.Before(runs[j].Submitted) })
	if asJSON {
		enc := json.NewEncoder(a.stdout)
		for _, r := range runs {
			enc.Encode(r)
		}
		return nil
	}
	if len(runs) == 0 {
		fmt.Fprintln(a.stdout, "no runs")
		return nil
	}
	fmt.Fprintf(a.stdout, "%-28s %-8s %-24s %-3s %s\n", "ID", "STATE", "WORKER", "DLV", "TASK")
	for _, r := range runs {
		fmt.Fprintf(a.stdout, "%-28s %-8s %-24s %-3d %s\n", r.ID, r.Status, r.Worker, r.Deliveries, oneLine(strings.Join(strings.Fields(r.Task), " "), 60))
	}
	return nil
}

// runOnFleet is `toolmux run --nats`: the run is submitted, its events
// followed and shown as a local run's, and its answer printed.
func (a *app) runOnFleet(ctx context.Context, task string, f runFlags) error {
	fl, err := a.connectFleet(ctx, f.fleet, "toolmux run", fleet.ConnectOptions{Role: fleet.RoleSubmitter})
	if err != nil {
		return err
	}
	defer fl.Close()
	id := tool.NewID()
	var out eventWriter
	if f.json {
		out = &jsonEvents{w: a.stdout}
	} else {
		out = newProgress(a.stderr, a.verbose, "")
	}
	if _, _, err := fl.Submit(ctx, fleet.Request{ID: id, Task: task}); err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	fmt.Fprintf(a.stderr, "toolmux: run %s submitted to the fleet at %s\n", id, f.fleet.urlOrEnv())
	// The events until the workflow's end, or, for a run that ends
	// without one (given up after its deliveries, its workers gone before
	// it began), until the last one stored when its state became final.
	var (
		mu     sync.Mutex
		seen   int64
		target int64 = -1
		run    *fleet.Run
		werr   error
	)
	evCtx, stopEvents := context.WithCancel(ctx)
	defer stopEvents()
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		if run, werr = fl.Wait(ctx, id); werr != nil {
			return
		}
		// A run's events are stored before its final state is written.
		last, err := fl.LastEventSeq(ctx, id)
		mu.Lock()
		defer mu.Unlock()
		if err != nil || seen >= last {
			stopEvents()
			return
		}
		target = last
	}()
	err = fl.Events(evCtx, id, 0, func(e fleet.Event) bool {
		out.event(stream.Event{ID: e.Seq, Name: e.Name, Task: e.Task, Time: e.Time, Data: e.Data})
		mu.Lock()
		defer mu.Unlock()
		seen = e.Seq
		return e.Name != stream.EventEndOfWorkflow && (target < 0 || e.Seq < target)
	})
	if err != nil && ctx.Err() != nil {
		fmt.Fprintf(a.stderr, "toolmux: stopped following run %s; it goes on in the fleet (toolmux runs --nats %s)\n", id, f.fleet.urlOrEnv())
		return &exitError{code: exitInterrupted}
	}
	<-waited
	if werr != nil {
		if ctx.Err() != nil {
			return &exitError{code: exitInterrupted}
		}
		return &exitError{code: exitFailed, err: werr}
	}
	res := &agent.Result{Task: id, Answer: run.Answer, Status: agent.Status(run.AgentStatus), Turns: run.Turns, Calls: run.Calls}
	// The run's duration is the fleet's, from a worker's first taking it
	// to its end (handed back and resumed runs included), not this
	// client's wait, which began at the submission.
	if !run.Started.IsZero() && run.Ended.After(run.Started) {
		res.Duration = run.Ended.Sub(run.Started)
	}
	var runErr error
	if run.Status == fleet.StatusFailed {
		runErr = errors.New(run.Error)
	}
	out.finish(res, runErr)
	if runErr != nil {
		return &exitError{code: exitFailed, err: fmt.Errorf("run %s failed on worker %s: %s", id, run.Worker, run.Error)}
	}
	if !f.json {
		fmt.Fprintln(a.stdout, run.Answer)
	}
	return nil
}
