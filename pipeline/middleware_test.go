package pipeline_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmux/toolmux/funcsource"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/tool"
)

// limiter is a user's middleware: it lets through at most n calls, and
// refuses the others without calling the tool.
type limiter struct {
	mu   sync.Mutex
	left int
}

func (l *limiter) middleware(next pipeline.Handler) pipeline.Handler {
	return pipeline.HandlerFunc(func(ctx context.Context, call tool.Call) *tool.Record {
		l.mu.Lock()
		ok := l.left > 0
		l.left--
		l.mu.Unlock()
		if !ok {
			return tool.Refused(&call, &tool.Error{Kind: tool.KindPolicyViolation, Server: call.Server, Tool: call.Tool,
				Message: "rate limit: too many calls"})
		}
		return next.Call(ctx, call)
	})
}

// audit is a user's middleware that remembers what it saw, under a name,
// so the order of several can be checked.
type audit struct {
	mu   sync.Mutex
	seen []string // "name: message argument"
}

func (a *audit) hook(name string) pipeline.Middleware {
	return func(next pipeline.Handler) pipeline.Handler {
		return pipeline.HandlerFunc(func(ctx context.Context, call tool.Call) *tool.Record {
			msg, _ := call.Arguments["message"].(string)
			a.mu.Lock()
			a.seen = append(a.seen, name+": "+msg)
			a.mu.Unlock()
			return next.Call(ctx, call)
		})
	}
}

func (a *audit) calls() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.seen)
}

// Users' middlewares run innermost, in the order given, in front of a real
// MCP server: they see the repaired arguments, and what they refuse goes
// back out through the built-in steps (recorded, guided, given a verdict).
// A call refused before the chain never reaches them.
func TestWithMiddlewareAgainstRealServer(t *testing.T) {
	everything, err := mcpsource.New(mcpsource.Config{Name: "everything", Transport: mcpsource.Stdio,
		Command: testservers.NodeBin(t, "mcp-server-everything"), ConnectTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(everything, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	var mu sync.Mutex
	var recorded []*tool.Record
	lim := &limiter{left: 2}
	aud := &audit{}
	const guidance = "Wait before calling again."
	p, err := pipeline.New(m,
		pipeline.WithRecorder(pipeline.RecorderFunc(func(_ context.Context, r *tool.Record) {
			mu.Lock()
			recorded = append(recorded, r)
			mu.Unlock()
		})),
		pipeline.WithRepair(pipeline.RepairOptions{Aliases: []pipeline.Aliases{{Tools: "everything/echo", Map: map[string]string{"msg": "message"}}}}),
		pipeline.WithInstructions(pipeline.InstructionsOptions{Rules: []pipeline.InstructionRule{{Kinds: []string{"policy_violation"}, Text: guidance}}}),
		pipeline.WithRollback(pipeline.RollbackOptions{Rules: []pipeline.RollbackRule{{Kinds: []string{"policy_violation"}, Reason: "rate limited"}}}),
		pipeline.WithMiddleware(aud.hook("outer")),
		pipeline.WithMiddleware(lim.middleware, aud.hook("inner")),
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	echo := func(args map[string]any) *tool.Record {
		t.Helper()
		return p.Call(ctx, tool.Call{Task: "t1", Server: "everything", Tool: "echo", Arguments: args})
	}

	// The alias was applied before the user's middlewares saw the call.
	first := echo(map[string]any{"msg": "one"})
	if first.Error != nil || first.Result == nil || !strings.Contains(first.Result.Text(), "one") {
		t.Fatalf("first call: %+v", first)
	}
	if second := echo(map[string]any{"message": "two"}); second.Error != nil {
		t.Fatalf("second call: %+v", second.Error)
	}
	// The third is refused by the limiter: the tool is not called, and the
	// refusal is recorded, guided and given a verdict.
	third := echo(map[string]any{"message": "three"})
	if tool.KindOf(third.Err()) != tool.KindPolicyViolation {
		t.Fatalf("third call: want the limiter's refusal, got %+v", third)
	}
	if !slices.Contains(third.Instructions, guidance) {
		t.Errorf("the refusal got no guidance: %v", third.Instructions)
	}
	if third.Verdict == nil || !third.Verdict.Rollback || third.Verdict.Reason != "rate limited" {
		t.Errorf("the refusal's verdict: %+v", third.Verdict)
	}
	want := []string{"outer: one", "inner: one", "outer: two", "inner: two", "outer: three"}
	if got := aud.calls(); !slices.Equal(got, want) {
		t.Errorf("the user's middlewares saw %q, want %q (first given outermost)", got, want)
	}

	// A refusal from before the chain takes the same way out, without
	// reaching the user's middlewares.
	refused := p.Refuse(ctx, tool.Call{Task: "t1", Server: "everything", Tool: "echo", Arguments: map[string]any{"message": "four"}},
		&tool.Error{Kind: tool.KindPolicyViolation, Message: "denied by the policy"})
	if !slices.Contains(refused.Instructions, guidance) || refused.Verdict == nil || !refused.Verdict.Rollback || refused.ID == "" {
		t.Errorf("the refusal did not go through the steps after the call: %+v", refused)
	}
	if got := aud.calls(); len(got) != len(want) {
		t.Errorf("a refusal reached the user's middlewares: %q", got)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(recorded) != 4 || recorded[2] != third || recorded[3] != refused {
		t.Errorf("recorded %d records, want the 4 returned", len(recorded))
	}
}

// A chain of only the caller's middlewares: no built-in one runs, and a
// refused call is returned as it is.
func TestWithMiddlewareAlone(t *testing.T) {
	everything, err := mcpsource.New(mcpsource.Config{Name: "everything", Transport: mcpsource.Stdio,
		Command: testservers.NodeBin(t, "mcp-server-everything"), ConnectTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(everything, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	aud := &audit{}
	p, err := pipeline.New(m, pipeline.WithOrder(), pipeline.WithMiddleware(aud.hook("only")))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Order(); len(got) != 0 {
		t.Errorf("order %v, want none", got)
	}
	rec := p.Call(context.Background(), tool.Call{Server: "everything", Tool: "echo", Arguments: map[string]any{"message": "hi"}})
	if rec.Error != nil || len(rec.Notes) != 0 || rec.Verdict != nil {
		t.Errorf("a chain without built-in middlewares changed the record: %+v", rec)
	}
	if got := aud.calls(); !slices.Equal(got, []string{"only: hi"}) {
		t.Errorf("saw %q", got)
	}
	refused := p.Refuse(context.Background(), tool.Call{Server: "everything", Tool: "echo"}, &tool.Error{Kind: tool.KindCancelled, Message: "cancelled"})
	if tool.KindOf(refused.Err()) != tool.KindCancelled || refused.Verdict != nil {
		t.Errorf("refusal: %+v", refused)
	}
}

// The built-in middlewares' constructors are exported, so a caller can
// assemble a chain by hand: here each of them, in the default order, in
// front of a Go function tool.
func TestChainFromExportedConstructors(t *testing.T) {
	type fetchArgs struct {
		URL   string `json:"url"`
		Count int    `json:"count"`
	}
	src := funcsource.New("web",
		funcsource.Func("fetch", "Fetches a page.", func(_ context.Context, in fetchArgs) (string, error) {
			return strings.Repeat("x", 100) + fmt.Sprint(in.Count) + " api_key=sk-0123456789abcdefghijklmn", nil
		}, funcsource.ReadOnly()))
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	must := func(mw pipeline.Middleware, err error) pipeline.Middleware {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return mw
	}
	var recorded []*tool.Record
	in, err := pipeline.NewInstructions(pipeline.InstructionsOptions{Tools: []pipeline.ToolText{{Tools: "web/*", Text: "Fetch less."}}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := pipeline.NewDedupe(pipeline.DedupeOptions{Policy: "reject"})
	if err != nil {
		t.Fatal(err)
	}
	h := pipeline.Chain(m,
		must(pipeline.NewRecord(pipeline.RedactOptions{}, pipeline.RecorderFunc(func(_ context.Context, r *tool.Record) { recorded = append(recorded, r) }), pipeline.Limits{}, nil)),
		in.Middleware,
		must(pipeline.NewTruncate(pipeline.TruncateOptions{MaxChars: 40}, t.TempDir())),
		must(pipeline.NewRollback(pipeline.RollbackOptions{})),
		must(pipeline.NewFallback(nil)),
		must(pipeline.NewRepair(pipeline.RepairOptions{}, m)),
		must(pipeline.NewValidate(pipeline.ValidateOptions{}, m)),
		must(pipeline.NewURLPolicy(pipeline.URLPolicyOptions{Rules: []pipeline.URLRule{{Action: "deny", Host: "blocked.example"}}})),
		d.Middleware)
	ctx := context.Background()
	call := func(url string) *tool.Record {
		return h.Call(ctx, tool.Call{Task: "t", Server: "web", Tool: "fetch", Arguments: map[string]any{"url": url, "count": "3"}})
	}
	rec := call("https://ok.example/a")
	if rec.Error != nil {
		t.Fatalf("call: %+v", rec.Error)
	}
	// repaired ("3" → 3), truncated, guided, recorded with an id.
	if strings.Contains(rec.Result.Text(), strings.Repeat("x", 100)) || len(rec.Instructions) != 1 || rec.ID == "" || rec.Verdict == nil {
		t.Errorf("record: %+v", rec)
	}
	if len(notesOf(rec, "repair")) == 0 || len(notesOf(rec, "truncate")) == 0 {
		t.Errorf("notes: %+v", rec.Notes)
	}
	if tool.KindOf(call("https://blocked.example/").Err()) != tool.KindPolicyViolation {
		t.Error("the URL policy let a denied host through")
	}
	if dup := call("https://ok.example/a"); tool.KindOf(dup.Err()) != tool.KindDuplicateQuery || !dup.Verdict.Rollback {
		t.Errorf("a repeated query: %+v", dup)
	}
	if len(recorded) != 3 {
		t.Errorf("recorded %d, want 3", len(recorded))
	}
}

func notesOf(rec *tool.Record, layer string) []tool.Note {
	var out []tool.Note
	for _, n := range rec.Notes {
		if n.Layer == layer {
			out = append(out, n)
		}
	}
	return out
}
