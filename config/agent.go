package config

import "time"

// Model providers, the values of Model.Provider.
const (
	// ProviderOpenAI is any server of the OpenAI-compatible chat
	// completions API: OpenAI, vLLM, Ollama, OpenRouter, DeepSeek, Qwen...
	ProviderOpenAI = "openai"
	// ProviderAnthropic is the Anthropic Messages API.
	ProviderAnthropic = "anthropic"
)

// Tool protocols, the values of Agent.ToolProtocol.
const (
	// ProtocolNative offers the tools through the provider's function
	// calling.
	ProtocolNative = "native"
	// ProtocolText describes the tools in the system prompt and reads
	// MiroFlow's <use_mcp_tool> blocks from the reply, for models without
	// function calling.
	ProtocolText = "text"
)

// Model is a language model the agents use (the `model:` section, or an
// agent's own `model:`).
type Model struct {
	// Set reports that the section was present: a Model that is not Set
	// means "no model configured" (the CLI's flags and environment may
	// still supply one).
	Set bool
	// Provider is ProviderOpenAI (the default) or ProviderAnthropic.
	Provider string
	// BaseURL is the API root ("http://localhost:11434/v1"); "" is the
	// provider's public endpoint.
	BaseURL string
	// APIKey is the key, usually "${OPENAI_API_KEY}"; "" sends none.
	APIKey string
	// Name is the model's name as the server knows it (`model:` key).
	Name string
	// Temperature and TopP are sent when not nil; MaxTokens when not 0.
	Temperature *float64
	TopP        *float64
	MaxTokens   int
	// Extra holds vendor fields merged into every OpenAI-compatible
	// request body (top_k, chat_template_kwargs, options, provider...).
	Extra map[string]any
	// Timeout bounds one request, a streamed answer included (0: the
	// provider's default).
	Timeout time.Duration
	// Retry is how rate limits and server errors are retried.
	Retry ModelRetry
}

// ModelRetry is the retry policy of model requests.
type ModelRetry struct {
	// MaxAttempts counts the first request (0: the provider's default).
	MaxAttempts    int
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
}

// Agent configures an agent: the main one (the `agent:` section) or a
// sub-agent (an entry of `agents:`).
type Agent struct {
	// Name identifies the agent in events and the task log; a sub-agent's
	// name is its key in `agents:` and its tools' server is "agent-NAME".
	Name string
	// DisplayName is what a UI shows (default: Name).
	DisplayName string
	// Description tells the calling model what a sub-agent is for; it is
	// the description of the sub-agent's tool.
	Description string
	// Tool is the name of a sub-agent's tool (default "run"), called with
	// one argument, "subtask".
	Tool string
	// SystemPrompt is the agent's system prompt (`system_prompt:`, or the
	// text of `system_prompt_file:`).
	SystemPrompt string
	// Model overrides the `model:` section for this agent when Set.
	Model Model
	// Tools are the tool patterns ("server/tool" globs) this agent is
	// offered; empty offers every tool of the catalog.
	Tools []string
	// Agents are the names of the sub-agents this agent may call (each
	// must be a key of `agents:`). The main agent calls every sub-agent
	// when the list is empty; a sub-agent calls none unless it lists some.
	Agents []string
	// ToolProtocol is ProtocolNative (default) or ProtocolText.
	ToolProtocol string
	// MaxTurns bounds the committed turns (default 20).
	MaxTurns int
	// MaxConsecutiveRollbacks is how many turns in a row may be dropped
	// and retried (default 5); the next one is kept.
	MaxConsecutiveRollbacks int
	// BoxedAnswer extracts the final answer from the last \boxed{...} of
	// the model's final message.
	BoxedAnswer bool
	// RefusalPatterns are phrases that make a reply without tool calls a
	// refusal, rolled back (matched case-insensitively; nil: the defaults,
	// empty list: none).
	RefusalPatterns []string
	// Context is the context budget.
	Context AgentContext
	// Selection is the tool selection for large catalogs.
	Selection ToolSelection
	// LoopDetection stops the same calls from being repeated.
	LoopDetection LoopDetection
	// Namespace is the duplicate-detection namespace of a sub-agent's
	// calls (default: one namespace per sub-agent run).
	Namespace string
	// CodeMode offers the model run_code (AgentCodeModeBeside, or
	// AgentCodeModeOnly instead of the tools); "" or AgentCodeModeOff
	// offers none. Its programs are bounded by the code_mode: section.
	CodeMode string
}

// The values of an agent's code_mode (docs/codemode.md, "In toolmux run").
const (
	AgentCodeModeOff    = "off"
	AgentCodeModeBeside = "beside"
	AgentCodeModeOnly   = "only"
)

// AgentContext bounds what an agent sends its model.
type AgentContext struct {
	// MaxTokens is the approximate budget of one request (0: no budget);
	// older tool results are elided to stay under it.
	MaxTokens int
	// KeepToolResults is how many of the latest tool results are always
	// sent whole (default 5; -1: all, subject to MaxTokens).
	KeepToolResults int
}

// ToolSelection offers a subset of a large catalog each turn.
type ToolSelection struct {
	// Threshold: catalogs with more tools than this are narrowed (default
	// 64; -1: never).
	Threshold int
	// TopK is how many tools BM25 adds to the pinned ones (default 20).
	TopK int
	// Pinned are tool patterns always offered.
	Pinned []string
}

// LoopDetection configures the detection of an agent repeating itself.
type LoopDetection struct {
	// Repeats is how many times the same turn's calls (or cycle of turns)
	// may occur before the agent is warned, and at twice that stopped with
	// a final summary (default 3; -1: off).
	Repeats int
}

// Agent defaults, applied to every agent a file leaves them out of.
const (
	DefaultMaxTurns                = 20
	DefaultMaxConsecutiveRollbacks = 5
	DefaultKeepToolResults         = 5
	DefaultSelectionThreshold      = 64
	DefaultSelectionTopK           = 20
	DefaultLoopRepeats             = 3
	DefaultSubAgentTool            = "run"
)

// DefaultAgent is the configuration of an agent named name that sets
// nothing: every limit at its default, native tool calling, every tool.
func DefaultAgent(name string) Agent {
	return Agent{
		Name:                    name,
		ToolProtocol:            ProtocolNative,
		MaxTurns:                DefaultMaxTurns,
		MaxConsecutiveRollbacks: DefaultMaxConsecutiveRollbacks,
		Context:                 AgentContext{KeepToolResults: DefaultKeepToolResults},
		Selection:               ToolSelection{Threshold: DefaultSelectionThreshold, TopK: DefaultSelectionTopK},
		LoopDetection:           LoopDetection{Repeats: DefaultLoopRepeats},
	}
}
