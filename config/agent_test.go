package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/config"
)

var agentEnv = map[string]string{
	"HOME":           "/home/u",
	"OPENAI_API_KEY": "sk-test",
	"LLM_URL":        "https://llm.example.com/v1",
	"EMPTY":          "",
}

// parseIn parses content as the file name in dir, with agentEnv.
func parseIn(t *testing.T, dir, name, content string) (*config.Config, error) {
	t.Helper()
	return config.ParseWith(filepath.Join(dir, name), []byte(content),
		config.Options{LookupEnv: envOf(agentEnv), Dir: dir})
}

func mustParseIn(t *testing.T, dir, content string) *config.Config {
	t.Helper()
	cfg, err := parseIn(t, dir, "toolmux.yaml", content)
	if err != nil {
		t.Fatalf("unexpected error:\n%v", err)
	}
	return cfg
}

func f64(f float64) *float64 { return &f }

const agentsExample = `model:
  provider: openai
  base_url: http://localhost:11434/v1
  api_key: ${OPENAI_API_KEY}
  model: qwen3:8b
  temperature: 0.3
  top_p: 0.95
  max_tokens: 4096
  timeout: 10m
  retry: {max_attempts: 5, initial_backoff: 1s, max_backoff: 30s}
  extra:
    top_k: 20
    min_p: 0.5
    label: "${NOT_EXPANDED}"
    none: null
    stop: ["a", 1, true]
    chat_template_kwargs: {enable_thinking: false}
agent:
  name: lead
  display_name: Main agent
  system_prompt: |
    You are $HOME ${NOT_EXPANDED}.
  model:
    provider: anthropic
    api_key: "${EMPTY:-none}"
    model: claude-sonnet-4-5
  tools: ["builtin/*", "tool-google-search/*"]
  agents: [browsing]
  tool_protocol: text
  max_turns: 30
  max_consecutive_rollbacks: 0
  boxed_answer: true
  refusal_patterns: ["I'm sorry, but I can't"]
  context: {max_tokens: 100000, keep_tool_results: -1}
  selection: {threshold: -1, top_k: 10, pinned: ["builtin/read_file"]}
  loop_detection: {repeats: -1}
agents:
  browsing:
    description: Searches the web and reads pages; give it one precise subtask.
    tool: search_and_browse
    namespace: browsing.web:1
    display_name: Browser
    system_prompt: Browse.
    tools: ["tool-google-search/*", "builtin/web_fetch"]
    max_turns: 15
    refusal_patterns: []
    loop_detection: {repeats: 2}
  coder:
    agents: [browsing]
    context: {max_tokens: 0, keep_tool_results: 0}
    selection: {threshold: 0}
`

func TestAgentsSection(t *testing.T) {
	cfg := mustParseIn(t, t.TempDir(), agentsExample)
	wantModel := config.Model{
		Set:         true,
		Provider:    config.ProviderOpenAI,
		BaseURL:     "http://localhost:11434/v1",
		APIKey:      "sk-test",
		Name:        "qwen3:8b",
		Temperature: f64(0.3),
		TopP:        f64(0.95),
		MaxTokens:   4096,
		Timeout:     10 * time.Minute,
		Retry:       config.ModelRetry{MaxAttempts: 5, InitialBackoff: time.Second, MaxBackoff: 30 * time.Second},
		Extra: map[string]any{
			"top_k":                int64(20),
			"min_p":                0.5,
			"label":                "${NOT_EXPANDED}",
			"none":                 nil,
			"stop":                 []any{"a", int64(1), true},
			"chat_template_kwargs": map[string]any{"enable_thinking": false},
		},
	}
	if !reflect.DeepEqual(cfg.Model, wantModel) {
		t.Errorf("model:\n got %+v\nwant %+v", cfg.Model, wantModel)
	}
	wantMain := config.Agent{
		Name:         "lead",
		DisplayName:  "Main agent",
		SystemPrompt: "You are $HOME ${NOT_EXPANDED}.\n",
		Model: config.Model{Set: true, Provider: config.ProviderAnthropic, APIKey: "none",
			Name: "claude-sonnet-4-5"},
		Tools:                   []string{"builtin/*", "tool-google-search/*"},
		Agents:                  []string{"browsing"},
		ToolProtocol:            config.ProtocolText,
		MaxTurns:                30,
		MaxConsecutiveRollbacks: 0,
		BoxedAnswer:             true,
		RefusalPatterns:         []string{"I'm sorry, but I can't"},
		Context:                 config.AgentContext{MaxTokens: 100000, KeepToolResults: -1},
		Selection:               config.ToolSelection{Threshold: -1, TopK: 10, Pinned: []string{"builtin/read_file"}},
		LoopDetection:           config.LoopDetection{Repeats: -1},
	}
	if !reflect.DeepEqual(cfg.Agent, wantMain) {
		t.Errorf("agent:\n got %+v\nwant %+v", cfg.Agent, wantMain)
	}
	browsing := config.DefaultAgent("browsing")
	browsing.Description = "Searches the web and reads pages; give it one precise subtask."
	browsing.Tool = "search_and_browse"
	browsing.Namespace = "browsing.web:1"
	browsing.DisplayName = "Browser"
	browsing.SystemPrompt = "Browse."
	browsing.Tools = []string{"tool-google-search/*", "builtin/web_fetch"}
	browsing.MaxTurns = 15
	browsing.RefusalPatterns = []string{}
	browsing.LoopDetection.Repeats = 2
	coder := config.DefaultAgent("coder")
	coder.Tool = config.DefaultSubAgentTool
	coder.Agents = []string{"browsing"}
	coder.Context = config.AgentContext{}
	coder.Selection.Threshold = 0
	want := []config.Agent{browsing, coder}
	if len(cfg.Agents) != len(want) {
		t.Fatalf("got %d sub-agents, want %d: %+v", len(cfg.Agents), len(want), cfg.Agents)
	}
	for i := range want {
		if !reflect.DeepEqual(cfg.Agents[i], want[i]) {
			t.Errorf("agents[%d]:\n got %+v\nwant %+v", i, cfg.Agents[i], want[i])
		}
	}
	// The rest of the configuration is untouched by the sections.
	if cfg.Timeout != config.DefaultTimeout || len(cfg.Servers) != 0 || !cfg.TaskLog.Enabled {
		t.Errorf("rest of the config: %+v", cfg)
	}
}

func TestAgentsDefaults(t *testing.T) {
	for _, content := range []string{"", "timeout: 1m\n", "model:\n", "model: null\n", "agent:\n", "agent: {}\n",
		"agents:\n", "agents: {}\n", "model: ~\nagent: ~\nagents: ~\n"} {
		cfg := mustParseIn(t, t.TempDir(), content)
		if !reflect.DeepEqual(cfg.Model, config.Model{}) {
			t.Errorf("%q: model = %+v, want none", content, cfg.Model)
		}
		if !reflect.DeepEqual(cfg.Agent, config.DefaultAgent("main")) {
			t.Errorf("%q: agent = %+v, want the defaults", content, cfg.Agent)
		}
		if cfg.Agents != nil {
			t.Errorf("%q: agents = %+v, want none", content, cfg.Agents)
		}
	}
	if !reflect.DeepEqual(config.Default().Agent, config.DefaultAgent("main")) {
		t.Errorf("Default().Agent = %+v", config.Default().Agent)
	}

	// A model with only a name gets the default provider and nothing else.
	cfg := mustParseIn(t, t.TempDir(), "model: {model: gpt-4o}\nagent: {model: {model: small}}\n")
	if want := (config.Model{Set: true, Provider: config.ProviderOpenAI, Name: "gpt-4o"}); !reflect.DeepEqual(cfg.Model, want) {
		t.Errorf("minimal model: got %+v, want %+v", cfg.Model, want)
	}
	// An agent's model is a whole model, not merged with the section's.
	if want := (config.Model{Set: true, Provider: config.ProviderOpenAI, Name: "small"}); !reflect.DeepEqual(cfg.Agent.Model, want) {
		t.Errorf("agent model: got %+v, want %+v", cfg.Agent.Model, want)
	}

	// Sub-agents start from the defaults, not from the main agent; the main
	// agent starts from the defaults too, wherever the sections are.
	cfg = mustParseIn(t, t.TempDir(), "agents:\n  b:\n  c: {}\nagent: {max_turns: 7, tools: [x], refusal_patterns: []}\n")
	b, c := config.DefaultAgent("b"), config.DefaultAgent("c")
	b.Tool, c.Tool = config.DefaultSubAgentTool, config.DefaultSubAgentTool
	if !reflect.DeepEqual(cfg.Agents, []config.Agent{b, c}) {
		t.Errorf("sub-agents: got %+v", cfg.Agents)
	}
	main := config.DefaultAgent("main")
	main.MaxTurns, main.Tools, main.RefusalPatterns = 7, []string{"x"}, []string{}
	if !reflect.DeepEqual(cfg.Agent, main) {
		t.Errorf("main agent: got %+v, want %+v", cfg.Agent, main)
	}
	if cfg.Agent.RefusalPatterns == nil || cfg.Agents[0].RefusalPatterns != nil {
		t.Errorf("refusal_patterns: [] must give an empty list, absence nil")
	}
}

func TestAgentsValues(t *testing.T) {
	for _, tc := range []struct {
		content string
		check   func(cfg *config.Config) bool
	}{
		{"model: {model: m, base_url: \"${LLM_URL}\", api_key: \"${OPENAI_API_KEY}\"}\n", func(c *config.Config) bool {
			return c.Model.BaseURL == "https://llm.example.com/v1" && c.Model.APIKey == "sk-test"
		}},
		{"model: {model: \"${MODEL:-qwen3:8b}\", base_url: \"${UNSET:-http://h:1/v1}\", api_key: \"${UNSET:-}\"}\n", func(c *config.Config) bool {
			return c.Model.Name == "qwen3:8b" && c.Model.BaseURL == "http://h:1/v1" && c.Model.APIKey == ""
		}},
		{"model: {model: m, base_url: \"\", api_key: \"\", provider: anthropic}\n", func(c *config.Config) bool {
			return c.Model.BaseURL == "" && c.Model.APIKey == "" && c.Model.Provider == config.ProviderAnthropic
		}},
		{"model: {model: m, temperature: 0, top_p: 1}\n", func(c *config.Config) bool {
			return *c.Model.Temperature == 0 && *c.Model.TopP == 1
		}},
		{"model: {model: m, temperature: 2, top_p: 1.0e-3}\n", func(c *config.Config) bool {
			return *c.Model.Temperature == 2 && *c.Model.TopP == 0.001
		}},
		{"model: {model: m, retry: {initial_backoff: 1m}, extra: {}}\n", func(c *config.Config) bool {
			return c.Model.Retry == (config.ModelRetry{InitialBackoff: time.Minute}) && c.Model.Extra != nil && len(c.Model.Extra) == 0
		}},
		{"model: {model: m, retry: {initial_backoff: 1s, max_backoff: 1s}, extra: ~}\n", func(c *config.Config) bool {
			return c.Model.Retry.MaxBackoff == time.Second && c.Model.Extra == nil
		}},
		{"model: {model: m, extra: {big: 9223372036854775807, t: 2001-12-14, e: 1e3}}\n", func(c *config.Config) bool {
			return c.Model.Extra["big"] == int64(9223372036854775807) && c.Model.Extra["t"] == "2001-12-14" && c.Model.Extra["e"] == 1000.0
		}},
		{"agent: {max_turns: 1, max_consecutive_rollbacks: 1000000, context: {keep_tool_results: -1}, selection: {top_k: 1}, loop_detection: {repeats: 2}}\n", func(c *config.Config) bool {
			a := c.Agent
			return a.MaxTurns == 1 && a.MaxConsecutiveRollbacks == 1000000 && a.Context.KeepToolResults == -1 &&
				a.Selection.TopK == 1 && a.Selection.Threshold == config.DefaultSelectionThreshold && a.LoopDetection.Repeats == 2
		}},
		{"agent: {agents: []}\nagents: {a: {agents: [b]}, b: {}}\n", func(c *config.Config) bool {
			return c.Agent.Agents != nil && len(c.Agent.Agents) == 0 && c.Agents[0].Agents[0] == "b"
		}},
		// Sub-agents that call each other without a cycle, in any order.
		{"agents:\n  a: {agents: [b, c]}\n  b: {agents: [c]}\n  c: {}\nagent: {agents: [c, a]}\n", func(c *config.Config) bool {
			return len(c.Agents) == 3 && reflect.DeepEqual(c.Agent.Agents, []string{"c", "a"})
		}},
		// A sub-agent's server is agent-NAME, so a server named like the
		// sub-agent itself is fine.
		{"servers: {browsing: {command: x}}\nagents: {browsing: {}}\nagent: {name: lead}\n", func(c *config.Config) bool {
			return len(c.Servers) == 1 && c.Agents[0].Name == "browsing" && c.Agent.Name == "lead"
		}},
		// Anchors share settings between agents.
		{"agents:\n  a: &base {max_turns: 3, tools: [x]}\n  b: {<<: *base, max_turns: 4}\n", func(c *config.Config) bool {
			return c.Agents[1].MaxTurns == 4 && reflect.DeepEqual(c.Agents[1].Tools, []string{"x"})
		}},
	} {
		cfg := mustParseIn(t, t.TempDir(), tc.content)
		if !tc.check(cfg) {
			t.Errorf("%q: got model %+v\nagent %+v\nagents %+v", tc.content, cfg.Model, cfg.Agent, cfg.Agents)
		}
	}
}

func TestAgentsSystemPromptFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "prompts"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("prompts/main.md", "You are the ${NOT_EXPANDED} lead.\n")
	abs := write("sub.md", "Browse.")
	cfg := mustParseIn(t, dir, fmt.Sprintf(`agent:
  system_prompt_file: prompts/main.md
agents:
  b: {system_prompt_file: "${PROMPTS:-%s}"}
`, abs))
	if cfg.Agent.SystemPrompt != "You are the ${NOT_EXPANDED} lead.\n" || cfg.Agents[0].SystemPrompt != "Browse." {
		t.Errorf("got %q and %q", cfg.Agent.SystemPrompt, cfg.Agents[0].SystemPrompt)
	}
	// A JSON toolmux file has the sections too.
	cfg, err := parseIn(t, dir, "toolmux.json", `{"model": {"model": "m", "temperature": 1, "extra": {"k": 1.5, "n": 2}},
 "agent": {"system_prompt_file": "./prompts/main.md"}, "mcpServers": {"a": {"command": "a"}}}`)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Agent.SystemPrompt == "" || *cfg.Model.Temperature != 1 || cfg.Model.Extra["k"] != 1.5 || cfg.Model.Extra["n"] != int64(2) || len(cfg.Servers) != 1 {
		t.Errorf("JSON: got %+v", cfg)
	}
}

func TestAgentsErrors(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		want          []wantErr
	}{
		{
			name:    "unknown top-level keys",
			content: "modle: {}\nagnet: {}\nagent_s: {}\n",
			want: []wantErr{
				{1, 1, "modle", "did you mean model?"},
				{2, 1, "agnet", "did you mean agent?"},
				{3, 1, "agent_s", "did you mean agents?"},
			},
		},
		{
			name:    "model required",
			content: "model: {}\nagent:\n  model: {provider: openai}\nagents:\n  b:\n    model:\n      api_key: x\n",
			want: []wantErr{
				{1, 1, "model", "model is required"},
				{3, 3, "agent.model", "model is required"},
				{6, 5, "agents.b.model", "model is required"},
			},
		},
		{
			name: "model keys and values",
			content: `model:
  provider: openia
  base_url: localhost:11434
  model: ""
  temperature: 2.5
  top_p: 0
  max_tokens: 0
  timeout: 30
  retry: {max_attempts: 0, initial_backoff: 10s, max_backoff: 1s, tools: []}
  extra: [a]
  modle: x
`,
			want: []wantErr{
				{2, 13, "model.provider", `unknown provider "openia" (expected openai or anthropic); did you mean openai?`},
				{3, 13, "model.base_url", `"localhost:11434" is not an http:// or https:// URL`},
				{4, 10, "model.model", "must not be empty"},
				{5, 16, "model.temperature", "must be between 0 and 2, got 2.5"},
				{6, 10, "model.top_p", "must be greater than 0 and at most 1, got 0"},
				{7, 15, "model.max_tokens", "must be between 1 and 1000000000, got 0"},
				{8, 12, "model.timeout", `"30" is not a duration (use a unit, e.g. "30s")`},
				{9, 10, "model.retry", "initial_backoff (10s) is longer than max_backoff (1s)"},
				{9, 25, "model.retry.max_attempts", "must be between 1 and 1000, got 0"},
				{9, 67, "model.retry.tools", "unknown key (expected one of: max_attempts, initial_backoff, max_backoff)"},
				{10, 10, "model.extra", "expected a mapping of request fields, got a list"},
				{11, 3, "model.modle", "unknown key (expected one of: provider, base_url, api_key, model, temperature, top_p, max_tokens, timeout, retry, extra); did you mean model?"},
			},
		},
		{
			name: "model value types",
			content: `model:
  model: [m]
  temperature: "0.5"
  top_p: .nan
  base_url: "https://"
  api_key: ${OPENAI_KEY}
  extra: {a: .inf, b: {c: [.NaN, 99999999999999999999]}}
`,
			want: []wantErr{
				{2, 10, "model.model", "expected a string, got a list"},
				{3, 16, "model.temperature", `expected a number, got "0.5"`},
				{4, 10, "model.top_p", "must be greater than 0 and at most 1, got .nan"},
				{5, 13, "model.base_url", `"https://" has no host`},
				{6, 12, "model.api_key", "environment variable OPENAI_KEY is not set (use ${OPENAI_KEY:-default} to give a default)"},
				{7, 14, "model.extra.a", `".inf" is not a JSON number`},
				{7, 28, "model.extra.b.c[0]", `".NaN" is not a JSON number`},
			},
		},
		{
			name:    "model of the wrong shape",
			content: "model: qwen3:8b\n",
			want:    []wantErr{{1, 8, "model", `expected a mapping, got "qwen3:8b"`}},
		},
		{
			name: "agent keys and values",
			content: `agent:
  name: "main agent"
  description: x
  tool: run
  namespace: n
  display: x
  tools: ["/x", "a/["]
  tool_protocol: json
  max_turns: 0
  max_consecutive_rollbacks: -1
  boxed_answer: "yes"
  refusal_patterns: ["ok", " ", 3, [x]]
  context: {max_tokens: -1, keep_tool_results: -2, keep: 1}
  selection: {threshold: -2, top_k: 0, pinned: [""]}
  loop_detection: {repeats: 1, times: 3}
`,
			want: []wantErr{
				{2, 9, "agent.name", `"main agent" is not a valid agent name (letters, digits, "_" and "-")`},
				{3, 3, "agent.description", "description belongs to sub-agents, the entries of agents:"},
				{4, 3, "agent.tool", "tool belongs to sub-agents"},
				{5, 3, "agent.namespace", "namespace belongs to sub-agents"},
				{6, 3, "agent.display", "unknown key (expected one of: name, display_name, system_prompt, system_prompt_file, model, tools, agents, tool_protocol, max_turns, max_consecutive_rollbacks, boxed_answer, refusal_patterns, context, selection, loop_detection, code_mode)"},
				{7, 11, "agent.tools[0]", `"/x": expected "server/tool" or a bare tool name`},
				{7, 17, "agent.tools[1]", `"a/[" is not a valid glob`},
				{8, 18, "agent.tool_protocol", `unknown tool protocol "json" (expected native or text)`},
				{9, 14, "agent.max_turns", "must be between 1 and 1000000, got 0"},
				{10, 30, "agent.max_consecutive_rollbacks", "must be between 0 and 1000000, got -1"},
				{11, 17, "agent.boxed_answer", `expected true or false, got "yes"`},
				{12, 28, "agent.refusal_patterns[1]", "must not be empty"},
				{12, 36, "agent.refusal_patterns[3]", "expected a string, got a list"},
				{13, 25, "agent.context.max_tokens", "must be between 0 and 1000000000, got -1"},
				{13, 48, "agent.context.keep_tool_results", "must be between -1 and 1000000, got -2"},
				{13, 52, "agent.context.keep", "unknown key (expected one of: max_tokens, keep_tool_results)"},
				{14, 26, "agent.selection.threshold", "must be between -1 and 1000000, got -2"},
				{14, 37, "agent.selection.top_k", "must be between 1 and 1000000, got 0"},
				{14, 49, "agent.selection.pinned[0]", "empty pattern"},
				{15, 29, "agent.loop_detection.repeats", "must be at least 2, or -1 to turn loop detection off, got 1"},
				{15, 32, "agent.loop_detection.times", "unknown key (expected one of: repeats)"},
			},
		},
		{
			name:    "agent of the wrong shape",
			content: "agent: [a]\nagents: [b]\n",
			want: []wantErr{
				{1, 8, "agent", "expected a mapping, got a list"},
				{2, 9, "agents", "expected a mapping, got a list"},
			},
		},
		{
			name: "system prompts",
			content: `agent:
  system_prompt: x
  system_prompt_file: missing.md
agents:
  a: {system_prompt_file: missing.md}
  b: {system_prompt_file: ""}
  c: {system_prompt_file: "${PROMPT}"}
  d: {system_prompt_file: .}
  e: {system_prompt: [x]}
`,
			want: []wantErr{
				{3, 3, "agent.system_prompt_file", "use either system_prompt or system_prompt_file, not both"},
				{5, 27, "agents.a.system_prompt_file", "cannot read the system prompt: "},
				{6, 27, "agents.b.system_prompt_file", "must not be empty"},
				{7, 27, "agents.c.system_prompt_file", "environment variable PROMPT is not set"},
				{8, 27, "agents.d.system_prompt_file", "is a directory, not a file"},
				{9, 22, "agents.e.system_prompt", "expected a string, got a list"},
			},
		},
		{
			name: "sub-agent keys and names",
			content: `agents:
  web search: {}
  ok:
    name: ok
    tool: "run it"
    namespace: "a/b"
    description: [x]
    max_turn: 3
  bad: x
`,
			want: []wantErr{
				{2, 3, "agents.web search", `"web search" is not a valid sub-agent name (letters, digits, "_" and "-")`},
				{4, 5, "agents.ok.name", "a sub-agent's name is its key in agents: (name belongs to agent:, the main agent)"},
				{5, 11, "agents.ok.tool", `"run it" is not a valid tool name`},
				{6, 16, "agents.ok.namespace", `"a/b" is not a valid namespace (letters, digits, "_", "-", "." and ":")`},
				{7, 18, "agents.ok.description", "expected a string, got a list"},
				{8, 5, "agents.ok.max_turn", "unknown key (expected one of: description, tool, namespace, display_name, system_prompt, system_prompt_file, model, tools, agents, tool_protocol, max_turns, max_consecutive_rollbacks, boxed_answer, refusal_patterns, context, selection, loop_detection, code_mode); did you mean max_turns?"},
				{9, 8, "agents.bad", `expected a mapping of the sub-agent's settings, got "x"`},
			},
		},
		{
			name:    "duplicate sub-agent",
			content: "agents:\n  a: {}\n  a: {}\n",
			want:    []wantErr{{3, 3, "agents.a", "duplicate key (first at line 2)"}},
		},
		{
			name: "references",
			content: `agent:
  agents: [browsing, brwsing, coder, browsing, 1]
agents:
  browsing: {agents: [browsing, nope]}
  coder: {}
`,
			want: []wantErr{
				{2, 22, "agent.agents[1]", `unknown sub-agent "brwsing" (agents: defines browsing or coder); did you mean browsing?`},
				{2, 38, "agent.agents[3]", `"browsing" is listed twice (first as agent.agents[0])`},
				{2, 48, "agent.agents[4]", `unknown sub-agent "1"`},
				{4, 23, "agents.browsing.agents[0]", "a sub-agent cannot call itself"},
				{4, 33, "agents.browsing.agents[1]", `unknown sub-agent "nope" (agents: defines browsing or coder)`},
			},
		},
		{
			name:    "references without sub-agents",
			content: "agent: {agents: [web]}\n",
			want:    []wantErr{{1, 18, "agent.agents[0]", `unknown sub-agent "web" (there is no agents: section defining sub-agents)`}},
		},
		{
			name: "cycles",
			content: `agents:
  a: {agents: [b]}
  b: {agents: [c]}
  c: {agents: [a]}
  d: {agents: [e]}
  e: {agents: [d, a]}
`,
			want: []wantErr{
				{4, 16, "agents.c.agents[0]", "sub-agents call each other in a cycle: a → b → c → a"},
				{6, 16, "agents.e.agents[0]", "sub-agents call each other in a cycle: d → e → d"},
			},
		},
		{
			name: "names taken",
			content: `servers:
  agent-browsing: {command: x}
mcpServers:
  agent-main: {command: y}
agents:
  browsing: {}
  main: {}
`,
			want: []wantErr{
				{6, 3, "agents.browsing", `the sub-agent's tools are served as "agent-browsing", but a server has that name (line 2)`},
				{7, 3, "agents.main", `the sub-agent's tools are served as "agent-main", but a server has that name (line 4)`},
				{7, 3, "agents.main", `"main" is the main agent's name; give the sub-agent another name`},
			},
		},
		{
			name:    "main agent named like a sub-agent",
			content: "agent: {name: web}\nagents: {web: {}}\n",
			want:    []wantErr{{1, 15, "agent.name", "the main agent must not have the name of a sub-agent (agents.web, line 2)"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) { checkParseErrors(t, tc.content, tc.want) })
	}
}

// checkParseErrors parses content as toolmux.yaml in a fresh directory and
// compares the errors with want.
func checkParseErrors(t *testing.T, content string, want []wantErr) {
	t.Helper()
	dir := t.TempDir()
	cfg, err := parseIn(t, dir, "toolmux.yaml", content)
	if err == nil {
		t.Fatalf("no error; got %+v", cfg)
	}
	if cfg != nil {
		t.Errorf("got a config along with the error")
	}
	got := allErrors(t, err)
	lines := strings.Split(content, "\n")
	at := func(line, col int) string {
		if line < 1 || line > len(lines) || col < 1 || col > len(lines[line-1])+1 {
			return ""
		}
		return shorten(lines[line-1][col-1:])
	}
	var report strings.Builder
	for _, e := range got {
		fmt.Fprintf(&report, "\n\t%d:%d %q %q at %q", e.Line, e.Column, e.Key, e.Msg, at(e.Line, e.Column))
	}
	if len(got) != len(want) {
		t.Fatalf("got %d errors, want %d:%s", len(got), len(want), report.String())
	}
	path := filepath.Join(dir, "toolmux.yaml")
	for i, w := range want {
		e := got[i]
		if e.File != path || e.Line != w.line || e.Column != w.col || e.Key != w.key || !strings.Contains(e.Msg, w.msg) {
			t.Errorf("error %d:\n got %d:%d %q %q at %q\nwant %d:%d %q containing %q at %q", i,
				e.Line, e.Column, e.Key, e.Msg, at(e.Line, e.Column), w.line, w.col, w.key, w.msg, at(w.line, w.col))
		}
	}
}

// Aliases cannot make extra expand into a huge value.
func TestAgentsExtraBudget(t *testing.T) {
	ten := func(x string) string { return "[" + strings.Repeat(x+", ", 9) + x + "]" }
	content := "model:\n  model: m\n  extra:\n    a: &a " + ten("1") + "\n    b: &b " + ten("*a") +
		"\n    c: &c " + ten("*b") + "\n    d: &d " + ten("*c") + "\n    e: " + ten("*d") + "\n"
	_, err := parseIn(t, t.TempDir(), "toolmux.yaml", content)
	if err == nil || !strings.Contains(err.Error(), "too large (more than 100000 values, aliases expanded)") {
		t.Fatalf("got %v", err)
	}
	if n := len(allErrors(t, err)); n != 1 {
		t.Errorf("got %d errors, want 1: %v", n, err)
	}
}

// The message of a missing model names the key, end to end.
func TestAgentsErrorMessage(t *testing.T) {
	_, err := config.ParseWith("toolmux.yaml", []byte("model:\n  base_url: http://localhost:11434/v1\n"), config.Options{LookupEnv: envOf(nil)})
	want := `toolmux.yaml:1:1: model: model is required: the model's name as its server knows it, such as "gpt-4o" or "qwen3:8b"`
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
}
