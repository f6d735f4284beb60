package pipeline

import (
	"context"
	"testing"

	"github.com/toolmux/toolmux/tool"
)

func TestRollbackRules(t *testing.T) {
	rules := RollbackOptions{Rules: []RollbackRule{
		{Prefix: "Unknown tool:"},
		{Prefix: "Error executing tool"},
		{JSONEmpty: "organic", Tools: []string{"google_search"}, Reason: "the search found nothing"},
		{JSONEmpty: "data.items", Tools: []string{"*/list"}},
		{IsError: true, Tools: []string{"strict/*"}},
		{Kinds: []string{"tool_not_registered", "duplicate_query"}},
	}}
	mw, err := NewRollback(rules)
	if err != nil {
		t.Fatal(err)
	}
	structured := func(v any) func(tool.Call) *tool.Record {
		return func(c tool.Call) *tool.Record { return okWith(c, &tool.Result{Structured: v}) }
	}
	next := &scripted{answers: map[string]func(tool.Call) *tool.Record{
		"s/google_search":  answerText(`{"organic": [], "searchParameters": {"q": "x"}}`),
		"s2/google_search": answerText(`{"organic": [{"title": "hit"}]}`),
		"s3/google_search": answerText(`not json at all`),
		"a/list":           structured(map[string]any{"data": map[string]any{"items": []any{}}}),
		"b/list":           structured(map[string]any{"data": map[string]any{"items": []any{1}}}),
		"c/list":           structured(map[string]any{"data": nil}),
		"x/weird":          answerText("Unknown tool: frobnicate"),
		"x/broken": func(c tool.Call) *tool.Record {
			return failWith(c, tool.KindExecutionFailed, "Error executing tool broken: exploded")
		},
		"strict/t": func(c tool.Call) *tool.Record { return okWith(c, tool.ErrorResult("nope")) },
		"loose/t":  func(c tool.Call) *tool.Record { return okWith(c, tool.ErrorResult("nope")) },
		"x/dup":    func(c tool.Call) *tool.Record { return failWith(c, tool.KindDuplicateQuery, "again") },
		"x/warned": func(c tool.Call) *tool.Record {
			r := okWith(c, tool.TextResult("ok"))
			r.Note("dedupe", "warned", map[string]any{"policy": "warn"})
			return r
		},
		"x/fine": answerText("all good"),
	}}
	h := Chain(next, mw)
	cases := map[string]string{ // server/tool -> reason ("" = no rollback)
		"s/google_search":  "the search found nothing",
		"s2/google_search": "",
		"s3/google_search": "",
		"a/list":           "the result's data.items is empty",
		"b/list":           "",
		"c/list":           "the result's data.items is empty",
		"x/weird":          `the result starts with "Unknown tool:"`,
		"x/broken":         `the result starts with "Error executing tool"`,
		"strict/t":         "the tool reported an error",
		"loose/t":          "",
		"x/dup":            "the call failed with tool_not_registered or duplicate_query",
		"x/warned":         "the call failed with tool_not_registered or duplicate_query",
		"x/missing":        "the call failed with tool_not_registered or duplicate_query",
		"x/fine":           "",
	}
	for key, want := range cases {
		srv, name, _ := cut(key)
		rec := h.Call(context.Background(), tool.Call{Server: srv, Tool: name})
		if rec.Verdict == nil {
			t.Fatalf("%s: no verdict", key)
		}
		if rec.Verdict.Rollback != (want != "") || rec.Verdict.Reason != want {
			t.Errorf("%s: verdict %+v, want reason %q", key, rec.Verdict, want)
		}
	}
}

func TestRollbackDefaultsAndBadRules(t *testing.T) {
	mw, err := NewRollback(RollbackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	next := &scripted{}
	rec := Chain(next, mw).Call(context.Background(), tool.Call{Server: "s", Tool: "nope"})
	if !rec.Verdict.Rollback {
		t.Errorf("unknown tool should roll back by default: %+v", rec.Verdict)
	}
	if _, err := NewRollback(RollbackOptions{Rules: []RollbackRule{{Tools: []string{"x"}}}}); err == nil {
		t.Error("a rule without a condition was accepted")
	}
	none, _ := NewRollback(RollbackOptions{Rules: []RollbackRule{}})
	rec = Chain(next, none).Call(context.Background(), tool.Call{Server: "s", Tool: "nope"})
	if rec.Verdict.Rollback {
		t.Error("an empty rule list must never roll back")
	}
}

func cut(s string) (string, string, bool) {
	for i := range s {
		if s[i] == '/' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}
