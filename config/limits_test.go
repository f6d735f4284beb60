package config_test

import (
	"testing"

	"github.com/toolmux/toolmux/config"
)

func TestLimitsSection(t *testing.T) {
	for _, tc := range []struct {
		content string
		want    config.Limits
	}{
		{"workspace: .\n", config.Limits{}},
		{"limits:\n", config.Limits{}},
		{"limits: {max_depth: 32}\n", config.Limits{MaxDepth: 32}},
		{"limits:\n  max_result_bytes: 4MiB\n  max_record_bytes: 512KiB\n  max_event_bytes: 1000\n",
			config.Limits{MaxResultBytes: 4 << 20, MaxRecordBytes: 512 << 10, MaxEventBytes: 1000}},
	} {
		cfg, err := config.ParseWith("toolmux.yaml", []byte(tc.content), config.Options{Dir: "/work"})
		if err != nil {
			t.Fatalf("%q: %v", tc.content, err)
		}
		if cfg.Limits != tc.want {
			t.Errorf("%q: got %+v, want %+v", tc.content, cfg.Limits, tc.want)
		}
	}
}

func TestLimitsErrors(t *testing.T) {
	checkErrors(t, "toolmux.yaml", `limits:
  max_depht: 10
  max_depth: 0
  max_record_bytes: lots
`, []wantErr{
		{2, 3, "limits.max_depht", "unknown key (expected one of: max_depth, max_result_bytes, max_record_bytes, max_event_bytes); did you mean max_depth?"},
		{3, 14, "limits.max_depth", "must be between 1 and 1000, got 0"},
		{4, 21, "limits.max_record_bytes", `"lots" is not a size (expected a size in bytes such as 1048576 or "1MiB"; units: KiB, MiB, GiB, KB, MB, GB)`},
	})
}
