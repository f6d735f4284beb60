package config_test

import (
	"testing"

	"github.com/toolmux/toolmux/config"
)

func TestTaskLogSection(t *testing.T) {
	for _, tc := range []struct {
		content string
		want    config.TaskLog
	}{
		{"workspace: .\n", config.TaskLog{Enabled: true, Durability: config.DurabilityProcess}},
		{"task_log:\n", config.TaskLog{Enabled: true, Durability: config.DurabilityProcess}},
		{"task_log: {durability: full}\n", config.TaskLog{Enabled: true, Durability: config.DurabilityFull}},
		{"task_log: {enabled: false}\n", config.TaskLog{Enabled: false, Durability: config.DurabilityProcess}},
	} {
		cfg, err := config.ParseWith("toolmux.yaml", []byte(tc.content), config.Options{Dir: "/work"})
		if err != nil {
			t.Fatalf("%q: %v", tc.content, err)
		}
		if cfg.TaskLog != tc.want {
			t.Errorf("%q: got %+v, want %+v", tc.content, cfg.TaskLog, tc.want)
		}
	}
	if d := config.Default().TaskLog; d != (config.TaskLog{Enabled: true, Durability: config.DurabilityProcess}) {
		t.Errorf("default: %+v", d)
	}
}

func TestTaskLogErrors(t *testing.T) {
	checkErrors(t, "toolmux.yaml", `task_log:
  durabilty: full
  enabled: "no"
`, []wantErr{
		{2, 3, "task_log.durabilty", "unknown key (expected one of: enabled, durability); did you mean durability?"},
		{3, 12, "task_log.enabled", `expected true or false, got "no"`},
	})
	checkErrors(t, "toolmux.yaml", "task_log: {durability: fsync}\n", []wantErr{
		{1, 24, "task_log.durability", `unknown durability "fsync" (expected process or full)`},
	})
}
