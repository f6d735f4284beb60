package tasklog_test

import (
	"context"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

// echoBackend is a one-tool pipeline.Backend.
type echoBackend struct{ echo tool.Tool }

func (b echoBackend) Call(_ context.Context, c tool.Call) *tool.Record {
	return &tool.Record{Server: c.Server, Tool: c.Tool, Arguments: c.Arguments, Result: tool.TextResult("Echo: hi"), Attempts: 1}
}

func (b echoBackend) Tool(context.Context, string, string) (tool.Tool, error) { return b.echo, nil }

func (b echoBackend) Tools(context.Context) (*tool.Catalog, error) {
	return tool.NewCatalog([]tool.Tool{b.echo}, nil), nil
}

// Calls through a real pipeline land in the log once each, secrets masked,
// under their task and session.
func TestPipelineRecordsIntoTheLog(t *testing.T) {
	l := open(t, "")
	echo := tool.Tool{Server: "fx", Name: "echo", InputSchema: map[string]any{"type": "object"}}
	p, err := pipeline.New(echoBackend{echo}, pipeline.WithRecorder(l))
	if err != nil {
		t.Fatal(err)
	}
	for _, session := range []string{"main", "agent-browsing_1"} {
		rec := p.Call(ctx, tool.Call{Task: "gw-session", Session: session, Server: "fx", Tool: "echo",
			Arguments: map[string]any{"message": "hi " + session, "api_key": "sk-live-0123456789abcdef"}})
		if rec.Err() != nil {
			t.Fatal(rec.Err())
		}
	}
	calls, err := l.Calls(ctx, "gw-session")
	if err != nil || len(calls) != 2 {
		t.Fatalf("%d calls, %v", len(calls), err)
	}
	for i, c := range calls {
		if c.Arguments["api_key"] != pipeline.Masked || !strings.HasPrefix(c.Arguments["message"].(string), "hi ") || c.Result == nil || c.Duration <= 0 {
			t.Errorf("call %d: %+v", i, c)
		}
	}
	if calls[1].Session != "agent-browsing_1" {
		t.Errorf("session %q", calls[1].Session)
	}
	// The gateway session became a running task.
	if task, err := l.Task(ctx, "gw-session"); err != nil || task.Status != tasklog.StatusRunning {
		t.Errorf("task %+v %v", task, err)
	}
	if s := l.Stats(); s.Recorded != 2 || s.Lost != 0 {
		t.Errorf("stats %+v", s)
	}
}
