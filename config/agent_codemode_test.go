package config_test

import (
	"testing"

	"github.com/toolmux/toolmux/config"
)

// An agent's code_mode: off, beside or only, for the main agent and a
// sub-agent alike; absent, "".
func TestAgentCodeMode(t *testing.T) {
	cfg, err := config.ParseWith("toolmux.yaml", []byte(`agent:
  code_mode: only
agents:
  helper:
    description: helps
    code_mode: beside
  plain:
    description: plain
`), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Agent.CodeMode != config.AgentCodeModeOnly {
		t.Errorf("agent.code_mode: %q", cfg.Agent.CodeMode)
	}
	got := map[string]string{}
	for _, a := range cfg.Agents {
		got[a.Name] = a.CodeMode
	}
	if got["helper"] != config.AgentCodeModeBeside || got["plain"] != "" {
		t.Errorf("agents' code_mode: %v", got)
	}
}

func TestAgentCodeModeErrors(t *testing.T) {
	checkErrors(t, "toolmux.yaml", `agent:
  code_mode: true
agents:
  helper:
    description: helps
    code_mode: besides
`, []wantErr{
		{2, 14, "agent.code_mode", `unknown code mode "true" (expected`},
		{6, 16, "agents.helper.code_mode", `did you mean beside?`},
	})
}
