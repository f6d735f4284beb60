package stream_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolmux/toolmux/builtin"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tool"
)

// step is one event of a call as the test sees it: the event name and,
// for tool_state, the state; for tool_call, "input" or "result".
type step struct {
	name, what string
	data       map[string]any
}

// A real scheduler over the built-in tools, with the real policy gate in
// default mode and an approver that says yes: every call's events come in
// order, as MiroFlow's front end and toolmux's UI expect them.
func TestSchedulerSink(t *testing.T) {
	m, gate := builtinStack(t, "a.txt", "alpha\n", policy.ProceedOnce)

	h := newHub(t, stream.WithBuffer(10000))
	s := subscribe(t, h, stream.Filter{Task: "task-1"}, stream.Live)
	sink := stream.SchedulerSink(h)
	sched := schedule.New(m, schedule.WithGate(gate), schedule.WithSink(sink))

	calls := []tool.Call{
		{ID: "read", Task: "task-1", Server: "builtin", Tool: "read_file", Arguments: map[string]any{"path": "a.txt"}},
		{ID: "write", Task: "task-1", Server: "builtin", Tool: "write_file", Arguments: map[string]any{"path": "b.txt", "content": "beta"}},
		{ID: "typo", Task: "task-1", Server: "builtin", Tool: "read_fiel", Arguments: map[string]any{"path": "c.txt"}},
	}
	shell := runtime.GOOS != "windows"
	if shell {
		calls = append(calls, tool.Call{ID: "shell", Task: "task-1", Server: "builtin", Tool: "shell",
			Arguments: map[string]any{"command": "echo from-shell"}})
	}
	sink.Announce(calls[:3]...) // the shell call is not announced
	out := sched.Run(context.Background(), calls)
	for i, o := range out[:2] {
		if o.State != schedule.Success {
			t.Fatalf("call %d: %s %v", i, o.State, o.Record.Err())
		}
	}

	// Read until every call's result has arrived, grouping by call.
	per := map[string][]step{}
	results := 0
	for results < len(calls) {
		e := next(t, s)
		var d map[string]any
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		var id, what string
		switch e.Name {
		case stream.EventToolCall:
			id = d["tool_call_id"].(string)
			what = "input"
			if in, _ := d["tool_input"].(map[string]any); in != nil && len(in) == 1 && in["result"] != nil {
				what = "result"
				results++
			}
			if want := "builtin__" + calls[indexOf(calls, id)].Tool; d["tool_name"] != want {
				t.Errorf("%s: tool_name %v, want %s", id, d["tool_name"], want)
			}
		case stream.EventToolState:
			id, what = d["call_id"].(string), d["state"].(string)
		default:
			id = d["call_id"].(string)
			if e.Name == stream.EventToolOutput {
				what = "output"
			}
		}
		per[id] = append(per[id], step{e.Name, what, d})
	}

	expect := map[string]string{
		"read": "tool_state:validating tool_state:scheduled tool_state:executing tool_call:input " +
			"tool_state:success tool_call:result",
		"write": "tool_state:validating tool_state:scheduled tool_state:awaiting_approval approval_request: " +
			"tool_state:executing approval_resolved: tool_call:input tool_state:success tool_call:result",
		"typo": "tool_state:validating tool_state:error tool_call:input tool_call:result",
		"shell": "tool_state:validating tool_state:scheduled tool_state:awaiting_approval approval_request: " +
			"tool_state:executing approval_resolved: tool_call:input tool_output:output* tool_state:success tool_call:result",
	}
	for id, want := range expect {
		if id == "shell" && !shell {
			continue
		}
		var got []string
		for _, st := range per[id] {
			w := st.name + ":" + st.what
			if w == "tool_output:output" && len(got) > 0 && got[len(got)-1] == "tool_output:output*" {
				continue // any number of output chunks
			}
			if w == "tool_output:output" {
				w += "*"
			}
			got = append(got, w)
		}
		if g := strings.Join(got, " "); g != want {
			t.Errorf("%s:\n got  %s\n want %s", id, g, want)
		}
	}

	// Payload details.
	read := per["read"]
	if in := read[3].data["tool_input"].(map[string]any); in["path"] != "a.txt" {
		t.Errorf("read input %v", in)
	}
	if res := read[5].data["tool_input"].(map[string]any)["result"].(string); !strings.Contains(res, "alpha") {
		t.Errorf("read result %q", res)
	}
	for _, st := range read {
		if st.name == stream.EventToolState {
			if st.data["batch"] == "" || st.data["server"] != "builtin" || st.data["tool"] != "read_file" {
				t.Errorf("tool_state %v", st.data)
			}
		}
	}
	if last := read[4].data; last["previous_state"] != "executing" || last["total_ms"].(float64) < last["previous_ms"].(float64) {
		t.Errorf("durations %v", last)
	}
	write := per["write"]
	if req := write[3].data; req["message"] == "" || req["arguments"].(map[string]any)["path"] != "b.txt" {
		t.Errorf("approval_request %v", req)
	}
	if res := write[5].data; res["outcome"] != stream.OutcomeApproved {
		t.Errorf("approval_resolved %v", res)
	}
	typo := per["typo"]
	if st := typo[1].data; st["kind"] != string(tool.KindToolNotRegistered) || st["message"] == "" {
		t.Errorf("typo state %v", st)
	}
	if res := typo[3].data["tool_input"].(map[string]any)["result"].(string); !strings.HasPrefix(res, "tool_not_registered: ") ||
		!strings.Contains(res, "did you mean") {
		t.Errorf("typo result %q", res)
	}
	if shell {
		sh := per["shell"]
		// Not announced, but the scheduler's events carry the arguments.
		if args, _ := sh[3].data["arguments"].(map[string]any); args["command"] != "echo from-shell" {
			t.Errorf("approval request without the call's arguments: %v", sh[3].data)
		}
		var output strings.Builder
		for _, st := range sh {
			if st.name == stream.EventToolOutput {
				output.WriteString(st.data["chunk"].(string))
			}
		}
		if !strings.Contains(output.String(), "from-shell") {
			t.Errorf("shell output %q", output.String())
		}
		if in := sh[6].data["tool_input"].(map[string]any); in["command"] != "echo from-shell" {
			t.Errorf("input %v", in)
		}
	}
}

// A denied approval resolves as denied; long results are cut.
func TestSchedulerSinkDenialAndLimit(t *testing.T) {
	m, gate := builtinStack(t, "big.txt", strings.Repeat("é", 5000), policy.Decline)
	h := newHub(t, stream.WithBuffer(1000))
	s := subscribe(t, h, stream.Filter{Names: []string{stream.EventApprovalResolved, stream.EventToolCall}}, stream.Live)
	sched := schedule.New(m, schedule.WithGate(gate), schedule.WithSink(stream.SchedulerSink(h, stream.WithResultLimit(1001))))
	out := sched.Run(context.Background(), []tool.Call{
		{ID: "w", Server: "builtin", Tool: "write_file", Arguments: map[string]any{"path": "x", "content": "y"}},
		{ID: "r", Server: "builtin", Tool: "read_file", Arguments: map[string]any{"path": "big.txt"}},
	})
	if out[0].State != schedule.Error || out[1].State != schedule.Success {
		t.Fatalf("states %s %s", out[0].State, out[1].State)
	}
	var resolved stream.ApprovalResolvedData
	var result string
	for resolved.CallID == "" || result == "" {
		e := next(t, s)
		p, err := e.DecodeData()
		if err != nil {
			t.Fatal(err)
		}
		switch d := p.(type) {
		case *stream.ApprovalResolvedData:
			resolved = *d
		case *stream.ToolCallData:
			if in, ok := d.ToolInput.(map[string]any); ok && d.ToolCallID == "r" && in["result"] != nil {
				result = in["result"].(string)
			}
		}
	}
	if resolved.CallID != "w" || resolved.Outcome != stream.OutcomeDenied || resolved.Message == "" {
		t.Errorf("resolved %+v", resolved)
	}
	head, _, ok := strings.Cut(result, "\n[… ")
	if !ok || len(head) > 1001 || !strings.HasSuffix(result, " more bytes not shown]") || !utf8.ValidString(head) {
		t.Errorf("cut result: %d bytes, %q…", len(result), result[max(len(result)-60, 0):])
	}
}

// The arguments an approval request and a tool_call input carry are cut
// to the argument limit, however long or deep they are: a huge write
// asked about keeps the start and end of its content, and a value nested
// past tool.DefaultMaxDepth is replaced by a marker.
func TestSchedulerSinkBoundsArguments(t *testing.T) {
	m, gate := builtinStack(t, "a.txt", "a", policy.Decline)
	h := newHub(t, stream.WithBuffer(1000))
	s := subscribe(t, h, stream.Filter{Names: []string{stream.EventApprovalRequest, stream.EventToolCall}}, stream.Live)
	const limit = 4096
	// The scheduler's own depth limit raised, for the sink's to show.
	sched := schedule.New(m, schedule.WithGate(gate), schedule.WithSink(stream.SchedulerSink(h, stream.WithArgumentLimit(limit))),
		schedule.WithMaxDepth(1000))
	var deep any = "bottom"
	for range 200 {
		deep = []any{deep}
	}
	content := "BEGIN" + strings.Repeat("c", 1<<20) + "FINISH"
	out := sched.Run(context.Background(), []tool.Call{
		{ID: "w", Server: "builtin", Tool: "write_file", Arguments: map[string]any{"path": "x", "content": content, "deep": deep}},
	})
	if out[0].State != schedule.Error {
		t.Fatalf("state %s", out[0].State)
	}
	seen := map[string]bool{}
	for !seen[stream.EventApprovalRequest] || !seen[stream.EventToolCall] {
		e := next(t, s)
		if len(e.Data) > 2*limit {
			t.Errorf("%s carries %d bytes, limit %d", e.Name, len(e.Data), limit)
		}
		p, err := e.DecodeData()
		if err != nil {
			t.Fatal(err)
		}
		var args map[string]any
		switch d := p.(type) {
		case *stream.ApprovalRequestData:
			args = d.Arguments
		case *stream.ToolCallData:
			if in, ok := d.ToolInput.(map[string]any); ok && in["result"] == nil {
				args = in
			}
		}
		if args == nil {
			continue
		}
		seen[e.Name] = true
		c, _ := args["content"].(string)
		if !strings.HasPrefix(c, "BEGIN") || !strings.HasSuffix(c, "FINISH") || !strings.Contains(c, "bytes cut by toolmux") {
			t.Errorf("%s: content %d bytes: %.30q…", e.Name, len(c), c)
		}
		if d := tool.Depth(args["deep"], 1000); d > tool.DefaultMaxDepth {
			t.Errorf("%s: arguments %d levels deep", e.Name, d)
		}
	}
}

func indexOf(calls []tool.Call, id string) int {
	for i, c := range calls {
		if c.ID == id {
			return i
		}
	}
	panic("unknown call " + id)
}

// builtinStack is a manager over the built-in tools of a workspace holding
// one file, and a default-mode policy gate whose approver always answers
// ans.
func builtinStack(t *testing.T, file, content string, ans policy.Answer) (*manager.Manager, *policy.Gate) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := builtin.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	eng, err := policy.New(policy.ModeDefault, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m, policy.NewGate(eng, policy.WithApprover(policy.ApproverFunc(
		func(context.Context, policy.Request) (policy.Answer, error) { return ans, nil })))
}

// A call's tool_call input shows its arguments as they were when it ran:
// the caller may reuse the map afterwards, and a replay, however late,
// still shows what was called. Its other events, encoded only when
// replayed, say the same as when the call ran.
func TestInputEventKeepsTheArgumentsAsCalled(t *testing.T) {
	m, gate := builtinStack(t, "a.txt", "alpha\n", policy.ProceedOnce)
	h := newHub(t)
	sched := schedule.New(m, schedule.WithGate(gate), schedule.WithSink(stream.SchedulerSink(h)))
	args := map[string]any{"path": "a.txt"}
	if rec := sched.Call(context.Background(), tool.Call{ID: "read", Task: "t", Server: "builtin", Tool: "read_file", Arguments: args}); rec.Err() != nil {
		t.Fatal(rec.Err())
	}
	args["path"] = "changed.txt"
	s := subscribe(t, h, stream.Filter{Task: "t"}, 0)
	var states []string
	for {
		e := next(t, s)
		var d map[string]any
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		if e.Name == stream.EventToolState {
			states = append(states, d["state"].(string))
			continue
		}
		in, _ := d["tool_input"].(map[string]any)
		if in["result"] != nil {
			break
		}
		if in["path"] != "a.txt" {
			t.Errorf("replayed input %v, want the arguments as called", in)
		}
	}
	if got := strings.Join(states, " "); got != "validating scheduled executing success" {
		t.Errorf("states %s", got)
	}
}
