package toolmux

import (
	"context"
	"fmt"
	"time"

	"github.com/toolmux/toolmux/agent"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/tool"
)

// An agent run made for a caller (a fleet's run, made for its submitter:
// the run's context carries it, identity.With) sees and calls only the
// tools the caller's groups may (the groups section's tools,
// Options.Visibility), as a gateway call by that caller would
// (docs/identity.md "What each caller sees"): a tool it may not see is not
// offered to the model, and a call of one is answered as the call of a
// tool that does not exist, without reaching the policy or the task log.
// A run without a caller (toolmux run) sees everything, as before.

// visibleCatalog is the agents' catalog, narrowed to what the run's
// caller may see.
type visibleCatalog struct {
	agent.Catalog
	vis func() *policy.Visibility
}

func (c visibleCatalog) Tools(ctx context.Context) (*tool.Catalog, error) {
	cat, err := c.Catalog.Tools(ctx)
	sc := c.vis().For(identity.From(ctx))
	if err != nil || !sc.Limited() {
		return cat, err
	}
	return narrow(cat, sc), nil
}

// narrow is cat with only the tools sc sees.
func narrow(cat *tool.Catalog, sc policy.Scope) *tool.Catalog {
	var tools []tool.Tool
	for _, t := range cat.Tools() {
		if sc.Sees(t.Server, t.Name) {
			tools = append(tools, t)
		}
	}
	return tool.NewCatalog(tools, cat.Servers())
}

// visibleCalls are the agents' calls, refusing those of tools the run's
// caller may not see.
type visibleCalls struct {
	agent.Caller
	vis     func() *policy.Visibility
	catalog agent.Catalog
}

func (c visibleCalls) Run(ctx context.Context, calls []tool.Call) []schedule.Outcome {
	sc := c.vis().For(identity.From(ctx))
	if !sc.Limited() {
		return c.Caller.Run(ctx, calls)
	}
	out := make([]schedule.Outcome, len(calls))
	var run []tool.Call
	var at []int
	var seen *tool.Catalog
	for i, call := range calls {
		if sc.Sees(call.Server, call.Tool) {
			run, at = append(run, call), append(at, i)
			continue
		}
		if seen == nil {
			cat, err := c.catalog.Tools(ctx)
			if err != nil {
				cat = tool.NewCatalog(nil, nil)
			}
			seen = narrow(cat, sc)
		}
		if call.ID == "" {
			call.ID = tool.NewID()
		}
		call.Caller = identity.RefFrom(ctx)
		now := time.Now()
		out[i] = schedule.Outcome{Call: call, State: schedule.Error,
			Transitions: []schedule.Transition{{State: schedule.Error, Time: now}},
			Record: tool.Refused(&call, &tool.Error{Kind: tool.KindToolNotRegistered, Server: call.Server, Tool: call.Tool,
				Message:    fmt.Sprintf("server %s has no tool named %q", call.Server, call.Tool),
				Suggestion: seen.SuggestTool(call.Server, call.Tool)})}
	}
	if len(run) > 0 {
		for j, o := range c.Caller.Run(ctx, run) {
			out[at[j]] = o
		}
	}
	return out
}
