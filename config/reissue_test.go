package config_test

import (
	"testing"
	"time"

	"github.com/toolmux/toolmux/config"
)

func TestReissue(t *testing.T) {
	cfg, err := config.ParseWith("toolmux.yaml", []byte(`reissue:
  window: 5m
  grace: 10s
  max_entries: 200
  max_result_bytes: 128KiB
`), config.Options{Dir: "/work"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (config.Reissue{Window: 5 * time.Minute, Grace: 10 * time.Second, MaxEntries: 200, MaxResultBytes: 128 << 10}); cfg.Reissue != want {
		t.Errorf("reissue: %+v", cfg.Reissue)
	}
	cfg, err = config.ParseWith("toolmux.yaml", []byte("reissue: {enabled: false}\n"), config.Options{Dir: "/work"})
	if err != nil || !cfg.Reissue.Disabled {
		t.Errorf("enabled: false: %v %+v", err, cfg.Reissue)
	}
	// Left out: the zero value, which means the gateway's defaults.
	cfg, err = config.ParseWith("toolmux.yaml", []byte("workspace: .\n"), config.Options{Dir: "/work"})
	if err != nil || cfg.Reissue != (config.Reissue{}) {
		t.Errorf("without the section: %v %+v", err, cfg.Reissue)
	}
}

func TestReissueErrors(t *testing.T) {
	checkErrors(t, "toolmux.yaml", `reissue:
  enabled: maybe
  window: 10
  grace: -1s
  max_entries: 0
  max_result_bytes: 1GiB
  windw: 1m
`, []wantErr{
		{2, 12, "reissue.enabled", `expected true or false, got "maybe"`},
		{3, 11, "reissue.window", `"10" is not a duration (use a unit, e.g. "30s")`},
		{4, 10, "reissue.grace", `must be positive, got "-1s"`},
		{5, 16, "reissue.max_entries", "must be between 1 and 1000000, got 0"},
		{6, 21, "reissue.max_result_bytes", "must be between 1 byte and 64MiB, got 1GiB"},
		{7, 3, "reissue.windw", "unknown key (expected one of: enabled, window, grace, max_entries, max_result_bytes); did you mean window?"},
	})
}
