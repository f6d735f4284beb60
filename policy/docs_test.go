package policy_test

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

// docTools are the tools the examples of docs/policy.md speak of, with the
// annotations they have (or, for the built-in tools, will have); any other
// tool declares nothing.
var docTools = map[string]tool.Annotations{
	"builtin/read_file":      {ReadOnly: tool.Bool(true)},
	"builtin/list_directory": {ReadOnly: tool.Bool(true)},
	"builtin/grep":           {ReadOnly: tool.Bool(true)},
	"builtin/glob":           {ReadOnly: tool.Bool(true)},
	"builtin/web_fetch":      {ReadOnly: tool.Bool(true), OpenWorld: tool.Bool(true)},
	"builtin/write_file":     {ReadOnly: tool.Bool(false), Destructive: tool.Bool(true)},
	"builtin/edit":           {ReadOnly: tool.Bool(false), Destructive: tool.Bool(true)},
	"builtin/memory":         {ReadOnly: tool.Bool(false), Destructive: tool.Bool(false)},
	"builtin/shell":          {ReadOnly: tool.Bool(false), Destructive: tool.Bool(true)},
}

// checkLine is "# [mode] as CALLER (GROUP, ...): server/tool {json
// arguments} → action": the mode and the caller (with its groups) are
// optional, a call without a caller being one without authentication.
var checkLine = regexp.MustCompile(`^#\s*(?:\[(\w+)\]\s+)?(?:as ([^\s(:]+)(?: \(([^)]*)\))?:\s+)?([^\s{\[]+/[^\s{]+)(?:\s+(\{.*\}))?\s+→\s+(allow|deny|ask)\s*$`)

// Every YAML example of docs/policy.md loads, and decides as the lines
// under it say.
func TestDocExamples(t *testing.T) {
	data, err := os.ReadFile("../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(data), -1)
	if len(blocks) < 5 {
		t.Fatalf("only %d yaml examples", len(blocks))
	}
	for i, b := range blocks {
		text := b[1]
		cfg, err := config.ParseWith("policy.md", []byte(text), config.Options{LookupEnv: func(string) (string, bool) { return "", false }, Dir: t.TempDir()})
		if err != nil {
			t.Errorf("example %d does not load:\n%s\n%v", i+1, text, err)
			continue
		}
		// The whole configuration's: its groups' approval modes too.
		e, err := policy.ForConfig(cfg)
		if err != nil {
			t.Errorf("example %d: %v", i+1, err)
			continue
		}
		checks := 0
		for _, line := range strings.Split(text, "\n") {
			if !strings.HasPrefix(line, "#") || !strings.Contains(line, "→") {
				continue
			}
			m := checkLine.FindStringSubmatch(line)
			if m == nil {
				t.Errorf("example %d: malformed check %q", i+1, line)
				continue
			}
			checks++
			engine := e
			if m[1] != "" {
				if engine, err = e.WithMode(policy.Mode(m[1])); err != nil {
					t.Errorf("example %d: %q: %v", i+1, line, err)
					continue
				}
			}
			var caller *identity.Caller
			if m[2] != "" {
				caller = &identity.Caller{Subject: "key:" + m[2], Name: m[2], Method: identity.MethodKey}
				for g := range strings.SplitSeq(m[3], ",") {
					if g = strings.TrimSpace(g); g != "" {
						caller.Groups = append(caller.Groups, g)
					}
				}
			}
			server, name, _ := strings.Cut(m[4], "/")
			tl := tool.Tool{Server: server, Name: name, Annotations: docTools[m[4]]}
			var args map[string]any
			if m[5] != "" {
				if err := json.Unmarshal([]byte(m[5]), &args); err != nil {
					t.Errorf("example %d: %q: %v", i+1, line, err)
					continue
				}
			}
			d := engine.DecideFor(caller, tl, tool.Call{Server: server, Tool: name, Arguments: args})
			if string(d.Action) != m[6] {
				t.Errorf("example %d, %s mode: %s\n got %s (rule %q)", i+1, engine.ModeFor(caller), line, d.Action, d.Rule)
			}
		}
		if checks == 0 {
			t.Errorf("example %d has no check lines:\n%s", i+1, text)
		}
	}
}

// The table of modes in docs/policy.md is the one the engine implements.
func TestDocModeTable(t *testing.T) {
	data, err := os.ReadFile("../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	columns := []tool.Tool{
		{Server: "builtin", Name: "read_file", Annotations: docTools["builtin/read_file"]},
		{Server: "builtin", Name: "write_file", Annotations: docTools["builtin/write_file"]},
		{Server: "builtin", Name: "memory", Annotations: docTools["builtin/memory"]},
		{Server: "builtin", Name: "shell", Annotations: docTools["builtin/shell"]},
	}
	rows := 0
	for _, line := range strings.Split(string(data), "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 5 || !strings.HasPrefix(cells[0], "`") {
			continue
		}
		mode, err := policy.ParseMode(strings.Trim(cells[0], "`"))
		if err != nil {
			continue
		}
		rows++
		e := mustEngine(t, mode)
		for i, tl := range columns {
			// A cell is the decision, maybe followed by exceptions; memory
			// is asked to save (its reads are the exception in plan mode).
			cell, except, _ := strings.Cut(cells[i+1], " ")
			if got := e.Decide(tl, call(tl, map[string]any{"action": "save", "fact": "x"})).Action; string(got) != cell {
				t.Errorf("%s %s/%s: the table says %s, the engine %s", mode, tl.Server, tl.Name, cell, got)
			}
			if except != "" {
				if tl.Name != "memory" || except != "(`list` and `recall` allowed)" {
					t.Errorf("%s %s/%s: unexpected exception %q", mode, tl.Server, tl.Name, except)
				}
				for _, action := range []string{"list", "recall"} {
					if got := e.Decide(tl, call(tl, map[string]any{"action": action})).Action; got != policy.Allow {
						t.Errorf("%s memory %s: %s, the table says allow", mode, action, got)
					}
				}
			}
		}
		// The edit tool is in the same column as write_file.
		ed := tool.Tool{Server: "builtin", Name: "edit", Annotations: docTools["builtin/edit"]}
		if got := e.Decide(ed, call(ed, nil)).Action; string(got) != cells[2] {
			t.Errorf("%s builtin/edit: the table says %s, the engine %s", mode, cells[2], got)
		}
	}
	if rows != len(policy.Modes()) {
		t.Errorf("found %d rows for %d modes", rows, len(policy.Modes()))
	}
}

// The refusals docs/policy.md shows under "Nobody to ask" are the gate's,
// word for word, for the tools they name (in the default mode, with no
// rule of the user's).
func TestDocRefusalExamples(t *testing.T) {
	data, err := os.ReadFile("../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	prefix := string(tool.KindApprovalUnavailable) + ": "
	seen := 0
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		seen++
		id, _, _ := strings.Cut(strings.TrimPrefix(line, prefix), " ")
		server, name, _ := strings.Cut(id, "/")
		tl := tool.Tool{Server: server, Name: name, Annotations: docTools[id]}
		err := policy.NewGate(mustEngine(t, policy.ModeDefault)).Check(context.Background(), tl, call(tl, nil))
		if err == nil || err.Error() != line {
			t.Errorf("the gate refuses %s with\n%v\nthe doc says\n%s", id, err, line)
		}
	}
	if seen < 2 {
		t.Errorf("found %d refusal examples in docs/policy.md, want the two of \"Nobody to ask\"", seen)
	}
}
