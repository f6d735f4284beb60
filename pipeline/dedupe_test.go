package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/toolmux/toolmux/tool"
)

// dedupeHarness is a Dedupe in front of a handler that answers "result"
// and fails calls whose arguments have "fail": true.
type dedupeHarness struct {
	d     *Dedupe
	h     Handler
	calls atomic.Int32
}

func newDedupeHarness(t *testing.T, cfg DedupeOptions) *dedupeHarness {
	t.Helper()
	d, err := NewDedupe(cfg)
	if err != nil {
		t.Fatalf("NewDedupe: %v", err)
	}
	dh := &dedupeHarness{d: d}
	dh.h = Chain(HandlerFunc(func(_ context.Context, c tool.Call) *tool.Record {
		dh.calls.Add(1)
		rec := &tool.Record{Server: c.Server, Tool: c.Tool, Task: c.Task, Session: c.Session, Arguments: c.Arguments}
		if c.Arguments["fail"] == true {
			rec.Result = tool.ErrorResult("upstream failed")
			rec.Error = &tool.Error{Kind: tool.KindToolError, Message: "upstream failed"}
			return rec
		}
		rec.Result = tool.TextResult("result")
		return rec
	}), d.Middleware)
	return dh
}

// dedupeCount returns the count a dedupe note reports, 0 without one.
func dedupeCount(rec *tool.Record) int {
	for _, n := range rec.Notes {
		if n.Layer == "dedupe" {
			return n.Data["count"].(int)
		}
	}
	return 0
}

func TestDedupeCounting(t *testing.T) {
	type step struct {
		op            string // "call" (default), "commit", "discard", "end"
		task, session string
		srv, tl       string // default "web", "google_search"
		args          map[string]any
		want          int // earlier calls the warning reports; 0: no warning
	}
	q := func(s string) map[string]any { return map[string]any{"q": s} }
	call := func(task, session string, args map[string]any, want int) step {
		return step{task: task, session: session, args: args, want: want}
	}
	commit := func(task, session string) step { return step{op: "commit", task: task, session: session} }
	discard := func(task, session string) step { return step{op: "discard", task: task, session: session} }
	end := func(task string) step { return step{op: "end", task: task} }
	failing := map[string]any{"q": "flaky", "fail": true}

	tests := []struct {
		name  string
		steps []step
	}{
		{"same query in one turn", []step{
			call("t", "main", q("rust mcp"), 0),
			call("t", "main", q("rust mcp"), 1),
			call("t", "main", q("rust mcp"), 2),
			call("t", "main", q("go mcp"), 0),
		}},
		{"across committed turns", []step{
			call("t", "main", q("a"), 0), commit("t", "main"),
			call("t", "main", q("a"), 1), commit("t", "main"),
			call("t", "main", q("a"), 2),
		}},
		{"a discarded turn is forgotten", []step{
			call("t", "main", q("a"), 0), discard("t", "main"),
			call("t", "main", q("a"), 0), commit("t", "main"),
			call("t", "main", q("a"), 1),
		}},
		{"discard keeps committed counts", []step{
			call("t", "main", q("a"), 0), commit("t", "main"),
			call("t", "main", q("a"), 1), call("t", "main", q("a"), 2), discard("t", "main"),
			call("t", "main", q("a"), 1),
		}},
		{"commit with nothing pending", []step{
			commit("t", "main"), commit("t", "main"), discard("t", "main"), commit("nobody", "x"),
			call("t", "main", q("a"), 0), commit("t", "main"), commit("t", "main"),
			call("t", "main", q("a"), 1),
		}},
		{"sessions are separate", []step{
			call("t", "main", q("a"), 0),
			call("t", "sub-1", q("a"), 0),
			call("t", "main", q("a"), 1),
			call("t", "sub-1", q("a"), 1),
			call("t", "", q("a"), 0),
		}},
		{"tasks are separate", []step{
			call("t1", "main", q("a"), 0), commit("t1", "main"),
			call("t2", "main", q("a"), 0),
			call("t1", "main", q("a"), 1),
		}},
		{"EndTask forgets the task only", []step{
			call("t1", "main", q("a"), 0), call("t1", "sub", q("a"), 0), commit("t1", "main"),
			call("t2", "main", q("a"), 0),
			end("t1"),
			call("t1", "main", q("a"), 0), call("t1", "sub", q("a"), 0),
			call("t2", "main", q("a"), 1),
			end("never-seen"),
		}},
		{"failed calls are not recorded", []step{
			call("t", "main", failing, 0),
			call("t", "main", failing, 0),
			call("t", "main", q("flaky"), 0), // "fail" is not a key: the same query
			call("t", "main", failing, 1),    // warned, failed, not recorded
			call("t", "main", q("flaky"), 1),
		}},
		{"URLs are canonical", []step{
			call("t", "main", map[string]any{"url": "https://Example.com:443/a/?b=2&a=1#x"}, 0),
			call("t", "main", map[string]any{"url": "https://example.com/a?a=1&b=2"}, 1),
			call("t", "main", map[string]any{"url": "https://example.com/a?a=1&b=3"}, 0),
			call("t", "main", map[string]any{"url": "http://example.com/a?a=1&b=2"}, 0),
		}},
		{"text is normalised", []step{
			call("t", "main", q("Rust  MCP\tServers"), 0),
			call("t", "main", q("  rust mcp servers "), 1),
			call("t", "main", q("rust mcp"), 0),
		}},
		{"calls without keys are never duplicates", []step{
			call("t", "main", map[string]any{"path": "a.txt"}, 0),
			call("t", "main", map[string]any{"path": "a.txt"}, 0),
			call("t", "main", nil, 0),
			call("t", "main", nil, 0),
			call("t", "main", map[string]any{"q": nil}, 0),
			call("t", "main", map[string]any{"q": nil}, 0),
		}},
		{"calls without a task are never duplicates", []step{
			call("", "", q("a"), 0),
			call("", "", q("a"), 0),
			call("", "main", q("a"), 0),
			call("", "main", q("a"), 0),
		}},
		{"tool and server are part of the query", []step{
			call("t", "main", q("a"), 0),
			{task: "t", session: "main", tl: "bing_search", args: q("a")},
			{task: "t", session: "main", srv: "other", args: q("a")},
			{task: "t", session: "main", srv: "other", args: q("a"), want: 1},
		}},
		{"other arguments do not matter", []step{
			call("t", "main", map[string]any{"q": "a", "num": 10.0}, 0),
			call("t", "main", map[string]any{"q": "a", "num": 20.0}, 1),
		}},
		{"several keys", []step{
			call("t", "main", map[string]any{"url": "https://e.com/", "info_to_extract": "Prices"}, 0),
			call("t", "main", map[string]any{"info_to_extract": "prices ", "url": "https://E.com"}, 1),
			call("t", "main", map[string]any{"url": "https://e.com/", "info_to_extract": "dates"}, 0),
			call("t", "main", map[string]any{"url": "https://e.com/"}, 0),
		}},
		{"values by type", []step{
			call("t", "main", q("1"), 0),
			call("t", "main", map[string]any{"q": 1.0}, 0),
			call("t", "main", map[string]any{"q": 1}, 1),
			call("t", "main", map[string]any{"q": json.Number("1.0")}, 2),
			call("t", "main", map[string]any{"q": true}, 0),
			call("t", "main", map[string]any{"q": map[string]any{"b": 1.0, "a": []any{"x"}}}, 0),
			call("t", "main", map[string]any{"q": map[string]any{"a": []any{"x"}, "b": 1.0}}, 1),
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dh := newDedupeHarness(t, DedupeOptions{})
			for i, s := range tc.steps {
				switch s.op {
				case "commit":
					dh.d.Commit(s.task, s.session)
					continue
				case "discard":
					dh.d.Discard(s.task, s.session)
					continue
				case "end":
					dh.d.EndTask(s.task)
					continue
				}
				c := tool.Call{Server: "web", Tool: "google_search", Task: s.task, Session: s.session, Arguments: s.args}
				if s.srv != "" {
					c.Server = s.srv
				}
				if s.tl != "" {
					c.Tool = s.tl
				}
				rec := dh.h.Call(context.Background(), c)
				if got := dedupeCount(rec); got != s.want {
					t.Errorf("step %d (%s %s/%s %v): count %d, want %d", i, s.task, s.session, c.Tool, s.args, got, s.want)
				}
			}
		})
	}
}

func TestDedupePolicies(t *testing.T) {
	call := tool.Call{Server: "web", Tool: "google_search", Task: "t", Session: "main", Arguments: map[string]any{"q": "rust mcp", "num": 10}}

	t.Run("allow", func(t *testing.T) {
		dh := newDedupeHarness(t, DedupeOptions{Policy: "allow"})
		for range 3 {
			rec := dh.h.Call(context.Background(), call)
			if rec.Err() != nil || len(rec.Notes) != 0 || len(rec.Result.Content) != 1 {
				t.Fatalf("allow: %v %+v %+v", rec.Err(), rec.Notes, rec.Result)
			}
		}
		if dh.calls.Load() != 3 {
			t.Errorf("calls = %d", dh.calls.Load())
		}
	})

	t.Run("warn", func(t *testing.T) {
		dh := newDedupeHarness(t, DedupeOptions{}) // warn is the default
		first := dh.h.Call(context.Background(), call)
		if len(first.Result.Content) != 1 || len(first.Notes) != 0 {
			t.Fatalf("first call warned: %+v %+v", first.Result, first.Notes)
		}
		dh.h.Call(context.Background(), call)
		rec := dh.h.Call(context.Background(), call)
		if rec.Err() != nil || dh.calls.Load() != 3 {
			t.Fatalf("warn: %v, calls %d", rec.Err(), dh.calls.Load())
		}
		want := "[toolmux] This query was already made 2 time(s) in this task; consider using the earlier result or changing the query."
		if n := len(rec.Result.Content); n != 2 || rec.Result.Content[0].Text != "result" || rec.Result.Content[1].Text != want {
			t.Errorf("result %+v", rec.Result.Content)
		}
		if len(rec.Notes) != 1 {
			t.Fatalf("notes %+v", rec.Notes)
		}
		n := rec.Notes[0]
		if n.Layer != "dedupe" || n.Data["policy"] != "warn" || n.Data["count"] != 2 || len(n.Data["fingerprint"].(string)) != 64 {
			t.Errorf("note %+v", n)
		}
		if !strings.Contains(n.Message, `google_search q="rust mcp"`) {
			t.Errorf("note message %q", n.Message)
		}
		if !warnedDuplicate(rec) {
			t.Error("the rollback layer does not see the warning")
		}
		t.Logf("warning: %s", want)
		t.Logf("note: %s", n.Message)
	})

	t.Run("reject", func(t *testing.T) {
		dh := newDedupeHarness(t, DedupeOptions{Policy: "reject"})
		if rec := dh.h.Call(context.Background(), call); rec.Err() != nil {
			t.Fatal(rec.Err())
		}
		for range 2 {
			rec := dh.h.Call(context.Background(), call)
			if tool.KindOf(rec.Err()) != tool.KindDuplicateQuery {
				t.Fatalf("reject: %v", rec.Err())
			}
			// A refused call is not counted: still "1 time(s)".
			want := `the same query (google_search q="rust mcp") was already made 1 time(s) in this task; use the earlier result or change the query`
			if rec.Error.Message != want {
				t.Errorf("message %q\nwant    %q", rec.Error.Message, want)
			}
			if rec.Error.Server != "web" || rec.Error.Tool != "google_search" || rec.Task != "t" || rec.Result != nil {
				t.Errorf("record %+v", rec)
			}
			if len(rec.Notes) != 1 || rec.Notes[0].Data["policy"] != "reject" || rec.Notes[0].Data["count"] != 1 {
				t.Errorf("notes %+v", rec.Notes)
			}
			t.Logf("rejected: %v", rec.Err())
		}
		if dh.calls.Load() != 1 {
			t.Errorf("a rejected call reached the tool: %d calls", dh.calls.Load())
		}
	})

	t.Run("per tool", func(t *testing.T) {
		dh := newDedupeHarness(t, DedupeOptions{
			Policy: "warn",
			Keys:   []string{"q"},
			Tools: []DedupeTool{
				{Tools: "google_search", Policy: "reject"},
				{Tools: "fs/*", Keys: []string{"path"}},
				{Tools: "scrape_*", Keys: []string{}}, // never checked
				{Tools: "google_*", Policy: "allow"},  // shadowed for google_search
				{Tools: "bing_search", Policy: "allow"},
			},
		})
		do := func(srv, tl string, args map[string]any) *tool.Record {
			return dh.h.Call(context.Background(), tool.Call{Server: srv, Tool: tl, Task: "t", Arguments: args})
		}
		do("web", "google_search", map[string]any{"q": "a"})
		if rec := do("web", "google_search", map[string]any{"q": "a"}); tool.KindOf(rec.Err()) != tool.KindDuplicateQuery {
			t.Errorf("google_search: %v", rec.Err())
		}
		do("fs", "read", map[string]any{"path": "a", "q": "x"})
		if rec := do("fs", "read", map[string]any{"path": "a", "q": "y"}); dedupeCount(rec) != 1 || rec.Err() != nil {
			t.Errorf("fs/read keyed on path: %+v", rec.Notes)
		}
		do("web", "scrape_website", map[string]any{"q": "a"})
		if rec := do("web", "scrape_website", map[string]any{"q": "a"}); len(rec.Notes) != 0 {
			t.Errorf("scrape_website has no keys: %+v", rec.Notes)
		}
		do("web", "bing_search", map[string]any{"q": "a"})
		if rec := do("web", "bing_search", map[string]any{"q": "a"}); len(rec.Notes) != 0 {
			t.Errorf("bing_search allows: %+v", rec.Notes)
		}
		do("web", "other", map[string]any{"q": "a", "url": "https://e.com"})
		if rec := do("web", "other", map[string]any{"q": "a", "url": "https://f.com"}); dedupeCount(rec) != 1 {
			t.Errorf("global keys are q only: %+v", rec.Notes)
		}
	})
}

func TestDedupeConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  DedupeOptions
		want string
	}{
		{DedupeOptions{Policy: "block"}, `policy "block"`},
		{DedupeOptions{Tools: []DedupeTool{{Tools: "a", Policy: "nope"}}}, `tools[0] (a): policy "nope"`},
		{DedupeOptions{Tools: []DedupeTool{{Tools: "a"}, {Tools: "[x"}}}, "tools[1]: bad tool pattern"},
	} {
		if _, err := NewDedupe(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewDedupe(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := NewDedupe(DedupeOptions{Policy: "Reject", Tools: []DedupeTool{{Tools: "x/*", Policy: " WARN "}}}); err != nil {
		t.Errorf("case of policies: %v", err)
	}
}

func TestDedupeFingerprint(t *testing.T) {
	d, err := NewDedupe(DedupeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fp := func(srv, tl string, args map[string]any) string {
		s, ok := d.Fingerprint(tool.Call{Server: srv, Tool: tl, Arguments: args})
		if !ok {
			return ""
		}
		return s
	}
	a := fp("web", "search", map[string]any{"q": "a", "url": "b"})
	if len(a) != 64 {
		t.Fatalf("fingerprint %q", a)
	}
	for name, other := range map[string]string{
		"keys joined into one value": fp("web", "search", map[string]any{"q": `a","url","b`}),
		"value moved to another key": fp("web", "search", map[string]any{"q": "b", "url": "a"}),
		"server and tool joined":     fp("web/search", "", map[string]any{"q": "a", "url": "b"}),
		"server and tool split":      fp("we", "b/search", map[string]any{"q": "a", "url": "b"}),
		"one key only":               fp("web", "search", map[string]any{"q": "a"}),
	} {
		if other == a || other == "" {
			t.Errorf("%s: fingerprint %q (the original is %q)", name, other, a)
		}
	}
	if b := fp("web", "search", map[string]any{"url": "b", "q": " A ", "page": 2.0}); b != a {
		t.Errorf("equivalent call: %q != %q", b, a)
	}
	if s, ok := d.Fingerprint(tool.Call{Server: "web", Tool: "search", Arguments: map[string]any{"path": "x"}}); ok || s != "" {
		t.Errorf("call without keys: %q, %v", s, ok)
	}
}

// TestDedupeParallelDuplicates sends the same query many times at once: the
// first runs, and with "reject" the others are refused while it is still
// running.
func TestDedupeParallelDuplicates(t *testing.T) {
	d, err := NewDedupe(DedupeOptions{Policy: "reject"})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var ran atomic.Int32
	h := d.Middleware(HandlerFunc(func(_ context.Context, c tool.Call) *tool.Record {
		ran.Add(1)
		<-release
		return &tool.Record{Result: tool.TextResult("ok")}
	}))
	const n = 20
	recs := make([]*tool.Record, n)
	var refused sync.WaitGroup
	refused.Add(n - 1)
	var all sync.WaitGroup
	for i := range n {
		all.Go(func() {
			recs[i] = h.Call(context.Background(), tool.Call{Server: "web", Tool: "search", Task: "t", Arguments: map[string]any{"q": "same"}})
			if recs[i].Err() != nil {
				refused.Done()
			}
		})
	}
	refused.Wait()
	close(release)
	all.Wait()
	if ran.Load() != 1 {
		t.Errorf("%d calls ran, want 1", ran.Load())
	}
	// The one that ran is pending now: a new call counts it once.
	rec := h.Call(context.Background(), tool.Call{Server: "web", Tool: "search", Task: "t", Arguments: map[string]any{"q": "same"}})
	if rec.Notes[0].Data["count"] != 1 {
		t.Errorf("count after the parallel burst: %v", rec.Notes[0].Data)
	}
}

func TestDedupeEvictsLeastRecentlyUsed(t *testing.T) {
	dh := newDedupeHarness(t, DedupeOptions{})
	dh.d.max = 3
	do := func(task string) int {
		return dedupeCount(dh.h.Call(context.Background(), tool.Call{Server: "web", Tool: "s", Task: task, Arguments: map[string]any{"q": "a"}}))
	}
	do("t1")
	do("t2")
	do("t3")
	if do("t1") != 1 { // t1 is now the most recent; t2 the least
		t.Fatal("t1 forgotten too early")
	}
	do("t4") // evicts t2
	if dh.d.lru.Len() != 3 || len(dh.d.tasks) != 3 {
		t.Fatalf("%d namespaces, %d tasks", dh.d.lru.Len(), len(dh.d.tasks))
	}
	if do("t2") != 0 {
		t.Error("t2 was not evicted")
	}
	if do("t1") != 2 {
		t.Error("t1 was evicted")
	}
}

func TestDedupeConcurrentUse(t *testing.T) {
	dh := newDedupeHarness(t, DedupeOptions{Tools: []DedupeTool{{Tools: "r", Policy: "reject"}}})
	dh.d.max = 16
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 300 {
				task := fmt.Sprintf("t%d", (w+i)%5)
				session := []string{"main", "sub"}[i%2]
				tl := []string{"s", "r"}[i%3%2]
				args := map[string]any{"q": fmt.Sprintf("q%d", i%7), "url": "https://e.com/" + fmt.Sprint(i%3)}
				if i%11 == 0 {
					args["fail"] = true
				}
				dh.h.Call(context.Background(), tool.Call{Server: "web", Tool: tl, Task: task, Session: session, Arguments: args})
				switch i % 13 {
				case 3:
					dh.d.Commit(task, session)
				case 7:
					dh.d.Discard(task, session)
				case 12:
					dh.d.EndTask(task)
				}
				_, _ = dh.d.Fingerprint(tool.Call{Server: "web", Tool: tl, Arguments: args})
			}
		})
	}
	wg.Wait()
	dh.d.mu.Lock()
	defer dh.d.mu.Unlock()
	if dh.d.lru.Len() > 16 {
		t.Errorf("%d namespaces kept, bound 16", dh.d.lru.Len())
	}
	for _, sessions := range dh.d.tasks {
		for _, sp := range sessions {
			if len(sp.inflight) != 0 {
				t.Errorf("calls still in flight: %v", sp.inflight)
			}
		}
	}
}

func FuzzFingerprint(f *testing.F) {
	for _, s := range []string{
		`{"q": "Rust  MCP"}`,
		`{"url": "https://Example.com:443/a/?b=2&a=1#x", "info_to_extract": "prices"}`,
		`{"query": 1.0, "Query": true, "subtask": null}`,
		`{"q": {"b": [1, 2.50, "x"], "a": {"z": null}}}`,
		`{"q": 1e300, "url": -0}`,
		`{"q": "a", "q": "b"}`,
		`{"subtask": "\u00e9cole\tSTRASSE", "other": "ignored"}`,
		`{}`,
		`[]`,
	} {
		f.Add(s)
	}
	d, err := NewDedupe(DedupeOptions{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		var args map[string]any
		if json.Unmarshal([]byte(doc), &args) != nil {
			return
		}
		call := tool.Call{Server: "web", Tool: "search", Arguments: args}
		fp, ok := d.Fingerprint(call)
		if ok != (len(presentKeys(args, DefaultDedupeKeys())) > 0) || ok != (fp != "") {
			t.Fatalf("Fingerprint(%s) = %q, %v", doc, fp, ok)
		}

		// Re-marshalled (keys sorted, numbers re-formatted).
		b, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		var again map[string]any
		if err := json.Unmarshal(b, &again); err != nil {
			t.Fatal(err)
		}
		if fp2, _ := d.Fingerprint(tool.Call{Server: "web", Tool: "search", Arguments: again}); fp2 != fp {
			t.Fatalf("re-marshalled %s -> %s: fingerprint %q != %q", doc, b, fp2, fp)
		}

		// Keys in reverse order, and numbers decoded as json.Number.
		var keys []string
		for k := range args {
			keys = append(keys, k)
		}
		var rev bytes.Buffer
		rev.WriteByte('{')
		for i := len(keys) - 1; i >= 0; i-- {
			kb, _ := json.Marshal(keys[i])
			vb, _ := json.Marshal(args[keys[i]])
			rev.Write(kb)
			rev.WriteByte(':')
			rev.Write(vb)
			if i > 0 {
				rev.WriteByte(',')
			}
		}
		rev.WriteByte('}')
		dec := json.NewDecoder(&rev)
		dec.UseNumber()
		var numbers map[string]any
		if err := dec.Decode(&numbers); err != nil {
			t.Fatal(err)
		}
		if fp3, _ := d.Fingerprint(tool.Call{Server: "web", Tool: "search", Arguments: numbers}); fp3 != fp {
			t.Fatalf("reordered with json.Number %s: fingerprint %q != %q", doc, fp3, fp)
		}
	})
}
