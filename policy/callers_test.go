package policy_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

// Callers of the tests: keys of a gateway, a token's user.
var (
	alice = &identity.Caller{Subject: "key:alice", Name: "alice", Groups: []string{"dev"}, Method: identity.MethodKey}
	bob   = &identity.Caller{Subject: "key:bob", Name: "bob", Groups: []string{"ops"}, Method: identity.MethodKey}
	carol = &identity.Caller{Subject: "248289761001", Name: "carol@example.com", Groups: []string{"dev", "interns"},
		Method: identity.MethodJWT, Issuer: "https://idp.example.com"}
	ciBot = &identity.Caller{Subject: "key:ci-build", Name: "ci-build", Method: identity.MethodKey}
)

// A rule that names callers or groups decides only the calls of those
// callers, by name or subject; a call without a caller matches none of
// them. Allow, deny and ask all work per caller.
func TestRulesByCaller(t *testing.T) {
	e := mustEngine(t, policy.ModeDefault,
		policy.Rule{Name: "devs run the shell", Groups: []string{"dev"}, Tools: []string{"builtin/shell"}, Action: policy.Allow},
		policy.Rule{Name: "ci by subject", Callers: []string{"key:ci-*"}, Tools: []string{"builtin/shell"}, Action: policy.Allow},
		policy.Rule{Name: "no deletes for ops", Groups: []string{"ops"}, Tools: []string{"*/delete_*"}, Action: policy.Deny, Message: "ops do not delete"},
		policy.Rule{Name: "ask carol", Callers: []string{"carol@*"}, Tools: []string{"github/search_issues"}, Action: policy.Ask},
		policy.Rule{Name: "both", Callers: []string{"alice"}, Groups: []string{"ops"}, Tools: []string{"github/get_issue"}, Action: policy.Allow},
	)
	for _, tc := range []struct {
		caller *identity.Caller
		tool   tool.Tool
		action policy.Action
		rule   string
	}{
		{alice, shell, policy.Allow, "devs run the shell"},
		{carol, shell, policy.Allow, "devs run the shell"},
		{bob, shell, policy.Ask, "default mode: everything else"},
		{ciBot, shell, policy.Allow, "ci by subject"},
		{nil, shell, policy.Ask, "default mode: everything else"},
		{bob, ghDelete, policy.Deny, "no deletes for ops"},
		{alice, ghDelete, policy.Ask, "default mode: everything else"},
		{nil, ghDelete, policy.Ask, "default mode: everything else"},
		{carol, ghSearch, policy.Ask, "ask carol"}, // a read-only tool, asked of carol alone
		{alice, ghSearch, policy.Allow, "default mode: read-only tools"},
		// Every condition set must hold: alice is not in ops.
		{alice, ghGet, policy.Ask, "default mode: everything else"},
	} {
		d := e.DecideFor(tc.caller, tc.tool, call(tc.tool, nil))
		if d.Action != tc.action || d.Rule != tc.rule {
			t.Errorf("%v %s/%s: %s (%s), want %s (%s)", tc.caller, tc.tool.Server, tc.tool.Name, d.Action, d.Rule, tc.action, tc.rule)
		}
		if tc.caller == nil {
			if d2 := e.Decide(tc.tool, call(tc.tool, nil)); d2 != d {
				t.Errorf("Decide is not DecideFor(nil): %+v, %+v", d2, d)
			}
		}
	}
	// Listings say what a caller's calls need.
	if got := e.RequiresFor(alice, shell); got != policy.Allow {
		t.Errorf("RequiresFor alice shell: %s", got)
	}
	if got := e.RequiresFor(bob, ghDelete); got != policy.Deny {
		t.Errorf("RequiresFor bob delete: %s", got)
	}
	if got := e.Requires(shell); got != policy.Ask {
		t.Errorf("Requires shell (no caller): %s", got)
	}
}

// Bad caller conditions are refused with the field they are in.
func TestRulesByCallerErrors(t *testing.T) {
	_, err := policy.New(policy.ModeDefault, []policy.Rule{
		{Name: "x", Callers: []string{"[", ""}, Groups: []string{""}, Action: policy.Allow},
	})
	var got []string
	for _, e := range unjoinErr(err) {
		var re *policy.RuleError
		if !errors.As(e, &re) {
			t.Fatalf("%T %v", e, e)
		}
		got = append(got, re.Field)
	}
	if want := []string{"callers[0]", "callers[1]", "groups[0]"}; !slices.Equal(got, want) {
		t.Errorf("fields %v, want %v (%v)", got, want, err)
	}
}

func unjoinErr(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// A caller's calls are decided in its groups' approval mode: the most
// cautious of them when it is in several; callers in none of them, and
// calls without a caller, in the engine's. Switching the engine's mode
// keeps the groups'.
func TestGroupModes(t *testing.T) {
	e := mustEngine(t, policy.ModeDefault,
		policy.Rule{Name: "no shell in yolo", Tools: []string{"builtin/shell"}, Modes: []policy.Mode{policy.ModeYolo}, Action: policy.Deny})
	e, err := e.WithGroupModes(map[string]policy.Mode{"dev": policy.ModeAutoEdit, "interns": policy.ModePlan, "ops": policy.ModeYolo})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		caller *identity.Caller
		mode   policy.Mode
		tool   tool.Tool
		action policy.Action
	}{
		{alice, policy.ModeAutoEdit, writeFile, policy.Allow}, // auto_edit allows file edits
		{alice, policy.ModeAutoEdit, shell, policy.Ask},
		{carol, policy.ModePlan, writeFile, policy.Deny}, // dev and interns: plan, the most cautious
		{carol, policy.ModePlan, readFile, policy.Allow},
		{bob, policy.ModeYolo, ghDelete, policy.Allow},
		{bob, policy.ModeYolo, shell, policy.Deny}, // the user's rule of yolo mode
		{ciBot, policy.ModeDefault, writeFile, policy.Ask},
		{nil, policy.ModeDefault, writeFile, policy.Ask},
	} {
		if m := e.ModeFor(tc.caller); m != tc.mode {
			t.Errorf("%v: mode %s, want %s", tc.caller, m, tc.mode)
		}
		if d := e.DecideFor(tc.caller, tc.tool, call(tc.tool, nil)); d.Action != tc.action {
			t.Errorf("%v %s: %s (%s), want %s", tc.caller, tc.tool.Name, d.Action, d.Rule, tc.action)
		}
	}
	y, err := e.WithMode(policy.ModeYolo)
	if err != nil {
		t.Fatal(err)
	}
	if m := y.ModeFor(alice); m != policy.ModeAutoEdit {
		t.Errorf("after WithMode(yolo), alice's mode is %s", m)
	}
	if m := y.ModeFor(nil); m != policy.ModeYolo {
		t.Errorf("after WithMode(yolo), the mode is %s", m)
	}
	if _, err := e.WithGroupModes(map[string]policy.Mode{"dev": "fast"}); err == nil {
		t.Error("an unknown mode is accepted")
	}
	// The configuration's groups section is where they come from.
	cfg := &config.Config{Groups: map[string]config.Group{"dev": {ApprovalMode: "auto_edit"}, "ops": {Tools: []string{"*"}}}}
	ce, err := policy.ForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := ce.GroupModes(); len(got) != 1 || got["dev"] != policy.ModeAutoEdit {
		t.Errorf("ForConfig's group modes: %v", got)
	}
}

// The gate decides for the caller its call's context carries, tells the
// approver who asks, and remembers an "always" answer for that caller
// only; a saved "always" rule names the caller.
func TestGateCallers(t *testing.T) {
	var mu sync.Mutex
	var asked []*identity.Caller
	approver := policy.ApproverFunc(func(_ context.Context, req policy.Request) (policy.Answer, error) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, req.Caller)
		return policy.AlwaysTool, nil
	})
	var saved []policy.Rule
	g := policy.NewGate(mustEngine(t, policy.ModeDefault,
		policy.Rule{Name: "ops may not", Groups: []string{"ops"}, Tools: []string{"github/create_issue"}, Action: policy.Deny}),
		policy.WithApprover(approver), policy.WithPersistAlways(true),
		policy.WithPersist(func(r policy.Rule) error { saved = append(saved, r); return nil }))
	as := func(c *identity.Caller) context.Context { return identity.With(context.Background(), c) }

	if err := g.Check(as(alice), shell, call(shell, nil)); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 || asked[0] != alice {
		t.Fatalf("asked %v, want alice", asked)
	}
	// alice's "always" is hers: bob, and a call without a caller, are
	// asked again; alice is not.
	if d := g.DecideFor(alice, shell, call(shell, nil)); d.Action != policy.Allow || !strings.Contains(d.Rule, "for alice") {
		t.Errorf("alice after always: %+v", d)
	}
	for _, c := range []*identity.Caller{bob, nil} {
		if d := g.DecideFor(c, shell, call(shell, nil)); d.Action != policy.Ask {
			t.Errorf("%v after alice's always: %+v", c, d)
		}
	}
	if err := g.Check(as(bob), shell, call(shell, nil)); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 2 || asked[1] != bob {
		t.Errorf("asked %v, want alice then bob", asked)
	}
	// The saved rule lets alice's calls through, and only hers.
	if len(saved) != 2 || !slices.Equal(saved[0].Callers, []string{"key:alice"}) {
		t.Fatalf("saved %+v", saved)
	}
	e := mustEngine(t, policy.ModeDefault, saved[0])
	if d := e.DecideFor(alice, shell, call(shell, nil)); d.Action != policy.Allow {
		t.Errorf("saved rule, alice: %+v", d)
	}
	if d := e.DecideFor(bob, shell, call(shell, nil)); d.Action != policy.Ask {
		t.Errorf("saved rule, bob: %+v", d)
	}
	// A deny for the caller's group, and the mode in its message.
	err := g.Check(as(bob), ghCreate, call(ghCreate, nil))
	if kindOf(t, err) != tool.KindPolicyViolation || !strings.Contains(err.Error(), `"ops may not" (mode default)`) {
		t.Errorf("bob create_issue: %v", err)
	}
	if err := g.Check(as(alice), ghCreate, call(ghCreate, nil)); err != nil {
		t.Errorf("alice create_issue: %v", err)
	}
}

// A refusal for want of an approver names the caller's mode.
func TestGateCallerModeInRefusal(t *testing.T) {
	e, err := mustEngine(t, policy.ModeYolo).WithGroupModes(map[string]policy.Mode{"dev": policy.ModeDefault})
	if err != nil {
		t.Fatal(err)
	}
	g := policy.NewGate(e)
	err = g.Check(identity.With(context.Background(), alice), shell, call(shell, nil))
	if kindOf(t, err) != tool.KindApprovalUnavailable || !strings.Contains(err.Error(), "mode default") {
		t.Errorf("alice: %v", err)
	}
	if err := g.Check(context.Background(), shell, call(shell, nil)); err != nil {
		t.Errorf("no caller, yolo: %v", err)
	}
}

// What each caller sees: nothing is limited until a group names tools;
// then a caller sees what its groups grant together, nothing without
// such a group, everything in the admin group; without a caller,
// everything.
func TestVisibility(t *testing.T) {
	off, err := policy.NewVisibility(nil, "admin")
	if err != nil || off != nil {
		t.Fatalf("no grants: %v %v", off, err)
	}
	if off.For(alice).Limited() || !off.For(alice).Sees("x", "y") {
		t.Error("a nil visibility limits")
	}
	v, err := policy.NewVisibility(map[string][]string{"dev": {"github/*", "read_*"}, "interns": {"docs/search"}, "guests": {}}, "admin")
	if err != nil {
		t.Fatal(err)
	}
	admin := &identity.Caller{Name: "root", Groups: []string{"admin"}}
	for _, tc := range []struct {
		caller       *identity.Caller
		server, name string
		sees         bool
	}{
		{alice, "github", "create_issue", true},
		{alice, "fs", "read_file", true}, // a bare pattern: any server
		{alice, "fs", "write_file", false},
		{carol, "docs", "search", true}, // dev and interns together
		{carol, "github", "get_issue", true},
		{bob, "github", "get_issue", false}, // ops grants nothing
		{ciBot, "fs", "read_file", false},   // in no group
		{admin, "fs", "write_file", true},
		{nil, "fs", "write_file", true},
	} {
		if got := v.For(tc.caller).Sees(tc.server, tc.name); got != tc.sees {
			t.Errorf("%v sees %s/%s: %v, want %v", tc.caller, tc.server, tc.name, got, tc.sees)
		}
	}
	if !v.For(alice).SeesServer("fs") || !v.For(carol).SeesServer("docs") || v.For(bob).SeesServer("github") {
		t.Error("SeesServer")
	}
	if _, err := policy.NewVisibility(map[string][]string{"x": {"a/["}}, ""); err == nil {
		t.Error("a bad pattern is accepted")
	}
	cv, err := policy.VisibilityFromConfig(&config.Config{Groups: map[string]config.Group{
		"dev": {Tools: []string{"github/*"}}, "ops": {ApprovalMode: "yolo"}}}, "admin")
	if err != nil || cv.For(bob).Sees("github", "x") || !cv.For(alice).Sees("github", "x") {
		t.Errorf("from config: %v", err)
	}
	if cv, _ := policy.VisibilityFromConfig(&config.Config{Groups: map[string]config.Group{"ops": {ApprovalMode: "yolo"}}}, "admin"); cv != nil {
		t.Error("groups without tools limit")
	}
}
