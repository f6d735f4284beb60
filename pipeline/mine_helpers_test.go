package pipeline

import (
	"context"
	"sync/atomic"

	"github.com/toolmux/toolmux/tool"
)

// scripted is a Handler whose answer for each (server, tool) is scripted,
// counting the calls that reach it.
type scripted struct {
	answers map[string]func(call tool.Call) *tool.Record
	calls   atomic.Int32
	last    atomic.Pointer[tool.Call]
}

func (s *scripted) Call(_ context.Context, call tool.Call) *tool.Record {
	s.calls.Add(1)
	s.last.Store(&call)
	if f, ok := s.answers[call.Server+"/"+call.Tool]; ok {
		return f(call)
	}
	return failWith(call, tool.KindToolNotRegistered, "no such tool")
}

func answerText(text string) func(tool.Call) *tool.Record {
	return func(call tool.Call) *tool.Record { return okWith(call, tool.TextResult(text)) }
}

func okWith(call tool.Call, res *tool.Result) *tool.Record {
	return &tool.Record{ID: call.ID, Server: call.Server, Tool: call.Tool, Arguments: call.Arguments, Result: res, Attempts: 1}
}

func failWith(call tool.Call, kind tool.Kind, msg string) *tool.Record {
	return &tool.Record{ID: call.ID, Server: call.Server, Tool: call.Tool, Arguments: call.Arguments, Attempts: 1,
		Error: &tool.Error{Kind: kind, Server: call.Server, Tool: call.Tool, Message: msg}}
}

func noteLayers(rec *tool.Record) []string {
	var out []string
	for _, n := range rec.Notes {
		out = append(out, n.Layer)
	}
	return out
}
