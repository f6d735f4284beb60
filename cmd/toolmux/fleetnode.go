package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tasklog/jsjournal"
)

// fleetNode is what serve runs of a fleet: the embedded NATS server of
// --nats-listen, the connection, the journal and the projection of the
// runs' events into the page. The zero value (no fleet) does nothing.
type fleetNode struct {
	server  *fleet.Server
	fleet   *fleet.Fleet
	journal *jsjournal.Journal
	prefix  string
	stderr  func(format string, args ...any)
	// members are the fleet's members of the data directory (nil: none
	// to follow), and stopMembers ends following them.
	members     *fleet.MemberStore
	stopMembers func()
	// isSetUp: the gateway has set the fleet up for members (setUp);
	// only the members' goroutine reads it after the start.
	isSetUp bool
}

// startFleetNode starts what serve's fleet flags ask for: nothing without
// them.
func (a *app) startFleetNode(ctx context.Context, ff fleetFlags, listen, token string) (fn *fleetNode, err error) {
	fn = &fleetNode{prefix: ff.prefix, stderr: func(format string, args ...any) { fmt.Fprintf(a.stderr, format, args...) }}
	if listen == "" && ff.url == "" && os.Getenv("TOOLMUX_NATS") == "" {
		return fn, nil
	}
	if listen != "" && ff.url != "" {
		return nil, usageError("--nats-listen starts the fleet's NATS server here; --nats joins another: give one")
	}
	defer func() {
		if err != nil {
			fn.close()
		}
	}()
	var co fleet.ConnectOptions
	cfg, err := a.loadConfig()
	if err != nil {
		return nil, err
	}
	dir := a.resolveDataDir(cfg)
	// The fleet's members with keys of their own (toolmux fleet add),
	// kept in the data directory.
	var members []fleet.Member
	if dir != "" {
		fn.members = fleet.NewMemberStore(membersPath(dir))
		if members, err = fn.members.List(); err != nil {
			return nil, &exitError{code: exitFailed, err: err}
		}
	}
	if listen != "" {
		if err := checkAddr(listen); err != nil {
			return nil, err
		}
		host, _, _ := net.SplitHostPort(listen)
		loopback := gateway.IsLoopback(listen)
		if dir == "" {
			return nil, usageError("--nats-listen keeps the fleet's streams in the data directory: set --data-dir")
		}
		// On loopback without --token, the server is still not every
		// local user's: it requires a token of its own, kept (for the
		// workers that outlive a restart of the gateway) in a file of the
		// data directory that the fleet commands of this user read.
		// Beyond loopback without --token, only the members, with keys
		// of their own, may connect.
		natsToken, tokenFile := token, ""
		if natsToken == "" && loopback {
			tokenFile = natsTokenPath(dir)
			if natsToken, err = readOrNewNATSToken(tokenFile); err != nil {
				return nil, &exitError{code: exitFailed, err: fmt.Errorf("the NATS server's token: %w", err)}
			}
		}
		fn.server, err = fleet.StartServer(fleet.ServerOptions{Listen: listen, StoreDir: filepath.Join(dir, "nats"), Token: natsToken,
			Members: members, MembersOnly: true, Fleet: ff.options()})
		var le *fleet.ListenError
		switch {
		case errors.As(err, &le):
			return nil, listenError("--nats-listen", listen, le.Err)
		case err != nil:
			return nil, &exitError{code: exitFailed, err: err}
		}
		port := fn.server.Addr().(*net.TCPAddr).Port
		ff.url = "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		// The gateway connects with a key of its own, made for this
		// start and kept in memory.
		co.Credentials, co.Role = fn.server.Admin(), fleet.RoleGateway
		join := net.JoinHostPort(host, strconv.Itoa(port))
		if host == "" || host == "0.0.0.0" || host == "::" {
			h, _ := os.Hostname()
			join = net.JoinHostPort(h, strconv.Itoa(port))
		}
		switch {
		case tokenFile != "":
			// Written once the server listens, naming the port it took:
			// never a token for whoever holds a port it could not take.
			if err := writeNATSToken(tokenFile, join, natsToken); err != nil {
				return nil, &exitError{code: exitFailed, err: fmt.Errorf("the NATS server's token: %w", err)}
			}
			fn.stderr("toolmux: NATS server for the fleet at %s (data in %s); it requires the token in %s, readable by you only, "+
				"which toolmux worker, submit, run and runs of yours on this machine send; workers join with: toolmux worker --nats nats://%s\n",
				fn.server.Addr(), filepath.Join(dir, "nats"), tokenFile, join)
		case natsToken == "":
			fn.stderr("toolmux: NATS server for the fleet at %s (data in %s); only its members connect, with keys of their own "+
				"(toolmux fleet add NAME --role worker|submitter); workers join with: toolmux worker --nats nats://%s --nats-creds FILE\n",
				fn.server.Addr(), filepath.Join(dir, "nats"), join)
		default:
			fn.stderr("toolmux: NATS server for the fleet at %s (data in %s); workers join with: toolmux worker --nats nats://TOKEN@%s\n",
				fn.server.Addr(), filepath.Join(dir, "nats"), join)
		}
		if len(members) > 0 {
			fn.stderr("toolmux: %s of the fleet in %s connect with keys of their own\n", plural(len(members), "member"), fn.members.Path())
		}
	}
	if fn.fleet, err = a.connectFleet(ctx, ff, "toolmux serve", co); err != nil {
		return nil, err
	}
	if fn.journal, err = fn.fleet.OpenJournal(ctx); err != nil {
		return nil, &exitError{code: exitFailed, err: err}
	}
	if fn.fleet.Options().Member == nil && fn.members != nil {
		// The gateway sets up what the members bind to, and tells the
		// workers who the members are.
		if err := fn.setUp(ctx, members); err != nil {
			return nil, &exitError{code: exitFailed, err: err}
		}
		if err := fn.fleet.PublishMembers(ctx, members); err != nil {
			return nil, &exitError{code: exitFailed, err: err}
		}
		fn.followMembers(members)
	}
	return fn, nil
}

// setUp sets the fleet up for its members (fleet.Setup), once it has
// some: a fleet without members is set up by its workers, as before, each
// with its --lease; in a fleet of members, the gateway's --lease is the
// fleet's, which its workers take.
func (fn *fleetNode) setUp(ctx context.Context, members []fleet.Member) error {
	if len(members) == 0 || fn.isSetUp {
		return nil
	}
	if err := fn.fleet.Setup(ctx); err != nil {
		return err
	}
	fn.isSetUp = true
	return nil
}

// membersPath is where the data directory keeps the fleet's members.
func membersPath(dataDir string) string { return filepath.Join(dataDir, "fleet", "members.json") }

// memberRecheck is how often serve looks whether its members' file
// changed: a member added or removed takes effect within it.
const memberRecheck = time.Second

// followMembers applies the members' file while serve runs: the
// members bucket first (a worker then knows a new submitter before its
// first run comes), then the embedded server's users (a member removed is
// disconnected, and refused from then on). A file that cannot be used is
// said once, and changes nothing until it is put right.
func (fn *fleetNode) followMembers(applied []fleet.Member) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		fn.members.Follow(ctx, memberRecheck, func(ms []fleet.Member, err error) (again bool) {
			if err != nil {
				fn.stderr("toolmux: the fleet's members are unchanged until their file is put right: %v\n", err)
				return false
			}
			if sameMembers(ms, applied) {
				return false
			}
			if err := fn.setUp(ctx, ms); err != nil {
				fn.stderr("toolmux: setting the fleet up for its members: %v (trying again)\n", err)
				return ctx.Err() == nil
			}
			if err := fn.fleet.PublishMembers(ctx, ms); err != nil {
				fn.stderr("toolmux: publishing the fleet's members: %v (trying again)\n", err)
				return ctx.Err() == nil
			}
			if fn.server != nil {
				if err := fn.server.SetMembers(ms); err != nil {
					fn.stderr("toolmux: %v (trying again)\n", err)
					return ctx.Err() == nil
				}
			}
			applied = ms
			names := make([]string, len(ms))
			for i, m := range ms {
				names[i] = m.Name + " (" + string(m.Role) + ")"
			}
			fn.stderr("toolmux: fleet members changed: %s%s\n", plural(len(ms), "member"), listOf(names))
			return false
		})
	})
	fn.stopMembers = func() { cancel(); wg.Wait() }
}

// sameMembers reports whether a and b are the same members, with the
// same keys, roles and groups.
func sameMembers(a, b []fleet.Member) bool {
	return slices.EqualFunc(a, b, func(x, y fleet.Member) bool {
		return x.Name == y.Name && x.Role == y.Role && x.NKey == y.NKey && slices.Equal(x.Groups, y.Groups)
	})
}

func listOf(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return ": " + strings.Join(names, ", ")
}

// taskLog are the task log's options in a fleet: its journal.
func (fn *fleetNode) taskLog() []tasklog.Option {
	if fn.journal == nil {
		return nil
	}
	return []tasklog.Option{tasklog.WithJournal(fn.journal)}
}

// dataSub is where, under the data directory, the fleet's gateway keeps
// its index: apart from the local task log, one per fleet.
func (fn *fleetNode) dataSub() string {
	if fn.fleet == nil {
		return ""
	}
	return filepath.Join("fleet", fn.prefix)
}

// summary is /api/fleet's source; nil without a fleet. A caller sees
// its own runs (those its fleet member of the same name submitted),
// counted and in the workers' hands; the admin group sees all, as the
// other listings do (docs/identity.md "Ownership").
func (fn *fleetNode) summary(admin string) func(ctx context.Context) (any, error) {
	if fn.fleet == nil {
		return nil
	}
	return func(ctx context.Context) (any, error) {
		scope := identity.ScopeOf(identity.From(ctx), []string{admin})
		if scope.All() {
			return fn.fleet.Summarize(ctx, nil)
		}
		members, err := fn.fleet.Members(ctx)
		if err != nil {
			return nil, err
		}
		return fn.fleet.Summarize(ctx, func(r *fleet.Run) bool {
			m, ok := members[r.SubmitterKey]
			return ok && scope.Sees(m.Caller().Ref())
		})
	}
}

// project republishes the workers' runs' events into the page's hub,
// from where the last serve of this data directory stopped (a position
// kept in a file beside the index).
func (fn *fleetNode) project(ctx context.Context, rt *toolmux.Runtime) (stop func()) {
	if fn.fleet == nil || rt.Events == nil || rt.Config.DataDir == "" {
		return func() {}
	}
	posFile := filepath.Join(rt.Config.DataDir, "fleet-events.pos")
	var after uint64
	if b, err := os.ReadFile(posFile); err == nil {
		after, _ = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	}
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	last, saved := after, after
	save := func() {
		mu.Lock()
		pos := last
		mu.Unlock()
		if pos != saved {
			if err := os.WriteFile(posFile, []byte(strconv.FormatUint(pos, 10)), 0o600); err == nil {
				saved = pos
			}
		}
	}
	wg.Go(func() {
		for pctx.Err() == nil {
			err := fn.fleet.Project(pctx, last, func(pos uint64, e fleet.Event) {
				rt.Events.Publish(e.Name, e.Task, e.Data)
				mu.Lock()
				last = pos
				mu.Unlock()
			})
			if err != nil && pctx.Err() == nil {
				fn.stderr("toolmux: following the fleet's events: %v (trying again)\n", err)
				sleepCtx(pctx, time.Second)
			}
		}
	})
	wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
				save()
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
		save()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// serveApprovals answers the workers' approval questions with approver
// (nil: refused, nobody to ask).
func (fn *fleetNode) serveApprovals(approver policy.Approver, log *slog.Logger) (stop func(), err error) {
	if fn.fleet == nil {
		return func() {}, nil
	}
	if approver == nil {
		approver = policy.ApproverFunc(func(context.Context, policy.Request) (policy.Answer, error) {
			return 0, policy.ErrNoApprover
		})
	}
	return fn.fleet.ServeApprovals(approver, log)
}

// close ends the node: the journal, the connection, then the server.
func (fn *fleetNode) close() {
	if fn == nil {
		return
	}
	if fn.stopMembers != nil {
		fn.stopMembers()
	}
	if fn.journal != nil {
		fn.journal.Close()
	}
	if fn.fleet != nil {
		fn.fleet.Close()
	}
	if fn.server != nil {
		fn.server.Shutdown()
	}
}
