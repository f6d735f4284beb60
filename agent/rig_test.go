package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/agent"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

// rig is a whole toolmux runtime for one test: the fixture MCP server over
// stdio and the built-in tools on a temporary workspace, a task log in a
// temporary data directory, and a scripted model.
type rig struct {
	rt    *toolmux.Runtime
	model *llmtest.Server
	dir   string
	// sub is a live subscription to every event; its events go to evs
	// (read them there, not from sub).
	sub *stream.Subscription
	// evs collects every event of the subscription as it arrives, so
	// that a test can wait for one and read them all after a run.
	evs *eventLog
}

// rigOptions are the variants of a rig.
type rigOptions struct {
	// extra is YAML added to the configuration (agent:, agents:,
	// pipeline: ...).
	extra string
	// fixture are the fixture server's flags.
	fixture []string
	// anthropic serves the script as an Anthropic Messages API.
	anthropic bool
	// noModel leaves the model: section out.
	noModel bool
}

// newRig builds a rig; extra is YAML added to the configuration (agent:,
// agents:, pipeline: ...), fixtureArgs are the fixture's flags.
func newRig(t *testing.T, script llmtest.Script, extra string, fixtureArgs ...string) *rig {
	t.Helper()
	return newRigWith(t, script, rigOptions{extra: extra, fixture: fixtureArgs})
}

// newRigWith builds a rig of the variant o.
func newRigWith(t *testing.T, script llmtest.Script, o rigOptions) *rig {
	t.Helper()
	r := &rig{dir: t.TempDir(), evs: newEventLog()}
	if err := os.WriteFile(filepath.Join(r.dir, "notes.txt"), []byte("the answer is 42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	model := ""
	switch {
	case o.noModel:
	case o.anthropic:
		r.model = llmtest.Anthropic(t, script)
		model = fmt.Sprintf("model: {provider: anthropic, base_url: %q, model: scripted, retry: {initial_backoff: 10ms, max_backoff: 50ms}}", r.model.BaseURL())
	default:
		r.model = llmtest.OpenAI(t, script)
		model = fmt.Sprintf("model: {base_url: %q, model: scripted, retry: {initial_backoff: 10ms, max_backoff: 50ms}}", r.model.BaseURL())
	}
	args := ""
	for _, a := range o.fixture {
		args += fmt.Sprintf("%q, ", a)
	}
	yaml := fmt.Sprintf(`
workspace: %q
data_dir: %q
policy: {mode: yolo}
code_mode: {engine: %q}
%s
servers:
  fixture:
    command: %q
    args: [%s]
%s`, r.dir, filepath.Join(r.dir, ".data"), testservers.CodeModeEngine(t), model, testservers.Fixture(t), strings.TrimSuffix(args, ", "), o.extra)
	cfg, err := config.Parse(filepath.Join(r.dir, "toolmux.yaml"), []byte(yaml))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yaml)
	}
	ctx := context.Background()
	r.rt, err = toolmux.Open(ctx, cfg, toolmux.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.sub, err = r.rt.Events.Subscribe(ctx, stream.Filter{}, stream.Live)
	if err != nil {
		r.rt.Close(ctx)
		t.Fatal(err)
	}
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for e := range r.sub.Events() {
			r.evs.add(e)
		}
	}()
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.rt.Close(cctx); err != nil {
			t.Errorf("close: %v", err)
		}
		r.sub.Close()
		<-collected
	})
	return r
}

// run runs the main agent on task.
func (r *rig) run(t *testing.T, task string) (*agent.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return r.runCtx(t, ctx, task)
}

// runCtx runs the main agent on task with the context ctx, for tests
// that cancel the run.
func (r *rig) runCtx(t *testing.T, ctx context.Context, task string, opts ...agent.RunOption) (*agent.Result, error) {
	t.Helper()
	a, err := r.rt.Agent()
	if err != nil {
		t.Fatal(err)
	}
	return a.Run(ctx, task, opts...)
}

// events waits until the task's workflow has ended on the event stream
// and returns the task's events in order.
func (r *rig) events(t *testing.T, task string) []stream.Event {
	t.Helper()
	return r.evs.wait(t, "the end of workflow "+task, func(evs []stream.Event) bool {
		for _, e := range evs {
			if e.Name == stream.EventEndOfWorkflow && e.Task == task {
				return true
			}
		}
		return false
	}, task)
}

// messages returns the message history of a session of the task.
func (r *rig) messages(t *testing.T, task, session string) []tasklog.Message {
	t.Helper()
	msgs, err := r.rt.Log.Messages(context.Background(), task, session)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// steps returns the task's step log.
func (r *rig) steps(t *testing.T, task string) []tasklog.Step {
	t.Helper()
	steps, err := r.rt.Log.Steps(context.Background(), task)
	if err != nil {
		t.Fatal(err)
	}
	return steps
}

// calls returns the task's call records.
func (r *rig) calls(t *testing.T, task string) []*tool.Record {
	t.Helper()
	recs, err := r.rt.Log.Calls(context.Background(), task)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// task returns the task's record.
func (r *rig) task(t *testing.T, id string) *tasklog.Task {
	t.Helper()
	task, err := r.rt.Log.Task(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// eventLog is the events a subscription delivered, with a way to wait
// for one.
type eventLog struct {
	mu      sync.Mutex
	evs     []stream.Event
	changed chan struct{} // closed, and replaced, at every event
}

func newEventLog() *eventLog { return &eventLog{changed: make(chan struct{})} }

func (l *eventLog) add(e stream.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, e)
	close(l.changed)
	l.changed = make(chan struct{})
}

// wait waits until cond holds of the events so far and returns those of
// task ("" for all). It fails the test after 30 s, or when events were
// lost.
func (l *eventLog) wait(t *testing.T, what string, cond func([]stream.Event) bool, task string) []stream.Event {
	t.Helper()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for {
		l.mu.Lock()
		evs, changed := l.evs[:len(l.evs):len(l.evs)], l.changed
		l.mu.Unlock()
		for _, e := range evs {
			if e.Name == stream.EventGap {
				t.Fatalf("events were lost: %s", e.Data)
			}
		}
		if cond(evs) {
			var out []stream.Event
			for _, e := range evs {
				if task == "" || e.Task == task {
					out = append(out, e)
				}
			}
			return out
		}
		select {
		case <-changed:
		case <-timeout.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// script answers each request with the next reply of the list chosen by
// pick (from the request: its system prompt, its tools), so that one
// model server can play several agents. A list that runs out answers 500.
func script(pick func(llmtest.Request) string, lists map[string][]llmtest.Reply) llmtest.Script {
	var mu sync.Mutex
	next := map[string]int{}
	return func(_ int, req llmtest.Request) llmtest.Reply {
		key := pick(req)
		mu.Lock()
		n := next[key]
		next[key]++
		mu.Unlock()
		if n < len(lists[key]) {
			return lists[key][n]
		}
		return llmtest.Reply{Status: 500, Body: `{"error":{"message":"llmtest: script ` + key + ` exhausted","type":"server_error"}}`}
	}
}

func call(name, args string) llmtest.Call { return llmtest.Call{Name: name, Args: args} }

func calls(cs ...llmtest.Call) llmtest.Reply { return llmtest.Reply{Calls: cs} }

func answer(text string) llmtest.Reply { return llmtest.Reply{Content: text} }

// raw is the JSON of a request's messages, to look for what Text leaves
// out (tool calls' ids and arguments).
func raw(t *testing.T, req llmtest.Request) string {
	t.Helper()
	b, err := json.Marshal(req.Messages)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// content decodes a logged message's content, a JSON string.
func content(t *testing.T, m tasklog.Message) string {
	t.Helper()
	var s string
	if len(m.Content) > 0 && string(m.Content) != "null" {
		if err := json.Unmarshal(m.Content, &s); err != nil {
			t.Fatalf("content %s: %v", m.Content, err)
		}
	}
	return s
}

// history is a session's messages as text, one per line: role, then
// content and tool calls.
func history(t *testing.T, msgs []tasklog.Message) string {
	t.Helper()
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "%s %s %s %s\n", m.Role, m.ToolCallID, content(t, m), m.ToolCalls)
	}
	return b.String()
}

// warnings returns the names of the warning steps.
func warnings(steps []tasklog.Step) []string {
	var out []string
	for _, s := range steps {
		if s.Level == tasklog.LevelWarning {
			out = append(out, s.Name)
		}
	}
	return out
}

// countContaining counts the names containing sub.
func countContaining(names []string, sub string) int {
	n := 0
	for _, s := range names {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

// lastMessage returns a request's last message.
func lastMessage(req llmtest.Request) map[string]any {
	if len(req.Messages) == 0 {
		return nil
	}
	return req.Messages[len(req.Messages)-1]
}

// toolStates decodes the task's tool_state events.
func toolStates(t *testing.T, evs []stream.Event) []stream.ToolStateData {
	t.Helper()
	var out []stream.ToolStateData
	for _, e := range evs {
		if e.Name != stream.EventToolState {
			continue
		}
		var d stream.ToolStateData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// agentOptions are the options of the rig's main agent, as the runtime
// gives them (toolmux.Runtime.Agent): its programs run by the engine the
// rig's code_mode: section names.
func (r *rig) agentOptions() agent.Options {
	o := agent.FromConfig(r.rt.Config.Agent)
	o.CodeMode.Bounds = agent.CodeModeBounds(r.rt.Config.CodeMode)
	return o
}
