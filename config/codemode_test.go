package config_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/toolmux/toolmux/config"
)

func TestCodeMode(t *testing.T) {
	cfg, err := config.ParseWith("toolmux.yaml", []byte(`code_mode:
  enabled: true
  timeout: 10s
  max_calls: 100000
  max_output_bytes: 64MiB
  max_memory_bytes: 128MiB
  max_programs: 1024
  engine: bin/toolmux-codemode
`), config.Options{Dir: "/work"})
	if err != nil {
		t.Fatal(err)
	}
	want := config.CodeMode{Enabled: true, Timeout: 10 * time.Second, MaxCalls: 100_000, MaxOutputBytes: 64 << 20, MaxMemoryBytes: 128 << 20,
		MaxPrograms: 1024, Engine: "/work/bin/toolmux-codemode"}
	if cfg.CodeMode != want {
		t.Fatalf("code_mode: %+v, want %+v", cfg.CodeMode, want)
	}
	cfg, err = config.ParseWith("toolmux.yaml", []byte("workspace: .\n"), config.Options{Dir: "/work"})
	if err != nil || !reflect.DeepEqual(cfg.CodeMode, config.CodeMode{}) {
		t.Fatalf("without the section: %v %+v", err, cfg.CodeMode)
	}
}

// Each bound one past what it allows, and the rest of what is wrong.
func TestCodeModeErrors(t *testing.T) {
	checkErrors(t, "toolmux.yaml", `code_mode:
  enabled: sure
  timeout: 0s
  max_calls: 100001
  max_output_bytes: 67108865
  max_memory_bytes: 17179869185
  max_call: 3
  engine: ""
  max_programs: 1025
`, []wantErr{
		{2, 12, "code_mode.enabled", `expected true or false, got "sure"`},
		{3, 12, "code_mode.timeout", `must be positive, got "0s"`},
		{4, 14, "code_mode.max_calls", "must be between 1 and 100000, got 100001"},
		{5, 21, "code_mode.max_output_bytes", ""},
		{6, 21, "code_mode.max_memory_bytes", ""},
		{7, 3, "code_mode.max_call", ""},
		{8, 11, "code_mode.engine", ""},
		{9, 17, "code_mode.max_programs", "must be between 1 and 1024, got 1025"},
	})
}
