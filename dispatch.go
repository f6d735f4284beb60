package toolmux

import (
	"context"

	"github.com/toolmux/toolmux/agent"
)

// Task is an agent task given to Runtime.Run.
type Task struct {
	// ID names the task in the task log and its events; "" gives it a
	// new one.
	ID string
	// Input is what the agent is asked to do.
	Input string
	// Metadata is kept with the task in the task log.
	Metadata map[string]any
}

// Dispatcher runs agent tasks. It is the seam where runs leave the process
// (a work queue and workers, SPEC §13): Runtime.Run hands every task to
// the runtime's dispatcher, which is the runtime's own main agent, in this
// process, unless Options.Dispatcher gives another. A dispatcher returns
// when the task has ended, with its result.
type Dispatcher interface {
	Dispatch(ctx context.Context, t Task) (*agent.Result, error)
}

// Run runs one task through the runtime's dispatcher.
func (rt *Runtime) Run(ctx context.Context, t Task) (*agent.Result, error) {
	return rt.dispatcher.Dispatch(ctx, t)
}

// inProcess runs each task on a main agent of the runtime's own.
type inProcess struct{ rt *Runtime }

func (d inProcess) Dispatch(ctx context.Context, t Task) (*agent.Result, error) {
	a, err := d.rt.Agent()
	if err != nil {
		return nil, err
	}
	var opts []agent.RunOption
	if t.ID != "" {
		opts = append(opts, agent.WithTask(t.ID))
	}
	if t.Metadata != nil {
		opts = append(opts, agent.WithMetadata(t.Metadata))
	}
	return a.Run(ctx, t.Input, opts...)
}
