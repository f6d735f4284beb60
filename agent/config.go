package agent

import (
	"slices"

	"github.com/toolmux/toolmux/config"
)

// FromConfig returns the options of an agent of the configuration file
// (the `agent:` section, or an entry of `agents:`), whose defaults the
// file's parser has filled in. The agent's own `model:` is the runtime's
// to resolve (Runtime.Models), not an option.
func FromConfig(c config.Agent) Options {
	return Options{
		Name:                    c.Name,
		DisplayName:             c.DisplayName,
		Description:             c.Description,
		Tool:                    c.Tool,
		SystemPrompt:            c.SystemPrompt,
		Tools:                   slices.Clone(c.Tools),
		Agents:                  slices.Clone(c.Agents),
		ToolProtocol:            c.ToolProtocol,
		MaxTurns:                c.MaxTurns,
		MaxConsecutiveRollbacks: c.MaxConsecutiveRollbacks,
		BoxedAnswer:             c.BoxedAnswer,
		RefusalPatterns:         slices.Clone(c.RefusalPatterns),
		Context:                 ContextBudget(c.Context),
		Selection:               Selection{Threshold: c.Selection.Threshold, TopK: c.Selection.TopK, Pinned: slices.Clone(c.Selection.Pinned)},
		LoopDetection:           LoopDetection(c.LoopDetection),
		Namespace:               c.Namespace,
		CodeMode:                CodeMode{Mode: c.CodeMode},
	}
}
