package config_test

import (
	"testing"
	"time"

	"github.com/toolmux/toolmux/config"
)

func TestTaskLogSection(t *testing.T) {
	ret := config.Retention{MaxAge: config.DefaultRetentionMaxAge, MaxBytes: config.DefaultRetentionMaxBytes}
	for _, tc := range []struct {
		content string
		want    config.TaskLog
	}{
		{"workspace: .\n", config.TaskLog{Enabled: true, Durability: config.DurabilityProcess, Retention: ret}},
		{"task_log:\n", config.TaskLog{Enabled: true, Durability: config.DurabilityProcess, Retention: ret}},
		{"task_log: {durability: full}\n", config.TaskLog{Enabled: true, Durability: config.DurabilityFull, Retention: ret}},
		{"task_log: {enabled: false}\n", config.TaskLog{Enabled: false, Durability: config.DurabilityProcess, Retention: ret}},
		{"task_log: {retention: {max_age: 7d}}\n", config.TaskLog{Enabled: true, Durability: config.DurabilityProcess,
			Retention: config.Retention{MaxAge: 7 * 24 * time.Hour, MaxBytes: config.DefaultRetentionMaxBytes}}},
		{"task_log: {retention: {max_age: 36h, max_bytes: 20GiB}}\n", config.TaskLog{Enabled: true, Durability: config.DurabilityProcess,
			Retention: config.Retention{MaxAge: 36 * time.Hour, MaxBytes: 20 << 30}}},
	} {
		cfg, err := config.ParseWith("toolmux.yaml", []byte(tc.content), config.Options{Dir: "/work"})
		if err != nil {
			t.Fatalf("%q: %v", tc.content, err)
		}
		if cfg.TaskLog != tc.want {
			t.Errorf("%q: got %+v, want %+v", tc.content, cfg.TaskLog, tc.want)
		}
	}
	if d := config.Default().TaskLog; d != (config.TaskLog{Enabled: true, Durability: config.DurabilityProcess, Retention: ret}) {
		t.Errorf("default: %+v", d)
	}
}

func TestTaskLogErrors(t *testing.T) {
	checkErrors(t, "toolmux.yaml", `task_log:
  durabilty: full
  enabled: "no"
`, []wantErr{
		{2, 3, "task_log.durabilty", "unknown key (expected one of: enabled, durability, retention); did you mean durability?"},
		{3, 12, "task_log.enabled", `expected true or false, got "no"`},
	})
	checkErrors(t, "toolmux.yaml", "task_log: {durability: fsync}\n", []wantErr{
		{1, 24, "task_log.durability", `unknown durability "fsync" (expected process or full)`},
	})
	checkErrors(t, "toolmux.yaml", "task_log: {retention: {max_age: 0d, max_bytes: 10KiB, max_size: 1}}\n", []wantErr{
		{1, 33, "task_log.retention.max_age", `"0d" is not a number of days between 1 and 36500`},
		{1, 48, "task_log.retention.max_bytes", `must be at least 1MiB, got 10KiB`},
		{1, 55, "task_log.retention.max_size", `unknown key (expected one of: max_age, max_bytes)`},
	})
}
