package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmux/toolmux/agent"
	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

// echoTurns is a model that echoes "one", then "two", then answers, by
// the turns its history holds (so that a resumed run is answered for the
// turn it is at, whatever came before).
func echoTurns(_ int, req llmtest.Request) llmtest.Reply {
	assistants := 0
	for _, m := range req.Messages {
		if m["role"] == "assistant" {
			assistants++
		}
	}
	switch assistants {
	case 0:
		return llmtest.Reply{Calls: []llmtest.Call{{Name: "fixture__echo", Args: `{"message": "one"}`}}}
	case 1:
		return llmtest.Reply{Calls: []llmtest.Call{{Name: "fixture__echo", Args: `{"message": "two"}`},
			{Name: "fixture__echo", Args: `{"message": "three"}`}}}
	}
	return llmtest.Reply{Content: "echoed one, two and three"}
}

// deadLog is the task log of a process that dies at a chosen write:
// every write after the one cut accepts is lost (the run itself goes on,
// as a process would until the kill lands, but nothing of it is kept).
type deadLog struct {
	*tasklog.Log
	cut func(step *tasklog.Step, msgs []tasklog.Message) bool

	mu   sync.Mutex
	dead bool
}

func (l *deadLog) gone() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dead
}

func (l *deadLog) after(step *tasklog.Step, msgs []tasklog.Message) {
	if l.cut(step, msgs) {
		l.mu.Lock()
		l.dead = true
		l.mu.Unlock()
	}
}

func (l *deadLog) Step(ctx context.Context, task string, s tasklog.Step) error {
	if l.gone() {
		return nil
	}
	err := l.Log.Step(ctx, task, s)
	l.after(&s, nil)
	return err
}

func (l *deadLog) AppendMessages(ctx context.Context, task, session string, msgs ...tasklog.Message) error {
	if l.gone() {
		return nil
	}
	err := l.Log.AppendMessages(ctx, task, session, msgs...)
	l.after(nil, msgs)
	return err
}

func (l *deadLog) FinishTask(ctx context.Context, id string, status tasklog.Status, answer string) error {
	if l.gone() {
		return nil
	}
	return l.Log.FinishTask(ctx, id, status, answer)
}

// callIDs records the ids of the calls a run makes.
type callIDs struct {
	agent.Caller
	mu  sync.Mutex
	ids []string
}

func (c *callIDs) Run(ctx context.Context, calls []tool.Call) []schedule.Outcome {
	c.mu.Lock()
	for _, call := range calls {
		c.ids = append(c.ids, call.ID)
	}
	c.mu.Unlock()
	return c.Caller.Run(ctx, calls)
}

func (c *callIDs) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.ids...)
}

// attempt runs task id on the rig's main agent with WithResume, its task
// log log (nil: the rig's) and its calls recorded by ids (nil: not).
func (r *rig) attempt(t *testing.T, id, input string, log agent.Log, ids *callIDs) (*agent.Result, error) {
	t.Helper()
	rt := r.rt.AgentRuntime()
	if log != nil {
		rt.Log = log
	}
	if ids != nil {
		ids.Caller = rt.Calls
		rt.Calls = ids
	}
	a, err := agent.New(rt, r.agentOptions())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return a.Run(ctx, input, agent.WithTask(id), agent.WithResume())
}

// committed is a cut after the write of a turn's tool results.
func committed(turn int) func(*tasklog.Step, []tasklog.Message) bool {
	n := 0
	return func(_ *tasklog.Step, msgs []tasklog.Message) bool {
		for _, m := range msgs {
			if m.Role == "tool" {
				n++
				return n == turn
			}
		}
		return false
	}
}

// planned is a cut after a turn's checkpoint.
func planned(turn int) func(*tasklog.Step, []tasklog.Message) bool {
	return func(s *tasklog.Step, _ []tasklog.Message) bool {
		return s != nil && strings.HasSuffix(s.Name, fmt.Sprintf("turn %d | calls planned", turn))
	}
}

func roles(msgs []tasklog.Message) string {
	var b []string
	for _, m := range msgs {
		b = append(b, m.Role)
	}
	return strings.Join(b, " ")
}

func requestRoles(req llmtest.Request) string {
	var b []string
	for _, m := range req.Messages {
		b = append(b, fmt.Sprint(m["role"]))
	}
	return strings.Join(b, " ")
}

// A run whose task log holds committed turns resumes with that history:
// the model's next request holds it, and the task log's history has one
// system prompt and one task, not two.
func TestResumeCommittedTurns(t *testing.T) {
	r := newRig(t, echoTurns, "")
	const id = "resume-committed"
	dl := &deadLog{Log: r.rt.Log, cut: committed(1)}
	if _, err := r.attempt(t, id, "echo things", dl, nil); err != nil {
		t.Fatal(err)
	}
	first := len(r.model.Requests())
	if got := roles(r.messages(t, id, "main")); got != "system user assistant tool" {
		t.Fatalf("the first attempt left %q", got)
	}
	res, err := r.attempt(t, id, "echo things", nil, nil)
	if err != nil || res.Answer != "echoed one, two and three" {
		t.Fatalf("resumed: %+v %v", res, err)
	}
	reqs := r.model.Requests()[first:]
	if len(reqs) != 2 {
		t.Fatalf("the resumed run asked the model %d times, want 2 (turn 2, the answer)", len(reqs))
	}
	if got := requestRoles(reqs[0]); got != "system user assistant tool" || !strings.Contains(reqs[0].Text(), "Echo: one") {
		t.Errorf("the resumed run's first request: %s\n%s", got, reqs[0].Text())
	}
	if got := roles(r.messages(t, id, "main")); got != "system user assistant tool assistant tool tool assistant" {
		t.Errorf("history after the resumed run: %q", got)
	}
	resumed := false
	for _, s := range r.steps(t, id) {
		if strings.HasSuffix(s.Name, "| resumed") {
			resumed = true
		}
	}
	if !resumed {
		t.Error("no resumed step")
	}
}

// A checkpoint after the committed turns (the turn's calls planned, the
// process gone before their results were written) has its calls run
// again under the same ids, without asking the model for that turn.
func TestResumePendingTurn(t *testing.T) {
	r := newRig(t, echoTurns, "")
	const id = "resume-pending"
	dl := &deadLog{Log: r.rt.Log, cut: planned(2)}
	firstIDs := &callIDs{}
	if _, err := r.attempt(t, id, "echo things", dl, firstIDs); err != nil {
		t.Fatal(err)
	}
	first := len(r.model.Requests())
	if got := roles(r.messages(t, id, "main")); got != "system user assistant tool" {
		t.Fatalf("the first attempt left %q", got)
	}
	planIDs := checkpointIDs(t, r, id, 2)
	if len(planIDs) != 2 || len(firstIDs.list()) != 3 || firstIDs.list()[1] != planIDs[0] || firstIDs.list()[2] != planIDs[1] {
		t.Fatalf("checkpoint ids %v, first attempt's calls %v", planIDs, firstIDs.list())
	}
	again := &callIDs{}
	res, err := r.attempt(t, id, "echo things", nil, again)
	if err != nil || res.Answer != "echoed one, two and three" {
		t.Fatalf("resumed: %+v %v", res, err)
	}
	if got := again.list(); len(got) != 2 || got[0] != planIDs[0] || got[1] != planIDs[1] {
		t.Errorf("the resumed run's calls %v, want the checkpoint's %v", got, planIDs)
	}
	reqs := r.model.Requests()[first:]
	if len(reqs) != 1 {
		t.Fatalf("the resumed run asked the model %d times, want once (the answer)", len(reqs))
	}
	if got := requestRoles(reqs[0]); got != "system user assistant tool assistant tool tool" ||
		!strings.Contains(reqs[0].Text(), "Echo: two") || !strings.Contains(reqs[0].Text(), "Echo: three") {
		t.Errorf("the resumed run's request: %s\n%s", got, reqs[0].Text())
	}
	if got := roles(r.messages(t, id, "main")); got != "system user assistant tool assistant tool tool assistant" {
		t.Errorf("history after the resumed run: %q", got)
	}
}

// A checkpoint followed by a rollback of its turn is not resumed: the
// turn was dropped, so the model is asked it anew.
func TestResumeRolledBackTurn(t *testing.T) {
	r := newRig(t, echoTurns, "")
	const id = "resume-rollback"
	dl := &deadLog{Log: r.rt.Log, cut: planned(2)}
	if _, err := r.attempt(t, id, "echo things", dl, nil); err != nil {
		t.Fatal(err)
	}
	planIDs := checkpointIDs(t, r, id, 2)
	// What the loop writes when a turn's results roll it back.
	name := r.rt.Config.Agent.Name
	if err := r.rt.Log.Step(context.Background(), id, tasklog.Step{Name: name + " | turn 2 | rollback 1", Message: "a result asked for it",
		Level: tasklog.LevelWarning, Metadata: map[string]any{"session": "main"}}); err != nil {
		t.Fatal(err)
	}
	first := len(r.model.Requests())
	again := &callIDs{}
	res, err := r.attempt(t, id, "echo things", nil, again)
	if err != nil || res.Answer != "echoed one, two and three" {
		t.Fatalf("resumed: %+v %v", res, err)
	}
	reqs := r.model.Requests()[first:]
	if len(reqs) != 2 || requestRoles(reqs[0]) != "system user assistant tool" {
		t.Fatalf("the resumed run's requests: %d, the first %q", len(reqs), requestRoles(reqs[0]))
	}
	for _, got := range again.list() {
		for _, planned := range planIDs {
			if got == planned {
				t.Errorf("the rolled-back turn's call %s was run again", got)
			}
		}
	}
	if len(again.list()) != 2 {
		t.Errorf("the resumed run made %d calls, want turn 2's two", len(again.list()))
	}
}

// A resumable run without an earlier attempt is the run it always was:
// the same requests to the model and the same history, with a checkpoint
// step before each turn's calls.
func TestResumeFirstAttempt(t *testing.T) {
	r := newRig(t, echoTurns, "")
	plain, err := r.run(t, "echo things")
	if err != nil {
		t.Fatal(err)
	}
	n := len(r.model.Requests())
	res, err := r.attempt(t, "resume-first", "echo things", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != plain.Answer || res.Turns != plain.Turns || res.Calls != plain.Calls || res.Status != plain.Status {
		t.Errorf("resumable %+v, plain %+v", res, plain)
	}
	reqs := r.model.Requests()
	if len(reqs) != 2*n {
		t.Fatalf("%d requests, want %d", len(reqs)-n, n)
	}
	for i := range n {
		if a, b := reqs[i].Text(), reqs[n+i].Text(); requestRoles(reqs[i]) != requestRoles(reqs[n+i]) || a != b {
			t.Errorf("request %d differs:\n%s\n---\n%s", i, a, b)
		}
	}
	if a, b := roles(r.messages(t, plain.Task, "main")), roles(r.messages(t, "resume-first", "main")); a != b {
		t.Errorf("history %q, plain %q", b, a)
	}
	steps := func(task string) (names []string) {
		for _, s := range r.steps(t, task) {
			if !strings.HasSuffix(s.Name, "| calls planned") {
				names = append(names, s.Name)
			}
		}
		return names
	}
	if a, b := steps(plain.Task), steps("resume-first"); strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Errorf("steps besides the checkpoints differ:\n%s\n---\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
	checkpoints := 0
	for _, s := range r.steps(t, "resume-first") {
		if strings.HasSuffix(s.Name, "| calls planned") {
			checkpoints++
		}
	}
	if checkpoints != 2 {
		t.Errorf("%d checkpoints, want one per turn with calls (2)", checkpoints)
	}
}

// checkpointIDs are the call ids of a turn's checkpoint in the task log.
func checkpointIDs(t *testing.T, r *rig, task string, turn int) []string {
	t.Helper()
	for _, s := range r.steps(t, task) {
		if !strings.HasSuffix(s.Name, fmt.Sprintf("turn %d | calls planned", turn)) {
			continue
		}
		raw, _ := s.Metadata["plan"].(string)
		var cp struct {
			Calls []struct {
				ID string `json:"id"`
			} `json:"calls"`
		}
		if err := json.Unmarshal([]byte(raw), &cp); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, c := range cp.Calls {
			ids = append(ids, c.ID)
		}
		return ids
	}
	t.Fatalf("no checkpoint of turn %d", turn)
	return nil
}

// cancelling is a Caller that cancels its run as the turn's calls are
// made (a worker giving the run up in the middle of its calls).
type cancelling struct {
	agent.Caller
	cancel context.CancelFunc
}

func (c *cancelling) Run(ctx context.Context, calls []tool.Call) []schedule.Outcome {
	c.cancel()
	return c.Caller.Run(ctx, calls)
}

// A resumable run cancelled in the middle of a turn's calls does not
// commit the turn with its calls "cancelled" (which a model would retry
// under new ids): the turn stays planned, and the next attempt runs its
// calls again under the same ids.
func TestResumeCancelledTurn(t *testing.T) {
	r := newRig(t, echoTurns, "")
	const id = "resume-cancelled"
	rt := r.rt.AgentRuntime()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rt.Calls = &cancelling{Caller: rt.Calls, cancel: cancel}
	a, err := agent.New(rt, r.agentOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Run(ctx, "echo things", agent.WithTask(id), agent.WithResume()); agent.KindOf(err) != agent.ErrCancelled {
		t.Fatalf("the cancelled attempt: %v", err)
	}
	if got := roles(r.messages(t, id, "main")); got != "system user" {
		t.Fatalf("the cancelled attempt committed its turn: %q", got)
	}
	planIDs := checkpointIDs(t, r, id, 1)
	first := len(r.model.Requests())
	again := &callIDs{}
	res, err := r.attempt(t, id, "echo things", nil, again)
	if err != nil || res.Answer != "echoed one, two and three" {
		t.Fatalf("resumed: %+v %v", res, err)
	}
	if got := again.list(); len(got) != 3 || got[0] != planIDs[0] {
		t.Errorf("the resumed run's calls %v, want the checkpoint's %v first", got, planIDs)
	}
	if n := len(r.model.Requests()) - first; n != 2 {
		t.Errorf("the resumed run asked the model %d times, want 2 (turn 2, the answer)", n)
	}
	if got := roles(r.messages(t, id, "main")); got != "system user assistant tool assistant tool tool assistant" {
		t.Errorf("history after the resumed run: %q", got)
	}
}
