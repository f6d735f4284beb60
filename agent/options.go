package agent

// Tool protocols, the values of Options.ToolProtocol.
const (
	// ProtocolNative offers the tools through the provider's function
	// calling.
	ProtocolNative = "native"
	// ProtocolText describes the tools in the system prompt and reads
	// MiroFlow's <use_mcp_tool> blocks from the reply, for models without
	// function calling.
	ProtocolText = "text"
)

// Defaults of the options, as DefaultOptions sets them.
const (
	DefaultMaxTurns                = 20
	DefaultMaxConsecutiveRollbacks = 5
	DefaultKeepToolResults         = 5
	DefaultSelectionThreshold      = 64
	DefaultSelectionTopK           = 20
	DefaultLoopRepeats             = 3
	// DefaultSubAgentTool is the name of a sub-agent's tool when
	// Options.Tool is empty.
	DefaultSubAgentTool = "run"
)

// Options configure an agent: the main one (New) or a sub-agent
// (NewSubAgent). Every field is used as it is (several limits give 0 a
// meaning of its own): start from DefaultOptions. FromConfig gives the
// options of a configuration file's agent. The agent's model is not an
// option: the Runtime holds the models, by agent name.
type Options struct {
	// Name identifies the agent in events and the task log; a sub-agent's
	// name is its tools' server, "agent-NAME". Required.
	Name string
	// DisplayName is what a UI shows (default: Name).
	DisplayName string
	// Description tells the calling model what a sub-agent is for; it is
	// the description of the sub-agent's tool.
	Description string
	// Tool is the name of a sub-agent's tool (default DefaultSubAgentTool),
	// called with one argument, "subtask".
	Tool string
	// SystemPrompt is the agent's system prompt.
	SystemPrompt string
	// Tools are the tool patterns ("server/tool" globs) this agent is
	// offered; empty offers every tool of the catalog.
	Tools []string
	// Agents are the names of the sub-agents this agent may call. The main
	// agent calls every sub-agent when the list is empty; a sub-agent
	// calls none unless it lists some.
	Agents []string
	// ToolProtocol is ProtocolNative ("" too) or ProtocolText.
	ToolProtocol string
	// MaxTurns bounds the committed turns.
	MaxTurns int
	// MaxConsecutiveRollbacks is how many turns in a row may be dropped
	// and retried; the next one is kept.
	MaxConsecutiveRollbacks int
	// BoxedAnswer extracts the final answer from the last \boxed{...} of
	// the model's final message.
	BoxedAnswer bool
	// RefusalPatterns are phrases that make a reply without tool calls a
	// refusal, rolled back (matched case-insensitively; nil:
	// DefaultRefusalPatterns, empty list: none).
	RefusalPatterns []string
	// Context is the context budget.
	Context ContextBudget
	// Selection is the tool selection for large catalogs.
	Selection Selection
	// LoopDetection stops the same calls from being repeated.
	LoopDetection LoopDetection
	// Namespace is the duplicate-detection namespace of a sub-agent's
	// calls (default: one namespace per sub-agent run).
	Namespace string
	// CodeMode offers the model run_code, a program that calls tools
	// (codemode.go); the zero value offers none.
	CodeMode CodeMode
}

// ContextBudget bounds what an agent sends its model.
type ContextBudget struct {
	// MaxTokens is the approximate budget of one request (0: no budget);
	// older tool results are elided to stay under it.
	MaxTokens int
	// KeepToolResults is how many of the latest tool results are always
	// sent whole (-1: all, subject to MaxTokens).
	KeepToolResults int
}

// Selection offers a subset of a large catalog each turn.
type Selection struct {
	// Threshold: catalogs with more tools than this are narrowed (-1:
	// never).
	Threshold int
	// TopK is how many tools BM25 adds to the pinned ones.
	TopK int
	// Pinned are tool patterns always offered.
	Pinned []string
}

// LoopDetection configures the detection of an agent repeating itself.
type LoopDetection struct {
	// Repeats is how many times the same turn's calls (or cycle of turns)
	// may occur before the agent is warned, and at twice that stopped with
	// a final summary (-1: off).
	Repeats int
}

// DefaultOptions are the options of an agent named name that sets
// nothing else: every limit at its default, native tool calling, every
// tool.
func DefaultOptions(name string) Options {
	return Options{
		Name:                    name,
		ToolProtocol:            ProtocolNative,
		MaxTurns:                DefaultMaxTurns,
		MaxConsecutiveRollbacks: DefaultMaxConsecutiveRollbacks,
		Context:                 ContextBudget{KeepToolResults: DefaultKeepToolResults},
		Selection:               Selection{Threshold: DefaultSelectionThreshold, TopK: DefaultSelectionTopK},
		LoopDetection:           LoopDetection{Repeats: DefaultLoopRepeats},
	}
}
