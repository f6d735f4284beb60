package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/toolmux/toolmux/agent"
	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

// appendProgram is a model that writes one program appending line1 ..
// lineN to out through the fixture's append tool, then answers with what
// the program returned.
func appendProgram(out string, n int) llmtest.Script {
	code := fmt.Sprintf(`const done = [];
for (let i = 1; i <= %d; i++) {
  done.push(await tools.fixture__append({path: %q, line: "line" + i, ms: 0}));
}
return {done: done.length, last: done[done.length - 1]};`, n, out)
	args, _ := json.Marshal(map[string]string{"code": code})
	return func(_ int, req llmtest.Request) llmtest.Reply {
		_, assistants, results := req.Dialogue()
		if assistants == 0 {
			return llmtest.Reply{Calls: []llmtest.Call{{Name: "run_code", Args: string(args)}}}
		}
		return llmtest.Reply{Content: "program said: " + oneLine(results[len(results)-1])}
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func fileLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// With code_mode: only, the model is offered run_code (declaring the
// fixture's tools) instead of the tools; the program's calls are calls
// of the run, each recorded with the program's record as its parent.
func TestCodeModeAgentProgram(t *testing.T) {
	out := filepath.Join(t.TempDir(), "effects.txt")
	r := newRig(t, appendProgram(out, 3), "agent: {code_mode: only}")
	res, err := r.run(t, "append three lines")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Answer, `{"done":3,"last":"appended line3"}`) {
		t.Errorf("answer: %q", res.Answer)
	}
	if got := fileLines(t, out); !slices.Equal(got, []string{"line1", "line2", "line3"}) {
		t.Errorf("effects: %v", got)
	}
	first := r.model.Requests()[0]
	if !slices.Equal(first.Tools, []string{"run_code", "terminate"}) {
		t.Errorf("offered %v, want run_code and terminate alone", first.Tools)
	}
	var desc string
	for _, tl := range first.Raw["tools"].([]any) {
		f := tl.(map[string]any)["function"].(map[string]any)
		if f["name"] == "run_code" {
			desc, _ = f["description"].(string)
		}
	}
	if !strings.Contains(desc, "fixture__append(args") {
		t.Errorf("run_code's description does not declare the fixture's tools:\n%s", desc)
	}
	var program *tool.Record
	var inner []*tool.Record
	for _, rec := range r.calls(t, res.Task) {
		if rec.Tool == "run_code" {
			program = rec
		} else {
			inner = append(inner, rec)
		}
	}
	if program == nil || program.Server != "toolmux" || program.Error != nil || !strings.Contains(fmt.Sprint(program.Arguments["code"]), "fixture__append") {
		t.Fatalf("the program's record: %+v", program)
	}
	if len(inner) != 3 {
		t.Fatalf("%d inner records, want 3", len(inner))
	}
	for i, rec := range inner {
		if rec.Parent != program.ID || rec.Tool != "append" || rec.Task != res.Task || rec.Error != nil {
			t.Errorf("inner record %d: parent %q (program %q), %s/%s, %v", i, rec.Parent, program.ID, rec.Server, rec.Tool, rec.Error)
		}
	}
}

// cancelAt is a Caller that cancels its run as the nth call is made (a
// worker giving the run up in the middle of a program), counting the
// calls it passes on.
type cancelAt struct {
	agent.Caller
	n      int
	cancel context.CancelFunc

	mu   sync.Mutex
	seen int
}

func (c *cancelAt) Run(ctx context.Context, calls []tool.Call) []schedule.Outcome {
	c.mu.Lock()
	c.seen += len(calls)
	cut := c.seen >= c.n
	c.mu.Unlock()
	if cut {
		c.cancel()
	}
	return c.Caller.Run(ctx, calls)
}

// A resumable run given up in the middle of a program: the next attempt
// runs the program again, and the calls it completed in the first
// attempt are answered from their records, not made again (the fixture
// appends each line once); the call cut short and those after it are
// made, under the ids the program's position and arguments give them.
func TestCodeModeResumeReplaysCompletedCalls(t *testing.T) {
	out := filepath.Join(t.TempDir(), "effects.txt")
	r := newRig(t, appendProgram(out, 5), "agent: {code_mode: only}")
	const id = "resume-program"
	rt := r.rt.AgentRuntime()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rt.Calls = &cancelAt{Caller: rt.Calls, n: 4, cancel: cancel}
	a, err := agent.New(rt, r.agentOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Run(ctx, "append five lines", agent.WithTask(id), agent.WithResume()); agent.KindOf(err) != agent.ErrCancelled {
		t.Fatalf("the cancelled attempt: %v", err)
	}
	if got := fileLines(t, out); !slices.Equal(got, []string{"line1", "line2", "line3"}) {
		t.Fatalf("effects of the first attempt: %v", got)
	}
	again := &callIDs{}
	res, err := r.attempt(t, id, "append five lines", nil, again)
	if err != nil || !strings.Contains(res.Answer, `{"done":5,"last":"appended line5"}`) {
		t.Fatalf("resumed: %+v %v", res, err)
	}
	if got := fileLines(t, out); !slices.Equal(got, []string{"line1", "line2", "line3", "line4", "line5"}) {
		t.Errorf("effects: %v, want each line once", got)
	}
	made := again.list()
	if len(made) != 2 || !strings.Contains(made[0], "-4-") || !strings.Contains(made[1], "-5-") {
		t.Errorf("the resumed program made the calls %v, want its 4th and 5th alone", made)
	}
	var program *tool.Record
	for _, rec := range r.calls(t, id) {
		if rec.Tool == "run_code" {
			program = rec
		}
	}
	if program == nil || program.Error != nil || len(program.Notes) == 0 || program.Notes[len(program.Notes)-1].Data["replayed"] != float64(3) {
		t.Errorf("the program's record does not say 3 calls were reused: %+v", program)
	}
}

// A run that dies after its program completed and was recorded, before
// the turn was committed: the next attempt answers the program from its
// record and makes none of its calls.
func TestCodeModeResumeReplaysCompletedProgram(t *testing.T) {
	out := filepath.Join(t.TempDir(), "effects.txt")
	r := newRig(t, appendProgram(out, 3), "agent: {code_mode: only}")
	const id = "resume-whole"
	// The process dies with the turn's checkpoint written: what it does
	// afterwards (the program, its records) is kept by the journal's
	// records, not its steps and messages (deadLog keeps Record).
	dead := &deadLog{Log: r.rt.Log, cut: func(s *tasklog.Step, _ []tasklog.Message) bool {
		return s != nil && strings.HasSuffix(s.Name, "calls planned")
	}}
	if _, err := r.attempt(t, id, "append three lines", dead, nil); err != nil {
		t.Fatal(err)
	}
	if got := fileLines(t, out); len(got) != 3 {
		t.Fatalf("effects of the first attempt: %v", got)
	}
	again := &callIDs{}
	res, err := r.attempt(t, id, "append three lines", nil, again)
	if err != nil || !strings.Contains(res.Answer, `{"done":3,"last":"appended line3"}`) {
		t.Fatalf("resumed: %+v %v", res, err)
	}
	if made := again.list(); len(made) != 0 {
		t.Errorf("the resumed run made calls %v, want none", made)
	}
	if got := fileLines(t, out); len(got) != 3 {
		t.Errorf("effects: %v, want three lines", got)
	}
	replayed := false
	for _, s := range r.steps(t, id) {
		replayed = replayed || strings.HasSuffix(s.Name, "run_code replayed")
	}
	if !replayed {
		t.Error("no step says the program was replayed")
	}
}

// With the text protocol, run_code is listed in the system prompt as
// one of toolmux's tools (code_mode: only: instead of the fixture's), and
// a <use_mcp_tool> block of server toolmux, tool run_code runs the
// program.
func TestCodeModeTextProtocol(t *testing.T) {
	out := filepath.Join(t.TempDir(), "effects.txt")
	code := fmt.Sprintf(`await tools.call("fixture__append", {path: %q, line: "text", ms: 0}); return "ok";`, out)
	args, _ := json.Marshal(map[string]string{"code": code})
	r := newRig(t, func(_ int, req llmtest.Request) llmtest.Reply {
		_, assistants, _ := req.Dialogue()
		if assistants == 0 {
			return llmtest.Reply{Content: "<use_mcp_tool>\n<server_name>toolmux</server_name>\n<tool_name>run_code</tool_name>\n<arguments>\n" +
				string(args) + "\n</arguments>\n</use_mcp_tool>"}
		}
		// The text protocol's results are the user message after the
		// reply.
		last, _ := req.Messages[len(req.Messages)-1]["content"].(string)
		return llmtest.Reply{Content: "said " + oneLine(last)}
	}, "agent: {code_mode: only, tool_protocol: text}")
	res, err := r.run(t, "append by text")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Answer, `"ok"`) {
		t.Errorf("answer %q", res.Answer)
	}
	if got := fileLines(t, out); !slices.Equal(got, []string{"text"}) {
		t.Errorf("effects: %v", got)
	}
	system := r.model.Requests()[0].Messages[0]["content"].(string)
	if !strings.Contains(system, "### run_code") || !strings.Contains(system, "fixture__append(args") || strings.Contains(system, "## Server: fixture") {
		t.Errorf("the system prompt:\n%s", system)
	}
}
