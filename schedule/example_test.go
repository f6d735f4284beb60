package schedule_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/toolmux/toolmux/builtin"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/tool"
)

// One model turn with three calls: two reads, which run in parallel, and a
// call of an unknown tool, which ends in error at validation. Outcomes come
// back in the order of the calls, each with the states it went through.
func Example() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	_ = os.WriteFile(filepath.Join(dir, "a.txt"), []byte("alpha\n"), 0o644)
	_ = os.WriteFile(filepath.Join(dir, "b.txt"), []byte("beta\n"), 0o644)

	src, err := builtin.New(dir)
	if err != nil {
		panic(err)
	}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		panic(err)
	}
	defer m.Close()

	// The sink is called from the calls' goroutines; a real one hands the
	// events to a stream or a log.
	sink := schedule.SinkFunc(func(e schedule.Event) {})
	s := schedule.New(m, schedule.WithSink(sink), schedule.WithMaxParallel(4))
	out := s.Run(context.Background(), []tool.Call{
		{Server: "builtin", Tool: "read_file", Arguments: map[string]any{"path": "a.txt"}},
		{Server: "builtin", Tool: "read_file", Arguments: map[string]any{"path": "b.txt"}},
		{Server: "builtin", Tool: "read_fiel", Arguments: map[string]any{"path": "c.txt"}},
	})
	fmt.Println(len(out[0].Transitions), "transitions:", out[0].Transitions[0].State, "...", out[0].State)
	for _, o := range out {
		if o.State == schedule.Success {
			fmt.Println(o.State, o.Record.Result.Text())
		} else {
			fmt.Println(o.State, tool.KindOf(o.Record.Err()))
		}
	}
	// Output:
	// 4 transitions: validating ... success
	// success alpha
	// success beta
	// error tool_not_registered
}
