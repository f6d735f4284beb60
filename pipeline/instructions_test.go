package pipeline

import (
	"context"
	"slices"
	"testing"

	"github.com/toolmux/toolmux/tool"
)

func TestInstructionsFirstUseAndRules(t *testing.T) {
	in, err := NewInstructions(InstructionsOptions{
		Tools: []ToolText{{Tools: "*/scrape*", Text: "Scraped pages are long; ask for what you need."}},
		Rules: []InstructionRule{
			{Tools: []string{"google_search"}, Match: "(?i)no results", Text: "Try fewer keywords."},
			{Kinds: []string{"timeout"}, Text: "The tool is slow; ask for less."},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	next := &scripted{answers: map[string]func(tool.Call) *tool.Record{
		"w/scrape_website": answerText("page"),
		"g/google_search":  answerText("No results found"),
		"g/slow":           func(c tool.Call) *tool.Record { return failWith(c, tool.KindTimeout, "too slow") },
	}}
	h := Chain(next, in.Middleware)
	call := func(task, srv, name string) *tool.Record {
		return h.Call(context.Background(), tool.Call{Task: task, Server: srv, Tool: name})
	}
	first := call("t1", "w", "scrape_website")
	if len(first.Instructions) != 1 || len(first.Notes) != 1 {
		t.Fatalf("first use: %+v", first)
	}
	if again := call("t1", "w", "scrape_website"); len(again.Instructions) != 0 {
		t.Errorf("second use in the same task got instructions again: %v", again.Instructions)
	}
	if other := call("t2", "w", "scrape_website"); len(other.Instructions) != 1 {
		t.Errorf("first use in another task: %v", other.Instructions)
	}
	if noTask := call("", "w", "scrape_website"); len(noTask.Instructions) != 1 {
		t.Errorf("a call without a task is its own task: %v", noTask.Instructions)
	}
	in.EndTask("t1")
	if afterEnd := call("t1", "w", "scrape_website"); len(afterEnd.Instructions) != 1 {
		t.Errorf("after EndTask the task starts afresh: %v", afterEnd.Instructions)
	}
	for i := 0; i < 2; i++ {
		r := call("t1", "g", "google_search")
		if !slices.Equal(r.Instructions, []string{"Try fewer keywords."}) {
			t.Errorf("rule instructions (call %d): %v", i, r.Instructions)
		}
	}
	if r := call("t1", "g", "slow"); !slices.Equal(r.Instructions, []string{"The tool is slow; ask for less."}) {
		t.Errorf("kind rule: %v", r.Instructions)
	}
	if _, err := NewInstructions(InstructionsOptions{Rules: []InstructionRule{{Match: "(", Text: "x"}}}); err == nil {
		t.Error("bad regexp accepted")
	}
}

func TestInstructionsBoundedMemory(t *testing.T) {
	in, _ := NewInstructions(InstructionsOptions{})
	for i := 0; i < maxTrackedTasks+50; i++ {
		in.firstUse(string(rune('a'+i%26))+string(rune(i)), "s/t")
	}
	if len(in.seen) > maxTrackedTasks || len(in.order) != len(in.seen) {
		t.Errorf("tracking %d tasks (order %d)", len(in.seen), len(in.order))
	}
}
