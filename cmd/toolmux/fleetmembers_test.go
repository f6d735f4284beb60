package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

// fleetCmd runs `toolmux fleet ARGS` on the gateway's data directory.
func fleetCmd(t *testing.T, dataHome string, args ...string) result {
	t.Helper()
	return execToolmux(t, t.TempDir(), "", append(modelFreeEnv(), "XDG_DATA_HOME="+dataHome), append([]string{"fleet"}, args...)...)
}

// addMember registers a member with `toolmux fleet add` and writes the
// seed file it prints (mode 0600) under dir, returning its path.
func addMember(t *testing.T, dataHome, dir, name string, args ...string) string {
	t.Helper()
	r := fleetCmd(t, dataHome, append([]string{"add", name}, args...)...)
	if r.code != 0 || !strings.Contains(r.stdout, "\nSU") || !strings.Contains(r.stderr, "shown only now") {
		t.Fatalf("fleet add %s: exit %d\n%s\n%s", name, r.code, r.stdout, r.stderr)
	}
	path := filepath.Join(dir, name+".nk")
	if err := os.WriteFile(path, []byte(r.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// seedOf is the seed line of a seed file.
func seedOf(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "SU") {
			return l
		}
	}
	t.Fatalf("%s holds no seed", path)
	return ""
}

// A fleet of members, end to end with the real commands: the gateway's
// NATS server lets in only its members (a worker and submitters with
// nkeys of their own, and its token, the admin's); each submitter's runs
// are run for it, with its groups' policy and tools, and recorded as its;
// /api/fleet shows each caller its own runs; a worker's credentials do
// not submit, a key of no member does not connect; members added and
// removed take effect on the running gateway; and no credential is in
// any stream, bucket, journal record or output.
func TestFleetMembers(t *testing.T) {
	t.Parallel()
	m := appendModel(t, 0)
	dir := workspace(t, fleetConfig(t, m)+`groups:
  dev: {tools: ["*"]}
  contractors: {tools: ["*"]}
  readers: {tools: ["fx/pid"]}
policy:
  rules:
    - {name: contractors never append, groups: [contractors], tools: ["fx/append"], action: deny}
`)
	data, keys := t.TempDir(), t.TempDir()
	w1 := addMember(t, data, keys, "w1", "--role", "worker")
	alice := addMember(t, data, keys, "alice", "--role", "submitter", "--group", "dev")
	bob := addMember(t, data, keys, "bob", "--role", "submitter", "--group", "contractors")
	if fi, err := os.Stat(filepath.Join(data, "toolmux", "fleet", "members.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the members' file: %v %v", fi, err)
	}
	// Alice and bob are API keys of the gateway too: the same callers.
	aliceKey := addKey(t, data, "alice", "--group", "dev")
	bobKey := addKey(t, data, "bob", "--group", "contractors")
	const admin = "the-admins-token-0123456789"
	natsAddr := fmt.Sprintf("127.0.0.1:%d", testservers.FreePort(t))
	natsURL := "nats://" + natsAddr
	p := startFleetGateway(t, dir, data, natsAddr, "--token", admin, "--lease", "2s")
	if !strings.Contains(p.stderr.String(), "3 members of the fleet") {
		t.Errorf("serve does not say its members:\n%s", p.stderr.String())
	}

	// The worker, on "another machine": its own data, its own key.
	w := spawnWorker(t, binary, dir, natsURL, t.TempDir(), "--nats-creds", w1)
	w.waitJoined(t)
	if !strings.Contains(w.stderr.String(), "worker w1 joined") {
		t.Errorf("the worker does not have its member's name:\n%s", w.stderr.String())
	}
	out := filepath.Join(t.TempDir(), "effects.txt")
	submit := func(creds, id, line string) result {
		t.Helper()
		runs := filepath.Join(t.TempDir(), "runs.jsonl")
		task := fmt.Sprintf(`{"id": %q, "task": "append %s to %s sleeping 0"}`+"\n", id, line, out)
		if err := os.WriteFile(runs, []byte(task), 0o644); err != nil {
			t.Fatal(err)
		}
		return execToolmux(t, dir, "", append(modelFreeEnv(), "XDG_DATA_HOME="+t.TempDir()),
			"submit", "--nats", natsURL, "--nats-creds", creds, "--wait", runs)
	}
	var secrets []string

	t.Run("each submitter's policy, records and runs", func(t *testing.T) {
		ra := submit(alice, "r1", "from-alice")
		if ra.code != 0 || !strings.Contains(ra.stdout, `"status":"done"`) || !strings.Contains(ra.stdout, "appended from-alice | tool said: appended from-alice") {
			t.Fatalf("alice's submit: exit %d\n%s\n%s\nworker: %s", ra.code, ra.stdout, ra.stderr, w.stderr.String())
		}
		rb := submit(bob, "r1", "from-bob")
		if rb.code != 0 || !strings.Contains(rb.stdout, "policy_violation") {
			t.Fatalf("bob's submit: exit %d\n%s\n%s", rb.code, rb.stdout, rb.stderr)
		}
		if n := countOf(lines(t, out), "from-alice"); n != 1 || countOf(lines(t, out), "from-bob") != 0 {
			t.Fatalf("effects: %v", lines(t, out))
		}
		// run --nats follows alice's own run's events.
		rr := execToolmux(t, dir, "", append(modelFreeEnv(), "XDG_DATA_HOME="+t.TempDir()),
			"run", "--nats", natsURL, "--nats-creds", alice, "append followed to "+out+" sleeping 0")
		if rr.code != 0 || strings.TrimSpace(rr.stdout) != "appended followed | tool said: appended followed" || !strings.Contains(rr.stderr, "✓ fx/append") {
			t.Fatalf("alice's run --nats: exit %d\n%s\n%s", rr.code, rr.stdout, rr.stderr)
		}
		// The runs are the submitters' tasks, their calls recorded as
		// theirs, on the gateway.
		for who, key := range map[string]string{"alice": aliceKey, "bob": bobKey} {
			var task struct {
				Status string
				Caller struct{ Name, Key string }
				Calls  []struct {
					Tool   string
					Caller struct{ Name, Key string }
				}
			}
			if !testservers.Eventually(30*time.Second, func() bool {
				p.getAs(t, admin, "/api/tasks/"+url.PathEscape(who+":r1"), &task)
				return task.Status == "success" && len(task.Calls) == 1
			}) {
				t.Fatalf("%s's task: %+v", who, task)
			}
			if task.Caller.Name != who || task.Caller.Key != "key:"+who || task.Calls[0].Caller != task.Caller {
				t.Errorf("%s's task names %+v", who, task)
			}
			// The API key of the member's name sees it as its own.
			if status(t, p, "/api/tasks/"+url.PathEscape(who+":r1"), key) != 200 {
				t.Errorf("%s cannot see its own run", who)
			}
		}
		if status(t, p, "/api/tasks/"+url.PathEscape("alice:r1"), bobKey) != 404 {
			t.Error("bob sees alice's run")
		}
		// /api/fleet: each caller its own runs, the admin all, counted
		// and among the recent ones.
		type summary struct {
			Runs   map[string]int `json:"runs"`
			Recent []struct {
				ID string `json:"id"`
			} `json:"recent"`
		}
		var all, as, bs summary
		p.getAs(t, admin, "/api/fleet", &all)
		p.getAs(t, aliceKey, "/api/fleet", &as)
		p.getAs(t, bobKey, "/api/fleet", &bs)
		if all.Runs["done"] != 3 || as.Runs["done"] != 2 || bs.Runs["done"] != 1 {
			t.Errorf("/api/fleet: admin %v, alice %v, bob %v", all.Runs, as.Runs, bs.Runs)
		}
		recent := func(s summary) string {
			var ids []string
			for _, r := range s.Recent {
				ids = append(ids, r.ID)
			}
			slices.Sort(ids)
			return strings.Join(ids, " ")
		}
		mine := strings.Fields(recent(as))
		if len(mine) != 2 || !slices.Contains(mine, "alice:r1") || !strings.HasPrefix(mine[0], "alice:") || !strings.HasPrefix(mine[1], "alice:") ||
			recent(bs) != "bob:r1" || recent(all) != strings.Join(append(mine, "bob:r1"), " ") {
			t.Errorf("/api/fleet's recent runs: admin %q, alice %q, bob %q", recent(all), recent(as), recent(bs))
		}
		// toolmux runs as alice lists hers only.
		lr := execToolmux(t, dir, "", append(modelFreeEnv(), "XDG_DATA_HOME="+t.TempDir()), "runs", "--nats", natsURL, "--nats-creds", alice, "--json")
		if lr.code != 0 || strings.Count(lr.stdout, "\n") != 2 || strings.Contains(lr.stdout, `"submitter":"bob"`) {
			t.Errorf("alice's runs: exit %d\n%s\n%s", lr.code, lr.stdout, lr.stderr)
		}
	})

	t.Run("a worker's credentials do not submit", func(t *testing.T) {
		r := submit(w1, "by-worker", "by-worker")
		if r.code != 1 || !strings.Contains(r.stderr, "the NATS server refused this submitter") || !strings.Contains(r.stderr, "Permissions Violation") {
			t.Fatalf("a worker's submit: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("a key of no member does not connect", func(t *testing.T) {
		stranger := filepath.Join(keys, "stranger.nk")
		kr := fleetCmd(t, t.TempDir(), "nkey", stranger)
		pub := strings.TrimSpace(kr.stdout)
		if kr.code != 0 || !strings.HasPrefix(pub, "U") {
			t.Fatalf("fleet nkey: exit %d\n%s\n%s", kr.code, kr.stdout, kr.stderr)
		}
		secrets = append(secrets, seedOf(t, stranger))
		r := submit(stranger, "s1", "from-stranger")
		if r.code != 1 || !strings.Contains(r.stderr, "Authorization Violation") || !strings.Contains(r.stderr, "toolmux fleet add NAME --role submitter --nkey "+pub) {
			t.Fatalf("a stranger's submit: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
		if countOf(lines(t, out), "from-stranger") != 0 {
			t.Fatal("a stranger's run ran")
		}
	})

	t.Run("members added and removed while the gateway runs", func(t *testing.T) {
		carol := addMember(t, data, keys, "carol", "--role", "submitter", "--group", "readers")
		if !testservers.Eventually(30*time.Second, func() bool { return strings.Contains(p.stderr.String(), "carol (submitter)") }) {
			t.Fatalf("serve did not take carol in:\n%s", p.stderr.String())
		}
		// Carol's group sees fx/pid only: fx/append is no tool to her run.
		r := submit(carol, "c1", "from-carol")
		if r.code != 0 || !strings.Contains(r.stdout, "tool_not_registered") {
			t.Fatalf("carol's submit: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
		if countOf(lines(t, out), "from-carol") != 0 {
			t.Fatal("carol's run called a tool her group does not see")
		}
		secrets = append(secrets, seedOf(t, carol))

		if rr := fleetCmd(t, data, "remove", "bob"); rr.code != 0 {
			t.Fatalf("fleet remove: exit %d\n%s", rr.code, rr.stderr)
		}
		if !testservers.Eventually(30*time.Second, func() bool {
			return strings.Contains(p.stderr.String(), "fleet members changed: 3 members")
		}) {
			t.Fatalf("serve did not shut bob out:\n%s", p.stderr.String())
		}
		if r := submit(bob, "r2", "bob-again"); r.code != 1 || !strings.Contains(r.stderr, "Authorization Violation") {
			t.Fatalf("bob's submit once removed: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("no credential in any stream, bucket or output", func(t *testing.T) {
		secrets = append(secrets, admin, aliceKey, bobKey)
		for _, f := range []string{w1, alice, bob} {
			secrets = append(secrets, seedOf(t, f))
		}
		f, err := fleet.Connect(context.Background(), "nats://"+admin+"@"+natsAddr, "test", fleet.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		found, msgs, err := testservers.StreamsHold(ctx, f.JetStream(), secrets)
		if err != nil || found != "" || msgs < 50 {
			t.Fatalf("the streams: a credential in %q of %d messages read (%v)", found, msgs, err)
		}
		// Nor the gateway's, the worker's or the members' file.
		b, err := os.ReadFile(filepath.Join(data, "toolmux", "fleet", "members.json"))
		if err != nil {
			t.Fatal(err)
		}
		for what, text := range map[string]string{"serve": p.stderr.String(), "the worker": w.stderr.String(), "members.json": string(b)} {
			for _, s := range secrets {
				if strings.Contains(text, s) {
					t.Errorf("%s shows a credential", what)
				}
			}
		}
		var ms []struct{ Name, Role, NKey string }
		lr := fleetCmd(t, data, "list", "--json")
		if err := json.Unmarshal([]byte(lr.stdout), &ms); err != nil || len(ms) != 3 {
			t.Errorf("fleet list --json: %v\n%s", err, lr.stdout)
		}
	})
}

// In a fleet of members, a worker shares a server with the others as in a
// fleet without (their keys allow the shared calls, their replies and
// their cancellations), and the gateway's lease is the fleet's: the
// workers take it, whatever their own --lease.
func TestFleetMembersSharedServer(t *testing.T) {
	t.Parallel()
	m := appendModel(t, 0)
	holderDir := fleetWorkspace(t, m)
	userDir := workspace(t, fmt.Sprintf("model:\n  base_url: %s\n  model: scripted\n", m.BaseURL()))
	data, keys := t.TempDir(), t.TempDir()
	holder := addMember(t, data, keys, "holder", "--role", "worker")
	user := addMember(t, data, keys, "user", "--role", "worker")
	sub := addMember(t, data, keys, "sub", "--role", "submitter")
	natsAddr := fmt.Sprintf("127.0.0.1:%d", testservers.FreePort(t))
	natsURL := "nats://" + natsAddr
	startFleetGateway(t, holderDir, data, natsAddr, "--lease", "2s")
	h := spawnWorker(t, binary, holderDir, natsURL, t.TempDir(), "--nats-creds", holder, "--share", "fx=1", "--lease", "30s")
	h.waitJoined(t)
	spawnWorker(t, binary, userDir, natsURL, t.TempDir(), "--nats-creds", user, "--concurrency", "2").waitJoined(t)
	runs := filepath.Join(t.TempDir(), "runs.jsonl")
	if err := os.WriteFile(runs, []byte(`{"id": "s1", "task": "span 200"}`+"\n"+`{"id": "s2", "task": "span 200"}`+"\n"+
		`{"id": "s3", "task": "span 200"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := execToolmux(t, userDir, "", append(modelFreeEnv(), "XDG_DATA_HOME="+t.TempDir()), "submit", "--nats", natsURL, "--nats-creds", sub, "--wait", runs)
	if r.code != 0 || strings.Count(r.stdout, `"answer":"spanned `) != 3 {
		t.Fatalf("submit: exit %d\n%s\n%s\nholder: %s", r.code, r.stdout, r.stderr, h.stderr.String())
	}
	// The holder's heartbeats expire with the gateway's lease (3/4 of
	// 2s), not its own 30s: it is gone from the workers within seconds.
	f, err := fleet.Connect(context.Background(), "nats://"+readNATSTokenFile(t, data)+"@"+natsAddr, "test", fleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h.kill(t)
	if !testservers.Eventually(20*time.Second, func() bool {
		ws, err := f.Workers(context.Background())
		return err == nil && len(ws) == 1 && ws[0].Name == "user"
	}) {
		t.Fatal("the killed holder is still listed")
	}
}

// A fleet of members on an external NATS server: its configuration
// includes the authorization toolmux fleet nats-config prints, the
// gateway joins it as a member of role gateway (serve --nats
// --nats-creds), sets the fleet up and tells the workers who the members
// are; a submitter's run is run for it.
func TestFleetMembersExternalServer(t *testing.T) {
	t.Parallel()
	m := appendModel(t, 0)
	dir := fleetWorkspace(t, m)
	data, keys := t.TempDir(), t.TempDir()
	gw := addMember(t, data, keys, "gw", "--role", "gateway")
	w1 := addMember(t, data, keys, "w1", "--role", "worker")
	sub := addMember(t, data, keys, "sub", "--role", "submitter", "--group", "dev")
	nc := fleetCmd(t, data, "nats-config")
	if nc.code != 0 {
		t.Fatalf("fleet nats-config: exit %d\n%s", nc.code, nc.stderr)
	}
	confDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(confDir, "toolmux-members.conf"), []byte(nc.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	port := testservers.FreePort(t)
	conf := filepath.Join(confDir, "nats.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("listen: 127.0.0.1:%d\njetstream {store_dir: %q}\ninclude toolmux-members.conf\n",
		port, t.TempDir())), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("the server does not read the configuration: %v\n%s", err, nc.stdout)
	}
	opts.NoLog, opts.NoSigs = true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("the NATS server did not start")
	}
	natsURL := fmt.Sprintf("nats://127.0.0.1:%d", port)
	// Nobody without a member's key.
	if _, err := fleet.Connect(context.Background(), natsURL, "stranger", fleet.Options{}); err == nil {
		t.Fatal("a client without credentials connected")
	}
	p := startServeProc(t, dir, data, "--nats", natsURL, "--nats-creds", gw, "--lease", "2s")
	w := spawnWorker(t, binary, dir, natsURL, t.TempDir(), "--nats-creds", w1)
	w.waitJoined(t)
	out := filepath.Join(t.TempDir(), "effects.txt")
	r := execToolmux(t, dir, "", append(modelFreeEnv(), "XDG_DATA_HOME="+t.TempDir()),
		"run", "--nats", natsURL, "--nats-creds", sub, "append outside to "+out+" sleeping 0")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "appended outside | tool said: appended outside" {
		t.Fatalf("run --nats: exit %d\n%s\n%s\nworker: %s\nserve: %s", r.code, r.stdout, r.stderr, w.stderr.String(), p.stderr.String())
	}
	var summary struct {
		Runs map[string]int `json:"runs"`
	}
	p.getJSON(t, "/api/fleet", &summary)
	if summary.Runs["done"] != 1 {
		t.Errorf("/api/fleet: %+v", summary)
	}
}

// The examples of docs/fleet.md's Members section hold: the workers'
// toolmux.yaml lets a dev merge and refuses a contractor, who sees GitHub's
// tools and read_file only; fleet list --json has the fields shown.
func TestFleetMembersDocExamples(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "fleet.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, members, ok := strings.Cut(string(doc), "## Members: a key each")
	block := regexp.MustCompile("(?ms)^```yaml toolmux.yaml\n(.*?)^```$").FindStringSubmatch(members)
	if !ok || block == nil {
		t.Fatal("docs/fleet.md's Members section has no toolmux.yaml")
	}
	cfg, err := config.Parse("toolmux.yaml", []byte(block[1]))
	if err != nil {
		t.Fatal(err)
	}
	engine, err := policy.ForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	vis, err := policy.VisibilityFromConfig(cfg, "admin")
	if err != nil {
		t.Fatal(err)
	}
	merge := tool.Tool{Server: "github", Name: "merge_pull_request"}
	alice := (&fleet.Member{Name: "alice", Role: fleet.RoleSubmitter, Groups: []string{"dev"}}).Caller()
	bob := (&fleet.Member{Name: "bob", Role: fleet.RoleSubmitter, Groups: []string{"contractors"}}).Caller()
	if d := engine.DecideFor(bob, merge, tool.Call{Server: "github", Tool: "merge_pull_request"}); d.Action != policy.Deny {
		t.Errorf("bob's merge: %+v", d)
	}
	if d := engine.DecideFor(alice, merge, tool.Call{Server: "github", Tool: "merge_pull_request"}); d.Action == policy.Deny {
		t.Errorf("alice's merge: %+v", d)
	}
	if sc := vis.For(bob); !sc.Sees("github", "merge_pull_request") || !sc.Sees("builtin", "read_file") || sc.Sees("builtin", "write_file") {
		t.Errorf("what bob sees is not what the doc says")
	}

	var shown []map[string]any
	_, after, _ := strings.Cut(members, "<!-- output: toolmux fleet list --json -->\n```json\n")
	listed, _, _ := strings.Cut(after, "```")
	if err := json.Unmarshal([]byte(listed), &shown); err != nil || len(shown) != 1 {
		t.Fatalf("the fleet list example: %v", err)
	}
	data := t.TempDir()
	addMember(t, data, t.TempDir(), "alice", "--role", "submitter", "--group", "dev")
	var real []map[string]any
	if r := fleetCmd(t, data, "list", "--json"); json.Unmarshal([]byte(r.stdout), &real) != nil || len(real) != 1 || !sameKeys(shown[0], real[0]) {
		t.Errorf("docs/fleet.md shows %v, fleet list --json says %v", shown, r.stdout)
	}
}
