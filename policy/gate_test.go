package policy_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/toolmux/toolmux/internal/testservers"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

// answers is an approver that gives fixed answers per tool and counts
// the requests it gets.
type answers struct {
	mu    sync.Mutex
	by    map[string]policy.Answer // "server/tool" -> answer; missing: ProceedOnce
	asked []string
}

func (a *answers) Approve(_ context.Context, req policy.Request) (policy.Answer, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	key := req.Tool.Server + "/" + req.Tool.Name
	a.asked = append(a.asked, key)
	if ans, ok := a.by[key]; ok {
		return ans, nil
	}
	return policy.ProceedOnce, nil
}

func (a *answers) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.asked)
}

func kindOf(t *testing.T, err error) tool.Kind {
	t.Helper()
	var te *tool.Error
	if !errors.As(err, &te) {
		t.Fatalf("%v (%T) is not a *tool.Error", err, err)
	}
	return te.Kind
}

func TestGateAlwaysTool(t *testing.T) {
	a := &answers{by: map[string]policy.Answer{"builtin/shell": policy.AlwaysTool}}
	g := policy.NewGate(mustEngine(t, policy.ModeDefault), policy.WithApprover(a))
	ctx := context.Background()
	if d := g.Decide(shell, call(shell, nil)); d.Action != policy.Ask {
		t.Fatalf("before: %+v", d)
	}
	for range 3 {
		if err := g.Check(ctx, shell, call(shell, map[string]any{"command": "make"})); err != nil {
			t.Fatal(err)
		}
	}
	if n := a.count(); n != 1 {
		t.Errorf("asked %d times, want once", n)
	}
	d := g.Decide(shell, call(shell, nil))
	if want := (policy.Decision{Action: policy.Allow, Rule: "always allow builtin/shell (this session)"}); d != want {
		t.Errorf("after: %+v, want %+v", d, want)
	}
	// Another tool of the same server still asks.
	if d := g.Decide(writeFile, call(writeFile, nil)); d.Action != policy.Ask {
		t.Errorf("write_file: %+v", d)
	}
	// The memory is the gate's, not the engine's.
	if d := g.Engine().Decide(shell, call(shell, nil)); d.Action != policy.Ask {
		t.Errorf("engine: %+v", d)
	}
	if d := policy.NewGate(g.Engine()).Decide(shell, call(shell, nil)); d.Action != policy.Ask {
		t.Errorf("another gate: %+v", d)
	}
}

func TestGateAlwaysServer(t *testing.T) {
	a := &answers{by: map[string]policy.Answer{"github/create_issue": policy.AlwaysServer}}
	g := policy.NewGate(mustEngine(t, policy.ModeDefault,
		policy.Rule{Name: "never delete", Tools: []string{"*/delete_*"}, Action: policy.Deny, Message: "Deleting repositories is not allowed."}),
		policy.WithApprover(a))
	ctx := context.Background()
	if err := g.Check(ctx, ghCreate, call(ghCreate, nil)); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(ctx, ghGet, call(ghGet, nil)); err != nil {
		t.Fatal(err)
	}
	if d := g.Decide(ghGet, call(ghGet, nil)); d.Action != policy.Allow || d.Rule != "always allow server github (this session)" {
		t.Errorf("get_issue: %+v", d)
	}
	// A remembered answer never overrides a deny.
	err := g.Check(ctx, ghDelete, call(ghDelete, nil))
	if kindOf(t, err) != tool.KindPolicyViolation || !strings.Contains(err.Error(), "Deleting repositories is not allowed.") {
		t.Errorf("delete: %v", err)
	}
	if d := g.Decide(shell, call(shell, nil)); d.Action != policy.Ask {
		t.Errorf("another server: %+v", d)
	}
	if n := a.count(); n != 1 {
		t.Errorf("asked %d times, want once", n)
	}
}

// Nobody to ask: the call is refused at once as approval_unavailable (no
// person saw it, none refused it), with what to change to allow it; the
// server's `trust: true` is named only where it would allow the call.
func TestGateNonInteractive(t *testing.T) {
	trust := "or set `trust: true` on server github to allow all its tools"
	for _, tc := range []struct {
		name    string
		mode    policy.Mode
		rules   []policy.Rule
		tool    tool.Tool
		want    string
		noTrust bool
	}{
		{"mode default", policy.ModeDefault, nil, shell,
			`approval_unavailable: builtin/shell needs approval (policy rule "default mode: everything else", mode default), but no one can be asked in this run; ` +
				"to allow it, run with --yes or --approval-mode yolo, or add a policy rule: `policy: {rules: [{tools: [builtin/shell], action: allow}]}`", true},
		{"a server's tool", policy.ModeDefault, nil, ghCreate,
			`approval_unavailable: github/create_issue needs approval (policy rule "default mode: everything else", mode default), but no one can be asked in this run; ` +
				"to allow it, run with --yes or --approval-mode yolo, or add a policy rule: `policy: {rules: [{tools: [github/create_issue], action: allow}]}`, " + trust, false},
		{"a user rule asks", policy.ModeAutoEdit, []policy.Rule{{Name: "careful", Tools: []string{"github/*"}, Action: policy.Ask, Priority: 4}}, ghCreate,
			`approval_unavailable: github/create_issue needs approval (policy rule "careful", mode auto_edit), but no one can be asked in this run; ` +
				"to allow it, run with --yes or --approval-mode yolo, or add a policy rule: `policy: {rules: [{tools: [github/create_issue], action: allow, priority: 5}]}`", true},
		{"a user rule of low priority asks", policy.ModeDefault, []policy.Rule{{Name: "last", Tools: []string{"github/*"}, Action: policy.Ask, Priority: -1}}, ghCreate,
			trust, false},
		{"names that need quoting", policy.ModeDefault, nil, tool.Tool{Server: "my server", Name: "do*it"},
			"add a policy rule: `policy: {rules: [{tools: [\"my server/do\\\\*it\"], action: allow}]}`, or set `trust: true` on server \"my server\"", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := policy.NewGate(mustEngine(t, tc.mode, tc.rules...), policy.WithApprover(nil))
			// Refused at once: nothing could end a wait under a context
			// that never ends, so an answer at all says none was made.
			err := g.Check(context.Background(), tc.tool, call(tc.tool, nil))
			if kindOf(t, err) != tool.KindApprovalUnavailable || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got  %v\nwant %s", err, tc.want)
			}
			if tc.noTrust && strings.Contains(err.Error(), "trust: true") {
				t.Errorf("names trust: true, which would not allow the call: %v", err)
			}
			if tc.noTrust || tc.tool.Server == "my server" {
				return
			}
			// What it names does what it says: the configuration's
			// trusted server (policy.ForConfig) lets the call run.
			cfg := &config.Config{Servers: []config.Server{{Name: tc.tool.Server, Trust: true}}}
			cfg.Policy.Mode = string(tc.mode)
			for _, r := range tc.rules {
				cfg.Policy.Rules = append(cfg.Policy.Rules, policy.ConfigRule(r))
			}
			e, err := policy.ForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := policy.NewGate(e).Check(context.Background(), tc.tool, call(tc.tool, nil)); err != nil {
				t.Errorf("with trust: true: %v", err)
			}
		})
	}
	// The suggested rule does what it says.
	g := policy.NewGate(mustEngine(t, policy.ModeDefault, policy.Rule{Tools: []string{"my server/do\\*it"}, Action: policy.Allow}))
	weird := tool.Tool{Server: "my server", Name: "do*it"}
	if err := g.Check(context.Background(), weird, call(weird, nil)); err != nil {
		t.Error(err)
	}
	// An ApproverFunc that is nil is no approver.
	g = policy.NewGate(nil, policy.WithApprover(policy.ApproverFunc(nil)))
	if err := g.Check(context.Background(), shell, call(shell, nil)); kindOf(t, err) != tool.KindApprovalUnavailable {
		t.Errorf("nil ApproverFunc: %v", err)
	}
}

func TestGateAnswers(t *testing.T) {
	boom := errors.New("the UI went away")
	for _, tc := range []struct {
		name string
		ans  policy.Answer
		err  error
		kind tool.Kind
		msg  string
	}{
		{"once", policy.ProceedOnce, nil, "", ""},
		{"deny", policy.Decline, nil, tool.KindApprovalDenied, "approval_denied: the user denied the call to builtin/shell"},
		{"approver error", 0, boom, tool.KindApprovalDenied, "approval_denied: could not ask for approval of builtin/shell: the UI went away"},
		{"no answer", 0, nil, tool.KindApprovalDenied, "approval_denied: the approver gave no valid answer (answer(0)) for builtin/shell"},
		{"unknown answer", 99, nil, tool.KindApprovalDenied, "approval_denied: the approver gave no valid answer (answer(99))"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got policy.Request
			g := policy.NewGate(mustEngine(t, policy.ModeDefault), policy.WithApprover(policy.ApproverFunc(
				func(ctx context.Context, req policy.Request) (policy.Answer, error) {
					got = req
					return tc.ans, tc.err
				})))
			c := call(shell, map[string]any{"command": "ls"})
			err := g.Check(context.Background(), shell, c)
			if tc.kind == "" {
				if err != nil {
					t.Fatal(err)
				}
			} else {
				if kindOf(t, err) != tc.kind || !strings.HasPrefix(err.Error(), tc.msg) {
					t.Errorf("got %v, want %s", err, tc.msg)
				}
				var te *tool.Error
				errors.As(err, &te)
				if te.Server != "builtin" || te.Tool != "shell" {
					t.Errorf("error names %s/%s", te.Server, te.Tool)
				}
			}
			if tc.err != nil && !errors.Is(err, tc.err) {
				t.Errorf("%v does not wrap the approver's error", err)
			}
			if got.Tool.Name != "shell" || got.Call.Arguments["command"] != "ls" || got.Decision.Rule != "default mode: everything else" {
				t.Errorf("request: %+v", got)
			}
			// Only "always" answers are remembered.
			if d := g.Decide(shell, c); d.Action != policy.Ask {
				t.Errorf("remembered %+v", d)
			}
		})
	}
}

func TestGateDeny(t *testing.T) {
	g := policy.NewGate(mustEngine(t, policy.ModePlan, policy.Rule{Name: "quiet", Tools: []string{"github/*"}, Action: policy.Deny}),
		policy.WithApprover(policy.ApproverFunc(func(context.Context, policy.Request) (policy.Answer, error) {
			t.Error("asked about a denied call")
			return policy.ProceedOnce, nil
		})))
	err := g.Check(context.Background(), shell, call(shell, nil))
	if kindOf(t, err) != tool.KindPolicyViolation || err.Error() != "policy_violation: plan mode allows only read-only tools\npolicy rule: plan mode: everything else" {
		t.Errorf("plan: %v", err)
	}
	err = g.Check(context.Background(), ghSearch, call(ghSearch, nil))
	if kindOf(t, err) != tool.KindPolicyViolation || !strings.HasPrefix(err.Error(), `policy_violation: github/search_issues is denied by policy rule "quiet" (mode plan)`) {
		t.Errorf("rule without message: %v", err)
	}
	// Approve accepts any decision.
	if err := g.Approve(context.Background(), shell, call(shell, nil), policy.Decision{Action: policy.Allow}); err != nil {
		t.Errorf("allow: %v", err)
	}
	if err := g.Approve(context.Background(), shell, call(shell, nil), policy.Decision{Action: "maybe"}); kindOf(t, err) != tool.KindApprovalDenied {
		t.Errorf("bad decision: %v", err)
	}
	if err := g.Check(context.Background(), readFile, call(readFile, nil)); err != nil {
		t.Errorf("read-only in plan mode: %v", err)
	}
}

func TestGateContext(t *testing.T) {
	t.Run("already cancelled", func(t *testing.T) {
		g := policy.NewGate(nil, policy.WithApprover(policy.ApproverFunc(func(context.Context, policy.Request) (policy.Answer, error) {
			t.Error("asked with a cancelled context")
			return policy.ProceedOnce, nil
		})))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := g.Check(ctx, shell, call(shell, nil))
		if kindOf(t, err) != tool.KindCancelled || !errors.Is(err, context.Canceled) {
			t.Errorf("got %v", err)
		}
	})
	t.Run("answered as the context ended", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		g := policy.NewGate(nil, policy.WithApprover(policy.ApproverFunc(func(context.Context, policy.Request) (policy.Answer, error) {
			cancel()
			return policy.AlwaysTool, nil
		})))
		err := g.Check(ctx, shell, call(shell, nil))
		if kindOf(t, err) != tool.KindCancelled {
			t.Errorf("got %v", err)
		}
		// The answer still counts for later calls.
		if d := g.Decide(shell, call(shell, nil)); d.Action != policy.Allow {
			t.Errorf("not remembered: %+v", d)
		}
	})
	t.Run("deadline while waiting for a turn", func(t *testing.T) {
		release := make(chan struct{})
		entered := make(chan struct{})
		g := policy.NewGate(nil, policy.WithApprover(policy.ApproverFunc(func(ctx context.Context, req policy.Request) (policy.Answer, error) {
			close(entered)
			<-release
			return policy.ProceedOnce, nil
		})))
		done := make(chan error)
		go func() { done <- g.Check(context.Background(), shell, call(shell, nil)) }()
		<-entered
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		err := g.Check(ctx, writeFile, call(writeFile, nil))
		if kindOf(t, err) != tool.KindTimeout || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("got %v", err)
		}
		close(release)
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	t.Run("terminal waiting", func(t *testing.T) {
		pr, pw := io.Pipe()
		defer pw.Close()
		out := &testservers.SyncBuffer{}
		g := policy.NewGate(nil, policy.WithApprover(policy.NewTerminal(pr, out)))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- g.Check(ctx, shell, call(shell, map[string]any{"command": "make"})) }()
		waitFor(t, func() bool { return strings.Contains(out.String(), "> ") })
		cancel()
		select {
		case err := <-done:
			if kindOf(t, err) != tool.KindCancelled || !errors.Is(err, context.Canceled) {
				t.Errorf("got %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Check did not return when its context was cancelled")
		}
		// The terminal still works for the next request.
		go func() { done <- g.Check(context.Background(), shell, call(shell, nil)) }()
		waitFor(t, func() bool { return strings.Count(out.String(), "Approve this tool call?") == 2 })
		if _, err := io.WriteString(pw, "n\n"); err != nil {
			t.Fatal(err)
		}
		if err := <-done; kindOf(t, err) != tool.KindApprovalDenied {
			t.Errorf("second request: %v", err)
		}
		// Closing the input ends the terminal's reader (goleak checks).
	})
}

// Requests are put to the approver one at a time; an "always" answer
// covers the requests that were waiting for their turn.
func TestGateSerialised(t *testing.T) {
	var active, maxActive, asked atomic.Int32
	g := policy.NewGate(nil, policy.WithApprover(policy.ApproverFunc(func(ctx context.Context, req policy.Request) (policy.Answer, error) {
		n := active.Add(1)
		defer active.Add(-1)
		for {
			m := maxActive.Load()
			if n <= m || maxActive.CompareAndSwap(m, n) {
				break
			}
		}
		asked.Add(1)
		time.Sleep(time.Millisecond)
		if req.Tool.Server == "s" {
			return policy.AlwaysServer, nil
		}
		return policy.ProceedOnce, nil
	})))
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			tl := tool.Tool{Server: "s", Name: fmt.Sprint("t", i%4)}
			if i%2 == 0 {
				tl.Server = "other"
			}
			if err := g.Check(context.Background(), tl, call(tl, nil)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if m := maxActive.Load(); m != 1 {
		t.Errorf("%d requests at once", m)
	}
	// 20 calls to server "other", each asked; the 20 to "s" are covered
	// by its first "always" answer.
	if n := asked.Load(); n != 21 {
		t.Errorf("asked %d times, want 21", n)
	}
}

func TestGatePersist(t *testing.T) {
	var saved []policy.Rule
	var failed []error
	save := func(r policy.Rule) error {
		saved = append(saved, r)
		if r.Server != "" {
			return errors.New("disk full")
		}
		return nil
	}
	e := mustEngine(t, policy.ModeDefault, policy.Rule{Name: "ask github", Server: "github", Action: policy.Ask, Priority: 7})
	a := &answers{by: map[string]policy.Answer{"builtin/shell": policy.AlwaysTool, "github/create_issue": policy.AlwaysServer, "x/y[1]": policy.AlwaysTool}}
	g := policy.NewGate(e, policy.WithApprover(a), policy.WithPersist(save), policy.WithPersistAlways(true),
		policy.WithPersistError(func(r policy.Rule, err error) { failed = append(failed, err) }))
	ctx := context.Background()
	odd := tool.Tool{Server: "x", Name: "y[1]"}
	for _, tl := range []tool.Tool{shell, ghCreate, odd, shell, ghDelete} {
		if err := g.Check(ctx, tl, call(tl, nil)); err != nil {
			t.Fatal(err)
		}
	}
	want := []policy.Rule{
		{Name: "always allow builtin/shell", Tools: []string{"builtin/shell"}, Action: policy.Allow},
		// Above the user rule that asked, as the session's memory is.
		{Name: "always allow server github", Server: "github", Action: policy.Allow, Priority: 8},
		{Name: "always allow x/y[1]", Tools: []string{`x/y\[1\]`}, Action: policy.Allow},
	}
	if fmt.Sprintf("%+v", saved) != fmt.Sprintf("%+v", want) {
		t.Errorf("saved\n%+v\nwant\n%+v", saved, want)
	}
	if len(failed) != 1 || failed[0].Error() != "disk full" {
		t.Errorf("persist errors: %v", failed)
	}
	// The saved rules decide as the answers did.
	e2 := mustEngine(t, policy.ModeDefault, append([]policy.Rule{{Name: "ask github", Server: "github", Action: policy.Ask, Priority: 7}}, want...)...)
	for _, tl := range []tool.Tool{shell, ghCreate, ghDelete, odd} {
		if d := e2.Decide(tl, call(tl, nil)); d.Action != policy.Allow {
			t.Errorf("%s/%s: %+v", tl.Server, tl.Name, d)
		}
	}
	// Persisting off: nothing saved.
	saved = nil
	g = policy.NewGate(e, policy.WithApprover(a), policy.WithPersist(save))
	if err := g.Check(ctx, shell, call(shell, nil)); err != nil || saved != nil {
		t.Errorf("saved %v with persisting off (%v)", saved, err)
	}
}

func TestGateSetMode(t *testing.T) {
	a := &answers{by: map[string]policy.Answer{"builtin/shell": policy.AlwaysTool}}
	g := policy.NewGate(mustEngine(t, policy.ModeDefault), policy.WithApprover(a))
	if err := g.Check(context.Background(), shell, call(shell, nil)); err != nil {
		t.Fatal(err)
	}
	if err := g.SetMode(policy.ModePlan); err != nil {
		t.Fatal(err)
	}
	if d := g.Decide(shell, call(shell, nil)); d.Action != policy.Deny {
		t.Errorf("plan: %+v", d)
	}
	if err := g.SetMode(policy.ModeAutoEdit); err != nil {
		t.Fatal(err)
	}
	if d := g.Decide(shell, call(shell, nil)); d.Action != policy.Allow {
		t.Errorf("auto_edit keeps the session's answers: %+v", d)
	}
	if g.Engine().Mode() != policy.ModeAutoEdit {
		t.Errorf("mode %s", g.Engine().Mode())
	}
	if err := g.SetMode("wild"); err == nil {
		t.Error("SetMode accepted a bad mode")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
		time.Sleep(time.Millisecond)
	}
}

// Admit tells the scheduler it is about to ask, and only then.
func TestAdmitReportsAsking(t *testing.T) {
	e, err := policy.New(policy.ModeDefault, nil)
	if err != nil {
		t.Fatal(err)
	}
	shell := tool.Tool{Server: "builtin", Name: "shell"}
	read := tool.Tool{Server: "builtin", Name: "read_file", Annotations: tool.Annotations{ReadOnly: tool.Bool(true)}}
	var asked []string
	asking := func(msg string) { asked = append(asked, msg) }

	g := policy.NewGate(e, policy.WithApprover(policy.ApproverFunc(func(context.Context, policy.Request) (policy.Answer, error) { return policy.ProceedOnce, nil })))
	if err := g.Admit(context.Background(), read, tool.Call{Server: "builtin", Tool: "read_file"}, asking); err != nil || len(asked) != 0 {
		t.Fatalf("read-only: %v, asked %v", err, asked)
	}
	if err := g.Admit(context.Background(), shell, tool.Call{Server: "builtin", Tool: "shell"}, asking); err != nil || len(asked) != 1 || !strings.Contains(asked[0], "builtin/shell") {
		t.Fatalf("shell: %v, asked %q", err, asked)
	}
	// Nobody to ask: refused at once, nothing reported as awaiting.
	asked = nil
	err = policy.NewGate(e).Admit(context.Background(), shell, tool.Call{Server: "builtin", Tool: "shell"}, asking)
	if tool.KindOf(err) != tool.KindApprovalUnavailable || len(asked) != 0 {
		t.Fatalf("non-interactive: %v, asked %v", err, asked)
	}
}

// SetEngine (a reload) puts new rules in use for the next decision and
// keeps the session's "always" answers.
func TestGateSetEngine(t *testing.T) {
	a := &answers{by: map[string]policy.Answer{"builtin/shell": policy.AlwaysTool}}
	g := policy.NewGate(mustEngine(t, policy.ModeDefault), policy.WithApprover(a))
	if err := g.Check(context.Background(), shell, call(shell, nil)); err != nil {
		t.Fatal(err)
	}
	g.SetEngine(mustEngine(t, policy.ModeDefault, policy.Rule{Name: "no writes", Tools: []string{"builtin/write_file"}, Action: policy.Deny}))
	if d := g.Decide(writeFile, call(writeFile, nil)); d.Action != policy.Deny || d.Rule != "no writes" {
		t.Errorf("the new rule: %+v", d)
	}
	if g.Requires(writeFile) != policy.Deny {
		t.Errorf("Requires: %v", g.Requires(writeFile))
	}
	if d := g.Decide(shell, call(shell, nil)); d.Action != policy.Allow {
		t.Errorf("the session's answer was dropped: %+v", d)
	}
	if n := a.count(); n != 1 {
		t.Errorf("asked %d times", n)
	}
}
