package agent

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/toolmux/toolmux/config"
)

// FromConfig carries every key of an agent's section but its model (the
// runtime's to resolve): the section and the options have the same
// fields otherwise, so the same JSON.
func TestFromConfigCarriesEverySetting(t *testing.T) {
	c := config.Agent{Name: "n", DisplayName: "d", Description: "desc", Tool: "go", SystemPrompt: "sp",
		Model: config.Model{Set: true, Name: "m", Timeout: time.Second}, Tools: []string{"a/*"}, Agents: []string{"b"},
		ToolProtocol: config.ProtocolText, MaxTurns: 3, MaxConsecutiveRollbacks: 4, BoxedAnswer: true,
		RefusalPatterns: []string{"no"}, Context: config.AgentContext{MaxTokens: 5, KeepToolResults: 6},
		Selection:     config.ToolSelection{Threshold: 7, TopK: 8, Pinned: []string{"c/*"}},
		LoopDetection: config.LoopDetection{Repeats: 9}, Namespace: "ns", CodeMode: config.AgentCodeModeOnly}
	asMap := func(v any) map[string]any {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	want := asMap(c)
	delete(want, "Model")
	// The section's code mode is the mode; its bounds are the code_mode:
	// section's, which the caller sets.
	want["CodeMode"] = asMap(CodeMode{Mode: config.AgentCodeModeOnly})
	if got := asMap(FromConfig(c)); !reflect.DeepEqual(got, want) {
		t.Errorf("options %v\nsection %v", got, want)
	}
	if n, m := reflect.TypeFor[config.Agent]().NumField(), reflect.TypeFor[Options]().NumField(); n != m+1 {
		t.Errorf("config.Agent has %d fields, Options %d: a key is not carried", n, m)
	}
}

// The file's defaults are the agent's: an agent the file says nothing of
// runs with DefaultOptions.
func TestConfigDefaultsAreTheAgents(t *testing.T) {
	if got, want := FromConfig(config.DefaultAgent("main")), DefaultOptions("main"); !reflect.DeepEqual(got, want) {
		t.Errorf("config's defaults %+v, the agent's %+v", got, want)
	}
	if config.DefaultSubAgentTool != DefaultSubAgentTool || config.ProtocolNative != ProtocolNative || config.ProtocolText != ProtocolText {
		t.Error("config and agent name the sub-agent tool or the protocols differently")
	}
}
