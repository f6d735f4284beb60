package policy_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

// Tools with the annotation shapes that matter.
var (
	readFile  = tool.Tool{Server: "builtin", Name: "read_file", Annotations: tool.Annotations{ReadOnly: tool.Bool(true)}}
	writeFile = tool.Tool{Server: "builtin", Name: "write_file", Annotations: tool.Annotations{Destructive: tool.Bool(true)}}
	edit      = tool.Tool{Server: "builtin", Name: "edit", Annotations: tool.Annotations{Destructive: tool.Bool(false)}}
	shell     = tool.Tool{Server: "builtin", Name: "shell"} // no hints: not read-only, destructive
	memory    = tool.Tool{Server: "builtin", Name: "memory", Annotations: tool.Annotations{ReadOnly: tool.Bool(false), Destructive: tool.Bool(false)}}
	ghSearch  = tool.Tool{Server: "github", Name: "search_issues", Annotations: tool.Annotations{ReadOnly: tool.Bool(true)}}
	ghCreate  = tool.Tool{Server: "github", Name: "create_issue", Annotations: tool.Annotations{Destructive: tool.Bool(false)}}
	ghDelete  = tool.Tool{Server: "github", Name: "delete_repo", Annotations: tool.Annotations{Destructive: tool.Bool(true)}}
	ghGet     = tool.Tool{Server: "github", Name: "get_issue"} // a read that did not say so
	fsWrite   = tool.Tool{Server: "fs", Name: "write_file"}    // not the built-in one
)

func call(t tool.Tool, args map[string]any) tool.Call {
	return tool.Call{Server: t.Server, Tool: t.Name, Arguments: args}
}

func mustEngine(t *testing.T, mode policy.Mode, rules ...policy.Rule) *policy.Engine {
	t.Helper()
	e, err := policy.New(mode, rules)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// The modes' defaults, without rules of the user's: the table of
// docs/policy.md.
func TestModeDefaults(t *testing.T) {
	type want struct {
		action policy.Action
		rule   string
	}
	tools := []tool.Tool{readFile, ghSearch, writeFile, edit, memory, shell, ghCreate, ghDelete, ghGet, fsWrite}
	table := map[policy.Mode][]want{
		policy.ModePlan: {
			{policy.Allow, "plan mode: read-only tools"}, {policy.Allow, "plan mode: read-only tools"},
			{policy.Deny, "plan mode: everything else"}, {policy.Deny, "plan mode: everything else"},
			{policy.Deny, "plan mode: everything else"}, {policy.Deny, "plan mode: everything else"},
			{policy.Deny, "plan mode: everything else"}, {policy.Deny, "plan mode: everything else"},
			{policy.Deny, "plan mode: everything else"}, {policy.Deny, "plan mode: everything else"},
		},
		policy.ModeDefault: {
			{policy.Allow, "default mode: read-only tools"}, {policy.Allow, "default mode: read-only tools"},
			{policy.Ask, "default mode: everything else"}, {policy.Ask, "default mode: everything else"},
			{policy.Allow, "default mode: memory"}, {policy.Ask, "default mode: everything else"},
			{policy.Ask, "default mode: everything else"}, {policy.Ask, "default mode: everything else"},
			{policy.Ask, "default mode: everything else"}, {policy.Ask, "default mode: everything else"},
		},
		policy.ModeAutoEdit: {
			{policy.Allow, "auto_edit mode: read-only tools"}, {policy.Allow, "auto_edit mode: read-only tools"},
			{policy.Allow, "auto_edit mode: file edits"}, {policy.Allow, "auto_edit mode: file edits"},
			{policy.Allow, "auto_edit mode: memory"}, {policy.Ask, "auto_edit mode: everything else"},
			{policy.Ask, "auto_edit mode: everything else"}, {policy.Ask, "auto_edit mode: everything else"},
			{policy.Ask, "auto_edit mode: everything else"}, {policy.Ask, "auto_edit mode: everything else"},
		},
		policy.ModeYolo: {
			{policy.Allow, "yolo mode: everything"}, {policy.Allow, "yolo mode: everything"},
			{policy.Allow, "yolo mode: everything"}, {policy.Allow, "yolo mode: everything"},
			{policy.Allow, "yolo mode: everything"}, {policy.Allow, "yolo mode: everything"},
			{policy.Allow, "yolo mode: everything"}, {policy.Allow, "yolo mode: everything"},
			{policy.Allow, "yolo mode: everything"}, {policy.Allow, "yolo mode: everything"},
		},
	}
	for _, mode := range policy.Modes() {
		e := mustEngine(t, mode)
		if e.Mode() != mode {
			t.Errorf("Mode() = %s, want %s", e.Mode(), mode)
		}
		for i, tl := range tools {
			d := e.Decide(tl, call(tl, map[string]any{"x": 1}))
			w := table[mode][i]
			if d.Action != w.action || d.Rule != w.rule {
				t.Errorf("%s %s/%s: got %s by %q, want %s by %q", mode, tl.Server, tl.Name, d.Action, d.Rule, w.action, w.rule)
			}
			want := w.action
			if mode == policy.ModePlan && tl.Name == "memory" {
				want = policy.Allow // some calls (list, recall) can run
			}
			if got := e.Requires(tl); got != want {
				t.Errorf("%s %s/%s: Requires = %s, want %s", mode, tl.Server, tl.Name, got, want)
			}
		}
	}
	// Plan mode lets memory list and recall, not save.
	plan := mustEngine(t, policy.ModePlan)
	for action, want := range map[string]policy.Decision{
		"list":   {Action: policy.Allow, Rule: "plan mode: memory reads"},
		"recall": {Action: policy.Allow, Rule: "plan mode: memory reads"},
		"save":   {Action: policy.Deny, Rule: "plan mode: everything else", Message: "plan mode allows only read-only tools"},
		"listx":  {Action: policy.Deny, Rule: "plan mode: everything else", Message: "plan mode allows only read-only tools"},
	} {
		if got := plan.Decide(memory, call(memory, map[string]any{"action": action, "query": "x"})); got != want {
			t.Errorf("plan memory %s: got %+v, want %+v", action, got, want)
		}
	}
	d := mustEngine(t, policy.ModePlan).Decide(shell, call(shell, nil))
	if d.Message != "plan mode allows only read-only tools" {
		t.Errorf("plan deny message %q", d.Message)
	}
}

func TestDecideRules(t *testing.T) {
	gitStatus := map[string]any{"command": "git status --short"}
	rmRF := map[string]any{"command": "rm -rf /"}
	for _, tc := range []struct {
		name   string
		mode   policy.Mode
		rules  []policy.Rule
		tool   tool.Tool
		args   map[string]any
		action policy.Action
		rule   string
	}{
		// Tool patterns.
		{"server/tool glob", policy.ModeDefault, []policy.Rule{{Tools: []string{"github/*_issue"}, Action: policy.Allow}},
			ghCreate, nil, policy.Allow, "rule 1"},
		{"server/tool glob misses another server", policy.ModeDefault, []policy.Rule{{Tools: []string{"gitlab/*"}, Action: policy.Allow}},
			ghCreate, nil, policy.Ask, "default mode: everything else"},
		{"bare glob matches any server", policy.ModeDefault, []policy.Rule{{Tools: []string{"write_file"}, Action: policy.Deny}},
			fsWrite, nil, policy.Deny, "rule 1"},
		{"bare glob, builtin too", policy.ModeAutoEdit, []policy.Rule{{Tools: []string{"write_file"}, Action: policy.Deny}},
			writeFile, nil, policy.Deny, "rule 1"},
		{"any of several patterns", policy.ModeDefault, []policy.Rule{{Name: "two", Tools: []string{"nope", "*/delete_*"}, Action: policy.Deny}},
			ghDelete, nil, policy.Deny, "two"},
		{"glob does not cross /", policy.ModeDefault, []policy.Rule{{Tools: []string{"*"}, Server: "git*", Action: policy.Deny}},
			ghCreate, nil, policy.Deny, "rule 1"},
		// Server.
		{"server glob", policy.ModeDefault, []policy.Rule{{Server: "git*", Action: policy.Allow}},
			ghDelete, nil, policy.Allow, "rule 1"},
		{"server glob misses", policy.ModeDefault, []policy.Rule{{Server: "fs", Action: policy.Allow}},
			ghDelete, nil, policy.Ask, "default mode: everything else"},
		{"server and tools both hold", policy.ModeDefault, []policy.Rule{{Server: "fs", Tools: []string{"write_file"}, Action: policy.Deny}},
			writeFile, nil, policy.Ask, "default mode: everything else"},
		// Arguments.
		{"args match", policy.ModeDefault, []policy.Rule{{Tools: []string{"builtin/shell"}, Args: map[string]string{"command": `^git (status|diff|log)\b`}, Action: policy.Allow}},
			shell, gitStatus, policy.Allow, "rule 1"},
		{"args do not match", policy.ModeDefault, []policy.Rule{{Tools: []string{"builtin/shell"}, Args: map[string]string{"command": `^git (status|diff|log)\b`}, Action: policy.Allow}},
			shell, rmRF, policy.Ask, "default mode: everything else"},
		{"args unanchored", policy.ModeYolo, []policy.Rule{{Args: map[string]string{"command": `rm\s+-\w*r`}, Action: policy.Deny, Message: "no recursive rm"}},
			shell, map[string]any{"command": "cd /tmp && rm -fr x"}, policy.Deny, "rule 1"},
		{"absent argument does not match", policy.ModeYolo, []policy.Rule{{Args: map[string]string{"command": `.*`}, Action: policy.Deny}},
			shell, map[string]any{"cmd": "rm"}, policy.Allow, "yolo mode: everything"},
		{"nil arguments", policy.ModeYolo, []policy.Rule{{Args: map[string]string{"command": `.*`}, Action: policy.Deny}},
			shell, nil, policy.Allow, "yolo mode: everything"},
		{"all arguments must match", policy.ModeYolo, []policy.Rule{{Args: map[string]string{"a": `x`, "b": `y`}, Action: policy.Deny}},
			shell, map[string]any{"a": "x", "b": "z"}, policy.Allow, "yolo mode: everything"},
		{"all arguments match", policy.ModeYolo, []policy.Rule{{Args: map[string]string{"a": `x`, "b": `y`}, Action: policy.Deny}},
			shell, map[string]any{"a": "x", "b": "y"}, policy.Deny, "rule 1"},
		{"number as JSON", policy.ModeYolo, []policy.Rule{{Args: map[string]string{"n": `^42$`}, Action: policy.Deny}},
			shell, map[string]any{"n": 42.0}, policy.Deny, "rule 1"},
		{"bool as JSON", policy.ModeYolo, []policy.Rule{{Args: map[string]string{"force": `^true$`}, Action: policy.Deny}},
			shell, map[string]any{"force": true}, policy.Deny, "rule 1"},
		{"null as JSON", policy.ModeYolo, []policy.Rule{{Args: map[string]string{"x": `^null$`}, Action: policy.Deny}},
			shell, map[string]any{"x": nil}, policy.Deny, "rule 1"},
		{"string is not JSON-quoted", policy.ModeYolo, []policy.Rule{{Args: map[string]string{"x": `^"`}, Action: policy.Deny}},
			shell, map[string]any{"x": "plain"}, policy.Allow, "yolo mode: everything"},
		{"list as JSON", policy.ModeYolo, []policy.Rule{{Args: map[string]string{"paths": `"/etc/`}, Action: policy.Deny}},
			shell, map[string]any{"paths": []any{"a", "/etc/passwd"}}, policy.Deny, "rule 1"},
		{"object as JSON, no HTML escaping", policy.ModeYolo, []policy.Rule{{Args: map[string]string{"o": `^\{"a":"<b>","z":1\}$`}, Action: policy.Deny}},
			shell, map[string]any{"o": map[string]any{"z": 1, "a": "<b>"}}, policy.Deny, "rule 1"},
		{"json.Number", policy.ModeYolo, []policy.Rule{{Args: map[string]string{"n": `^1e3$`}, Action: policy.Deny}},
			shell, map[string]any{"n": json.Number("1e3")}, policy.Deny, "rule 1"},
		// Annotations.
		{"read_only: true", policy.ModeDefault, []policy.Rule{{ReadOnly: tool.Bool(true), Action: policy.Ask}},
			ghSearch, nil, policy.Ask, "rule 1"},
		{"read_only: false matches a tool without the hint", policy.ModeDefault, []policy.Rule{{ReadOnly: tool.Bool(false), Action: policy.Deny}},
			shell, nil, policy.Deny, "rule 1"},
		{"destructive: true matches a tool without the hint", policy.ModeYolo, []policy.Rule{{Destructive: tool.Bool(true), Action: policy.Deny}},
			ghGet, nil, policy.Deny, "rule 1"},
		{"destructive: true misses a declared non-destructive tool", policy.ModeYolo, []policy.Rule{{Destructive: tool.Bool(true), Action: policy.Deny}},
			ghCreate, nil, policy.Allow, "yolo mode: everything"},
		{"destructive: false misses a read-only tool? no, read-only is not destructive", policy.ModeDefault, []policy.Rule{{Destructive: tool.Bool(false), Action: policy.Deny}},
			ghSearch, nil, policy.Deny, "rule 1"},
		{"destructive: false", policy.ModeDefault, []policy.Rule{{Destructive: tool.Bool(false), Action: policy.Allow}},
			ghCreate, nil, policy.Allow, "rule 1"},
		// Priority and ties.
		{"first of equal priority wins", policy.ModeDefault, []policy.Rule{
			{Name: "a", Tools: []string{"builtin/shell"}, Action: policy.Deny},
			{Name: "b", Tools: []string{"builtin/shell"}, Action: policy.Allow}},
			shell, nil, policy.Deny, "a"},
		{"higher priority wins whatever the order", policy.ModeDefault, []policy.Rule{
			{Name: "a", Tools: []string{"builtin/shell"}, Action: policy.Deny},
			{Name: "b", Tools: []string{"builtin/shell"}, Action: policy.Allow, Priority: 1}},
			shell, nil, policy.Allow, "b"},
		{"negative priority still before the defaults", policy.ModeDefault, []policy.Rule{
			{Name: "late", Action: policy.Deny, Priority: -100}},
			readFile, nil, policy.Deny, "late"},
		{"a specific rule needs priority over a broad one", policy.ModeDefault, []policy.Rule{
			{Name: "no shell", Tools: []string{"shell"}, Action: policy.Deny},
			{Name: "git", Tools: []string{"shell"}, Args: map[string]string{"command": "^git "}, Action: policy.Allow, Priority: 10}},
			shell, gitStatus, policy.Allow, "git"},
		{"user rules beat the mode's defaults", policy.ModeDefault, []policy.Rule{{Tools: []string{"read_file"}, Action: policy.Deny, Message: "no"}},
			readFile, nil, policy.Deny, "rule 1"},
		{"unnamed rules are numbered in definition order", policy.ModeDefault, []policy.Rule{
			{Name: "x", Tools: []string{"nope"}, Action: policy.Deny},
			{Tools: []string{"shell"}, Action: policy.Deny, Priority: -1},
			{Tools: []string{"shell"}, Action: policy.Allow, Priority: -2}},
			shell, nil, policy.Deny, "rule 2"},
		// Modes filter.
		{"rule limited to another mode", policy.ModeDefault, []policy.Rule{{Tools: []string{"shell"}, Modes: []policy.Mode{policy.ModeAutoEdit}, Action: policy.Allow}},
			shell, nil, policy.Ask, "default mode: everything else"},
		{"rule limited to this mode", policy.ModeAutoEdit, []policy.Rule{{Tools: []string{"shell"}, Modes: []policy.Mode{policy.ModeDefault, policy.ModeAutoEdit}, Action: policy.Allow}},
			shell, nil, policy.Allow, "rule 1"},
		{"a user rule marks a tool as a file edit", policy.ModeAutoEdit, []policy.Rule{{Tools: []string{"fs/write_file"}, Modes: []policy.Mode{policy.ModeAutoEdit}, Action: policy.Allow}},
			fsWrite, nil, policy.Allow, "rule 1"},
		// The promises of plan and yolo.
		{"plan: an allow rule naming no mode does not open plan mode", policy.ModePlan, []policy.Rule{{Tools: []string{"shell"}, Action: policy.Allow}},
			shell, nil, policy.Deny, "plan mode: everything else"},
		{"plan: nor does an ask rule", policy.ModePlan, []policy.Rule{{Tools: []string{"shell"}, Action: policy.Ask}},
			shell, nil, policy.Deny, "plan mode: everything else"},
		{"plan: an allow rule naming plan does", policy.ModePlan, []policy.Rule{{Tools: []string{"github/get_*"}, Modes: []policy.Mode{policy.ModePlan}, Action: policy.Allow}},
			ghGet, nil, policy.Allow, "rule 1"},
		{"plan: an ask rule naming no mode still applies to read-only tools", policy.ModePlan, []policy.Rule{{Tools: []string{"github/*"}, Action: policy.Ask}},
			ghSearch, nil, policy.Ask, "rule 1"},
		{"plan: deny rules apply", policy.ModePlan, []policy.Rule{{Tools: []string{"read_file"}, Action: policy.Deny}},
			readFile, nil, policy.Deny, "rule 1"},
		{"yolo: an ask rule naming no mode does not ask", policy.ModeYolo, []policy.Rule{{Tools: []string{"shell"}, Action: policy.Ask}},
			shell, nil, policy.Allow, "yolo mode: everything"},
		{"yolo: an ask rule naming yolo asks", policy.ModeYolo, []policy.Rule{{Tools: []string{"shell"}, Modes: []policy.Mode{policy.ModeYolo}, Action: policy.Ask}},
			shell, nil, policy.Ask, "rule 1"},
		{"yolo: deny rules apply", policy.ModeYolo, []policy.Rule{{Tools: []string{"*/delete_*"}, Action: policy.Deny}},
			ghDelete, nil, policy.Deny, "rule 1"},
		{"the tool's identity comes from the call when the tool has none", policy.ModeDefault, []policy.Rule{{Tools: []string{"github/create_issue"}, Action: policy.Deny}},
			tool.Tool{}, nil, policy.Deny, "rule 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := mustEngine(t, tc.mode, tc.rules...)
			c := call(tc.tool, tc.args)
			if tc.tool.Name == "" {
				c = call(ghCreate, tc.args)
			}
			d := e.Decide(tc.tool, c)
			if d.Action != tc.action || d.Rule != tc.rule {
				t.Errorf("got %s by %q, want %s by %q", d.Action, d.Rule, tc.action, tc.rule)
			}
		})
	}
}

func TestDecisionMessage(t *testing.T) {
	e := mustEngine(t, policy.ModeDefault, policy.Rule{Name: "no rm", Args: map[string]string{"command": `\brm\b`}, Action: policy.Deny, Message: "Do not delete files; move them to ./trash."})
	got := e.Decide(shell, call(shell, map[string]any{"command": "rm x"}))
	want := policy.Decision{Action: policy.Deny, Rule: "no rm", Message: "Do not delete files; move them to ./trash."}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestRequires(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mode  policy.Mode
		rules []policy.Rule
		tool  tool.Tool
		want  policy.Action
	}{
		{"no arguments: as Decide", policy.ModeDefault, []policy.Rule{{Tools: []string{"shell"}, Action: policy.Deny}}, shell, policy.Deny},
		{"an argument rule that may allow", policy.ModeDefault,
			[]policy.Rule{{Tools: []string{"shell"}, Args: map[string]string{"command": "^git "}, Action: policy.Allow}}, shell, policy.Ask},
		{"an argument rule that may ask", policy.ModeYolo,
			[]policy.Rule{{Tools: []string{"shell"}, Args: map[string]string{"command": "rm"}, Modes: []policy.Mode{policy.ModeYolo}, Action: policy.Ask}}, shell, policy.Ask},
		{"an argument rule that may allow, otherwise denied", policy.ModeDefault, []policy.Rule{
			{Tools: []string{"shell"}, Args: map[string]string{"command": "^git "}, Action: policy.Allow, Priority: 1},
			{Tools: []string{"shell"}, Action: policy.Deny}}, shell, policy.Allow},
		{"an argument rule that may deny, otherwise allowed", policy.ModeYolo,
			[]policy.Rule{{Tools: []string{"shell"}, Args: map[string]string{"command": "rm"}, Action: policy.Deny}}, shell, policy.Allow},
		{"argument rules that only deny, then deny", policy.ModeDefault, []policy.Rule{
			{Tools: []string{"shell"}, Args: map[string]string{"command": "rm"}, Action: policy.Deny, Priority: 1},
			{Tools: []string{"shell"}, Action: policy.Deny}}, shell, policy.Deny},
		{"rules after an argument-free match do not count", policy.ModeDefault, []policy.Rule{
			{Tools: []string{"shell"}, Action: policy.Deny, Priority: 2},
			{Tools: []string{"shell"}, Args: map[string]string{"command": "^git "}, Action: policy.Allow}}, shell, policy.Deny},
		{"plan guard applies", policy.ModePlan,
			[]policy.Rule{{Tools: []string{"shell"}, Args: map[string]string{"command": "^ls"}, Action: policy.Allow}}, shell, policy.Deny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustEngine(t, tc.mode, tc.rules...).Requires(tc.tool); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	_, err := policy.New(policy.ModeDefault, []policy.Rule{
		{Action: policy.Allow},
		{Name: "bad one", Tools: []string{"a/[", "", "/x"}, Server: "a/b", Args: map[string]string{"c": "(", "": "x", "e": ""}, Modes: []policy.Mode{"plna"}, Action: "permit"},
		{Tools: []string{"ok"}},
	})
	if err == nil {
		t.Fatal("no error")
	}
	var list []*policy.RuleError
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var re *policy.RuleError
		if !errors.As(e, &re) {
			t.Fatalf("%v is not a *RuleError", e)
		}
		list = append(list, re)
	}
	want := []string{
		`policy rule "bad one" (rule 2): tools[0]: "a/[" is not a valid glob: syntax error in pattern (see path.Match)`,
		`policy rule "bad one" (rule 2): tools[1]: empty pattern`,
		`policy rule "bad one" (rule 2): tools[2]: "/x": expected "server/tool" or a bare tool name`,
		`policy rule "bad one" (rule 2): server: "a/b": a server name never contains "/" (to name a tool, use tools: ["server/tool"])`,
		`policy rule "bad one" (rule 2): args: an argument name must not be empty`,
		`policy rule "bad one" (rule 2): args.c: "(" is not a valid regular expression: missing closing ): ` + "`(`",
		`policy rule "bad one" (rule 2): args.e: must not be empty (use ".*" to match any value of a present argument)`,
		`policy rule "bad one" (rule 2): modes[0]: unknown mode "plna" (expected plan, default, auto_edit or yolo)`,
		`policy rule "bad one" (rule 2): action: unknown action "permit" (expected allow, deny or ask)`,
		`policy rule 3: action: missing (expected allow, deny or ask)`,
	}
	if len(list) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(list), len(want), err)
	}
	for i, w := range want {
		if list[i].Error() != w {
			t.Errorf("error %d:\n got %s\nwant %s", i, list[i], w)
		}
	}
	if list[9].Index != 3 || list[9].Rule != "rule 3" || list[9].Field != "action" {
		t.Errorf("fields: %+v", list[9])
	}
	for _, m := range []policy.Mode{"", "YOLO"} {
		if _, err := policy.New(m, nil); err == nil {
			t.Errorf("mode %q accepted", m)
		}
	}
}

func TestParseMode(t *testing.T) {
	for _, m := range policy.Modes() {
		if got, err := policy.ParseMode(string(m)); got != m || err != nil {
			t.Errorf("%s: %s, %v", m, got, err)
		}
	}
	if got, err := policy.ParseMode(""); got != policy.ModeDefault || err != nil {
		t.Errorf("empty: %s, %v", got, err)
	}
	if _, err := policy.ParseMode("auto-edit"); err == nil || !strings.Contains(err.Error(), "auto_edit") {
		t.Errorf("auto-edit: %v", err)
	}
}

func TestWithModeAndRules(t *testing.T) {
	rules := []policy.Rule{
		{Name: "low", Tools: []string{"a"}, Action: policy.Deny, Priority: -1},
		{Name: "plan only", Tools: []string{"b"}, Modes: []policy.Mode{policy.ModePlan}, Action: policy.Allow},
		{Name: "high", Tools: []string{"c"}, Action: policy.Ask, Priority: 5},
	}
	e := mustEngine(t, policy.ModeDefault, rules...)
	var names []string
	for _, r := range e.Rules() {
		names = append(names, r.Name)
	}
	if got := strings.Join(names, ", "); got != "high, low, default mode: read-only tools, default mode: memory, default mode: everything else" {
		t.Errorf("default rules: %s", got)
	}
	p, err := e.WithMode(policy.ModePlan)
	if err != nil || p.Mode() != policy.ModePlan {
		t.Fatal(p, err)
	}
	names = nil
	for _, r := range p.Rules() {
		names = append(names, r.Name)
	}
	if got := strings.Join(names, ", "); got != "high, plan only, low, plan mode: read-only tools, plan mode: memory reads, plan mode: everything else" {
		t.Errorf("plan rules: %s", got)
	}
	if same, _ := e.WithMode(policy.ModeDefault); same != e {
		t.Errorf("WithMode to the same mode made a new engine")
	}
	if _, err := e.WithMode("nope"); err == nil {
		t.Errorf("WithMode accepted a bad mode")
	}
}

func TestArgumentText(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{"a\"b", `a"b`}, {nil, "null"}, {true, "true"}, {42.0, "42"}, {-0.5, "-0.5"}, {1e21, "1e+21"},
		{1e-7, "1e-7"}, {123456789.0, "123456789"}, {float32(0.1), "0.1"}, {7, "7"}, {int64(-7), "-7"},
		{[]any{"a", 1.0}, `["a",1]`}, {map[string]any{"b": "<", "a": []any{}}, `{"a":[],"b":"<"}`},
		{json.RawMessage(`{"x":1}`), `{"x":1}`},
	} {
		if got := policy.ArgumentText(tc.v); got != tc.want {
			t.Errorf("%#v: got %s, want %s", tc.v, got, tc.want)
		}
		// Numbers as encoding/json writes them.
		if f, ok := tc.v.(float64); ok {
			j, _ := json.Marshal(f)
			if string(j) != tc.want {
				t.Errorf("%v: encoding/json says %s", f, j)
			}
		}
	}
}

func BenchmarkDecide(b *testing.B) {
	e, _ := policy.New(policy.ModeDefault, []policy.Rule{
		{Tools: []string{"github/*", "gitlab/*"}, Action: policy.Allow, Priority: 3},
		{Tools: []string{"shell"}, Args: map[string]string{"command": `^git (status|diff)\b`}, Action: policy.Allow, Priority: 2},
		{Tools: []string{"*/delete_*"}, Action: policy.Deny, Priority: 1},
	})
	c := call(shell, map[string]any{"command": "rm -rf build"})
	b.ReportAllocs()
	for b.Loop() {
		e.Decide(shell, c)
	}
}
