package pipeline

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sync"

	"github.com/toolmux/toolmux/internal/toolglob"
	"github.com/toolmux/toolmux/tool"
)

// maxTrackedTasks bounds the memory of "first use in a task": the oldest
// task is forgotten beyond it.
const maxTrackedTasks = 10_000

type toolText struct {
	pattern toolglob.Pattern
	text    string
}

type instructionRule struct {
	tools []toolglob.Pattern
	match *regexp.Regexp
	kinds []string
	text  string
}

// Instructions attaches guidance to results just in time: a tool's guidance
// the first time the tool is used in a task, and a rule's text whenever it
// matches. The system prompt stays small and stable.
type Instructions struct {
	tools []toolText
	rules []instructionRule

	mu    sync.Mutex
	seen  map[string]map[string]bool // task -> "server/tool" -> used
	order []string                   // tasks, oldest first
}

// NewInstructions returns the instructions middleware's state; its
// Middleware goes in the chain, and EndTask releases what it remembers of a
// task.
func NewInstructions(cfg InstructionsOptions) (*Instructions, error) {
	in := &Instructions{seen: map[string]map[string]bool{}}
	for _, t := range cfg.Tools {
		p, err := toolglob.Parse(t.Tools, true)
		if err != nil {
			return nil, err
		}
		in.tools = append(in.tools, toolText{p, t.Text})
	}
	for i, r := range cfg.Rules {
		tools, err := toolglob.ParseAll(r.Tools, true)
		if err != nil {
			return nil, err
		}
		ir := instructionRule{tools: tools, kinds: slices.Clone(r.Kinds), text: r.Text}
		if r.Match != "" {
			if ir.match, err = regexp.Compile(r.Match); err != nil {
				return nil, fmt.Errorf("instruction rule %d: %v", i, err)
			}
		}
		in.rules = append(in.rules, ir)
	}
	return in, nil
}

// Middleware attaches the guidance to each record once the call has
// answered.
func (in *Instructions) Middleware(next Handler) Handler { return afterMiddleware(in.after)(next) }

func (in *Instructions) after(_ context.Context, call tool.Call, rec *tool.Record) *tool.Record {
	for _, t := range in.tools {
		if t.pattern.Match(rec.Server, rec.Tool) {
			if in.firstUse(call.Task, rec.Server+"/"+rec.Tool) {
				in.attach(rec, t.text, "first use of the tool in this task")
			}
			break
		}
	}
	for _, r := range in.rules {
		if r.matches(rec) {
			in.attach(rec, r.text, "a rule matched the outcome")
		}
	}
	return rec
}

func (in *Instructions) attach(rec *tool.Record, text, why string) {
	if slices.Contains(rec.Instructions, text) {
		return
	}
	rec.Instructions = append(rec.Instructions, text)
	rec.Note("instructions", "attached guidance: "+why, nil)
}

func (r instructionRule) matches(rec *tool.Record) bool {
	if len(r.tools) > 0 {
		if _, ok := toolglob.Any(r.tools, rec.Server, rec.Tool); !ok {
			return false
		}
	}
	if r.match != nil && rec.Result != nil && r.match.MatchString(textView(rec.Result)) {
		return true
	}
	return rec.Error != nil && slices.Contains(r.kinds, string(rec.Error.Kind))
}

// firstUse records that task used the tool and reports whether it was the
// first time. Calls without a task are each their own task.
func (in *Instructions) firstUse(task, key string) bool {
	if task == "" {
		return true
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	used, ok := in.seen[task]
	if !ok {
		if len(in.order) >= maxTrackedTasks {
			delete(in.seen, in.order[0])
			in.order = in.order[1:]
		}
		used = map[string]bool{}
		in.seen[task] = used
		in.order = append(in.order, task)
	}
	if used[key] {
		return false
	}
	used[key] = true
	return true
}

// EndTask forgets a finished task.
func (in *Instructions) EndTask(task string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if _, ok := in.seen[task]; !ok {
		return
	}
	delete(in.seen, task)
	in.order = slices.DeleteFunc(in.order, func(t string) bool { return t == task })
}
