package builtin_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/toolmux/toolmux/builtin"
	"github.com/toolmux/toolmux/tool"
)

// inTask returns a context whose calls belong to task, as the manager
// makes them.
func inTask(task string) context.Context {
	return tool.WithCall(context.Background(), tool.Call{Server: "builtin", Tool: "memory", Task: task})
}

// remember calls memory in ctx and returns the text of a successful result.
func remember(t *testing.T, s *builtin.Source, ctx context.Context, args map[string]any) string {
	t.Helper()
	res, err := s.Call(ctx, "memory", args)
	if err != nil {
		t.Fatalf("memory(%v): %v", args, err)
	}
	return res.Text()
}

func TestMemoryTasks(t *testing.T) {
	s := newSource(t, t.TempDir())
	a, b := inTask("task-a"), inTask("task-b")
	if got := remember(t, s, a, map[string]any{"action": "save", "fact": "  The API listens on port 8080 \n"}); got != "Saved fact #1." {
		t.Errorf("save = %q", got)
	}
	if got := remember(t, s, a, map[string]any{"action": "save", "fact": "Tests run with make test"}); got != "Saved fact #2." {
		t.Errorf("save = %q", got)
	}
	// Saving the same fact again keeps one copy.
	res, err := s.Call(a, "memory", map[string]any{"action": "save", "fact": "The API listens on port 8080"})
	if err != nil || res.Text() != "This fact was already saved as fact #1." || res.Structured.(map[string]any)["n"] != 1 {
		t.Errorf("duplicate save = %v, %v", res, err)
	}
	if got := remember(t, s, b, map[string]any{"action": "save", "fact": "Only in task b"}); got != "Saved fact #1." {
		t.Errorf("save in b = %q", got)
	}
	// Calls outside any task share one namespace.
	if got := remember(t, s, context.Background(), map[string]any{"action": "save", "fact": "No task\nsecond line"}); got != "Saved fact #1." {
		t.Errorf("save without task = %q", got)
	}

	if got := remember(t, s, a, map[string]any{"action": "list"}); got != "2 facts saved in this task:\n1. The API listens on port 8080\n2. Tests run with make test" {
		t.Errorf("list a = %q", got)
	}
	if got := remember(t, s, b, map[string]any{"action": "list", "fact": "", "query": nil}); got != "1 fact saved in this task:\n1. Only in task b" {
		t.Errorf("list b = %q", got)
	}
	if got := remember(t, s, inTask(""), map[string]any{"action": "list"}); got != "1 fact saved in this task:\n1. No task\n   second line" {
		t.Errorf("list without task = %q", got)
	}
	if got := remember(t, s, inTask("task-c"), map[string]any{"action": "list"}); got != "No facts saved in this task yet." {
		t.Errorf("list c = %q", got)
	}
	res, err = s.Call(a, "memory", map[string]any{"action": "list"})
	if err != nil {
		t.Fatal(err)
	}
	facts := res.Structured.(map[string]any)["facts"].([]map[string]any)
	if len(facts) != 2 || facts[1]["n"] != 2 || facts[1]["fact"] != "Tests run with make test" {
		t.Errorf("structured %v", facts)
	}
}

func TestMemoryRecall(t *testing.T) {
	s := newSource(t, t.TempDir())
	ctx := inTask("t")
	for _, f := range []string{
		"The API server listens on port 8080", // 1
		"Deploy with make deploy",             // 2
		"API docs are in docs/api.md",         // 3
		"The staging API port is 9090",        // 4
		"Deployment to staging needs VPN",     // 5
	} {
		remember(t, s, ctx, map[string]any{"action": "save", "fact": f})
	}
	for _, c := range []struct{ query, want string }{
		// Every word must appear; newest first.
		{"api port", `2 facts of 5 contain all of "api port" (newest first):
4. The staging API port is 9090
1. The API server listens on port 8080`},
		// Case-insensitive, inside longer words, punctuation ignored.
		{"DEPLOY, staging!", `1 fact of 5 contains all of "DEPLOY, staging!" (newest first):
5. Deployment to staging needs VPN`},
		// No fact has them all: the most matching words first, then newest.
		{"port staging vpn", `No fact contains all of "port staging vpn"; 3 facts of 5 contain some of its words (most matching words first, then newest):
5. Deployment to staging needs VPN
4. The staging API port is 9090
1. The API server listens on port 8080`},
		{"kubernetes", `No fact of this task contains any of the words of "kubernetes" (5 facts are saved).`},
	} {
		if got := remember(t, s, ctx, map[string]any{"action": "recall", "query": c.query}); got != c.want {
			t.Errorf("recall %q =\n%s\nwant\n%s", c.query, got, c.want)
		}
	}
}

func TestMemoryErrors(t *testing.T) {
	s := newSource(t, t.TempDir(), builtin.WithMaxFactBytes(20), builtin.WithMaxFacts(2))
	ctx := inTask("t")
	remember(t, s, ctx, map[string]any{"action": "save", "fact": "one"})
	for _, c := range []struct {
		args map[string]any
		kind tool.Kind
		msg  string
	}{
		{map[string]any{}, tool.KindInvalidParams, `"action"`},
		{map[string]any{"action": "forget"}, tool.KindInvalidParams, `"save", "list" or "recall"`},
		{map[string]any{"action": "save"}, tool.KindInvalidParams, `non-empty "fact"`},
		{map[string]any{"action": "save", "fact": "   "}, tool.KindInvalidParams, `non-empty "fact"`},
		{map[string]any{"action": "save", "fact": strings.Repeat("x", 21)}, tool.KindInvalidParams, "21 bytes, over the limit of 20 bytes"},
		{map[string]any{"action": "recall"}, tool.KindInvalidParams, `"query"`},
		{map[string]any{"action": "recall", "query": " ?! "}, tool.KindInvalidParams, `"query"`},
		{map[string]any{"action": "list", "fact": "x"}, tool.KindInvalidParams, `only used with action "save"`},
		{map[string]any{"action": "save", "fact": "x", "query": "x"}, tool.KindInvalidParams, `only used with action "recall"`},
		{map[string]any{"action": "list", "task": "x"}, tool.KindInvalidParams, `"task"`},
	} {
		_, err := s.Call(ctx, "memory", c.args)
		if te := tool.AsError(err); te == nil || te.Kind != c.kind || !strings.Contains(te.Message, c.msg) {
			t.Errorf("%v: err = %v, want %s containing %q", c.args, err, c.kind, c.msg)
		}
	}
	remember(t, s, ctx, map[string]any{"action": "save", "fact": "two"})
	_, err := s.Call(ctx, "memory", map[string]any{"action": "save", "fact": "three"})
	if te := tool.AsError(err); te == nil || te.Kind != tool.KindToolError || !strings.Contains(te.Message, "already has 2 facts") {
		t.Errorf("full: %v", err)
	}
}

// safeName is the form of a memory file's name.
var safeName = regexp.MustCompile(`^task-[A-Za-z0-9_-]{1,40}-[0-9a-f]{16}\.jsonl$`)

func TestMemoryDurable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "memory")
	ws := t.TempDir()
	s1 := newSource(t, ws, builtin.WithMemoryDir(dir))
	hostile := "../../etc/passwd\x00 and spaces/ünïcode"
	remember(t, s1, inTask("run-1"), map[string]any{"action": "save", "fact": "first fact"})
	remember(t, s1, inTask("run-1"), map[string]any{"action": "save", "fact": "second fact"})
	remember(t, s1, inTask(hostile), map[string]any{"action": "save", "fact": "hostile task"})
	remember(t, s1, context.Background(), map[string]any{"action": "save", "fact": "shared fact"})

	// Every file is a plain name inside dir, one per task.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 {
		t.Errorf("%d files in the memory directory, want 3", len(entries))
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || !safeName.MatchString(e.Name()) {
			t.Errorf("memory file %q", e.Name())
		}
	}

	// A second source on the same directory sees the facts, and numbers
	// new ones after them.
	s2 := newSource(t, ws, builtin.WithMemoryDir(dir))
	if got := remember(t, s2, inTask("run-1"), map[string]any{"action": "list"}); got != "2 facts saved in this task:\n1. first fact\n2. second fact" {
		t.Errorf("reloaded = %q", got)
	}
	if got := remember(t, s2, inTask(hostile), map[string]any{"action": "list"}); got != "1 fact saved in this task:\n1. hostile task" {
		t.Errorf("reloaded hostile = %q", got)
	}
	if got := remember(t, s2, inTask(""), map[string]any{"action": "recall", "query": "shared"}); !strings.HasSuffix(got, "\n1. shared fact") {
		t.Errorf("reloaded shared = %q", got)
	}
	if got := remember(t, s2, inTask("run-1"), map[string]any{"action": "save", "fact": "third fact"}); got != "Saved fact #3." {
		t.Errorf("save after reload = %q", got)
	}

	// A save cut short by a crash leaves a torn line: it is skipped, and
	// the next save starts on a line of its own.
	var runFile string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "task-run-1-") {
			runFile = filepath.Join(dir, e.Name())
		}
	}
	f, err := os.OpenFile(runFile, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"n":4,"fact":"torn`)
	f.Close()
	s3 := newSource(t, ws, builtin.WithMemoryDir(dir))
	if got := remember(t, s3, inTask("run-1"), map[string]any{"action": "save", "fact": "fourth fact"}); got != "Saved fact #4." {
		t.Errorf("save after torn line = %q", got)
	}
	s4 := newSource(t, ws, builtin.WithMemoryDir(dir))
	if got := remember(t, s4, inTask("run-1"), map[string]any{"action": "list"}); got != "4 facts saved in this task:\n1. first fact\n2. second fact\n3. third fact\n4. fourth fact" {
		t.Errorf("after torn line = %q", got)
	}
}

// TestMemoryConcurrent saves from many goroutines at once: every fact gets
// its own number, and the file holds them all.
func TestMemoryConcurrent(t *testing.T) {
	dir := t.TempDir()
	ws := t.TempDir()
	s := newSource(t, ws, builtin.WithMemoryDir(dir))
	const n = 40
	var wg sync.WaitGroup
	numbers := make([]string, n)
	for i := range n {
		wg.Go(func() {
			res, err := s.Call(inTask("busy"), "memory", map[string]any{"action": "save", "fact": fmt.Sprintf("fact %d", i)})
			if err != nil {
				t.Error(err)
				return
			}
			numbers[i] = res.Text()
			// Reads run alongside the saves.
			if _, err := s.Call(inTask("busy"), "memory", map[string]any{"action": "recall", "query": "fact"}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, got := range numbers {
		if seen[got] {
			t.Errorf("number given twice: %q", got)
		}
		seen[got] = true
	}
	for i := 1; i <= n; i++ {
		if !seen[fmt.Sprintf("Saved fact #%d.", i)] {
			t.Errorf("no save got number %d", i)
		}
	}
	got := remember(t, newSource(t, ws, builtin.WithMemoryDir(dir)), inTask("busy"), map[string]any{"action": "list"})
	if !strings.HasPrefix(got, fmt.Sprintf("%d facts saved in this task:", n)) {
		t.Errorf("reloaded %q", got[:min(len(got), 80)])
	}
}
