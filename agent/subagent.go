package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/toolmux/toolmux/tool"
)

// SubAgentPrefix starts the server name of every sub-agent's tool.
const SubAgentPrefix = "agent-"

// SubAgentServer is the server name of the sub-agent called name.
func SubAgentServer(name string) string { return SubAgentPrefix + name }

// SubAgent is a sub-agent as a tool source (a manager.Source): one tool,
// agent-NAME__TOOL(subtask), that runs the sub-agent's own loop — its
// prompt, tools and limits — in the calling task, and returns its final
// answer. Its calls go through the same scheduler and pipeline as every
// other, in a session of their own, so duplicate detection counts them
// apart from the caller's.
//
// The source exists before the runtime it runs on (the manager holds it,
// and the scheduler is built on the manager): Bind supplies the runtime,
// and a call before Bind fails with server_unavailable.
type SubAgent struct {
	cfg Options
	rt  atomic.Pointer[Agent]
}

// NewSubAgent returns the source of the sub-agent cfg (FromConfig gives
// the options of an entry of the configuration's `agents:`).
func NewSubAgent(cfg Options) *SubAgent {
	if cfg.Tool == "" {
		cfg.Tool = DefaultSubAgentTool
	}
	return &SubAgent{cfg: cfg}
}

// Bind gives the sub-agent the runtime it runs on.
func (s *SubAgent) Bind(rt Runtime) error {
	a, err := newAgent(rt, s.cfg, true)
	if err != nil {
		return err
	}
	s.rt.Store(a)
	return nil
}

// Name is the sub-agent's server name, agent-NAME.
func (s *SubAgent) Name() string { return SubAgentServer(s.cfg.Name) }

// Tools returns the sub-agent's one tool. It is marked read-only: calling
// it changes nothing by itself, and every call the sub-agent makes is put
// to the policy on its own.
func (s *SubAgent) Tools(context.Context) ([]tool.Tool, error) {
	desc := s.cfg.Description
	if desc == "" {
		desc = fmt.Sprintf("Delegate a subtask to the %s agent, which works on it with its own tools and returns its findings.", s.cfg.Name)
	}
	return []tool.Tool{{
		Server:      s.Name(),
		Name:        s.cfg.Tool,
		Title:       s.cfg.DisplayName,
		Description: desc,
		InputSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"subtask": map[string]any{"type": "string", "description": "The subtask, complete and self-contained: the agent sees nothing else."},
			},
			"required":             []any{"subtask"},
			"additionalProperties": false,
		},
		Annotations: tool.Annotations{ReadOnly: tool.Bool(true), OpenWorld: tool.Bool(true)},
	}}, nil
}

// Call runs the sub-agent on the subtask, in the task of the call.
func (s *SubAgent) Call(ctx context.Context, name string, args map[string]any) (*tool.Result, error) {
	a := s.rt.Load()
	if a == nil {
		return nil, tool.NewError(tool.KindServerUnavailable, "the sub-agent "+s.cfg.Name+" is not bound to a runtime")
	}
	if name != s.cfg.Tool {
		return nil, tool.NewError(tool.KindToolNotRegistered, fmt.Sprintf("the sub-agent %s has one tool, %s", s.cfg.Name, s.cfg.Tool))
	}
	subtask, _ := args["subtask"].(string)
	if strings.TrimSpace(subtask) == "" {
		return nil, tool.NewError(tool.KindInvalidParams, "subtask must be a non-empty string saying what the agent should do")
	}
	call, _ := tool.CallFrom(ctx)
	task := call.Task
	if task == "" {
		task = tool.NewID()
	}
	if call.ID == "" {
		call.ID = tool.NewID()
	}
	// Each run is a session of its own (its message history, and the
	// namespace of duplicate detection unless one is configured), named
	// after the call that started it.
	session := s.cfg.Name + "-" + call.ID
	if s.cfg.Namespace != "" {
		session = s.cfg.Namespace
	}
	res, err := a.runSub(ctx, task, session, subtask)
	if err != nil {
		if ae, ok := errors.AsType[*Error](err); ok && ae.Kind == ErrCancelled {
			return nil, err
		}
		return tool.ErrorResult(fmt.Sprintf("The %s agent failed: %v", s.cfg.Name, err)), nil
	}
	text := res.Answer
	if res.Status != StatusAnswered {
		text = fmt.Sprintf("(The %s agent stopped at %s; this is its summary.)\n%s", s.cfg.Name, res.Status, text)
	}
	return tool.TextResult(text), nil
}

// Close releases nothing: the sub-agent's runs end with their calls.
func (s *SubAgent) Close() error { return nil }
