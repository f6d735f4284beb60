package toolmux

import (
	"context"
	"fmt"
	"strings"

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
	// Agent names the agent to run: "" or the agent: section's name is
	// the main agent, another name one of the agents: section's.
	Agent string
	// Resume makes the run resumable (agent.WithResume): when the task
	// log already holds an earlier attempt of ID, it goes on from there.
	Resume bool
}

// UnknownAgentError is a task naming an agent the configuration lacks.
type UnknownAgentError struct {
	Name  string
	Known []string
}

func (e *UnknownAgentError) Error() string {
	return fmt.Sprintf("no agent %q is configured (known: %s)", e.Name, strings.Join(e.Known, ", "))
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
	a, err := d.rt.agentNamed(t.Agent)
	if err != nil {
		return nil, err
	}
	var opts []agent.RunOption
	if t.Resume {
		opts = append(opts, agent.WithResume())
	}
	if t.ID != "" {
		opts = append(opts, agent.WithTask(t.ID))
	}
	if t.Metadata != nil {
		opts = append(opts, agent.WithMetadata(t.Metadata))
	}
	return a.Run(ctx, t.Input, opts...)
}

// agentNamed is the main agent for "" or its own name, else the agent of
// that name in the configuration's agents: section.
func (rt *Runtime) agentNamed(name string) (*agent.Agent, error) {
	if name == "" || name == rt.Config.Agent.Name {
		return rt.Agent()
	}
	known := []string{rt.Config.Agent.Name}
	for _, a := range rt.Config.Agents {
		if a.Name == name {
			return agent.New(rt.agents, agentOptions(rt.Config, a, rt.programs))
		}
		known = append(known, a.Name)
	}
	return nil, &UnknownAgentError{Name: name, Known: known}
}
