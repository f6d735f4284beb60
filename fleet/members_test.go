package fleet_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

// member is a member of a test's fleet: its registration, its seed file
// and its credentials.
type member struct {
	fleet.Member
	file  string
	seed  string
	creds *fleet.Credentials
}

// newMember makes a member's nkey, its seed file in dir (mode 0600).
func newMember(t *testing.T, dir, name string, role fleet.Role, groups ...string) *member {
	t.Helper()
	b, pub, err := fleet.NewSeed(name)
	if err != nil {
		t.Fatal(err)
	}
	m := &member{Member: fleet.Member{Name: name, Role: role, Groups: groups, NKey: pub}, file: filepath.Join(dir, name+".nk")}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "SU") {
			m.seed = l
		}
	}
	if m.seed == "" {
		t.Fatalf("no seed in %q", b)
	}
	if err := os.WriteFile(m.file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if m.creds, err = fleet.LoadCredentials(m.file); err != nil {
		t.Fatal(err)
	}
	if m.creds.PublicKey != pub {
		t.Fatalf("the credentials' key is %s, not %s", m.creds.PublicKey, pub)
	}
	return m
}

// violations collects what the server refused a raw connection.
type violations struct {
	mu   sync.Mutex
	errs []string
}

func (v *violations) add(_ *nats.Conn, _ *nats.Subscription, err error) {
	v.mu.Lock()
	v.errs = append(v.errs, err.Error())
	v.mu.Unlock()
}

func (v *violations) has(sub string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.ContainsFunc(v.errs, func(e string) bool { return strings.Contains(e, sub) })
}

// rawConn connects to s as m, without the fleet's library: what anyone
// holding m's seed could do.
func rawConn(t *testing.T, s *fleet.Server, m *member, v *violations) *nats.Conn {
	t.Helper()
	opt, err := nats.NkeyOptionFromSeed(m.file)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.ClientURL(), opt, nats.ErrorHandler(v.add),
		nats.CustomInboxPrefix(fleet.InboxPrefix("toolmux", m.NKey)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// memberFleet starts a server of members (and of token, "" for none) and
// its gateway, connected with the server's own key, which sets the fleet
// up and publishes the members.
func memberFleet(t *testing.T, o fleet.Options, token string, members ...*member) (*fleet.Server, *fleet.Fleet) {
	t.Helper()
	var ms []fleet.Member
	for _, m := range members {
		ms = append(ms, m.Member)
	}
	s, err := fleet.StartServer(fleet.ServerOptions{Listen: "127.0.0.1:0", StoreDir: t.TempDir(), Token: token, MembersOnly: true,
		Members: ms, Fleet: o})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	gw, err := fleet.ConnectWith(bg, s.ClientURL(), "gateway", o, fleet.ConnectOptions{Credentials: s.Admin()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	if err := gw.Setup(bg); err != nil {
		t.Fatal(err)
	}
	if err := gw.PublishMembers(bg, ms); err != nil {
		t.Fatal(err)
	}
	return s, gw
}

// long is a context for one request that must be answered.
func long(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// short is a context for one request that may go unanswered.
func short(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(bg, 500*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

func connectAs(t *testing.T, s *fleet.Server, m *member) (*fleet.Fleet, error) {
	t.Helper()
	f, err := fleet.ConnectWith(bg, s.ClientURL(), m.Name, fleet.Options{Lease: 2 * time.Second},
		fleet.ConnectOptions{Credentials: m.creds, Role: m.Role})
	if err == nil {
		t.Cleanup(func() { f.Close() })
	}
	return f, err
}

// TestMembers is a fleet of members on one server: submitters in two
// groups, a worker, the gateway. Each submitter's runs are held to its
// groups' policy and name it; no member can do what its role may not
// (submit as another, read another's runs, submit as a worker); a key of
// no member cannot connect; members added and removed while the server
// runs are let in and shut out; and no credential is in any stream.
func TestMembers(t *testing.T) {
	dir := t.TempDir()
	alice := newMember(t, dir, "alice", fleet.RoleSubmitter, "dev")
	bob := newMember(t, dir, "bob", fleet.RoleSubmitter, "contractors")
	w1 := newMember(t, dir, "w1", fleet.RoleWorker)
	o := fleet.Options{Lease: 2 * time.Second}
	s, gw := memberFleet(t, o, "the-admins-token", alice, bob, w1)
	gj, err := gw.OpenJournal(bg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gj.Close() })

	// The worker: contractors may not append.
	fx := newEffects()
	model := appendModel(t, 0)
	cfg := func(c *config.Config) {
		c.Policy.Rules = append(c.Policy.Rules, config.PolicyRule{Name: "contractors never append", Tools: []string{"fx/append"},
			Groups: []string{"contractors"}, Action: "deny"})
	}
	n := newNode(t, s, o, "w1", model, fx, fleet.WorkerOptions{}, nodeOptions{creds: w1.creds, cfg: cfg}).start()

	fa, err := connectAs(t, s, alice)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := connectAs(t, s, bob)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("each submitter's policy", func(t *testing.T) {
		// The same id for both: each member's ids are its own.
		for _, sub := range []struct {
			f    *fleet.Fleet
			line string
		}{{fa, "from-alice"}, {fb, "from-bob"}} {
			if _, _, err := sub.f.Submit(bg, fleet.Request{ID: "r1", Task: "append " + sub.line}); err != nil {
				t.Fatal(err)
			}
		}
		ra, rb := wait(t, fa, "r1"), wait(t, fb, "r1")
		if ra.Status != fleet.StatusDone || ra.Submitter != "alice" || ra.TaskID != "alice:r1" || ra.SubmitterKey != alice.NKey ||
			!strings.Contains(ra.Answer, "appended from-alice") {
			t.Fatalf("alice's run: %+v", ra)
		}
		if rb.Status != fleet.StatusDone || rb.Submitter != "bob" || rb.TaskID != "bob:r1" ||
			!strings.Contains(rb.Answer, string(tool.KindPolicyViolation)) {
			t.Fatalf("bob's run: %+v", rb)
		}
		if fx.count("from-alice") != 1 || fx.count("from-bob") != 0 {
			t.Fatalf("effects: %v", fx.lines)
		}
		// The records name the submitter; the task is its.
		for _, who := range []*member{alice, bob} {
			task := who.Name + ":r1"
			recs, err := n.rt.Log.Calls(bg, task)
			if err != nil || len(recs) != 1 {
				t.Fatalf("%s's calls: %v %v", who.Name, recs, err)
			}
			want := &tool.CallerRef{Name: who.Name, Key: identity.KeySubject(who.Name)}
			if *recs[0].Caller != *want {
				t.Fatalf("%s's call record names %+v", who.Name, recs[0].Caller)
			}
			tk, err := n.rt.Log.Task(bg, task)
			if err != nil || tk.Caller == nil || *tk.Caller != *want {
				t.Fatalf("%s's task: %+v %v", who.Name, tk, err)
			}
		}
		// Each reads its own run's events, not the other's.
		var names []string
		ctx, cancel := context.WithTimeout(bg, 30*time.Second)
		defer cancel()
		if err := fa.Events(ctx, "r1", 0, func(e fleet.Event) bool {
			names = append(names, e.Name)
			return e.Task == "alice:r1" && e.Name != "end_of_workflow"
		}); err != nil || len(names) == 0 {
			t.Fatalf("alice's events: %v %v", names, err)
		}
	})

	t.Run("a submitter cannot submit as another, nor read another's runs", func(t *testing.T) {
		v := &violations{}
		nc := rawConn(t, s, alice, v)
		js, _ := jetstream.New(nc)
		for _, subject := range []string{"toolmux.queue.u." + bob.NKey, "toolmux.queue.run"} {
			if _, err := js.Publish(short(t), subject, []byte(`{"id": "forged", "task": "append forged"}`)); err == nil {
				t.Fatalf("alice published on %s", subject)
			}
			if !v.has(`Publish to "` + subject + `"`) {
				t.Fatalf("no violation for %s: %v", subject, v.errs)
			}
		}
		runs, err := js.KeyValue(long(t), "TOOLMUX_RUNS")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := runs.Get(short(t), "u."+bob.NKey+".r1"); err == nil {
			t.Fatal("alice read bob's run")
		}
		if _, err := runs.Put(short(t), "u."+bob.NKey+".r1", []byte(`{}`)); err == nil {
			t.Fatal("alice wrote bob's run")
		}
		if _, err := runs.Keys(short(t)); err == nil {
			t.Fatal("alice listed every run")
		}
		ev, err := js.Stream(long(t), "TOOLMUX_EVENTS")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ev.GetLastMsgForSubject(short(t), "toolmux.events.u."+bob.NKey+".r1"); err == nil {
			t.Fatal("alice read bob's events")
		}
		if _, err := ev.OrderedConsumer(short(t), jetstream.OrderedConsumerConfig{FilterSubjects: []string{"toolmux.events.>"}}); err == nil {
			t.Fatal("alice followed every run's events")
		}
		if _, err := js.Stream(long(t), "TOOLMUX_JOURNAL"); err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Subscribe("_INBOX_toolmux."+bob.NKey+".>", func(*nats.Msg) {}); err != nil {
			t.Fatal(err)
		}
		if !testservers.Eventually(5*time.Second, func() bool { return v.has(`Subscription to "_INBOX_toolmux.` + bob.NKey) }) {
			t.Fatalf("alice subscribed to bob's inbox: %v", v.errs)
		}
		// Nothing forged reached the queue or the worker.
		if fx.count("forged") != 0 {
			t.Fatal("a forged run ran")
		}
		// Through the library, an id is the member's own.
		if _, err := fa.Get(bg, "r1"); err != nil {
			t.Fatal(err)
		}
		r, err := fb.Get(bg, "r1")
		if err != nil || r.Submitter != "bob" {
			t.Fatalf("bob's r1: %+v %v", r, err)
		}
	})

	t.Run("a worker's credentials cannot submit", func(t *testing.T) {
		fw, err := connectAs(t, s, &member{Member: fleet.Member{Name: "w1", Role: fleet.RoleSubmitter, NKey: w1.NKey}, creds: w1.creds})
		if err != nil {
			t.Fatal(err)
		}
		// Under a minute's deadline, a submission that ends within half
		// of it was ended by the refusal, not by waiting for an answer.
		ctx, cancel := context.WithTimeout(bg, time.Minute)
		defer cancel()
		refused := make(chan error, 1)
		go func() {
			_, _, err := fw.Submit(ctx, fleet.Request{ID: "by-worker", Task: "append by-worker"})
			refused <- err
		}()
		select {
		case err = <-refused:
		case <-time.After(30 * time.Second):
			t.Fatal("the refusal did not end the submission")
		}
		var pe *fleet.PermissionError
		if !errors.As(err, &pe) || !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("a worker's submission: %v", err)
		}
		// Nothing of it is left: no state waits for ever.
		runs, err := gw.Runs(bg)
		if err != nil || slices.ContainsFunc(runs, func(r *fleet.Run) bool { return r.ID == "by-worker" }) {
			t.Errorf("the refused run is listed: %v", err)
		}
		v := &violations{}
		js, _ := jetstream.New(rawConn(t, s, w1, v))
		if _, err := js.Publish(short(t), "toolmux.queue.run", []byte(`{"id": "w", "task": "append w"}`)); err == nil || !v.has("Publish to") {
			t.Fatalf("a worker published a run: %v %v", err, v.errs)
		}
		if _, err := js.CreateOrUpdateStream(short(t), jetstream.StreamConfig{Name: "TOOLMUX_QUEUE", Subjects: []string{"toolmux.queue.>", "x.>"},
			Retention: jetstream.WorkQueuePolicy}); err == nil {
			t.Fatal("a worker changed the queue")
		}
	})

	t.Run("a key of no member cannot connect", func(t *testing.T) {
		stranger := newMember(t, t.TempDir(), "stranger", fleet.RoleSubmitter)
		if _, err := connectAs(t, s, stranger); !errors.Is(err, nats.ErrAuthorization) {
			t.Fatalf("a stranger connected: %v", err)
		}
	})

	t.Run("members added and removed while the server runs", func(t *testing.T) {
		carol := newMember(t, dir, "carol", fleet.RoleSubmitter, "dev")
		all := []fleet.Member{alice.Member, w1.Member, carol.Member}
		if err := gw.PublishMembers(bg, all); err != nil {
			t.Fatal(err)
		}
		if err := s.SetMembers(all); err != nil {
			t.Fatal(err)
		}
		fc, err := connectAs(t, s, carol)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := fc.Submit(bg, fleet.Request{ID: "c1", Task: "append from-carol"}); err != nil {
			t.Fatal(err)
		}
		if r := wait(t, fc, "c1"); r.Status != fleet.StatusDone || r.Submitter != "carol" {
			t.Fatalf("carol's run: %+v", r)
		}
		// Bob is gone: his connection is closed, and he cannot come back.
		if !testservers.Eventually(10*time.Second, func() bool { return fb.Conn().Status() != nats.CONNECTED }) {
			t.Fatal("bob's connection outlived his removal")
		}
		if _, err := connectAs(t, s, bob); !errors.Is(err, nats.ErrAuthorization) {
			t.Fatalf("bob came back: %v", err)
		}
	})

	t.Run("a run of a member removed fails, saying so", func(t *testing.T) {
		// Dave submits while no worker runs, and is removed before one
		// takes his run.
		n.stop()
		dave := newMember(t, dir, "dave", fleet.RoleSubmitter)
		all := []fleet.Member{alice.Member, w1.Member, dave.Member}
		if err := gw.PublishMembers(bg, all); err != nil {
			t.Fatal(err)
		}
		if err := s.SetMembers(all); err != nil {
			t.Fatal(err)
		}
		fd, err := connectAs(t, s, dave)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := fd.Submit(bg, fleet.Request{ID: "d1", Task: "append from-dave"}); err != nil {
			t.Fatal(err)
		}
		all = all[:2]
		if err := s.SetMembers(all); err != nil {
			t.Fatal(err)
		}
		if err := gw.PublishMembers(bg, all); err != nil {
			t.Fatal(err)
		}
		newNode(t, s, o, "w1", model, fx, fleet.WorkerOptions{}, nodeOptions{creds: w1.creds, cfg: cfg}).start()
		// The gateway sees every run; dave's is under his key.
		var r *fleet.Run
		if !testservers.Eventually(30*time.Second, func() bool {
			runs, err := gw.Runs(bg)
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(runs, func(r *fleet.Run) bool { return r.ID == "d1" })
			if i < 0 {
				return false
			}
			r = runs[i]
			return r.Status.Final()
		}) {
			t.Fatalf("dave's run did not end: %+v", r)
		}
		if r.Status != fleet.StatusFailed || r.SubmitterKey != dave.NKey || !strings.Contains(r.Error, "is not a member of the fleet") ||
			fx.count("from-dave") != 0 {
			t.Fatalf("dave's run: %+v", r)
		}
	})

	t.Run("no credential in any stream or bucket", func(t *testing.T) {
		secrets := []string{"the-admins-token"}
		for _, m := range []*member{alice, bob, w1} {
			secrets = append(secrets, m.seed)
		}
		ctx, cancel := context.WithTimeout(bg, 30*time.Second)
		defer cancel()
		found, msgs, err := testservers.StreamsHold(ctx, gw.JetStream(), secrets)
		if err != nil || found != "" || msgs < 20 {
			t.Fatalf("the streams: a credential in %q of %d messages read (%v)", found, msgs, err)
		}
	})
}

// A worker's approval question carries its run's submitter: the gateway
// puts it to its approvers as that caller's (who sees it, who may answer
// it), never with a credential.
func TestMemberApprovalCarriesAsker(t *testing.T) {
	dir := t.TempDir()
	alice := newMember(t, dir, "alice", fleet.RoleSubmitter, "dev")
	w1 := newMember(t, dir, "w1", fleet.RoleWorker)
	s, gw := memberFleet(t, fleet.Options{Lease: 2 * time.Second}, "", alice, w1)
	asked := make(chan policy.Request, 1)
	var fromCtx *identity.Caller
	stop, err := gw.ServeApprovals(policy.ApproverFunc(func(ctx context.Context, req policy.Request) (policy.Answer, error) {
		fromCtx = identity.From(ctx)
		asked <- req
		return policy.ProceedOnce, nil
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	fw, err := connectAs(t, s, w1)
	if err != nil {
		t.Fatal(err)
	}
	ans, err := fw.Approver("w1", 30*time.Second).Approve(bg, policy.Request{
		Tool:     tool.Tool{Server: "fx", Name: "append"},
		Call:     tool.Call{ID: "c1", Server: "fx", Tool: "append", Task: "alice:r1"},
		Decision: policy.Decision{Action: policy.Ask, Rule: "ask"},
		Caller:   alice.Caller()})
	if err != nil || ans != policy.ProceedOnce {
		t.Fatalf("the answer: %v %v", ans, err)
	}
	req := <-asked
	if req.Caller == nil || req.Caller.Name != "alice" || req.Caller.Key() != "key:alice" || !slices.Equal(req.Caller.Groups, []string{"dev"}) ||
		req.Call.Caller == nil || *req.Call.Caller != (tool.CallerRef{Name: "alice", Key: "key:alice"}) || fromCtx.Key() != "key:alice" {
		t.Fatalf("the question's asker: %+v %+v %+v", req.Caller, req.Call.Caller, fromCtx)
	}
}

// The members' file: the owner's only, refused when it is not a
// members' file (naming it), a name or a key once, changes kept by rename.
func TestMemberStore(t *testing.T) {
	dir := t.TempDir()
	st := fleet.NewMemberStore(filepath.Join(dir, "fleet", "members.json"))
	if ms, err := st.List(); err != nil || len(ms) != 0 {
		t.Fatalf("no file: %v %v", ms, err)
	}
	_, k1, _ := fleet.NewSeed("a")
	_, k2, _ := fleet.NewSeed("b")
	if _, err := st.Add(fleet.Member{Name: "alice", Role: fleet.RoleSubmitter, Groups: []string{"dev", "dev", "ops"}, NKey: k1}, false); err != nil {
		t.Fatal(err)
	}
	var ex *fleet.MemberExistsError
	if _, err := st.Add(fleet.Member{Name: "alice", Role: fleet.RoleWorker, NKey: k2}, false); !errors.As(err, &ex) || ex.Other != "" {
		t.Fatalf("a name twice: %v", err)
	}
	if _, err := st.Add(fleet.Member{Name: "bob", Role: fleet.RoleWorker, NKey: k1}, false); !errors.As(err, &ex) || ex.Other != "alice" {
		t.Fatalf("a key twice: %v", err)
	}
	var me *fleet.MemberError
	for _, bad := range []fleet.Member{
		{Name: "a.b", Role: fleet.RoleWorker, NKey: k2},
		{Name: strings.Repeat("x", fleet.MemberNameMax+1), Role: fleet.RoleWorker, NKey: k2},
		{Name: "carol", Role: "boss", NKey: k2},
		{Name: "carol", Role: fleet.RoleWorker, NKey: "SUAB"},
		{Name: "carol", Role: fleet.RoleSubmitter, NKey: k2, Groups: []string{"a b"}},
	} {
		if _, err := st.Add(bad, false); !errors.As(err, &me) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	if replaced, err := st.Add(fleet.Member{Name: "alice", Role: fleet.RoleSubmitter, NKey: k2}, true); err != nil || !replaced {
		t.Fatalf("replace: %v %v", replaced, err)
	}
	ms, err := st.List()
	if err != nil || len(ms) != 1 || ms[0].NKey != k2 {
		t.Fatalf("after replace: %+v %v", ms, err)
	}
	var nf *fleet.MemberNotFoundError
	if err := st.Remove("alcie"); !errors.As(err, &nf) || !slices.Equal(nf.Names, []string{"alice"}) {
		t.Fatalf("remove of no member: %v", err)
	}
	var se *fleet.MemberStoreError
	if err := os.Chmod(st.Path(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := st.List(); !errors.As(err, &se) || !strings.Contains(err.Error(), "chmod 600 "+st.Path()) {
		t.Fatalf("a file others may read: %v", err)
	}
	if err := os.WriteFile(st.Path(), []byte(`{"version": 1, "members": [{"name": "x", "role": "worker", "nkey": "U", "grups": []}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := st.List(); !errors.As(err, &se) || !strings.Contains(err.Error(), st.Path()) {
		t.Fatalf("not a members' file: %v", err)
	}
	if err := st.Remove("x"); !errors.As(err, &se) {
		t.Fatalf("a change of a file that is not a members' file: %v", err)
	}
}

// Follow tells the members when the file changes, once when it cannot
// be used, and again at the next look when they could not be applied.
func TestMemberStoreFollow(t *testing.T) {
	st := fleet.NewMemberStore(filepath.Join(t.TempDir(), "members.json"))
	seen := make(chan string, 10)
	failOnce := true
	ctx, cancel := context.WithCancel(bg)
	done := make(chan struct{})
	go func() {
		defer close(done)
		st.Follow(ctx, 10*time.Millisecond, func(ms []fleet.Member, err error) bool {
			names := make([]string, len(ms))
			for i, m := range ms {
				names[i] = m.Name
			}
			if err != nil {
				names = []string{"error"}
			}
			seen <- strings.Join(names, ",")
			if len(ms) > 0 && failOnce {
				failOnce = false
				return true // not applied: told again, the file unchanged
			}
			return false
		})
	}()
	defer func() { cancel(); <-done }()
	next := func(want string) {
		t.Helper()
		select {
		case got := <-seen:
			if got != want {
				t.Fatalf("told %q, want %q", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("not told %q", want)
		}
	}
	next("")
	_, k, _ := fleet.NewSeed("a")
	if _, err := st.Add(fleet.Member{Name: "alice", Role: fleet.RoleWorker, NKey: k}, false); err != nil {
		t.Fatal(err)
	}
	next("alice")
	next("alice")
	if err := os.Chmod(st.Path(), 0o640); err != nil {
		t.Fatal(err)
	}
	next("error")
	if err := os.Chmod(st.Path(), 0o600); err != nil {
		t.Fatal(err)
	}
	next("alice")
}
