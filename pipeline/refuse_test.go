package pipeline_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/toolmux/toolmux/funcsource"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/tool"
)

// A call refused before the chain (the scheduler's unknown tool) goes
// through each step after the call once: one record, one rollback note,
// the guidance once; a step outside the record step too.
func TestRefusalTakesEachStepOnce(t *testing.T) {
	src := funcsource.New("fn", funcsource.Func("echo", "Echoes.", func(_ context.Context, in struct{ Message string }) (string, error) {
		return in.Message, nil
	}, funcsource.ReadOnly()))
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const guidance = "List the tools before calling one."
	for _, order := range [][]string{
		pipeline.DefaultOrder(),
		{pipeline.NameInstructions, pipeline.NameRecord, pipeline.NameRollback},
	} {
		var mu sync.Mutex
		var recorded []*tool.Record
		p, err := pipeline.New(m, pipeline.WithOrder(order...),
			pipeline.WithRecorder(pipeline.RecorderFunc(func(_ context.Context, r *tool.Record) {
				mu.Lock()
				recorded = append(recorded, r)
				mu.Unlock()
			})),
			pipeline.WithInstructions(pipeline.InstructionsOptions{Rules: []pipeline.InstructionRule{{Kinds: []string{"tool_not_registered"}, Text: guidance}}}),
		)
		if err != nil {
			t.Fatal(err)
		}
		rec := p.Refuse(context.Background(), tool.Call{Task: "t1", Server: "fn", Tool: "ecoh"},
			&tool.Error{Kind: tool.KindToolNotRegistered, Message: "no tool ecoh on fn", Suggestion: "echo"})
		var rollbacks int
		for _, n := range rec.Notes {
			if n.Layer == pipeline.NameRollback {
				rollbacks++
			}
		}
		if rec.Verdict == nil || !rec.Verdict.Rollback || rollbacks != 1 {
			t.Errorf("order %v: verdict %+v, %d rollback notes: %+v", order, rec.Verdict, rollbacks, rec.Notes)
		}
		if n := len(slices.DeleteFunc(slices.Clone(rec.Instructions), func(s string) bool { return s != guidance })); n != 1 {
			t.Errorf("order %v: the guidance %d times: %q", order, n, rec.Instructions)
		}
		mu.Lock()
		if len(recorded) != 1 || recorded[0] != rec {
			t.Errorf("order %v: %d records, want the one returned", order, len(recorded))
		}
		mu.Unlock()
	}
}
